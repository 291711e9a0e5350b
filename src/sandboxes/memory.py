"""How many members train at once and how many held-out sequences a chunk holds: the bytes a training step needs,
counted on the ``meta`` device before training starts, against what the device (or, while planning, this machine) has.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from .runtime import counting_for

if TYPE_CHECKING:
    from .trainer import Task, TrainConfig


def meta_batch(task: Task, n: int) -> tuple[Tensor, Tensor]:
    """Inputs and targets of ``n`` samples of ``task`` as they reach the model, on the ``meta`` device: their shapes
    and dtypes (from one real sample), no data, so a step can be counted at any size for free. A task that summarises
    its batches says how many rows a batch of ``n`` becomes (``batch_rows``)."""
    x, y = task.sample(1, torch.Generator().manual_seed(0))
    rows = task.batch_rows(n) if hasattr(task, "batch_rows") else n
    return (
        torch.empty((rows, *x.shape[1:]), dtype=x.dtype, device="meta"),
        torch.empty((rows, *y.shape[1:]), dtype=y.dtype, device="meta"),
    )


def activation_bytes(model: nn.Module, task: Task, n: int, device_type: str = "cpu") -> int:
    """Bytes autograd keeps for the backward pass of ``model`` on ``n`` samples of ``task`` on a ``device_type``.

    Counted on a copy of the model on the ``meta`` device, where shapes propagate but nothing is
    computed, so the count is free even for sizes that would not fit anywhere; attention counts the
    kernel ``device_type`` runs (on a CPU, one that keeps its exponentials).
    """
    x_meta, y_meta = meta_batch(task, n)
    saved: dict[int, int] = {}

    def pack(tensor: Tensor) -> Tensor:
        saved[id(tensor)] = tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor), counting_for(device_type):
        task.loss(copy.deepcopy(model).to("meta")(x_meta), y_meta)
    return sum(saved.values())


def memory_budget(device: torch.device) -> int | None:
    """Bytes one training step may use: half the free memory of a CUDA device, no limit elsewhere."""
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    return free // 2


def host_budget() -> int:
    """A quarter of the memory this machine has available now (Linux's MemAvailable); what a calibration on a CPU may
    use, so that planning a run sized for GPUs trains its ensembles in groups rather than running out of memory.

    Not half: glibc keeps freed blocks in its heap for the next step (``keep_freed_memory``), where a step's large
    tensors leave holes, and eight batched trigger-task members (2 layers, width 64, T = 256) peaked at 3.4 GB of
    resident memory against 1.5 GB when such blocks were mapped and unmapped one by one.
    """
    try:
        with open("/proc/meminfo") as info:
            fields = dict(line.split(":", 1) for line in info)
        available = int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return available // 4


def member_bytes(
    make_model: Callable[[], nn.Module], task: Task, config: TrainConfig, device: torch.device
) -> tuple[int, float]:
    """One member's bytes in a training step on ``device``: its weights, gradients and Adam's two moments, and its
    activations per sequence."""
    model = make_model()
    weights = 4 * sum(p.numel() * p.element_size() for p in model.parameters())
    return weights, activation_bytes(model, task, config.batch_size, device.type) / config.batch_size


def plan(
    make_model: Callable[[], nn.Module],
    task: Task,
    config: TrainConfig,
    members: int,
    budget: int | None,
    device: torch.device,
) -> tuple[int, int]:
    """Members per group and held-out sequences per chunk that keep one step on ``device`` within ``budget`` bytes."""
    if budget is None:
        return members, config.eval_size
    weights, per_sequence = member_bytes(make_model, task, config, device)
    group = int(max(1, min(members, budget // (weights + per_sequence * config.batch_size))))
    chunk = int(max(1, min(config.eval_size, budget // (group * per_sequence))))
    return group, chunk


def step_bytes(
    make_model: Callable[[], nn.Module], task: Task, config: TrainConfig, members: int, device: torch.device
) -> int:
    """Bytes of one training step on ``device`` with ``members`` members at once."""
    weights, per_sequence = member_bytes(make_model, task, config, device)
    return int(members * (weights + per_sequence * config.batch_size))
