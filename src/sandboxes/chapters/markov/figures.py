"""Figures of the Markov chapter, each drawn from one section's data (fresh or loaded from JSON)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from ...data.markov import binary_kernel, stationary_law
from ...plotting import COLORS, curves_with_band, reference_line
from ...theory import markov as theory
from ...theory.markov_flow import ReducedFlow

if TYPE_CHECKING:
    from .measure import (
        BasinData,
        DepthData,
        FlowData,
        MultistateData,
        PhaseData,
        SweepData,
        TrainingData,
    )


def _lines(p: float, q: float) -> tuple[float, float]:
    kernel = binary_kernel(p, q)
    return theory.entropy_rate(kernel), theory.unigram_entropy(kernel)


def loss_curves(data: TrainingData) -> Figure:
    """Held-out loss of every seed against the entropy rate and the unigram entropy (Fig. 3a/b)."""
    runs = data["runs"]
    chains = list(dict.fromkeys((r["p"], r["q"]) for r in runs))
    fig, axes = plt.subplots(1, len(chains), figsize=(5.0 * len(chains), 3.4), squeeze=False)
    for ax, (p, q) in zip(axes[0], chains):
        for run in (r for r in runs if (r["p"], r["q"]) == (p, q)):
            name = "tied" if run["tied"] else "untied"
            curves_with_band(ax, np.asarray(run["eval_steps"]), np.asarray(run["eval_loss"]), COLORS[name], name)
        H, H_pi = _lines(p, q)
        reference_line(ax, H, "entropy rate")
        reference_line(ax, H_pi, "H(π) unigram", ":")
        ax.set(
            title=f"p = {p}, q = {q} (p+q {'>' if p + q > 1 else '<'} 1)",
            xlabel="step",
            ylabel="held-out loss (nats)",
            ylim=(H - 0.3 * (H_pi - H) - 0.01, H_pi + 0.6 * (H_pi - H) + 0.01),
        )
        ax.legend(loc="upper right")
    fig.tight_layout()
    return fig


def predictions(data: TrainingData) -> Figure:
    """Predicted P(x_n+1 = 1) at positions with x_n = 0, against p and pi_1 (Fig. 3c/d)."""
    runs = data["runs"]
    chains = list(dict.fromkeys((r["p"], r["q"]) for r in runs))
    fig, axes = plt.subplots(1, len(chains), figsize=(5.0 * len(chains), 3.2), squeeze=False)
    for ax, (p, q) in zip(axes[0], chains):
        for run in (r for r in runs if (r["p"], r["q"]) == (p, q)):
            inputs = np.asarray(run["prediction"]["inputs"])[:-1]
            prob = np.asarray(run["prediction"]["prob_one"])
            zeros = np.flatnonzero(inputs == 0)
            name = "tied" if run["tied"] else "untied"
            ax.plot(zeros, prob[zeros], "o", ms=3, color=COLORS[name], label=name)
        reference_line(ax, p, "p = P(1 | 0)")
        reference_line(ax, stationary_law(binary_kernel(p, q))[1], "π₁", ":")
        ax.set(
            title=f"p = {p}, q = {q}: prediction where x_n = 0",
            xlabel="position n",
            ylabel="predicted P(x_n+1 = 1)",
            ylim=(0, 1),
        )
        ax.legend(loc="upper right")
    fig.tight_layout()
    return fig


def weight_shapes(data: TrainingData) -> Figure:
    """Appendix D on the trained weights, per chain: each matrix's share of the squared norm in its top singular
    direction and the positional table's share in its mean over positions, a dot per seed, and each seed's weights
    before training as a grey cross; the rows judge the MLP's two matrices and the positions of the tied runs with
    p+q<1 against one half."""
    runs = [run for run in data["runs"] if "spectra" in run]
    chains = list(dict.fromkeys((r["p"], r["q"]) for r in runs))
    fig, axes = plt.subplots(1, max(1, len(chains)), figsize=(5.0 * max(1, len(chains)), 3.6), squeeze=False)
    for ax, (p, q) in zip(axes[0], chains):
        chain = [r for r in runs if (r["p"], r["q"]) == (p, q)]
        names = list(dict.fromkeys(name for run in chain for name in run["spectra"])) + ["positions"]
        for offset, run in zip(np.linspace(-0.15, 0.15, len(chain)), chain):
            kind = "tied" if run["tied"] else "untied"
            for shapes, marker, color, label in (
                (run["initial"], "x", "0.6", "before training"),
                (run, "o", COLORS[kind], kind),
            ):
                shares = {name: theory.top_share(values) for name, values in shapes["spectra"].items()}
                shares["positions"] = np.asarray(shapes["positions_constant"])
                for i, (name, seeds) in enumerate(shares.items()):
                    x = np.full(len(seeds), names.index(name) + offset)
                    ax.plot(x, seeds, marker, ms=3, color=color, linestyle="none", label=label if i == 0 else None)
        labels = [name.removeprefix("blocks.0.").removesuffix(".weight") for name in names]
        reference_line(ax, 0.5, "half")
        ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
        ax.set(title=f"p = {p}, q = {q}: trained weights", ylabel="share of the squared norm", ylim=(0, 1.02))
        handles, texts = ax.get_legend_handles_labels()
        unique = dict(zip(texts, handles))
        ax.legend(unique.values(), unique.keys(), loc="lower left", fontsize="small")
    fig.tight_layout()
    return fig


def hessian_sweep(data: SweepData) -> Figure:
    """Smallest eigenvalue of the (e, a, b) Hessian block at theta_pi along p = q = s/2."""
    sweep = np.asarray(data["sweep"])
    fig, ax = plt.subplots()
    ax.plot(sweep, data["tied_min_eig"], "o-", color=COLORS["tied"], label="tied (autograd)")
    ax.plot(sweep, data["untied_min_eig"], "s-", color=COLORS["untied"], label="untied (autograd)")
    fine = np.linspace(sweep.min(), sweep.max(), 200)
    ax.plot(
        fine,
        [2 * theory.curvature(s / 2, s / 2) for s in fine],
        color=COLORS["theory"],
        lw=1,
        label="2c = 2pq(p+q-1)/(p+q)² (closed form)",
    )
    ax.axhline(0, color="black", lw=0.6)
    ax.axvline(1, color="black", lw=0.6, ls=":")
    ax.set(xlabel="switching factor p + q  (p = q)", ylabel="smallest eigenvalue")
    ax.legend()
    return fig


def phase_portrait(data: FlowData) -> Figure:
    """Reduced gradient flow in the (e, w) plane, with the Gaussian starts coloured by where they end."""
    flows = [data["featured"], data["contrast"]]
    flows.sort(key=lambda f: f["p"] + f["q"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    e_grid, w_grid = np.meshgrid(np.linspace(0.01, 2.0, 25), np.linspace(-2.0, 1.5, 25))
    for ax, flow_data in zip(axes, flows):
        flow = ReducedFlow(flow_data["p"], flow_data["q"])
        velocity = np.array([[flow.velocity(e, w) for e, w in zip(re, rw)] for re, rw in zip(e_grid, w_grid)])
        ax.streamplot(e_grid, w_grid, velocity[..., 0], velocity[..., 1], color="#bbbbbb", density=1.0, linewidth=0.7)
        e_curve = np.linspace(0.02, 2.0, 400)
        target = (flow.optimal_slope / e_curve**2 - 1) / 2
        w_curve = np.sign(target) * np.sqrt(np.abs(target))
        ax.plot(e_curve, w_curve, color="black", lw=2, label="global minima  e²(1+2w|w|) = ln[(1-p)(1-q)/pq]")
        ax.axhline(-1 / np.sqrt(2), color=COLORS["theory"], ls=":", lw=1, label="w = -1/√2")
        starts = np.asarray(flow_data["starts"])
        reached = np.asarray(flow_data["reached_global"], dtype=bool)
        ax.plot(starts[reached, 0], starts[reached, 1], "o", ms=4, color=COLORS["untied"], label="start → global min")
        ax.plot(
            starts[~reached, 0], starts[~reached, 1], "x", ms=5, color=COLORS["tied"], label="start → e = 0 (unigram)"
        )
        for tr in flow_data["trajectories"]:
            tr = np.asarray(tr)
            ax.plot(tr[:, 0], tr[:, 1], color="black", lw=0.8, alpha=0.7)
        ax.set(
            xlim=(0, 2),
            ylim=(-2, 1.5),
            xlabel="e",
            ylabel="w",
            title=f"p = {flow_data['p']}, q = {flow_data['q']} (p+q {'>' if flow.p + flow.q > 1 else '<'} 1)",
        )
    axes[0].legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    return fig


def phase_diagram(data: PhaseData) -> Figure:
    """Where tied and untied one-layer runs are at the end over the (p, q) grid: 0 = entropy rate, 1 = unigram."""
    values = np.asarray(data["values"])
    step = values[1] - values[0]
    extent = (values[0] - step / 2, values[-1] + step / 2)
    fig, axes = plt.subplots(1, 2, figsize=(9.2, 3.8), sharey=True)
    for ax, name in zip(axes, ("tied", "untied")):
        ratio = np.where(
            np.asarray(data["resolvable"], dtype=bool), np.asarray(data["ratio"][name], dtype=float), np.nan
        )
        image = ax.imshow(ratio.T, origin="lower", cmap="coolwarm", vmin=0, vmax=1, extent=extent + extent)
        ax.plot([0, 1], [1, 0], color="black", lw=1, ls="--")
        ax.set(xlim=extent, ylim=extent, xlabel="p", ylabel="q" if name == "tied" else None, title=name)
    fig.colorbar(image, ax=axes, label="excess loss / (H(π) − H) at the end\n0 bigram … 1 unigram; blank: gap < 0.01")
    return fig


def basin(data: BasinData) -> Figure:
    """Fraction of seeds ending at each critical value against the initialisation scale."""
    scales = np.asarray(data["scales"])
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), sharey=True)
    for ax, name in zip(axes, ("tied", "untied")):
        outcome = data["outcome"][name]
        bottom = np.zeros(len(scales))
        for kind, color in (("bigram", COLORS["untied"]), ("unigram", COLORS["tied"]), ("neither", "#aaaaaa")):
            share = np.asarray(outcome[kind])
            ax.bar(np.arange(len(scales)), share, bottom=bottom, color=color, label=kind)
            bottom += share
        ax.set_xticks(np.arange(len(scales)), [f"{s:g}" for s in scales])
        ax.set(title=f"{name}, p = {data['p']}, q = {data['q']}", xlabel="init std", ylabel="fraction of seeds")
    axes[1].legend(loc="lower left", bbox_to_anchor=(1.0, 0.0), fontsize=8)
    fig.tight_layout()
    return fig


def depth(data: DepthData) -> Figure:
    """Held-out loss of tied and untied runs by depth: one layer lingers at the unigram, deeper ones leave it."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    H, H_pi = _lines(data["p"], data["q"])
    depths = sorted({run["depth"] for run in data["runs"]})
    shades = plt.get_cmap("viridis")(np.linspace(0.0, 0.85, len(depths)))
    for ax, tied in zip(axes, (True, False)):
        for run in (r for r in data["runs"] if r["tied"] == tied):
            curves_with_band(
                ax,
                np.asarray(run["eval_steps"]),
                np.asarray(run["eval_loss"]),
                shades[depths.index(run["depth"])],
                f"depth {run['depth']}",
            )
        reference_line(ax, H, "entropy rate")
        reference_line(ax, H_pi, "H(π) unigram", ":")
        ax.set(
            xlabel="step",
            title=f"{'tied' if tied else 'untied'}, p = {data['p']}, q = {data['q']}",
            ylim=(H - 0.02, H_pi + 0.04),
        )
    axes[0].set_ylabel("held-out loss (nats)")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    return fig


