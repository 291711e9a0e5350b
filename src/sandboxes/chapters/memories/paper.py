"""What the papers report of the factual recall training beside a run's, for the page's comparison table."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .judge import plateau_rest

if TYPE_CHECKING:
    from .measure import HallucinationData


def hallucination_vs_paper(run: HallucinationData) -> list[tuple[str, str, str]]:
    """The hallucination stage as the slides and the authors' notebook show it, beside the run."""
    levels, parts = run["levels"], np.asarray(run["parts"])
    steps = np.asarray(run["eval_steps"])
    rests = [plateau_rest(steps, seed[:, 0], levels) for seed in parts]
    return [
        (
            "intermediate stage",
            "predicts with p(a | r), uniform over the relation's answers, ignoring the subject (no number in the "
            "slides)",
            f"rest at H(a | r) = {levels['relation']:.3f}: {min(rests):.2f} to {max(rests):.2f} times the fall to it",
        ),
        (
            "end of training",
            "global convergence to zero loss (gradient flow)",
            f"held-out loss {parts[:, -1, 0].min():.3g} to {parts[:, -1, 0].max():.3g}",
        ),
    ]
