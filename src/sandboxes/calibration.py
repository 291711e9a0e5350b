"""Planning a run by running it short: under :func:`calibrating` every training call and every chunked count runs
a few steps or chunks and records what its full run would cost (how a cluster run is sized before it is submitted).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import torch
from torch import Tensor, nn

In = TypeVar("In")
Out = TypeVar("Out")

CALIBRATION_EVAL = 16  # held-out sequences a calibration evaluates; their time is scaled to the planned eval_size


@dataclass
class Timing:
    """Seconds in training steps and in evaluations, per group (each group's first step and first evaluation
    excluded: they warm up)."""

    step_s: float = 0.0
    steps: int = 0
    eval_s: float = 0.0
    evals: int = 0
    groups: int = 0
    heldout_s: float = 0.0  # the part of eval_s spent on the held-out loss (the rest: checks and probes)
    eval_scale: float = 1.0  # the planned held-out set over the part a calibration read

    @property
    def planned_eval_s(self) -> float:
        """Evaluation seconds with the held-out loss scaled to the whole planned held-out set."""
        return self.eval_s + self.heldout_s * (self.eval_scale - 1.0)

    def mark(self, device: torch.device) -> float:
        """Now, once the device has finished what it was given (CUDA runs asynchronously)."""
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()


@dataclass(frozen=True)
class TrainCall:
    """One call of :func:`train` run shortened under :func:`calibrating`, and what its full run would cost."""

    planned_steps: int
    eval_every: int
    wall_time: float
    timing: Timing
    step_bytes: int  # weights, gradients, Adam's state and activations of one step of one group of members
    groups: int = 1  # groups of members the full run trains one after another (the calibration trains the first)
    # what it trains, for the performance survey: one member's model factory and task, members per group, batch size
    make_model: Callable[[], nn.Module] | None = field(default=None, compare=False, repr=False)
    task: Any = field(default=None, compare=False, repr=False)
    members: int = 1
    batch_size: int = 0
    total: int = 1  # members of the whole call, in every group

    @property
    def estimated_s(self) -> float:
        """Seconds of the full run: per group, the shortened run's set-up and warm-up, then its mean step and
        evaluation times over the planned steps and evaluations (the last group, if smaller, costs as much)."""
        t = self.timing
        setup = (self.wall_time - t.step_s - t.eval_s) / max(1, t.groups)
        evals = self.planned_steps // self.eval_every + 1
        per_group = (t.step_s / max(1, t.steps)) * self.planned_steps + (t.planned_eval_s / max(1, t.evals)) * evals
        return self.groups * (setup + per_group)


@dataclass(frozen=True)
class ChunkedCall:
    """One :func:`calibrated_map` run shortened under :func:`calibrating`: how many chunks it ran of how many, its
    seconds, and what the chunks it ran would have cost in full (more, where they held shortened calls of their
    own); a full run costs that per chunk times every chunk."""

    chunks: int
    ran: int
    wall_time: float
    ran_in_full_s: float
    step_bytes: int = 0  # the largest training step of a call it held
    inner: tuple[TrainCall, ...] = ()  # the training calls its chunks held, as they ran

    @property
    def estimated_s(self) -> float:
        return self.ran_in_full_s * self.chunks / self.ran


@dataclass
class _Calibration:
    steps: int
    calls: list[TrainCall | ChunkedCall]
    timing: Timing = field(default_factory=Timing)


_calibration: _Calibration | None = None


def is_calibrating() -> bool:
    """Whether :func:`calibrating` is shortening this process's calls."""
    return _calibration is not None


@contextmanager
def calibrating(steps: int) -> Iterator[list[TrainCall | ChunkedCall]]:
    """Within it, every :func:`train` call runs at most ``steps`` steps and every :func:`calibrated_map` two chunks,
    each recording what its full run would cost; how a cluster run is planned before it is submitted (the models
    come out barely trained and the counts are made up: use only the costs)."""
    global _calibration
    if steps < 1:
        raise ValueError(f"calibration needs at least one step, got {steps}")
    outer, _calibration = _calibration, _Calibration(steps, [])
    try:
        yield _calibration.calls
    finally:
        _calibration = outer


def calibrated_map(fn: Callable[[In], Out], chunks: Sequence[In]) -> list[Out]:
    """``fn`` of every chunk, in order: a long count split so that planning can time it.

    Under :func:`calibrating` only the first chunk and the last (which may be shorter) run; the chunks between
    repeat the first one's result, so that what follows sees every chunk's shape, and the skipped time is the mean
    of the two. Shortened calls inside ``fn`` (a nested map, a training run) are scaled with it, not twice.
    """
    if _calibration is None or len(chunks) <= 2:
        return [fn(chunk) for chunk in chunks]
    calls = _calibration.calls
    mark = len(calls)
    start = time.perf_counter()
    first, last = fn(chunks[0]), fn(chunks[-1])
    wall = time.perf_counter() - start
    inner = calls[mark:]
    del calls[mark:]
    in_full = wall - sum(call.wall_time for call in inner) + sum(call.estimated_s for call in inner)
    calls.append(
        ChunkedCall(
            len(chunks),
            2,
            wall,
            in_full,
            max((call.step_bytes for call in inner), default=0),
            tuple(train for call in inner for train in ((call,) if isinstance(call, TrainCall) else call.inner)),
        )
    )
    return [first] * (len(chunks) - 1) + [last]


def repeated(run: Callable[[], Out], times: int) -> Out:
    """``run()``, which the full run makes ``times`` times over with calls alike (a capacity search's runs, one
    after another); under :func:`calibrating` the calls it records count ``times`` times over."""
    if _calibration is None:
        return run()
    calls = _calibration.calls
    mark = len(calls)
    out = run()
    calls[mark:] = [
        replace(call, groups=call.groups * times)
        if isinstance(call, TrainCall)
        else replace(call, ran_in_full_s=call.ran_in_full_s * times)
        for call in calls[mark:]
    ]
    return out


def count_chunks(seq: Tensor, chunk: int) -> tuple[Tensor, ...]:
    """``seq`` in chunks of ``chunk`` sequences for a :func:`calibrated_map` count; under :func:`calibrating` in
    chunks of ``CALIBRATION_EVAL``, so that a plan times two short chunks and scales them to all (at a full
    profile's size one chunk of hundreds of long strings takes minutes on the planning machine)."""
    return seq.split(min(chunk, CALIBRATION_EVAL) if _calibration is not None else chunk)


def active() -> _Calibration | None:
    """The calibration :func:`calibrating` has opened in this process, if any: the trainer shortens its runs to it
    and records their costs in it."""
    return _calibration
