"""Figures of the shortcuts chapter, each drawn from one section's data (fresh or loaded from JSON)."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from ...plotting import COLORS
from ...theory import shortcuts as theory

if TYPE_CHECKING:
    from .measure import (
        BalanceData,
        BrittlenessData,
        ConstructionData,
        DyckData,
        EncodingsData,
        HardData,
        LengthsData,
        SupervisionData,
        SweepData,
    )

SERIES = {
    "gpt": ("GPT (shortcut)", COLORS["tied"]),
    "lstm": ("LSTM", COLORS["lstm"]),
    "scratchpad": ("scratchpad + recency", COLORS["depth2"]),
}


def depth_vs_length(data: ConstructionData) -> Figure:
    """Theorem 10's depth ceil(log2 T) against the T steps of a recurrent network, with checked builds."""
    curve = data["depth_vs_T"]
    fig, ax = plt.subplots(figsize=(6.0, 3.4))
    T = np.asarray(curve["T"])
    ax.plot(T, T, color=COLORS["lstm"], label="RNN: T sequential steps")
    ax.step(T, curve["transformer"], where="post", color=COLORS["tied"], label="Theorem 10: ⌈log₂ T⌉ layers")
    checks = data["checks"]
    exact = [c for c in checks if c["errors"] == 0]
    ax.scatter(
        [c["T"] for c in exact],
        [c["depth"] for c in exact],
        color="black",
        s=14,
        zorder=3,
        label="built and run: exact",
    )
    ax.set(xscale="log", yscale="log", xlabel="sequence length T", ylabel="sequential depth")
    ax.legend(loc="upper left")
    fig.tight_layout()
    return fig


def temperature(data: ConstructionData) -> Figure:
    """Accuracy of the Theorem 10 build against the attention scale gamma / (Lemma 13's sufficient gamma)."""
    sweep = data["temperature"]
    fig, ax = plt.subplots(figsize=(5.6, 3.2))
    ax.plot(sweep["scales"], sweep["accuracy"], "o-", color=COLORS["tied"])
    ax.axvline(1.0, color=COLORS["theory"], linestyle="--", linewidth=1)
    ax.annotate(
        "Lemma 13 suffices", (1.0, 0.5), xytext=(4, 0), textcoords="offset points", fontsize=8, color=COLORS["theory"]
    )
    ax.set(
        xlabel="γ / sufficient γ", ylabel="accuracy", ylim=(0, 1.05), title=f"{sweep['automaton']} at T = {sweep['T']}"
    )
    fig.tight_layout()
    return fig


def depth_sweep(data: SweepData) -> Figure:
    """Best and median accuracy over seeds against depth, with the paper's values (T = 100) beside them."""
    names, depths = data["names"], np.asarray(data["depths"])
    acc = np.asarray(data["accuracy"])
    cols = min(4, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.0 * cols, 2.5 * rows), squeeze=False, sharey=True)
    for ax, name, a, chance, solvable in zip(axes.flat, names, acc, data["chance"], data["solvable"]):
        ax.plot(depths, a.max(axis=1), "o-", color=COLORS["quick"], label=f"ours, best (T={data['T']})")
        ax.plot(depths, np.median(a, axis=1), "o:", color=COLORS["quick"], alpha=0.6, label="ours, median")
        for key, style in (("paper_best", "s-"), ("paper_median", "s:")):
            row = data[key].get(name)
            if row:
                x = [d for d in range(1, len(row) + 1) if row[d - 1] is not None and d <= depths.max()]
                ax.plot(
                    x,
                    [row[d - 1] / 100 for d in x],
                    style,
                    color=COLORS["full"],
                    alpha=0.7,
                    markersize=3,
                    label="paper, " + key.split("_")[1] + " (T=100)",
                )
        ax.axhline(chance, color=COLORS["theory"], linewidth=0.8, linestyle="--")
        ax.set(
            title=f"{name} ({'solvable' if solvable else 'non-solvable'})",
            xlabel="depth",
            ylim=(0, 1.03),
            xticks=depths,
        )
    for ax in axes.flat[len(names) :]:
        ax.axis("off")
    axes[0, 0].set_ylabel("accuracy")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, bbox_to_anchor=(0.5, -0.02))
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def _largest_rise(curves: np.ndarray) -> float:
    """The most any curve (the last axis: evaluations in order) climbed back above the lowest loss it had reached
    before: the thesis's "negative progress", zero where no curve ever went up."""
    return float((curves - np.minimum.accumulate(curves, axis=-1)).max())


def instability(data: SweepData) -> Figure:
    """The thesis's Fig. 3.5b,c: every sweep run's held-out loss against the step, one colour per depth, each panel
    titled with the most any of its runs climbed back above its own lowest loss ("negative progress")."""
    if "eval_loss" not in data:  # a result file made before the sweep kept its curves
        fig, ax = plt.subplots(figsize=(5.0, 1.2))
        ax.axis("off")
        ax.text(0.5, 0.5, "this result file predates the sweep's stored curves", ha="center", va="center")
        return fig
    names, depths, steps = data["names"], data["depths"], np.asarray(data["eval_steps"])
    loss = np.asarray(data["eval_loss"])
    colours = plt.get_cmap("viridis")(np.linspace(0.0, 0.85, len(depths)))
    cols = min(4, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.0 * cols, 2.5 * rows), squeeze=False, sharex=True)
    for ax, name, curves in zip(axes.flat, names, loss):
        for depth, per_seed, colour in zip(depths, curves, colours):
            for k, curve in enumerate(per_seed):
                ax.plot(steps, curve, color=colour, linewidth=0.9, label=f"depth {depth}" if k == 0 else None)
        ax.set(title=f"{name}: largest rise {_largest_rise(curves):.3g}", xlabel="step", yscale="log")
    for ax in axes.flat[len(names) :]:
        ax.axis("off")
    axes[0, 0].set_ylabel("held-out loss")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(depths), fontsize=8, bbox_to_anchor=(0.5, -0.02))
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def hard_runs(data: HardData) -> Figure:
    """Per hard automaton: each run's held-out loss against the step, one colour per depth (flat at the end once it
    settled), titled with the most any run's loss climbed back above its lowest (as :func:`instability`), and its
    final accuracy against depth with the paper's best (T = 100)."""
    names, depths = data["names"], data["depths"]
    if not names:
        fig, ax = plt.subplots(figsize=(5.0, 1.2))
        ax.axis("off")
        ax.text(0.5, 0.5, "no hard automaton in this run", ha="center", va="center")
        return fig
    loss, acc, steps = np.asarray(data["eval_loss"]), np.asarray(data["accuracy"]), np.asarray(data["eval_steps"])
    colours = plt.get_cmap("viridis")(np.linspace(0.0, 0.85, len(depths)))
    fig, axes = plt.subplots(len(names), 2, figsize=(9.0, 2.8 * len(names)), squeeze=False)
    for (left, right), name, curves, a, chance in zip(axes, names, loss, acc, data["chance"]):
        for depth, per_seed, colour in zip(depths, curves, colours):
            for k, curve in enumerate(per_seed):
                left.plot(steps, curve, color=colour, linewidth=1.0, label=f"depth {depth}" if k == 0 else None)
        left.set(
            title=f"{name}: held-out loss, {a.shape[1]} seeds; largest rise {_largest_rise(curves):.3g}",
            xlabel="step",
            ylabel="loss",
        )
        left.legend(fontsize=8)
        for j, (depth, colour) in enumerate(zip(depths, colours)):
            right.plot([depth] * a.shape[1], a[j], "o", color=colour, alpha=0.8)
        paper = data["paper_best"].get(name)
        if paper:
            x = [d for d in depths if d <= len(paper) and paper[d - 1] is not None]
            right.plot(
                x,
                [paper[d - 1] / 100 for d in x],
                "s-",
                color=COLORS["full"],
                alpha=0.7,
                markersize=3,
                label="paper, best (T=100)",
            )
        right.axhline(chance, color=COLORS["theory"], linewidth=0.8, linestyle="--", label="chance")
        right.set(
            title=f"{name}: accuracy after {data['steps']} steps (T={data['T']})",
            xlabel="depth",
            ylabel="accuracy",
            ylim=(0, 1.03),
            xticks=depths,
        )
        right.legend(fontsize=8)
    fig.tight_layout()
    return fig


def boundary_attention(data: SweepData) -> Figure:
    """Last-layer attention of a trained depth-2 gridworld GPT, with the times at a wall marked.

    A sweep without a gridworld, or without depth 2, has no such GPT: the figure then says so.
    """
    att = data["grid_attention"]
    if att is None:
        fig, ax = plt.subplots(figsize=(5.0, 1.2))
        ax.axis("off")
        ax.text(0.5, 0.5, "no gridworld trained at depth 2 in this sweep", ha="center", va="center")
        return fig
    weights, states = np.asarray(att["weights"]), np.asarray(att["states"])
    heads = weights.shape[0]
    fig, axes = plt.subplots(1, heads, figsize=(2.6 * heads, 2.8), squeeze=False)
    low, high = att["walls"]
    for h, ax in enumerate(axes[0]):
        ax.imshow(np.where(np.tril(np.ones_like(weights[h])) > 0, weights[h], np.nan), cmap="viridis", vmin=0, vmax=1)
        for t, q in enumerate(states):
            if q in (low, high):
                ax.axvline(t, color="white" if q == low else "grey", linewidth=0.8, alpha=0.8)
        ax.set(
            title=f"head {h}: {att['boundary_mass'][h]:.2f} on walls",
            xlabel="key position",
            ylabel="query position" if h == 0 else None,
        )
    fig.suptitle(
        f"white: state 0, grey: last state; uniform attention would put {att['boundary_rate']:.2f} on walls", fontsize=9
    )
    fig.tight_layout()
    return fig


