"""The paper's reports (Makkuva et al.'s figures and sections) beside a run's, for the page's comparison table."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...data.markov import binary_kernel
from ...theory import markov as theory
from .judge import escape_steps, information_gap

if TYPE_CHECKING:
    from .measure import BasinData, DepthData, MultistateData, PhaseData, TrainingData


def training_vs_paper(data: TrainingData) -> list[tuple[str, str, str]]:
    """Where each loss curve of the paper's Fig. 3 ends, and for tied runs with p+q>1 how many had left the plateau."""
    rows = []
    for run in data["runs"]:
        kernel = binary_kernel(run["p"], run["q"])
        stuck = run["tied"] and run["p"] + run["q"] > 1
        target = (
            f"the unigram loss H(π) = {theory.unigram_entropy(kernel):.3f}"
            if stuck
            else f"the entropy rate {theory.entropy_rate(kernel):.3f}"
        )
        final = np.asarray(run["eval_loss"])[:, -1]
        ours = f"{np.median(final):.3f} (median of {len(final)} seeds; {final.min():.3f} to {final.max():.3f})"
        if stuck:
            left = np.asarray(run["escape_step"], dtype=float)
            ours += (
                f"; {int(np.isfinite(left).sum())} of {len(left)} had left the plateau by step {run['eval_steps'][-1]}"
            )
        rows.append(
            (
                f"({run['p']}, {run['q']}) {'tied' if run['tied'] else 'untied'}: held-out loss at the end",
                f"ends at {target} (Fig. 3)",
                ours,
            )
        )
    return rows


def _left(escape: np.ndarray) -> str:
    """How many runs had left the unigram plateau, out of how many."""
    return f"{int(np.isfinite(escape).sum())} of {escape.size} runs had left the unigram plateau"


def phase_vs_paper(data: PhaseData) -> list[tuple[str, str, str]]:
    """The paper's Fig. 4 regions (tied p+q>1 at the unigram, the rest at the bigram) against the grid's runs."""
    values, resolvable = np.asarray(data["values"]), np.asarray(data["resolvable"], dtype=bool)
    above = (values[:, None] + values[None, :] > 1) & resolvable
    below = (values[:, None] + values[None, :] < 1) & resolvable
    cells = above.ravel()
    rows = []
    for kind in ("tied", "untied"):
        ratio = np.asarray(data["ratio"][kind])
        escape = np.asarray(data["escape_step"][kind], dtype=float)[cells]
        if above.any():
            seed = "the unigram loss (Fig. 4)" if kind == "tied" else "the entropy rate (Fig. 4)"
            rows.append(
                (
                    f"phase diagram, {kind}, p+q>1: where runs end",
                    seed,
                    f"median excess / gap {np.median(ratio[above]):.2f} over {int(above.sum())} cells "
                    f"(1: unigram, 0: entropy rate); {_left(escape)}",
                )
            )
        if below.any():
            rows.append(
                (
                    f"phase diagram, {kind}, p+q<1: where runs end",
                    "the entropy rate (Fig. 4)",
                    f"largest cell's excess / gap {ratio[below].max():.2f} over {int(below.sum())} cells",
                )
            )
    return rows


def basin_vs_paper(data: BasinData) -> list[tuple[str, str, str]]:
    """Where seeds end from each initialisation scale, beside what the paper reports from GPT-2's."""
    stuck = data["p"] + data["q"] > 1
    rows = []
    for kind in ("tied", "untied"):
        seed = (
            "the unigram loss, from init std 0.02 (Fig. 3a)"
            if kind == "tied" and stuck
            else "the entropy rate, from init std 0.02 (Figs. 3, 4)"
        )
        ours = ", ".join(
            f"{scale:g}: {fraction:.0%}" for scale, fraction in zip(data["scales"], data["outcome"][kind]["bigram"])
        )
        rows.append((f"basin ({data['p']}, {data['q']}), {kind}: seeds at the bigram, per init std", seed, ours))
    return rows


def depth_vs_paper(data: DepthData) -> list[tuple[str, str, str]]:
    """Depth two and more: the paper's plateau then entropy rate, against each depth's runs."""
    kernel = binary_kernel(data["p"], data["q"])
    H_pi, gap = theory.unigram_entropy(kernel), information_gap(data["p"], data["q"])
    rows = []
    for run in data["runs"]:
        kind = "tied" if run["tied"] else "untied"
        escape = escape_steps(np.asarray(run["eval_steps"]), np.asarray(run["eval_loss"]), H_pi, gap)
        left = escape[np.isfinite(escape)]
        if run["depth"] > 1:
            seed = "the entropy rate, after a plateau at the unigram loss (Fig. 1, Sec. 4.4)"
        elif run["tied"] and data["p"] + data["q"] > 1:
            seed = "one layer, tied: the unigram loss when its budget ends (Fig. 3a)"
        else:
            seed = "one layer: the entropy rate (Fig. 3)"
        ours = f"largest excess / gap {np.max(run['excess']) / gap:.2f}; {_left(escape)}"
        if left.size:
            ours += f" (median step {np.median(left):.0f} of {run['eval_steps'][-1]})"
        rows.append((f"depth {run['depth']} {kind} ({data['p']}, {data['q']}): where runs end", seed, ours))
    return rows


def multistate_vs_paper(data: MultistateData) -> list[tuple[str, str, str]]:
    """The paper's Fig. 5 (tied runs stuck for large p, untied ones at the bigram) against each p of the sweep."""
    rows = []
    for kind in ("tied", "untied"):
        ratio = np.asarray(data[kind], dtype=float)
        escape = np.asarray(data["escape_step"][kind], dtype=float)
        ours = "; ".join(
            f"p = {p:g}: {np.nanmedian(r):.2f}, {int(np.isfinite(e).sum())}/{e.size} left"
            for p, r, e in zip(data["switch_probs"], ratio, escape)
            if np.isfinite(r).any()
        )
        seed = (
            "the unigram loss for large p (Fig. 5); threshold not known in closed form"
            if kind == "tied"
            else "the entropy rate (Fig. 5)"
        )
        rows.append(
            (
                f"{data['states']}-state chain, {kind}: median excess / gap per p (1: unigram, 0: entropy "
                f"rate), runs that left the plateau; p* = {data['threshold']:.3g}",
                seed,
                ours,
            )
        )
    return rows
