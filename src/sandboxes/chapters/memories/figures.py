"""Figures of the memories chapter, each drawn from one section's data (fresh or loaded from JSON)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from scipy.special import lambertw

from ...plotting import COLORS, curves_with_band, reference_line
from ...theory.memories import (
    ASYMPTOTIC_CONSTANT,
    MLP_GAP_EXTRA,
    built_failures,
    facts_per_parameter,
    growth_exponent,
    mlp_capacity_constant,
    recall_samples,
)

if TYPE_CHECKING:
    from .measure import (
        CapacityData,
        DistributionalData,
        FactBuildData,
        FactCapacityData,
        GradientData,
        HallucinationData,
        MlpCapacityData,
    )


def one_step(data: GradientData) -> Figure:
    """The memory one gradient step from zero writes: u_k^T W_1 e_z, inputs sorted by their target."""
    scores, targets = np.asarray(data["one_step_scores"]), np.asarray(data["targets"])
    order = np.argsort(targets, kind="stable")
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    image = ax.imshow(scores[order].T, aspect="auto", cmap="RdBu_r", vmin=-1.5, vmax=1.5)
    ax.plot(np.arange(len(order)), targets[order], "k.", markersize=3, label="the target f(z)")
    ax.set(xlabel="input z (sorted by its target)", ylabel="output k", title="u_k^T W_1 e_z after one step of size N")
    ax.legend(loc="upper left", fontsize=8)
    fig.colorbar(image, ax=ax)
    return fig


def capacity(data: CapacityData) -> Figure:
    """The most associations each memory recalls, per dimension and seed, against the prediction; and N ln N / d^2."""
    dims = np.asarray(data["dims"], dtype=float)
    predicted = np.asarray(data["predicted"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.6))
    for kind, color, shift in (("construction", COLORS["untied"], 0.97), ("one_step", COLORS["tied"], 1.03)):
        runs = np.asarray(data[kind], dtype=float)  # type: ignore[literal-required]
        label = "construction" if kind == "construction" else "one gradient step"
        for side, values in ((left, runs), (right, runs * np.log(runs) / dims[:, None] ** 2)):
            side.plot(np.repeat(dims * shift, runs.shape[1]), values.ravel(), ".", color=color, alpha=0.4)
            side.plot(dims * shift, np.median(values, axis=1), "o", color=color, label=f"{label} (median)")
    judged = np.asarray(data["single_share"]) < 0.5
    left.loglog(dims, predicted, "-", color=COLORS["theory"], label="predicted N* (Gaussian model)")
    left.loglog(dims[judged], predicted[judged], "s", color=COLORS["theory"], mfc="none", label="judged")
    for side in (left, right):
        side.set_xticks(dims, [str(int(d)) for d in dims])
        side.minorticks_off()
    left.set(xlabel="dimension d", ylabel="associations all recalled")
    left.legend(fontsize=8)
    right.semilogx(dims, predicted * np.log(predicted) / dims**2, "-", color=COLORS["theory"], label="predicted")
    reference_line(right, ASYMPTOTIC_CONSTANT, "1/8 (d to infinity)")
    right.set(xlabel="dimension d", ylabel="N ln N / d^2")
    fig.tight_layout()
    return fig


def mlp_capacity(data: MlpCapacityData) -> Figure:
    """The most associations a trained MLP memory stores against m d, one colour per width ratio, with the law
    N ln N = c m d at the median c; and against d beside one-hot embeddings' d."""
    dims, ratios = np.asarray(data["dims"], float), data["ratios"]
    runs = np.asarray(data["stored"], dtype=float)
    constant = mlp_capacity_constant(runs, dims, np.asarray(ratios, dtype=float))
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.6))
    colors = plt.get_cmap("viridis")(np.linspace(0.1, 0.85, len(ratios)))
    for j, (ratio, color) in enumerate(zip(ratios, colors)):
        params = dims**2 * ratio
        for side, x in ((left, params), (right, dims)):
            side.plot(np.repeat(x, runs.shape[2]), runs[:, j].ravel(), ".", color=color, alpha=0.4)
            side.plot(x, np.median(runs[:, j], axis=1), "o", color=color, label=f"m = {ratio} d (median)")
    params = np.geomspace((dims**2).min() * min(ratios), (dims**2).max() * max(ratios), 50)
    n = np.exp(np.real(lambertw(constant * params)))  # N ln N = c m d
    left.loglog(params, n, "--", color=COLORS["theory"], label=f"N ln N = {constant:.2f} m d")
    left.set(xlabel="m d", ylabel="associations memorised")
    right.loglog(dims, dims, ":", color=COLORS["theory"], label="one-hot embeddings: d")
    right.set_xticks(dims, [str(int(d)) for d in dims])
    right.minorticks_off()
    right.set(xlabel="dimension d", ylabel="associations memorised")
    for side in (left, right):
        side.legend(fontsize=8)
    fig.tight_layout()
    return fig


def fact_capacity(data: FactCapacityData) -> Figure:
    """The most facts a one-layer transformer recalls against its parameters, one colour per shape, with the linear
    law at the median facts per parameter."""
    sizes = np.asarray(data["sizes"], dtype=float)
    facts, params = sizes**2, np.asarray(data["params"], dtype=float)
    fig, ax = plt.subplots()
    colors = plt.get_cmap("viridis")(np.linspace(0.1, 0.85, len(data["shapes"])))
    for i, ((alpha, beta), color) in enumerate(zip(data["shapes"], colors)):
        ax.plot(np.repeat(params[i], facts.shape[2]), facts[i].ravel(), ".", color=color, alpha=0.4)
        ax.plot(params[i], np.median(facts[i], axis=1), "o-", color=color, label=f"H d_h = {alpha:g} d, m = {beta:g} d")
    line = np.geomspace(params.min(), params.max(), 20)
    per_parameter = facts_per_parameter(sizes, params)
    ax.loglog(line, per_parameter * line, "--", color=COLORS["theory"], label=f"S R = {per_parameter:.3f} P")
    ax.set(xlabel="parameters P = 4 H d_h d + 2 m d", ylabel="facts recalled (S R, S = R)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def fact_build(data: FactBuildData) -> Figure:
    """Left: the share of facts each layer set by hand recalls against d (the facts in the attention, and in the
    MLP), and the expected share the union bound leaves at least under its Gaussian model (1 - its count of wrong
    facts / S R). Right: with slots (or units) for half the subjects, the share answered right by the subjects with
    one and by the others, against chance among the relation's answers."""
    sizes = (data["subjects"], data["relations"], data["per_relation"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.6), gridspec_kw={"width_ratios": [3, 2]})
    layers = (
        ("attention", "dims", "recalled", 0, COLORS["untied"]),
        ("MLP", "mlp_dims", "mlp_recalled", MLP_GAP_EXTRA, COLORS["tied"]),
    )
    for name, dims_key, recalled_key, extra, color in layers:
        dims = np.asarray(data[dims_key])  # type: ignore[literal-required]
        fine = np.geomspace(dims.min(), dims.max(), 64)
        bound = [1 - built_failures(*sizes, int(d), extra) / (sizes[0] * sizes[1]) for d in fine]
        left.plot(dims, data[recalled_key], "o-", color=color, label=f"facts in the {name}: measured")  # type: ignore[literal-required]
        left.plot(fine, np.clip(bound, 0, 1), color=color, linestyle=":", label="union bound (expected, at least)")
    left.axvline(data["built_dim"], color=COLORS["untied"], linestyle="--", linewidth=0.8)
    left.axvline(data["mlp_dim"], color=COLORS["tied"], linestyle="--", linewidth=0.8)
    left.set(xscale="log", xlabel="embedding dimension d (dashed: built at)", ylabel="share of facts recalled")
    left.set_ylim(-0.02, 1.02)
    left.legend(fontsize=7, loc="lower right")
    names = ["with:\nright", "without:\nright", "without:\nin relation"]
    x = np.arange(len(names))
    attention = [data["covered_right"], data["uncovered_right"], data["uncovered_in_relation"]]
    right.bar(x - 0.2, attention, 0.4, color=COLORS["untied"], label="slots (attention)")
    right.bar(
        x[:2] + 0.2,
        [data["mlp_covered_right"], data["mlp_uncovered_right"]],
        0.4,
        color=COLORS["tied"],
        label="units (MLP)",
    )
    reference_line(right, 1 / data["per_relation"], "1/A", style=":")
    right.set_xticks(x, names, fontsize=8)
    right.set(
        ylabel="share of sequences", ylim=(0, 1.05), title=f"a slot or unit for {data['covered']} of {data['subjects']}"
    )
    right.legend(fontsize=7, loc="upper right")
    return fig


def hallucination(data: HallucinationData) -> Figure:
    """The held-out loss and its relation and subject parts over training, against the four levels."""
    steps, parts, levels = np.asarray(data["eval_steps"]), np.asarray(data["parts"]), data["levels"]
    fig, ax = plt.subplots()
    curves_with_band(ax, steps, parts[..., 0], COLORS["theory"], "loss")
    curves_with_band(ax, steps, parts[..., 1], COLORS["untied"], "relation part")
    curves_with_band(ax, steps, parts[..., 2], COLORS["tied"], "subject part")
    for key, label in (("uniform", "uniform"), ("relation", "H(a | r)"), ("subject", "H(a | s)")):
        reference_line(ax, levels[key], label, style=":")
    ax.set(xlabel="gradient step", ylabel="held-out loss (nats)")
    ax.legend(fontsize=8)
    return fig


def distributional(data: DistributionalData) -> Figure:
    """Noisy in-context recall: the noise token's probability (with and without layer 2's MLP) and the answer's over
    training at each N, the scored recalls each took to be learned against N, and what zeroing either MLP does at
    the largest N."""
    updates = np.asarray(data["eval_steps"], dtype=float) + 1
    tokens = data["tokens"]
    fig, (curves, laws, bars) = plt.subplots(1, 3, figsize=(13, 3.8))
    shades = plt.cm.viridis(np.linspace(0.1, 0.85, len(tokens)))
    for n, shade, runs in zip(tokens, shades, data["curves"]):
        mean = np.asarray(runs, dtype=float).mean(axis=0)
        curves.plot(updates, mean[:, 0], "--", color=shade)
        curves.plot(updates, mean[:, 2], ":", color=shade)
        curves.plot(updates, mean[:, 1], "-", color=shade, label=f"N = {n}")
    curves.plot([], [], "k--", label="noise token")
    curves.plot([], [], "k:", label="noise token, MLP 2 zeroed")
    curves.plot([], [], "k-", label="answer")
    curves.set(xscale="log", xlabel="updates", ylabel="probability at a recall (held out, seeds' mean)")
    curves.legend(fontsize=7)
    samples = recall_samples(data)
    for k, (label, color, marker) in enumerate(
        (("noise token in MLP 2", COLORS["untied"], "^"), ("answer (attention)", COLORS["tied"], "o"))
    ):
        for n, runs in zip(tokens, samples[..., k]):
            first = label if n == tokens[0] else None
            laws.plot(np.full(len(runs), n), runs, marker, color=color, alpha=0.6, label=first)
        if not np.isnan(samples[..., k]).any() and len(set(tokens)) > 1:
            slope = growth_exponent(tokens, samples[..., k])
            anchor = np.exp(np.mean(np.log(samples[..., k])))
            grid = np.asarray([min(tokens), max(tokens)], dtype=float)
            centre = np.exp(np.mean(np.log(tokens)))
            laws.plot(grid, anchor * (grid / centre) ** slope, "-", color=color, label=f"fit: N^{slope:.2f}")
    laws.set(xscale="log", yscale="log", xlabel="vocabulary size N", ylabel="scored recalls seen to learn it")
    laws.set_xticks(tokens, [str(n) for n in tokens])
    laws.xaxis.set_minor_locator(plt.NullLocator())
    laws.legend(fontsize=7)
    names = {"full": "full", "no_mlp_1": "no MLP 1", "no_mlp_2": "no MLP 2"}
    place = np.arange(len(names))
    reads = np.asarray([data["ablations"][name][-1] for name in names], dtype=float).mean(axis=1)
    bars.bar(place - 0.2, reads[:, 0], 0.4, color=COLORS["untied"], label="p(noise token)")
    bars.bar(place + 0.2, reads[:, 1], 0.4, color=COLORS["tied"], label="p(answer)")
    reference_line(bars, data["noise_p"], "noisy_p", style=":")
    bars.set(xticks=place, xticklabels=list(names.values()), ylim=(0, 1), title=f"at the end, N = {tokens[-1]}")
    bars.legend(fontsize=7)
    fig.tight_layout()
    return fig
