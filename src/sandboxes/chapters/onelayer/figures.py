"""Figures of the one-layer chapter, each drawn from one section's data (fresh or loaded from JSON)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from ...plotting import COLORS

if TYPE_CHECKING:
    from .measure import KhopData, LearningData, MatchData, NGramData, ParityData, QSAData, QSATrainData

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
    """Each order's largest error with softmax heads against the scale, beside our bound (dashed), log scale: one
    layer of n - 1 heads (left), n - 1 layers of one head (right; at n = 2 the two are one model)."""
    scales = np.asarray(data["scales"])
    orders = sorted({order["n"] for order in data["orders"]})
    fig, axes = plt.subplots(1, 2, figsize=(9.6, 3.8), sharey=True)
    for ax, shape, title in zip(axes, ("heads", "layers"), ("one layer of n - 1 heads", "n - 1 layers of one head")):
        for order in (o for o in data["orders"] if o["shape"] == shape):
            color = ORDER_COLORS[orders.index(order["n"]) % len(ORDER_COLORS)]
            bound = np.asarray(order["bound"])
            finite = np.isfinite(bound)
            ax.semilogy(scales, order["soft_error"], "o-", color=color, label=f"n = {order['n']}")
            ax.semilogy(scales[finite], bound[finite], "--", color=color)
        ax.set(xlabel="scale beta of the softmax heads", title=title)
        if ax.lines:
            ax.legend(fontsize=8, title="measured; dashed: our bound", title_fontsize=7)
    axes[0].set_ylabel("largest |log p_model - log p| (nats)")
    fig.tight_layout()
    return fig


def parity(data: ParityData) -> Figure:
    """Left: the least |output| over every string of each length at a scale growing as N^2, beside our bound. Right:
    the share of strings decided wrongly at fixed scales, hollow where our bound no longer covers the length."""
    lengths = np.asarray(data["lengths"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.6))
    left.plot(lengths, data["scaled_margin"], "o-", color=COLORS["untied"], label=f"scale {data['scaled']:g} N^2")
    if data["margin_bound"] > 0:
        left.axhline(data["margin_bound"], color=COLORS["theory"], linestyle=":", label="our bound at that scale")
    left.set(xlabel="length n", ylabel="least |output| over every string", ylim=(0, 1.05))
    left.legend(fontsize=8)
    for beta, wrong, covered, color in zip(
        data["fixed_scales"], data["fixed_wrong"], data["fixed_covered"], ORDER_COLORS[1:]
    ):
        right.plot(lengths, wrong, "-", color=color, label=f"fixed scale {beta:g}")
        inside = np.asarray(covered)
        right.plot(lengths[inside], np.asarray(wrong)[inside], "o", color=color)
        right.plot(lengths[~inside], np.asarray(wrong)[~inside], "o", color=color, mfc="none")
    right.set(xlabel="length n", ylabel="share of strings decided wrongly", title="filled: covered by our bound")
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig


def khop(data: KhopData) -> Figure:
    """The layers the construction uses for each k (the bits of k, beside log2 k), and the share of queries still
    answered right with one layer fewer."""
    ks = np.asarray(data["ks"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.4))
    left.step(ks, data["layers"], where="post", color=COLORS["untied"], label="layers used (bits of k)")
    left.plot(ks, np.log2(ks), "--", color=COLORS["theory"], label="log2 k")
    left.set(xlabel="hops k", ylabel="layers")
    left.legend(fontsize=8)
    right.plot(ks, data["fewer_right"], "o-", color=COLORS["tied"])
    right.set(xlabel="hops k", ylabel="share right with one layer fewer", ylim=(0, 1.05))
    fig.tight_layout()
    return fig


def learning(data: LearningData) -> Figure:
    """Left: the held-out balanced error against N at the smallest width, Match2 and Match3, each seed a dot, the
    seeds' mean a line (dashed: deeper models), with the 'solved' threshold. Right: Match3's error against the width
    of one layer at each N where several widths ran, else the held-out loss of one layer along training at the
    largest N."""
    N, width = np.asarray(data["N"]), min(data["widths"])
    runs = {(r["depth"], r["width"], r["N"]): r for r in data["runs"]}
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.6))
    colors = {"match2": COLORS["untied"], "match3": COLORS["tied"]}
    for depth in data["depths"]:
        errors = np.asarray([runs[depth, width, n]["balanced_error"] for n in N])  # N x task x seed
        for t, task in enumerate(("match2", "match3")):
            label = f"{task}, {depth} layer{'s' if depth > 1 else ''}"
            left.plot(N, errors[:, t].mean(axis=1), "-" if depth == 1 else "--", color=colors[task], label=label)
            if depth == 1:
                left.plot(np.repeat(N, errors.shape[2]), errors[:, t].ravel(), "o", color=colors[task], alpha=0.5, ms=4)
    left.axhline(data["solved"], color=COLORS["theory"], linestyle=":", label="solved")
    M = data["runs"][0]["M"]
    left.set(xlabel="N", ylabel="held-out balanced error", ylim=(-0.02, 0.55), title=f"width {width}, M = {M}")
    left.set_xticks(N)
    left.legend(fontsize=7)
    if len(data["widths"]) > 1 and 1 in data["depths"]:
        widths = np.asarray(sorted(data["widths"]))
        for n, color in zip(N, ORDER_COLORS):
            errors = np.asarray([runs[1, w, n]["balanced_error"][1] for w in widths])  # width x seed
            right.plot(widths, errors.mean(axis=1), "o-", color=color, label=f"N = {n}")
        right.axvline(M, color=COLORS["theory"], linestyle="--", lw=0.8, label="M: our layer's width")
        right.axhline(data["solved"], color=COLORS["theory"], linestyle=":")
        right.set_xscale("log", base=2)
        right.set(xlabel="width of one layer", ylabel="Match3 balanced error (mean over seeds)", ylim=(-0.02, 0.55))
        right.legend(fontsize=7)
    else:
        run = runs[data["depths"][0], width, int(N[-1])]
        for t, task in enumerate(("match2", "match3")):
            for curve in np.asarray(run["eval_loss"][t]):
                right.plot(run["eval_steps"], curve, color=colors[task], alpha=0.7, lw=1)
        right.set(xlabel="step", ylabel="held-out loss (nats)", title=f"N = {N[-1]}, width {width}")
    fig.tight_layout()
    return fig


def qsa(data: QSAData) -> Figure:
    """Left: the unit's largest error at each N and q, beside our bound at its measured margin and eps (log scale).
    Right: the largest off-support score over random supports against the keys' width in units of q ln N, one line
    per N and q, beside the proof's 1/2."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.6))
    labels = [f"N={c['N']}\nq={c['q']}" for c in data["checks"]]
    x = np.arange(len(labels))
    left.semilogy(x, [c["error"] for c in data["checks"]], "o", color=COLORS["untied"], label="largest error")
    left.semilogy(x, [c["bound"] for c in data["checks"]], "_", ms=14, color=COLORS["theory"], label="our bound")
    left.axhline(data["eps"], color=COLORS["tied"], linestyle=":", label="eps")
    left.set_xticks(x, labels, fontsize=7)
    left.set(ylabel="||f(X)_i - qSA(X)_i||")
    left.legend(fontsize=7)
    for law, color in zip(data["law"], ORDER_COLORS * 4):
        right.plot(law["factors"], law["off_score"], "o-", color=color, ms=3, label=f"N={law['N']}, q={law['q']}")
    right.axhline(0.5, color=COLORS["theory"], linestyle=":", label="the proof's 1/2")
    right.set(xlabel="keys' width / (q ln N)", ylabel="largest off-support score")
    right.legend(fontsize=7)
    fig.tight_layout()
    return fig