def brittleness(data: BrittlenessData) -> Figure:
    """Parity: accuracy against the input law, the count of ones and the length (the paper's Figs. 3.8, 3.9)."""
    fig, axes = plt.subplots(1, 3, figsize=(12.0, 3.2), sharey=True)
    panels = (
        ("by_prob", data["probs"], "test Pr[σ = 1] (trained at 0.5)"),
        ("by_count", data["counts"], f"number of ones in {data['T']} inputs"),
        ("by_length", data["lengths"], f"test length (trained at {data['T']})"),
    )
    for ax, (key, x, label) in zip(axes, panels):
        for name, (legend, color) in SERIES.items():
            if key in data[name]:
                ys = np.asarray(data[name][key])
                for y in ys:
                    ax.plot(x, y, color=color, alpha=0.3, linewidth=0.8)
                ax.plot(x, np.median(ys, axis=0), "o-", color=color, markersize=3, label=legend)
        ax.set(xlabel=label, ylim=(0, 1.03))
    axes[0].set_ylabel("accuracy")
    axes[0].legend(loc="lower center")
    fig.tight_layout()
    return fig


LENGTH_SERIES = {
    "absolute": ("sinusoidal positions", COLORS["tied"]),
    "shifted": ("shifted in training", COLORS["full"]),
    "none": ("no positions", COLORS["untied"]),
    "lstm": ("LSTM", COLORS["lstm"]),
    "scratchpad": ("scratchpad + recency", COLORS["depth2"]),
    "scratchpad_plain": ("scratchpad, no recency", COLORS["theory"]),
}


def lengths(data: LengthsData) -> Figure:
    """Accuracy over whole strings against their length, one panel per automaton, each learner's seeds thin and their
    median bold; the training length dashed (the thesis's Figs. 3.9/3.21, which draw the mean of 25 replicates)."""
    names = data["automata"]
    fig, axes = plt.subplots(1, len(names), figsize=(5.2 * len(names), 3.4), sharey=True, squeeze=False)
    for ax, name in zip(axes[0], names):
        for arm in data["arms"]:
            legend, color = LENGTH_SERIES[arm]
            ys = theory.length_accuracy(data["by_position"][name][arm], data["lengths"])
            for y in ys:
                ax.plot(data["lengths"], y, color=color, alpha=0.3, linewidth=0.8)
            style = "s:" if arm == "scratchpad_plain" else "o-"  # the control, apart from the thesis's curves
            ax.plot(data["lengths"], np.median(ys, axis=0), style, color=color, markersize=3, label=legend)
        ax.axvline(data["T"], color=COLORS["theory"], linestyle="--", linewidth=0.8)
        ax.set(title=name, xlabel=f"test length (trained at {data['T']})", ylim=(0, 1.03))
    axes[0][0].set_ylabel("accuracy (every position)")
    axes[0][0].legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    return fig


def supervision(data: SupervisionData) -> Figure:
    """Held-out accuracy on every state against the share of states the loss saw in training, one panel per
    automaton: each seed a dot, the mean a line, GPT and LSTM; chance dotted."""
    names, reveals = data["names"], np.asarray(data["reveals"])
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.4), sharey=True, squeeze=False)
    for i, (ax, name) in enumerate(zip(axes[0], names)):
        for kind, color, label in (
            ("gpt", COLORS["untied"], f"GPT, {data['depth']} layers"),
            ("lstm", COLORS["lstm"], "LSTM"),
        ):
            runs = np.asarray(data["accuracy"][kind][i])  # reveal x seed
            ax.plot(reveals, runs.mean(axis=1), "-", color=color, label=label)
            for r, seeds in zip(reveals, runs):
                ax.plot([r] * len(seeds), seeds, "o", color=color, markersize=3)
        ax.axhline(data["chance"][i], color=COLORS["theory"], linestyle=":", linewidth=1, label="chance")
        ax.set(xscale="log", xlabel="p_reveal (share of states the loss sees)", title=f"{name}, T = {data['T']}")
    axes[0][0].set_ylabel("held-out accuracy, every state")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    return fig


DYCK_SHOWN = 3  # seeds drawn per positional encoding


def dyck_attention(data: DyckData) -> Figure:
    """Layer 2's attention on the special prefix for the first seeds of each positional encoding (as the thesis's
    Fig. 3.3), boxed where a stack-like head would look: the innermost unmatched open bracket, where the next token
    closes it and it lies before the query; last, each seed's mean weight there over held-out prefixes, trained and
    untrained, against 1/2."""
    prefix, positions = data["prefix"], data["positions"]
    labels = ["()[]"[t] for t in prefix]
    stack = theory.last_unmatched_open(prefix)
    shown = min(DYCK_SHOWN, min(len(data["attention"][p]) for p in positions))
    fig, axes = plt.subplots(
        len(positions), shown + 1, figsize=(2.6 * (shown + 1), 2.7 * len(positions)), squeeze=False
    )
    for row, positional in zip(axes, positions):
        for s, ax in enumerate(row[:shown]):
            ax.imshow(np.asarray(data["attention"][positional][s]), cmap="Greys", vmin=0, vmax=1)
            for t, key in enumerate(stack[:-1]):
                if 0 <= key < t and prefix[t + 1] % 2 == 1:
                    ax.add_patch(plt.Rectangle((key - 0.5, t - 0.5), 1, 1, fill=False, color=COLORS["untied"], lw=1.2))
            ax.set_xticks(range(len(prefix)), labels, fontsize=6)
            ax.set_yticks(range(len(prefix)), labels, fontsize=6)
            ax.grid(False)
            ax.set_title(f"{positional} positions, seed {s}", fontsize=8)
        ax = row[-1]
        for x, (key, color) in enumerate((("stack_weight", COLORS["untied"]), ("untrained_stack_weight", "#999999"))):
            weights = data[key][positional]  # type: ignore[literal-required]
            ax.plot(np.full(len(weights), x) + np.linspace(-0.15, 0.15, len(weights)), weights, "o", color=color, ms=3)
        ax.axhline(0.5, color=COLORS["theory"], linestyle=":", linewidth=1)
        ax.set(xticks=[0, 1], xlim=(-0.5, 1.5), ylim=(0, 1), title="weight on the stack's top", ylabel="per seed")
        ax.set_xticklabels(["trained", "untrained"], fontsize=8)
    fig.tight_layout()
    return fig


ENCODING_COLORS = {"sinusoidal": COLORS["tied"], "linear": COLORS["untied"]}


def length_generalisation(data: EncodingsData) -> Figure:
    """Held-out accuracy at each position of sequences twice the training length, one line per seed and the mean
    bold, per positional encoding: positions right of the dashed line were never trained on; dotted, a guess blind
    to the inputs (chance, or the majority label)."""
    T = data["T"]
    fig, ax = plt.subplots(figsize=(7.0, 3.6))
    for positional in data["encodings"]:
        runs, color = np.asarray(data["by_position"][positional]), ENCODING_COLORS[positional]
        positions = np.arange(1, runs.shape[1] + 1)
        for run in runs:
            ax.plot(positions, run, color=color, alpha=0.2, linewidth=0.7)
        ax.plot(positions, runs.mean(axis=0), color=color, linewidth=2, label=f"{positional} positions")
    ax.axvline(T + 0.5, color=COLORS["theory"], linestyle="--", linewidth=1, label=f"training length T = {T}")
    ax.axhline(data["chance"], color=COLORS["theory"], linestyle=":", linewidth=1, label="a guess blind to the inputs")
    ax.set(xlabel="position t", ylabel="held-out accuracy at t", title=f"{data['automaton']}, tested at 2T = {2 * T}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


BALANCE_SERIES = (COLORS["untied"], COLORS["depth2"], COLORS["full"], COLORS["lstm"], COLORS["tied"])  # by arm


def balance(data: BalanceData) -> Figure:
    """Accuracy on long prefixes against the balance violation, one dot per seed, each training (standard, and the
    contrastive term at each weight) its colour (the thesis's Fig. 3.40); the untrained models' violations dotted."""
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    for arm, color in zip(data["arms"], itertools.cycle(BALANCE_SERIES)):
        ax.plot(data["violation"][arm], data["long_accuracy"][arm], "o", color=color, label=arm)
    for i, beta in enumerate(b for b in data["untrained_violation"] if np.isfinite(b)):
        ax.axvline(beta, color=COLORS["theory"], linestyle=":", linewidth=0.8, label="untrained" if i == 0 else None)
    lo, hi = data["long"]
    ax.set(
        xscale="log",
        xlabel="balance violation beta (0: Theorem 1's perfect balance)",
        ylabel=f"closing brackets right, prefixes {lo}-{hi}",
        title=f"Dyck, minimal first layer, trained at {data['T']}",
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
