"""Whether a run's loss had settled when its budget ran out, and what a row says when it had not: pure functions of
stored curves and a schedule, shared by every chapter's rows (which never train)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .trainer import TrainResult

MIN_EVALS = 8  # a run evaluated fewer times than this is too short to call settled
SETTLED_TAIL = 0.1  # a run has settled when its last quarter of evaluations lowered the loss by less than this
# fraction of its whole descent


def still_descending(
    result: TrainResult, noise: float, curve: np.ndarray | None = None, continued: bool = False
) -> np.ndarray:
    """Per member: the loss had not settled when the budget ran out.

    Time is counted in learning-rate units (the sum of the schedule's factors), so that a loss that
    stops moving only because a decaying schedule stopped the optimiser does not count as settled:
    a member is still descending when the last quarter of that time lowered its evaluated loss by
    more than a tenth of its whole descent, or when the whole descent is within ``noise`` (the run
    has hardly started), or when it was evaluated fewer than ``MIN_EVALS`` times (too few to tell).
    Rows about eventual behaviour use it to say "undecided" instead of "fails". ``curve`` (members x
    evaluations) is judged in place of the loss: minus a probe that should rise, say.

    A ``continued`` run starts from trained weights (a second phase), so a flat curve there has
    settled rather than hardly started: such a member is still descending only when its last
    quarter lowered the loss by more than ``noise`` and by more than a tenth of its fall from its
    highest point.
    """
    loss = np.asarray(result.eval_loss if curve is None else curve, dtype=float)
    if loss.shape[1] < MIN_EVALS:
        return np.ones(len(loss), dtype=bool)
    time = np.cumsum([result.config.lr_factor(step) for step in range(result.config.steps)])[result.eval_steps]
    tail = np.flatnonzero(time >= time[-1] - (time[-1] - time[0]) / 4)
    first = min(tail[0], len(time) - 2) if len(time) > 1 else 0
    if continued:
        fall = loss.max(axis=1) - loss[:, -1]
        return loss[:, first] - loss[:, -1] > np.maximum(noise, SETTLED_TAIL * fall)
    descent = loss[:, 0] - loss[:, -1]
    return (descent < noise) | (loss[:, first] - loss[:, -1] > SETTLED_TAIL * descent)


def budget_ran_out(waiting: int, runs: str, steps_param: str) -> tuple[bool, str]:
    """``(settled, why not)`` for :meth:`Claim.eventually`: whether no run was ``waiting``, and if some were,
    how many (``runs`` says which and what they were doing) and which parameter's budget decides the claim."""
    return waiting == 0, f"{waiting} {runs} when the budget ran out; more steps (--set {steps_param}=...) decide it"


def misses_settled(missed: Sequence[bool], descending: Sequence[bool], steps_param: str) -> tuple[bool, str]:
    """``(settled, why not)`` for :meth:`Claim.eventually` on a row about every run: decided where a run that missed
    the bound had stopped moving (its miss is final) or where no run that missed was still descending, undecided only
    while every run that missed descends."""
    missed_runs, moving = np.asarray(missed, dtype=bool), np.asarray(descending, dtype=bool)
    waiting, final = int((missed_runs & moving).sum()), int((missed_runs & ~moving).sum())
    return final > 0 or waiting == 0, budget_ran_out(
        waiting, "runs short of the bound were still descending", steps_param
    )[1]
