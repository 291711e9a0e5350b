"""Many ensemble members' batches drawn in one pass: where every member samples the same task and each step of its
sampler acts row by row, the members' own draws are joined and walked once (the trainer's hot path)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor


def sample_together(
    tasks: Sequence[Any],
    n: int,
    generators: Sequence[torch.Generator],
    draw: Callable[[torch.Generator], tuple[np.ndarray, ...]],
    rows: Callable[..., tuple[Tensor, Tensor]],
) -> tuple[Tensor, Tensor]:
    """``tasks[k].sample(n, generators[k])`` for every k, stacked ``(K, n, ...)``: where the tasks are one, ``draw``
    takes each member's random numbers from its own generator, in the order ``sample`` would, and ``rows`` turns all
    of them, joined on their first axis, into inputs and targets at once; otherwise each member samples alone."""
    if any(t != tasks[0] for t in tasks):
        pairs = [t.sample(n, g) for t, g in zip(tasks, generators)]
        return torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])
    draws = [draw(g) for g in generators]
    inputs, targets = rows(*(np.concatenate(parts) for parts in zip(*draws)))
    return inputs.reshape(len(tasks), n, *inputs.shape[1:]), targets.reshape(len(tasks), n, *targets.shape[1:])
