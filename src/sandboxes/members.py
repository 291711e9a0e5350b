"""Trained ensemble members kept on disk, so that one section's seeds can train in separate jobs.

Under :func:`sharing`, every :func:`~sandboxes.trainer.train` call looks each of its members up by a key made of
what fixes that member's run (its schedule, task, seed, architecture and initial weights, whether it is vmapped,
the device) and trains only the members it does not find, storing them. A cluster run's group jobs train a few
seeds of a section each; the job that then runs the section over all its seeds finds every member stored and
trains none. A share job of a section that trains a grid instead trains one block of every training call's members
(:func:`share_rows`). A member's run does not depend on the members trained beside it (``tests/test_trainer.py``),
so that section computes exactly what one process computes (``tests/test_cluster.py``).
"""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn


@dataclass
class Shared:
    """A folder of stored members, how many members the calls under :func:`sharing` found or trained, and for a
    share job, which share (g, n) of every call's members it trains."""

    folder: Path
    served: int = 0
    trained: int = 0
    share: tuple[int, int] | None = None
    skipped: int = 0


_active: Shared | None = None


@contextmanager
def sharing(folder: Path, share: tuple[int, int] | None = None) -> Iterator[Shared]:
    """Within it, training calls serve the members stored in ``folder`` and store the members they train; with
    ``share`` = (g, n), each call trains only the g-th of n blocks of its members (:func:`share_rows`)."""
    global _active
    outer, _active = _active, Shared(Path(folder), share=share)
    try:
        yield _active
    finally:
        _active = outer


def active() -> Shared | None:
    """The store training calls share now, if any."""
    return _active


def share_rows(shared: Shared, members: int) -> set[int] | None:
    """The rows of a call's ``members`` that this share job trains (None: every row, no share): share g of n takes
    the g-th of up to n consecutive blocks of two or more members (a member trains bit for bit alike in any vmapped
    ensemble of two or more, ``tests/test_trainer.py``); a call of one member falls to share 0. The blocks follow
    the call's order, which the section's own job repeats, so between them the share jobs store every member of
    each call that does not depend on what an earlier call trained."""
    if shared.share is None:
        return None
    g, n = shared.share
    blocks = np.array_split(np.arange(members), max(1, min(n, members // 2)))
    return set(blocks[g].tolist()) if g < len(blocks) else set()


def _bytes(tensor: Tensor) -> bytes:
    """The raw bytes of ``tensor``, whatever its dtype and shape."""
    return tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def _described(thing: Any) -> str:
    """``repr`` without memory addresses (a class without its own repr prints one), so that two processes agree."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(thing))


def key(schedule: Any, task: Any, seed: int, model: nn.Module, vmapped: bool, device: torch.device) -> str:
    """What fixes one member's run, hashed: the schedule, the task (its repr and two sequences it draws), the seed,
    the architecture and the initial weights (which carry a first phase into a second), vmap or not, the device."""
    described = (
        schedule,
        type(task).__qualname__,
        _described(task),
        seed,
        _described(model),
        _described(getattr(model, "config", None)),
        vmapped,
        device.type,
    )  # config: settings without weights
    digest = hashlib.sha256(repr(described).encode())
    for tensor in task.sample(2, torch.Generator().manual_seed(0)):
        digest.update(_bytes(tensor))
    for name, tensor in model.state_dict().items():
        digest.update(name.encode() + _bytes(tensor))
    return digest.hexdigest()[:40]


@dataclass(frozen=True)
class Stored:
    """One trained member: its weights and its rows of the call's curves."""

    state: dict[str, Tensor]
    train_loss: np.ndarray
    eval_steps: np.ndarray
    eval_loss: np.ndarray
    probes: np.ndarray | None


def _path(shared: Shared, member: str) -> Path:
    """Where the member stored under ``member`` lives."""
    return shared.folder / f"{member}.pt"


def load(shared: Shared, member: str) -> Stored | None:
    """The member stored under ``member``, if a job has stored it."""
    path = _path(shared, member)
    if not path.exists():
        return None
    body = torch.load(path, weights_only=True)
    probes = body["probes"]
    return Stored(
        body["state"],
        body["train_loss"].numpy(),
        body["eval_steps"].numpy(),
        body["eval_loss"].numpy(),
        None if probes is None else probes.numpy(),
    )


def save(shared: Shared, member: str, stored: Stored) -> None:
    """Store a trained member; written under a temporary name first, so a killed job leaves none half written."""
    shared.folder.mkdir(parents=True, exist_ok=True)
    body = {
        "state": {name: value.detach().cpu().clone() for name, value in stored.state.items()},
        "train_loss": torch.from_numpy(np.ascontiguousarray(stored.train_loss)),
        "eval_steps": torch.from_numpy(np.ascontiguousarray(stored.eval_steps)),
        "eval_loss": torch.from_numpy(np.ascontiguousarray(stored.eval_loss)),
        "probes": None if stored.probes is None else torch.from_numpy(np.ascontiguousarray(stored.probes)),
    }
    path = _path(shared, member)
    # a name of its own: two jobs may store the same member at once (two sections that share a first phase)
    temporary = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    torch.save(body, temporary)
    temporary.replace(path)