def multistate(data: MultistateData) -> Figure:
    """The tied Hessian's sign change at p* = (n-1)/n, and where tied and untied runs end around it."""
    fig, (hess, runs) = plt.subplots(1, 2, figsize=(10, 3.6))
    fine = np.linspace(0.02, 0.98, 200)
    n = data["states"]
    hess.plot(fine, 2 / n * (n * fine / (n - 1) - 1), color=COLORS["theory"], lw=1, label="(2/n)(np/(n-1) − 1)")
    hess.plot(data["hessian_probs"], data["hessian_eigenvalue"], "o", color=COLORS["tied"], label="tied (autograd)")
    hess.set(
        xlabel="switching probability p", ylabel="embedding Hessian eigenvalue", title=f"{n}-state tied unigram point"
    )
    probs = np.asarray(data["switch_probs"])
    for offset, name in ((-0.01, "tied"), (0.01, "untied")):
        ratio = np.asarray(data[name], dtype=float)
        for p, row in zip(probs, ratio):
            runs.plot(np.full(len(row), p + offset), row, "o", color=COLORS[name], alpha=0.6)
        runs.plot(probs + offset, np.median(ratio, axis=1), "-", color=COLORS[name], label=name)
    runs.set(
        xlabel="switching probability p",
        ylabel="excess loss / (H(π) − H)",
        ylim=(-0.05, 1.15),
        title="where training ends",
    )
    runs.axhline(1, color=COLORS["theory"], ls=":", lw=1)
    runs.axhline(0, color=COLORS["theory"], ls="--", lw=1)
    for ax in (hess, runs):
        ax.axvline(data["threshold"], color="black", lw=0.8, ls=":", label="p* = (n−1)/n")
        ax.legend(fontsize=8)
    hess.axhline(0, color="black", lw=0.6)
    fig.tight_layout()
    return fig
