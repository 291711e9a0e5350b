"""Seeding, device choice and the C allocator's settings: what every run needs first."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import platform
import random
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

DEVICES = ("auto", "cpu", "cuda", "mps")


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and torch; return a fresh CPU generator for data with the same seed."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def member_seed(*settings: object) -> int:
    """A seed fixed by a member's own settings (an automaton's name, a sample size, a seed index), never by its
    place in a list, so that adding a member to a sweep changes no other member's run."""
    return zlib.crc32(repr(settings).encode()) % 2**31


# glibc's mallopt parameters (malloc.h): free memory above the trim threshold at the top of the heap goes back to
# the system, and blocks above the mmap threshold (at most 32 MiB on 64-bit systems) are mapped and unmapped one by
# one, up to a count of mapped blocks (0: none; glibc still maps a block where the heap cannot grow).
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_KEEP_BYTES = 1 << 30


@functools.cache
def keep_freed_memory() -> bool:
    """Have glibc keep freed memory for the next step instead of returning it; False where there is no glibc.

    A training step on a CPU allocates and frees the same buffers every time; by default glibc hands blocks of a
    few MiB back to the system, and the next step pays a page fault for every 4 KiB of them again (at the Markov
    paper's length, about a third of a step). The mmap threshold can rise to 32 MiB at most, and a batched
    ensemble's tensors can be larger (eight trigger-task members at batch 64 and T = 256 hold activations of exactly
    32 MiB, over the threshold with glibc's header), so no block is mapped on its own: with mapped blocks those
    members spent 9 to 11 s of system time in 10 steps and ran slower than the same members one after another.
    Speed and resident memory change (freed blocks stay in the heap, see ``memory.host_budget``), never a number.
    """
    path = ctypes.util.find_library("c")
    libc = ctypes.CDLL(path) if path and platform.system() == "Linux" else None
    if libc is None or not hasattr(libc, "mallopt"):
        return False
    return bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, _KEEP_BYTES))


_meta_stands_for: str | None = None


@contextmanager
def counting_for(device_type: str) -> Iterator[None]:
    """Within it, a computation on the ``meta`` device picks the kernels of ``device_type`` (:func:`kernel_device`):
    a count of the bytes a training step keeps is then the count for the device that will train."""
    global _meta_stands_for
    before, _meta_stands_for = _meta_stands_for, device_type
    try:
        yield
    finally:
        _meta_stands_for = before


def kernel_device(device: torch.device) -> str:
    """The device type whose kernels a computation on ``device`` runs (or, on ``meta``, counts)."""
    return _meta_stands_for if device.type == "meta" and _meta_stands_for else device.type


def pick_device(name: str = "auto") -> torch.device:
    """``auto`` takes cuda, then mps, then cpu; a named device that is absent is an error."""
    if name not in DEVICES:
        raise ValueError(f"unknown device {name!r}; choose one of {', '.join(DEVICES)}")
    if name == "auto":
        env = os.environ.get("SANDBOXES_DEVICE")
        if env and env != "auto":
            return pick_device(env)
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for but torch sees no CUDA GPU")
    if name == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ValueError("device 'mps' was asked for but torch sees no Apple GPU")
    return torch.device(name)


def device_name(device: torch.device) -> str:
    """A human-readable name of the hardware behind ``device`` (the GPU model, or the CPU)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return "Apple MPS"
    return f"{cpu_model()}, {usable_cores()} cores"


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what the platform calls the processor."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    named = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return (named[0] if named else "") or platform.processor() or platform.machine() or "cpu"


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the system has one): what its threads can use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
