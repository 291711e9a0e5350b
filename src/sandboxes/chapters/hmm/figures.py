"""Figures of the HMM chapter, each drawn from one section's data (fresh or loaded from JSON)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from ...plotting import COLORS, reference_line

if TYPE_CHECKING:
    from .measure import (
        GhmmData,
        GhmmTensorData,
        LearningData,
        PaperExampleData,
        PowersData,
        RecoveryData,
    )

FLOOR = 1e-17  # an exact zero would vanish from a log axis


def rotation_sweep(data: PaperExampleData) -> Figure:
    """Pairwise and two-token predictor differences as the printed HMM is rotated about (1, 1, 1)."""
    angles = np.asarray(data["sweep_angles"])
    fig, ax = plt.subplots()
    ax.semilogy(
        angles,
        np.maximum(data["sweep_pairwise_gap"], FLOOR),
        color=COLORS["untied"],
        label="pairwise predictors (max difference)",
    )
    ax.semilogy(
        angles,
        np.maximum(data["sweep_two_token_gap"], FLOOR),
        color=COLORS["tied"],
        label="two-token predictor x2 (x) x3 | x1",
    )
    valid = np.asarray(data["sweep_admissible"], dtype=bool)
    ax.fill_between(
        angles, 1e-18, 1, where=valid, color="0.85", label=f"valid HMM ({valid.sum()} of {len(valid)} angles)"
    )
    ax.axvline(data["angle"], color=COLORS["theory"], linestyle=":", linewidth=1)
    ax.annotate("printed example", (data["angle"], 1e-3), xytext=(5, 0), textcoords="offset points", fontsize=8)
    ax.set(xlabel="rotation angle about (1, 1, 1) (rad)", ylabel="largest entry difference", ylim=(1e-18, 1))
    ax.legend(loc="center right", fontsize=8)
    return fig


def powers(data: PowersData) -> Figure:
    """Claim 1: T and T~ differ while their t-th powers agree to round-off."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2))
    left.bar(data["powers"], data["difference"], color=COLORS["tied"])
    left.set(xlabel="t", ylabel="max |T - T~|", title="the matrices differ")
    right.semilogy(data["powers"], np.maximum(data["power_difference"], FLOOR), "o", color=COLORS["untied"])
    right.set(xlabel="t", ylabel="max |T^t - T~^t|", title="their t-th powers agree", ylim=(1e-18, 1e-10))
    fig.tight_layout()
    return fig


def exact_recovery(data: RecoveryData) -> Figure:
    """Entrywise error of (O, T) recovered from exact two-token predictors, per HMM size, against the tolerance."""
    errors, tolerance = data["errors"], data["tolerance"]
    fig, ax = plt.subplots()
    for i, errs in enumerate(errors.values()):
        ax.semilogy(
            np.full(len(errs), i) + np.linspace(-0.2, 0.2, len(errs)),
            np.maximum(errs, FLOOR),
            ".",
            color=COLORS["untied"],
        )
    reference_line(ax, tolerance, "tolerance")
    ax.set_xticks(range(len(errors)), [f"d x k = {s}" for s in errors])
    ax.set(ylabel="max entry error after relabelling", title="exact two-token predictor -> (O, T)")
    return fig


def learned_distance(data: LearningData) -> Figure:
    """Distance between the two HMMs' learned predictors beyond seed noise, pairwise against two-token."""
    samples = np.asarray(data["samples"])
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.4), sharey=True)
    for ax, name, title in zip(axes, ("pairwise", "two_token"), ("x2 | x1", "x2 (x) x3 | x1")):
        part = data[name]
        ax.fill_between(samples, 0, np.asarray(part["within"]), color="0.85", label="seed-to-seed distance (noise)")
        ax.plot(samples, part["excess"], "o-", color=COLORS["tied"], label="between the HMMs, beyond noise")
        ax.axhline(
            part["exact_gap"], color=COLORS["theory"], linestyle="--", linewidth=1, label="optimal predictors' distance"
        )
        ax.set(xscale="log", xlabel="samples N", title=title)
    axes[0].set_ylabel("weighted RMS distance")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    return fig