def qsa_trained(data: QSATrainData) -> Figure:
    """Left: each trained unit's error against its width (a dot per seed), beside 1/(2q), uniform attention's, and
    N - 1, the width from which our unit (no embedding function) can compute qSA.
    Right: the widest unit's attention on one held-out input, the positions each row names circled (the slide's
    map)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.8))
    widths, errors = np.asarray(data["widths"]), np.asarray(data["error"])
    for seed in range(errors.shape[1]):
        left.plot(widths, errors[:, seed], "o", color=COLORS["untied"], ms=4, label="a seed" if seed == 0 else None)
    left.plot(widths, np.median(errors, axis=1), "-", color=COLORS["untied"], alpha=0.5)
    left.set_xscale("log", base=2)
    left.minorticks_off()
    left.axvline(data["N"] - 1, color=COLORS["depth2"], linestyle="-.", label="m = N - 1: such a unit exists")
    left.axhline(1 / (2 * data["q"]), color=COLORS["theory"], linestyle=":", label="1/(2q)")
    left.axhline(data["uniform_error"], color=COLORS["tied"], linestyle="--", label="uniform attention")
    left.set(xlabel="width m of query and key", ylabel="mean over inputs of max_i error", ylim=(0, None))
    left.set_xticks(widths, [str(w) for w in widths])
    left.legend(fontsize=7)
    attention = np.asarray(data["attention"])
    right.imshow(attention, cmap="Greys", vmin=0, vmax=max(attention.max(), 1e-9))
    rows, cols = np.repeat(np.arange(data["N"]), data["q"]), np.asarray(data["named"]).ravel()
    right.scatter(cols, rows, s=30, facecolors="none", edgecolors=COLORS["tied"], linewidths=0.8)
    right.set(
        xlabel="key position j",
        ylabel="query position i",
        title=f"width {data['widths'][-1]}, one input (circles: named)",
        xticks=range(0, data["N"], 5),
        yticks=range(0, data["N"], 5),
    )
    fig.tight_layout()
    return fig
