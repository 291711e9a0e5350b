"""What Sanford, Hsu and Telgarsky state of Match2 and Match3 beside a trained run's, for the page's comparison table
(theorems and a conjecture: the paper reports no trained models of these tasks that the talk shows)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .judge import find_run, smallest_solving_width

if TYPE_CHECKING:
    from .measure import LearningData, QSATrainData


def learning_vs_paper(run: LearningData) -> list[tuple[str, str, str]]:
    """Match2 and Match3 as the talk states them, beside the trained layers' balanced errors."""
    width = min(run["widths"])
    one = [find_run(run, 1, width, N) for N in run["N"]] if 1 in run["depths"] else []
    rows = []
    if one:
        match2 = ", ".join(f"N = {r['N']}: {max(r['balanced_error'][0]):.3f}" for r in one)
        match3 = ", ".join(f"N = {r['N']}: {min(r['balanced_error'][1]):.3f}" for r in one)
        rows += [
            (
                "Match2 in one layer",
                "one unit of embedding dimension 3 computes it for every N (M = poly(N), p = O(log M) bits)",
                f"width {width}, worst seed's balanced error: {match2}",
            ),
            (
                "Match3 in one layer",
                "no single layer computes it if m <= c N / (p H log log N), for N large enough; c not given",
                f"width {width}, best seed's balanced error: {match3}",
            ),
        ]
    if 1 in run["depths"] and len(run["widths"]) > 1:
        rows.append(
            (
                "width that solves Match3 (M fixed)",
                "at least c N / (p H log log N) for N large enough (c not given); our layer of width M computes it",
                "; ".join(f"N = {N}: {solving(run, N)}" for N in run["N"]),
            )
        )
    deeper = [d for d in run["depths"] if d > 1]
    for depth in deeper:
        errors = [np.mean(find_run(run, depth, width, N)["balanced_error"][1]) for N in run["N"]]
        rows.append(
            (
                f"Match3 in {depth} layers",
                "conjecture: every multi-layer transformer that computes it has width, depth, embedding dimension "
                "or bit complexity N^Omega(1)",
                f"width {width}, mean balanced error: "
                + ", ".join(f"N = {N}: {e:.3f}" for N, e in zip(run["N"], errors)),
            )
        )
    return rows


def solving(run: LearningData, N: int) -> str:
    """The smallest width of the run that solves Match3 at ``N`` on every seed, in words."""
    width, M = smallest_solving_width(run, N, run["solved"]), find_run(run, 1, min(run["widths"]), N)["M"]
    if width is None:
        return f"none up to {max(run['widths'])}"
    return f"width {width}{' (our layer of width M fits)' if width >= M else ''}"


def qsa_trained_vs_paper(run: QSATrainData) -> list[tuple[str, str, str]]:
    """The slide's trained unit and the theorems' widths beside the trained units' errors and attention."""
    errors, mass = np.asarray(run["error"]), np.asarray(run["support_mass"])
    where = f"N = {run['N']}, q = {run['q']}"
    return [
        (
            f"a trained unit's attention, {where}",
            "the slide draws it after training: weight on the named positions (a map, no number)",
            f"width {run['widths'][-1]}: mean weight on the named positions {mass[-1].min():.3f} to "
            f"{mass[-1].max():.3f} over seeds (uniform attention: {run['q'] / run['N']:.3f})",
        ),
        (
            "width a unit needs",
            "m >= Omega(d' + q log N) at precision p = Omega(log((q/eps) log N)) suffices, the unit embedding each "
            "set by any function (constants not given); for q large enough and N >= 2q + 1, m <= c q / p rules "
            "1/(2q)-approximation out (c not given; at float32 and q = 3, c q / p is below 1)",
            "our unit has no embedding function (its query is linear in the set's 0/1 vector); median error by "
            "width: "
            + ", ".join(f"{w}: {e:.3f}" for w, e in zip(run["widths"], np.median(errors, axis=1)))
            + f" (1/(2q) = {1 / (2 * run['q']):.3f}; uniform attention {run['uniform_error']:.3f})",
        ),
    ]
