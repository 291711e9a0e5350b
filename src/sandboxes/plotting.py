"""The book's figure style and the few plot helpers that several chapters use."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes

COLORS = {
    "theory": "#444444",
    "tied": "#c0392b",
    "untied": "#2471a3",
    "depth2": "#1e8449",
    "lstm": "#7d3c98",
    "quick": "#2471a3",
    "full": "#d35400",
}


def apply_style() -> None:
    """One look for every figure: small, clean, readable on a web page."""
    plt.rcParams.update(
        {
            "figure.figsize": (6.4, 3.6),
            "figure.dpi": 110,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "font.size": 10,
            "legend.frameon": False,
            "savefig.bbox": "tight",
            "figure.facecolor": "white",  # the notebook backend's default is transparent, unreadable in dark mode
            "savefig.facecolor": "white",
        }
    )


def reference_line(ax: Axes, value: float, label: str, style: str = "--") -> None:
    """A horizontal line at a value the theory predicts, labelled at the right edge."""
    ax.axhline(value, color=COLORS["theory"], linestyle=style, linewidth=1)
    ax.annotate(
        label,
        (1.0, value),
        xycoords=("axes fraction", "data"),
        xytext=(3, 0),
        textcoords="offset points",
        va="center",
        fontsize=8,
        color=COLORS["theory"],
    )


def curves_with_band(ax: Axes, x: np.ndarray, ys: np.ndarray, color: str, label: str) -> None:
    """Each seed as a thin line and the median as a thick one."""
    ys = np.atleast_2d(ys)
    for y in ys:
        ax.plot(x, y, color=color, alpha=0.3, linewidth=0.8)
    ax.plot(x, np.median(ys, axis=0), color=color, linewidth=2, label=label)
