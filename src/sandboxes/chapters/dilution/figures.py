"""Figures of the dilution chapter, each drawn from one section's data (fresh or loaded from JSON)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from ...data.flipflop import latest_write_position
from ...plotting import COLORS
from ...theory import dilution as theory

if TYPE_CHECKING:
    from .measure import (
        BoundData,
        ConstructionData,
        ScalingData,
        SecondPhaseData,
        SharpenedTrainingData,
        SharpeningData,
        Sharpness,
        SimulatorData,
        TailLengthData,
        TrainingData,
        WrongWriteData,
    )

KINDS = {
    "transformer": COLORS["untied"],
    "plain": COLORS["theory"],
    "sharpened": COLORS["full"],
    "rare": COLORS["depth2"],
    "lstm": COLORS["lstm"],
}
SETS = {"0.98": "sparse, p_i = 0.98", "0.8": "p_i = 0.8", "0.1": "dense, p_i = 0.1"}


def bound_curves(data: BoundData) -> Figure:
    """Proposition 4's bound against T for several sigma, with the extremal and random inputs."""
    lengths, sigmas = np.asarray(data["lengths"]), data["sigmas"]
    fine = np.unique(np.geomspace(2, lengths.max(), 200).round())
    fig, ax = plt.subplots()
    for k, sigma in enumerate(sigmas):
        color = plt.cm.viridis(k / max(1, len(sigmas) - 1))
        ax.plot(fine, theory.max_weight_bound(fine, sigma), color=color, lw=1.5, label=f"σ = {sigma:g}")
        ax.plot(lengths, np.asarray(data["random_max"])[k], "x", color=color, ms=5)
    ax.plot([], [], "x", color="black", label="largest of 64 random inputs")
    ax.set(
        xscale="log",
        xlabel="sequence length T",
        ylabel="largest attention weight",
        title="Proposition 4 bound (lines; the extremal input attains it)",
    )
    ax.legend(fontsize=7, ncol=2)
    return fig


def dilution_length(data: BoundData) -> Figure:
    """The length beyond which a head of norm sigma cannot give any position more than a threshold."""
    sigma = np.asarray(data["sigma_grid"])
    fig, ax = plt.subplots()
    for k, threshold in enumerate(data["thresholds"]):
        ax.plot(
            sigma,
            data["dilution_length"][str(threshold)],
            color=plt.cm.magma(0.2 + 0.25 * k),
            label=f"largest weight ≤ {threshold:g}",
        )
    ax.set(
        yscale="log",
        xlabel="σ_max = ‖W_Kᵀ W_Q‖₂ (unit-norm latents)",
        ylabel="dilution length T*",
        title="T* = 1 + exp(2σ)(1 − t)/t: beyond it no input gets more than t",
    )
    ax.legend()
    return fig