def predictor_error(data: LearningData) -> Figure:
    """Distance of each learned predictor to the optimal one against the best fit's sampling error."""
    samples = np.asarray(data["samples"])
    fig, ax = plt.subplots()
    for name, color in (("pairwise", COLORS["untied"]), ("two_token", COLORS["tied"])):
        part = data[name]
        for per_hmm in np.asarray(part["error"]):
            ax.loglog(np.repeat(samples, per_hmm.shape[1]), per_hmm.ravel(), ".", color=color, alpha=0.6)
        ax.loglog(
            samples,
            part["sampling_error"],
            "--",
            color=color,
            label=f"{'x2 | x1' if name == 'pairwise' else 'x2 (x) x3 | x1'}: sqrt(sum_j (1 - |f_j|^2) / N)",
        )
    ax.set(xlabel="samples N", ylabel="distance to the optimal predictor")
    ax.legend(fontsize=8)
    return fig


def learned_recovery(data: LearningData) -> Figure:
    """Error of (O, T) recovered from learned two-token predictors, to its own HMM and to the other, with N^(-1/2)."""
    samples = np.asarray(data["samples"])
    own, other = np.asarray(data["recovery"]["own"]), np.asarray(data["recovery"]["other"])
    fig, ax = plt.subplots()
    for values, color, label in (
        (own, COLORS["tied"], "distance to its own HMM"),
        (other, COLORS["untied"], "distance to the other HMM"),
    ):
        per_size = values.transpose(1, 0, 2).reshape(len(samples), -1)
        ax.loglog(np.repeat(samples, per_size.shape[1]), per_size.ravel(), ".", color=color, alpha=0.5)
        ax.loglog(samples, np.median(per_size, axis=1), "-", color=color, linewidth=2, label=label)
    guide = np.median(own[:, 0]) * np.sqrt(samples[0] / samples)
    ax.loglog(samples, guide, "--", color=COLORS["theory"], linewidth=1, label="N^(-1/2)")
    ax.set(xlabel="samples N", ylabel="max entry error of recovered (O, T)")
    ax.legend(fontsize=8)
    return fig


def ghmm_fits(data: GhmmData) -> Figure:
    """Where least-squares G-HMM fits from random starts end, with T free and with stochastic columns."""
    outcomes = data["outcomes"]
    kinds = list(next(iter(outcomes.values())))
    fig, ax = plt.subplots()
    width = 0.38
    for i, (mode, color) in enumerate(zip(outcomes, (COLORS["untied"], COLORS["tied"]))):
        ax.bar(
            np.arange(len(kinds)) + (i - 0.5) * width,
            [outcomes[mode][kind] for kind in kinds],
            width,
            color=color,
            label=mode,
        )
    ax.set_xticks(range(len(kinds)), kinds, fontsize=8)
    ax.set(ylabel="random starts", title="least-squares fits of the G-HMM pairwise predictor")
    ax.legend(fontsize=8)
    return fig


def ghmm_tensor(data: GhmmTensorData) -> Figure:
    """Theorem 8's recovery error per task order; along a line, the partner's conditional mean and density."""
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(11, 3.3))
    errors = data["errors"]
    for i, errs in enumerate(errors.values()):
        left.semilogy(
            np.full(len(errs), i) + np.linspace(-0.15, 0.15, len(errs)),
            np.maximum(errs, FLOOR),
            ".",
            color=COLORS["untied"],
        )
    reference_line(left, data["tolerance"], "tolerance")
    left.set_xticks(range(len(errors)), list(errors), fontsize=7, rotation=35, ha="right")
    left.set(ylabel="max entry error after relabelling", title="Thm 8: two-token predictor -> (M, T)")
    line = np.asarray(data["line"])
    for ax, key, title in (
        (middle, "line_mean", "conditional mean: the same"),
        (right, "line_density", "conditional density: not the same"),
    ):
        ours, partner = np.asarray(data[key])
        ax.plot(line, ours, color=COLORS["tied"], linewidth=3, alpha=0.6, label="G-HMM (M, T)")
        ax.plot(line, partner, "--", color=COLORS["untied"], label="partner (HM, T~)")
        ax.set(xlabel="x_1 = s u (s along a random unit u)", title=title)
    middle.set_ylabel("first coordinate of E[x_2 | x_1]")
    right.set_ylabel("(2 pi)^(d/2) p(x_2 = mu_1 | x_1)")
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig
