"""What the paper says of the learning experiment (Liu et al. prove identifiability and run no experiment) beside a
run's, for the page's comparison table."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .judge import recovery_slope

if TYPE_CHECKING:
    from .measure import LearnedTask, LearningData


def learning_vs_paper(learning: LearningData) -> list[tuple[str, str, str]]:
    """What the theorems say of the learning experiment beside what it learned."""
    n = int(learning["samples"][-1])
    pair, two = learning["pairwise"], learning["two_token"]

    def measured(part: LearnedTask) -> str:
        return f"{part['excess'][-1]:.3g} (seed-to-seed distance {part['within'][-1]:.3g})"

    return [
        (
            f"x2|x1 learned at N = {n}: distance between the two HMMs' predictors beyond seed noise",
            f"their optimal pairwise predictors are equal (Thm 4): distance {pair['exact_gap']:.3g}, computed here",
            measured(pair),
        ),
        (
            f"x2(x)x3|x1 learned at N = {n}: the same distance",
            f"that of their optimal predictors, not 0 (Thm 7): {two['exact_gap']:.3g}, computed here",
            measured(two),
        ),
        (
            "parameters recovered from the learned x2(x)x3|x1: log-log slope of the error against N",
            "nothing: the paper proves identifiability and gives no algorithm, sample bound or learning experiment; "
            "-1/2 is what a smooth map of an N^-1/2 estimate gives",
            f"{recovery_slope(learning):.2f}",
        ),
    ]