def construction_sweep(data: ConstructionData) -> Figure:
    """The construction with its weights held fixed: wrong reads and layer-1 self-selection against T."""
    sizes = np.asarray(data["sizes"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    for k, (p, label) in enumerate(SETS.items()):
        axes[0].plot(sizes, data["errors"][p], "o-", ms=3, color=plt.cm.viridis(0.15 + 0.35 * k), label=label)
    axes[1].plot(sizes, data["self_selection"], "o-", ms=3, color=COLORS["theory"])
    axes[1].axhline(0.5, color=COLORS["tied"], ls=":", lw=1, label="1/2: the rounding flips")
    for ax in axes:
        ax.axvline(data["safe_length"], color=COLORS["untied"], ls="--", lw=1, label="certified up to here")
        ax.axvline(data["onset"], color=COLORS["tied"], ls="--", lw=1, label="'w 1 i 0 r' fails (closed form)")
        ax.set_xlabel(f"block size = sequence length (weights built for {data['base']})")
    axes[0].set(ylabel="wrong reads", yscale="symlog", ylim=(0, None), title="wrong reads on random strings")
    axes[1].set(
        ylabel="smallest weight on itself", ylim=(0, 1.05), title="layer 1: an unwritten bit must select itself"
    )
    axes[0].legend(fontsize=7)
    axes[1].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    return fig


def simulator_attention(data: SimulatorData) -> Figure:
    """Top key of the 1-layer simulators on the proof's two inputs, with the predicted switches."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    for name, color in (("case 1", COLORS["tied"]), ("case 2", COLORS["full"]), ("orthogonal", COLORS["untied"])):
        run = data[name]
        label = f"W_Qpᵀ W_Kp = {run['delta']:g}"
        top1 = np.asarray(run["case1_top"])
        axes[0].plot(np.arange(len(top1)), top1, color=color, lw=1.5, label=label)
        top2 = np.asarray(run["case2_top"])
        queries = np.arange(2, 2 + len(top2))
        axes[1].plot(queries, queries - 1 - top2, color=color, lw=1.5, label=label)
    axes[0].axvline(data["case1_switch"], color=COLORS["theory"], ls="--", lw=1, label="predicted switch")
    axes[1].axvline(data["case2_switch"], color=COLORS["theory"], ls="--", lw=1, label="predicted switch")
    axes[0].set(xlabel="query t", ylabel="key with the top score", title="case 1: write at 0, then noops")
    axes[1].set(
        xlabel="query t (second write at t − 1)",
        ylabel="distance of top key behind the latest write",
        title="case 2: write at 0 and at t − 1",
    )
    for ax in axes:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def error_violins(data: TrainingData) -> Figure:
    """Wrong reads per seed of the transformers and the LSTMs, as distributions over seeds, on each test set."""
    return _violins(data["counts"])


def second_phase_violins(data: SecondPhaseData) -> Figure:
    """Wrong reads per seed after each second phase (plain, sharpened, rare), on each test set."""
    return _violins(data["counts"])


def _violins(counts: dict[str, dict[str, list[tuple[int, int]]]]) -> Figure:
    names = ["in-distribution", "sparse", "dense"]
    present = [kind for kind in KINDS if kind in counts]
    fig, axes = plt.subplots(1, len(names), figsize=(11, 3.4), sharey=True)
    for ax, name in zip(axes, names):
        for k, kind in enumerate(present):
            errors = np.array([w for w, _ in counts[kind][name]], dtype=float)
            y = np.log10(1 + errors)
            if np.ptp(y) > 0:
                parts = ax.violinplot(y, positions=[k], showextrema=False, widths=0.7)
                for body in parts["bodies"]:
                    body.set(facecolor=KINDS[kind], alpha=0.3)
            ax.plot(np.full(len(y), k) + np.linspace(-0.1, 0.1, len(y)), y, "o", ms=4, color=KINDS[kind])
        ax.set_xticks(range(len(present)), present)
        ax.set(title=f"{name} ({counts[present[0]][name][0][1]} reads)")
    axes[0].set_ylabel("log10(1 + wrong reads) per seed")
    fig.tight_layout()
    return fig


def sharpness_by_position(data: TrainingData) -> Figure:
    """Largest weight and entropy of the sharpest head at read queries, against the read's position."""
    return _sharpness(data["sharpness"], "transformer")


def sharpening_by_position(data: SecondPhaseData) -> Figure:
    """The same after the plain and the sharpened second phases: what the penalty did to the attention."""
    return _sharpness(data["sharpness"], "plain")


def _sharpness(sharp: dict[str, list[Sharpness]], bound_of: str) -> Figure:
    """Per layer, the seeds' mean largest weight and entropy per position bin, with the Prop 4 bound of ``bound_of``."""
    layers = len(sharp[bound_of][0]["layers"])
    edges = np.asarray(sharp[bound_of][0]["bin_edges"])
    centre = (edges[:-1] + edges[1:]) / 2
    fig, axes = plt.subplots(2, layers, figsize=(4.6 * layers, 5.6), squeeze=False, sharex=True)

    def seed_mean(runs: list[Sharpness], layer: int, key: str) -> np.ndarray:
        values = np.array([[np.nan if v is None else v for v in r["layers"][layer][key]] for r in runs], dtype=float)
        counts = (~np.isnan(values)).sum(axis=0)  # a position bin no seed read stays empty (NaN), without a warning
        return np.where(counts > 0, np.nansum(values, axis=0) / np.maximum(counts, 1), np.nan)

    for layer in range(layers):
        for kind, runs in sharp.items():
            for row, key in enumerate(("max_weight", "entropy")):
                axes[row, layer].plot(centre, seed_mean(runs, layer, key), "o-", color=KINDS[kind], label=kind)
        sigma = seed_mean(sharp[bound_of], layer, "sigma")
        axes[0, layer].plot(
            centre,
            theory.max_weight_bound(centre + 1, sigma),
            "--",
            color=COLORS["theory"],
            lw=1,
            label=f"Prop 4 bound ({bound_of}'s σ)",
        )
        axes[0, layer].set(title=f"layer {layer + 1}", ylim=(0, 1.05), ylabel="largest weight")
        axes[1, layer].set(xlabel="position of the read (keys = position + 1)", ylabel="entropy (nats)", ylim=(0, None))
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    return fig


FLOOR = 1e-5  # a held-out loss of exactly 0 would vanish from a log axis


def training_curves(data: TrainingData) -> Figure:
    """Held-out loss on the reads of the transformers and of the LSTMs, on a log scale."""
    fig, ax = plt.subplots()
    for curve in np.asarray(data["eval_loss"]):
        ax.plot(data["eval_steps"], np.maximum(curve, FLOOR), color=KINDS["transformer"], lw=1)
    for curve in np.asarray(data["lstm_eval_loss"]):
        ax.plot(data["lstm_eval_steps"], np.maximum(curve, FLOOR), color=KINDS["lstm"], lw=1)
    ax.plot([], [], color=KINDS["transformer"], label="transformer, one line per seed")
    ax.plot([], [], color=KINDS["lstm"], label="LSTM, one line per seed")
    ax.set(xlabel="step", ylabel="held-out loss on reads (nats)", yscale="log")
    ax.legend(fontsize=8)
    return fig


def second_phase_curves(data: SecondPhaseData) -> Figure:
    """Held-out objective of the first phase, then of each second phase from its end, on a log scale: cross-entropy on
    the reads, plus the penalty in the sharpened phase, on strings of the mixture in the rare one."""
    steps = np.asarray(data["eval_steps"])
    start = data["second_phase_start"]
    fig, ax = plt.subplots()
    for kind, curves in data["eval_loss"].items():
        for curve in np.asarray(curves):
            ax.plot(steps[steps >= start], np.maximum(curve[steps >= start], FLOOR), color=KINDS[kind], lw=1)
        ax.plot([], [], color=KINDS[kind], label=f"{kind}, one line per seed")
    for curve in np.asarray(next(iter(data["eval_loss"].values()))):
        ax.plot(steps[steps < start], np.maximum(curve[steps < start], FLOOR), color=KINDS["transformer"], lw=1)
    ax.plot([], [], color=KINDS["transformer"], label="first phase")
    ax.axvline(start, color=COLORS["theory"], ls=":", lw=1, label="second phases start")
    ax.set(xlabel="step", ylabel="held-out objective of the phase (nats)", yscale="log")
    ax.legend(fontsize=8)
    return fig


def sharpening_sweep(data: SharpeningData) -> Figure:
    """Per weight of the penalty (0: the plain twins), each seed's wrong sparse and dense reads and its last layer's
    read entropy, with the seeds' total or mean as a line."""
    return _penalty_panels(data, ("sparse", "dense"))


def sharpened_from_start(data: SharpenedTrainingData) -> Figure:
    """The same for runs with the penalty from the first step, with their wrong in-distribution reads first: runs
    from scratch must learn the task, where a second phase starts from models that had."""
    return _penalty_panels(data, ("in-distribution", "sparse", "dense"))


def _penalty_panels(data: SharpeningData | SharpenedTrainingData, sets: tuple[str, ...]) -> Figure:
    """Per weight of the penalty (0: the plain twins), each seed's wrong reads on each of ``sets`` and its last
    layer's read entropy, with the seeds' total or mean as a line."""
    coefficients = data["coefficients"]
    x = np.arange(len(coefficients))
    fig, axes = plt.subplots(1, len(sets) + 1, figsize=(4 * (len(sets) + 1), 3.4))
    for ax, name in zip(axes, sets):
        wrong = np.array([[w for w, _ in seeds] for seeds in data["counts"][name]], dtype=float)
        for k in x:
            jitter = np.linspace(-0.12, 0.12, wrong.shape[1])
            ax.plot(k + jitter, np.log10(1 + wrong[k]), "o", ms=4, color=KINDS["sharpened" if k else "plain"])
        ax.plot(x, np.log10(1 + wrong.sum(axis=1)), "-", color=COLORS["theory"], lw=1, label="all seeds together")
        ax.axhline(np.log10(1 + wrong[0].sum() / 10), color=COLORS["theory"], ls="--", lw=1, label="a tenth of plain's")
        ax.set(title=f"{name} ({data['counts'][name][0][0][1]} reads a seed)", ylabel="log10(1 + wrong reads)")
    entropy = np.asarray(data["read_entropy"], dtype=float)
    for k in x:
        jitter = np.linspace(-0.12, 0.12, entropy.shape[1])
        axes[-1].plot(k + jitter, entropy[k], "o", ms=4, color=KINDS["sharpened" if k else "plain"])
    axes[-1].plot(x, entropy.mean(axis=1), "-", color=COLORS["theory"], lw=1)
    axes[-1].set(title="sharpness at reads", ylabel="last layer's read entropy (nats)", yscale="log")
    for ax in axes:
        ax.set_xticks(x, ["plain"] + [f"{c:g}" for c in coefficients[1:]])
        ax.set_xlabel("weight of the entropy penalty")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def _run_label(run: dict) -> str:
    return f"{'plain' if run['weight'] == 0 else 'sharpened'}\np_noop {run['p_noop']:g}"


def wrong_write_heads(data: WrongWriteData) -> Figure:
    """Per run (p_noop, plain or sharpened), each seed's share of noop queries on an earlier write, its mean top
    weight, and the first query at which Prop 5's inputs pull its top key off the latest write."""
    runs = data["runs"]
    x = np.arange(len(runs))
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    for k, run in enumerate(runs):
        colour = KINDS["sharpened" if run["weight"] else "plain"]
        jitter = np.linspace(-0.15, 0.15, len(run["earlier_write"]))
        stuck = np.array([e > 0 for e in run["state_errors"]])
        earlier, top = np.asarray(run["earlier_write"]), np.asarray(run["top_weight"])
        for ax, values in ((axes[0], earlier), (axes[1], top)):
            ax.plot(k + jitter[~stuck], values[~stuck], "o", ms=4, color=colour)
            ax.plot(k + jitter[stuck], values[stuck], "x", ms=6, color=colour)
        for case, marker in (("case 1", "^"), ("case 2", "v")):
            first = [fw[case]["measured"] for fw in run["first_wrong"]]
            found = np.array([f is not None for f in first])
            values = np.array([f if f is not None else np.nan for f in first], dtype=float)
            axes[2].plot(k + jitter[found], values[found], marker, ms=5, color=colour, ls="none")
            axes[2].plot(
                k + jitter[~found],
                np.full((~found).sum(), 2.0 * data["drift_length"]),
                marker,
                ms=5,
                mfc="none",
                color=colour,
                ls="none",
            )
    axes[0].set(title="top key on an earlier write (x: wrong states)", ylabel="share of noop queries")
    axes[1].set(title="sharpness", ylabel="mean top weight at noop queries")
    axes[2].axhline(data["automaton_T"], color=COLORS["theory"], ls="--", lw=1, label="training length")
    axes[2].axhline(data["drift_length"], color=COLORS["theory"], ls=":", lw=1, label="longest input read")
    axes[2].set(
        title="Prop 5's inputs: first wrong top key (▲ case 1, ▼ case 2; open: none)",
        yscale="log",
        ylabel="query position",
    )
    axes[2].title.set_fontsize(9)
    axes[2].legend(fontsize=8)
    for ax in axes:
        ax.set_xticks(x, [_run_label(run) for run in runs], fontsize=8)
    fig.tight_layout()
    return fig


def wrong_write_maps(data: WrongWriteData) -> Figure:
    """Attention on one short string (Fig. 3.34): a plain head, a sharpened head without wrong states, and the
    sharpened head with wrong states most often on an earlier write, where there were; the latest write framed."""
    example = np.asarray(data["example"])
    latest = latest_write_position(torch.tensor(example)[None])[0].numpy()
    picks = [("plain", data["runs"][0], 0)]
    sharpened = [(run, seed) for run in data["runs"] if run["weight"] for seed in range(len(run["state_errors"]))]
    right = [(run, seed) for run, seed in sharpened if run["state_errors"][seed] == 0]
    if right:
        picks.append(("sharpened", *right[0]))
    wrong = [(run, seed) for run, seed in sharpened if run["state_errors"][seed] > 0]
    if wrong:  # the seed most often on an earlier write
        picks.append(("stuck", *max(wrong, key=lambda pair: pair[0]["earlier_write"][pair[1]])))
    fig, axes = plt.subplots(1, len(picks), figsize=(3.6 * len(picks), 3.6), squeeze=False)
    names = ("w0", "w1", "·")
    for ax, (kind, run, seed) in zip(axes[0], picks):
        ax.imshow(np.asarray(run["attention"][seed]), cmap="viridis", vmin=0, vmax=1)
        ax.plot(latest, np.arange(len(example)), "s", mfc="none", mec="red", ms=7)
        ax.set_xticks(range(len(example)), [names[t] for t in example], fontsize=7)
        ax.set_yticks(range(len(example)), [names[t] for t in example], fontsize=7)
        ax.set(title=f"{kind}, p_noop {run['p_noop']:g}, seed {seed}", xlabel="key", ylabel="query")
    fig.tight_layout()
    return fig


def tail_lengths(data: TailLengthData) -> Figure:
    """Per training length, each seed's wrong reads on in-distribution, sparse and dense strings (dots) and all
    seeds' together (line), log10(1 + count)."""
    counts = data["counts"]
    return _wrong_read_panels(
        [str(T) for T in data["lengths"]],
        "training length T",
        [("all seeds together", counts, KINDS["transformer"], COLORS["theory"])],
        np.sum,
        lambda name: "reads a seed: " + ", ".join(str(runs[name][0][1]) for runs in counts),
    )


def scaling(data: ScalingData) -> Figure:
    """Per budget, each seed's wrong reads on in-distribution, sparse and dense strings (dots, one colour a width)
    and their median (lines), log10(1 + count): R5's sweep at this scale, seeds as the thesis's violins show them."""
    widths, counts = data["widths"], data["counts"]
    colours = plt.get_cmap("viridis")(np.linspace(0.1, 0.85, len(widths)))
    return _wrong_read_panels(
        [str(b) for b in data["budgets"]],
        "training steps",
        [(f"width {w}", cells, colour, colour) for w, cells, colour in zip(widths, counts, colours)],
        np.median,
        lambda name: f"{counts[0][0][name][0][1]} reads a seed",
    )


def _wrong_read_panels(
    ticks: list[str],
    xlabel: str,
    groups: list[tuple[str, list[dict[str, list[tuple[int, int]]]], Any, Any]],
    summary: Callable[[np.ndarray], float],
    reads: Callable[[str], str],
) -> Figure:
    """One panel per test set (in-distribution, sparse, dense): at each tick each group's seeds' wrong reads (dots)
    and ``summary`` of them (a line per group, labelled), groups side by side, log10(1 + count)."""
    x = np.arange(len(ticks))
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4), sharey=True)
    for ax, name in zip(axes, ("in-distribution", "sparse", "dense")):
        for k, (label, cells, dots, line) in enumerate(groups):
            wrong = [np.array([w for w, _ in runs[name]], dtype=float) for runs in cells]
            offset = 0.25 * (k - (len(groups) - 1) / 2) / max(1, len(groups) - 1)
            for tick, seeds in enumerate(wrong):
                jitter = np.linspace(-0.12, 0.12, len(seeds)) / len(groups)
                ax.plot(tick + offset + jitter, np.log10(1 + seeds), "o", ms=3.5, color=dots)
            ax.plot(x + offset, [np.log10(1 + summary(s)) for s in wrong], "-", color=line, lw=1, label=label)
        ax.set(title=f"{name} ({reads(name)})", xlabel=xlabel)
        ax.title.set_fontsize(9)
        ax.set_xticks(x, ticks)
    axes[0].set_ylabel("log10(1 + wrong reads)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig
