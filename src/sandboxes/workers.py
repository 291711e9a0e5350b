"""Independent training calls, or the seeds of one call, spread over worker processes of one thread each.

A section that trains many small ensembles (the shortcuts chapter's depth sweep: an ensemble per depth and vocabulary)
leaves a CPU's cores half used: its matrix products scale with threads, its many small elementwise operations do
not. Worker processes of one thread each train whole calls side by side instead (:func:`train_each`), or groups of
one call's seeds (:func:`train_spread`). A worker's numbers depend only on its call (every call seeds itself and runs
at one thread), so any number of workers gives the same results; they may differ from a run in one process, whose
operations run at that process's thread count. Workers are spawned, so a script that calls these functions keeps its
work under ``if __name__ == "__main__":``, as Python's multiprocessing asks (``python -m sandboxes`` and notebooks do).
"""

from __future__ import annotations

import io
import multiprocessing
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from . import calibration, members, trainer
from .model import count_parameters
from .runtime import keep_freed_memory
from .trainer import Task, TrainConfig, TrainingDiverged, TrainResult, train


@dataclass(frozen=True)
class TrainRequest:
    """The arguments of one :func:`~sandboxes.trainer.train` call (its model factories and tasks must pickle)."""

    make_model: Callable[[], nn.Module] | Sequence[Callable[[], nn.Module]]
    task: Task | Sequence[Task]
    config: TrainConfig
    seeds: Sequence[int]
    device: torch.device
    batched: bool = True

    def run(self, progress: bool | None) -> TrainResult:
        """The call, in this process."""
        return train(
            self.make_model, self.task, self.config, self.seeds, self.device, batched=self.batched, progress=progress
        )

    def only(self, rows: Sequence[int]) -> TrainRequest:
        """The same call for the members at ``rows``."""

        def pick(one_or_each: Any) -> Any:
            return [one_or_each[i] for i in rows] if isinstance(one_or_each, Sequence) else one_or_each

        return replace(
            self, make_model=pick(self.make_model), task=pick(self.task), seeds=[self.seeds[i] for i in rows]
        )

    def cost(self) -> float:
        """Parameters times members times sequences seen: an estimate that orders the work, never a number."""
        make = self.make_model[0] if isinstance(self.make_model, Sequence) else self.make_model
        return count_parameters(make()) * len(self.seeds) * self.config.steps * self.config.batch_size


def _packed(thing: object) -> bytes:
    """``thing`` as bytes: tensors go by value, not as shared-memory handles (one per tensor, which run out)."""
    buffer = io.BytesIO()
    torch.save(thing, buffer)
    return buffer.getvalue()


def _unpacked(data: bytes) -> object:
    return torch.load(io.BytesIO(data), weights_only=False)


def _start_worker() -> None:
    """One thread per worker; the divergence warnings are given again by the parent, which judges the rows."""
    torch.set_num_threads(1)
    keep_freed_memory()
    warnings.simplefilter("ignore", TrainingDiverged)


def _run_here(request: TrainRequest) -> TrainResult:
    """What a worker does for :func:`train_each`: one request's call, without a progress bar."""
    return request.run(progress=False)


def in_workers(requests: Sequence[TrainRequest], workers: int) -> bool:
    """Whether :func:`train_each` would spread ``requests`` over worker processes: more than one worker and one
    request, all on the CPU, and no planning (:func:`calibration.calibrating`) or member store that lives in this
    process."""
    return (
        workers > 1
        and len(requests) > 1
        and all(r.device.type == "cpu" for r in requests)
        and not calibration.is_calibrating()
        and members.active() is None
    )


def train_each(requests: Sequence[TrainRequest], workers: int = 1, progress: bool | None = None) -> list[TrainResult]:
    """:func:`~sandboxes.trainer.train` of every request, in order; with ``workers`` > 1 in that many processes of one
    thread each, the costliest first, each divergence warning given here as :func:`train` gives it."""
    if not in_workers(requests, workers):
        threads = torch.get_num_threads()
        if workers > 1 and all(r.device.type == "cpu" for r in requests):
            torch.set_num_threads(1)  # one call, a plan or a member store: here, but with a worker's numbers
        try:
            return [request.run(progress) for request in requests]
        finally:
            torch.set_num_threads(threads)
    results = map_each(
        _run_here, [(r,) for r in requests], workers, progress, "trainings", [r.cost() for r in requests]
    )
    for result in results:
        trainer.warn_diverged(result)
    return results


CPU = torch.device("cpu")


def _call_packed(call: bytes) -> bytes:
    """What a worker does for :func:`map_each`: one packed (function, arguments) in, its packed value out."""
    fn, args = _unpacked(call)  # type: ignore[misc]
    return _packed(fn(*args))


def map_each(
    fn: Callable[..., Any],
    calls: Sequence[tuple[Any, ...]],
    workers: int = 1,
    progress: bool | None = None,
    desc: str = "",
    cost: Sequence[float] | None = None,
    device: torch.device = CPU,
) -> list[Any]:
    """``fn(*args)`` for each ``args`` of ``calls``, in order: here, or with ``workers`` > 1 in that many processes
    of one thread each, the costliest first (by ``cost``). For independent searches whose runs differ in size, so
    that they do not stack into one vmapped ensemble (the memories chapter's capacity bisections); ``fn`` is a
    module-level function. As for :func:`train_each`, any number of workers gives the same values, which may
    differ from this process's at its own thread count. Where the calls run on a GPU, or a plan is being calibrated,
    they run here."""
    show = sys.stderr.isatty() if progress is None else progress
    if workers <= 1 or len(calls) <= 1 or device.type != "cpu" or calibration.is_calibrating():
        threads = torch.get_num_threads()
        if workers > 1 and device.type == "cpu":
            torch.set_num_threads(1)  # asked of workers but run here: with a worker's numbers
        try:
            return [fn(*args) for args in tqdm(calls, desc=desc, disable=not show, leave=False, file=sys.stderr)]
        finally:
            torch.set_num_threads(threads)
    order = sorted(range(len(calls)), key=lambda i: -(cost[i] if cost is not None else 0.0))
    results: list[Any] = [None] * len(calls)
    context = multiprocessing.get_context("spawn")  # a forked child would inherit the parent's OpenMP threads
    with ProcessPoolExecutor(min(workers, len(calls)), mp_context=context, initializer=_start_worker) as pool:
        futures = {pool.submit(_call_packed, _packed((fn, calls[i]))): i for i in order}
        for future in tqdm(
            as_completed(futures),
            total=len(futures),
            desc=f"{desc} in {workers} workers",
            disable=not show,
            leave=False,
            file=sys.stderr,
        ):
            results[futures[future]] = _unpacked(future.result())
    return results


def seed_groups(n_seeds: int, workers: int) -> list[list[int]]:
    """The members ``0 .. n_seeds - 1`` in at most ``workers`` runs of consecutive members, two or more each: a member
    trains bit for bit alike in any vmapped ensemble of two or more (``tests/test_trainer.py``), not alone."""
    return [list(group) for group in np.array_split(np.arange(n_seeds), max(1, min(workers, n_seeds // 2)))]


def train_spread(request: TrainRequest, workers: int = 1, progress: bool | None = None) -> TrainResult:
    """The one call ``request`` with its members spread over up to ``workers`` processes (:func:`seed_groups`), joined
    back in order: each member's numbers are those of the whole call at one thread."""
    groups = seed_groups(len(request.seeds), workers)
    start = time.perf_counter()
    parts = train_each([request.only(group) for group in groups], workers, progress)
    return parts[0] if len(parts) == 1 else trainer.joined(parts, time.perf_counter() - start)
