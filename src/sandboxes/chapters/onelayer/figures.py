"""Figures of the one-layer chapter, each drawn from one section's data (fresh or loaded from JSON)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from ...plotting import COLORS

if TYPE_CHECKING:
    from .measure import MatchData, NGramData

ORDER_COLORS = (COLORS["untied"], COLORS["tied"], COLORS["depth2"], COLORS["lstm"], COLORS["full"])


def match2(data: MatchData) -> Figure:
    """Left: the unit's weights on one input (rows: queries, the blank last); right: the share of positions wrong with
    float32 scores, against the size of a score's rounding error, c 2^-24."""
    tokens, weights = data["example"], np.asarray(data["example_weights"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.8))
    image = left.imshow(weights, cmap="Greys", vmin=0, vmax=1)
    labels = [str(x) for x in tokens] + ["blank"]
    left.set_xticks(range(len(labels)), labels)
    left.set_yticks(range(len(labels)), labels)
    left.set(xlabel="key token", ylabel="query token", title="weights at M = 10, N = 8")
    fig.colorbar(image, ax=left, fraction=0.046)
    precision = data["precision"]
    error, wrong = np.asarray(precision["score_error"]), np.asarray(precision["wrong_share"])
    right.semilogx(error, np.maximum(wrong, 1e-4), "o-", color=COLORS["untied"], label="float32 scores")
    right.axvline(1.0, color=COLORS["theory"], linestyle=":", label="rounding error of a score = 1")
    for m, x, y in zip(precision["M"], error, np.maximum(wrong, 1e-4)):
        right.annotate(f"M={m}", (x, y), textcoords="offset points", xytext=(0, 6), fontsize=7, ha="center")
    right.set_yscale("log")
    right.set(
        xlabel="c 2^-24 (c = M^2 ln 6N)",
        ylabel="share of positions wrong (0 drawn at 1e-4)",
        title=f"N = {precision['N']}",
    )
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig


def ngram(data: NGramData) -> Figure:
    """Each order's largest error with softmax heads against the scale, beside our bound, log scale."""
    scales = np.asarray(data["scales"])
    fig, ax = plt.subplots()
    for order, color in zip(data["orders"], ORDER_COLORS):
        ax.semilogy(scales, order["soft_error"], "o-", color=color, label=f"n = {order['n']}: measured")
        bound = np.asarray(order["bound"])
        finite = np.isfinite(bound)
        ax.semilogy(scales[finite], bound[finite], "--", color=color, label=f"n = {order['n']}: our bound")
    ax.set(xlabel="scale beta of the softmax heads", ylabel="largest |log p_layer - log p| (nats)")
    ax.legend(fontsize=7, ncol=2)
    return fig
