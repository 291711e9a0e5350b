"""Figures of the induction-heads chapter, each drawn from one section's data (fresh or loaded from JSON)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from ..plotting import COLORS, curves_with_band, reference_line

if TYPE_CHECKING:
    from ..chapters.induction import ConstructionData, LevelsData, TrainingData

LEVEL_NAMES = {"uniform": "uniform (ln k)", "unigram": "in-context unigram", "bayes": "Bayes (in-context bigram)"}


def information(data: LevelsData) -> Figure:
    """The chi-square information between each position and every earlier one, the parents circled."""
    table = np.asarray(data["information"], dtype=float)
    fig, ax = plt.subplots(figsize=(4.6, 4.0))
    image = ax.imshow(table, cmap="viridis", origin="upper")
    rows = [i for i in range(1, len(table)) if data["parents"][i] >= 0]
    ax.plot([data["parents"][i] for i in rows], rows, "o", markerfacecolor="none", markeredgecolor="white",
            markersize=5, label="the parent")
    ax.set(xlabel="earlier position j", ylabel="position i", title="E I_chi2(s_i; s_j) under the prior")
    ax.grid(False)
    fig.colorbar(image, ax=ax, shrink=0.8)
    ax.legend(loc="lower left", fontsize=8)
    return fig


def construction(data: ConstructionData) -> Figure:
    """The construction's two attention patterns on one sequence: the token before, then the matching tokens."""
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.6))
    tokens = [str(s) for s in data["example"]]
    for ax, table, title in zip(axes, data["attention"], ("layer 1: the token before", "layer 2: earlier matches")):
        ax.imshow(np.asarray(table), cmap="Greys", vmin=0, vmax=1)
        ax.set(title=title, xlabel="key (token)", ylabel="query (token)",
               xticks=range(len(tokens)), yticks=range(len(tokens)), xticklabels=tokens, yticklabels=tokens)
        ax.grid(False)
    fig.tight_layout()
    return fig


def training(data: TrainingData) -> Figure:
    """Held-out loss of one- and two-layer models against the three levels."""
    fig, ax = plt.subplots()
    steps = np.asarray(data["eval_steps"])
    for kind, color, label in (("one_layer", COLORS["tied"], "one layer"), ("two_layers", COLORS["untied"], "two layers")):
        curves_with_band(ax, steps, np.asarray(data["eval_loss"][kind]), color, label)
    for name, value in data["in_distribution"]["levels"].items():
        reference_line(ax, value, LEVEL_NAMES[name], ":" if name == "unigram" else "--")
    ax.set(xlabel="step", ylabel="held-out loss (nats per token)")
    ax.legend(loc="upper right", fontsize=8)
    return fig


def attention(data: TrainingData) -> Figure:
    """Layer 1's attention in the first two-layer model (the head that best finds the parents), parents marked."""
    table = np.asarray(data["attention"], dtype=float)
    fig, ax = plt.subplots(figsize=(4.6, 4.0))
    ax.imshow(table, cmap="Greys", vmin=0, vmax=1)
    rows = [i for i in range(1, len(table)) if data["parents"][i] >= 0]
    ax.plot([data["parents"][i] for i in rows], rows, "o", markerfacecolor="none", markeredgecolor=COLORS["tied"],
            markersize=5, label="the parent")
    ax.set(xlabel="key position", ylabel="query position", title="trained layer 1, mean over held-out sequences")
    ax.grid(False)
    ax.legend(loc="lower left", fontsize=8)
    return fig


def out_of_distribution(data: TrainingData) -> Figure:
    """Each model's final loss in and out of distribution, beside the estimators' levels on the same sequences."""
    fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.4), sharey=False)
    for ax, key, title in zip(axes, ("in_distribution", "out_of_distribution"), ("kernels from the prior",
                                                                                  "kernels outside the prior")):
        part = data[key]
        for name, value in part["levels"].items():
            reference_line(ax, value, LEVEL_NAMES[name], ":" if name == "unigram" else "--")
        for x, (kind, color) in enumerate((("one_layer", COLORS["tied"]), ("two_layers", COLORS["untied"]))):
            losses = part["loss"][kind]
            ax.plot(np.full(len(losses), x) + np.linspace(-0.1, 0.1, len(losses)), losses, "o", color=color)
        ax.set(xticks=[0, 1], xticklabels=["one layer", "two layers"], xlim=(-0.5, 1.5), title=title,
               ylabel="final loss (nats per token)")
    fig.tight_layout()
    return fig
