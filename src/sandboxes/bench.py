"""Training throughput: one model, K models one after another, and K models batched.

The book's models are tiny, so one of them leaves a GPU mostly idle; :func:`sandboxes.trainer.train`
can train K seeds as one vmapped ensemble instead. This module measures what that buys on the
device at hand, for a model of each chapter's size, with the real trainer (sampling included).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .data.markov import MarkovChain, symmetric_kernel
from .model import GPT, GPTConfig
from .trainer import TrainConfig, train

# Model sizes of the chapters' quick profiles (vocabulary, length, depth, width, heads).
SIZES: dict[str, GPTConfig] = {
    "markov": GPTConfig(vocab_size=2, block_size=64, n_layer=1, n_head=1, d_model=8),
    "automata": GPTConfig(vocab_size=8, block_size=32, n_layer=2, n_head=2, d_model=32, layer_norm=True),
    "flipflop": GPTConfig(vocab_size=5, block_size=64, n_layer=2, n_head=2, d_model=32, layer_norm=True),
}


@dataclass(frozen=True)
class Throughput:
    """Member-steps and tokens per second of one way of training K models."""

    size: str
    mode: str
    k: int
    steps_per_s: float
    tokens_per_s: float


def measure(size: str, mode: str, k: int, steps: int, batch_size: int, device: torch.device) -> Throughput:
    """Train ``k`` models for ``steps`` steps in ``mode`` (single, loop or batched) and time it."""
    config = SIZES[size]
    task = MarkovChain(symmetric_kernel(config.vocab_size, 0.3), config.block_size)
    seeds = list(range(1 if mode == "single" else k))
    train_config = TrainConfig(steps=steps, batch_size=batch_size, eval_every=steps, eval_size=batch_size)
    train(lambda: GPT(config), task, TrainConfig(steps=2, batch_size=batch_size, eval_every=2, eval_size=batch_size),
          seeds[:2], device, batched=mode != "loop", progress=False)  # warm-up: kernels, allocator
    result = train(lambda: GPT(config), task, train_config, seeds, device, batched=mode != "loop", progress=False)
    member_steps = len(seeds) * steps
    return Throughput(size, mode, len(seeds), member_steps / result.wall_time,
                      member_steps * batch_size * config.block_size / result.wall_time)


def run(k: int, steps: int, batch_size: int, device: torch.device, sizes: list[str] | None = None) -> list[Throughput]:
    """All three modes for every size."""
    out = []
    for size in sizes or list(SIZES):
        if size not in SIZES:
            raise ValueError(f"unknown model size {size!r}; choose from {', '.join(SIZES)}")
        out += [measure(size, mode, k, steps, batch_size, device) for mode in ("single", "loop", "batched")]
    return out


def report(rows: list[Throughput]) -> str:
    """A table of throughputs and the batched-over-loop ratio per size."""
    lines = [f"{'size':<10}{'mode':<9}{'K':>4}{'member-steps/s':>16}{'tokens/s':>12}"]
    for row in rows:
        lines.append(f"{row.size:<10}{row.mode:<9}{row.k:>4}{row.steps_per_s:>16.1f}{row.tokens_per_s:>12.0f}")
    for size in dict.fromkeys(r.size for r in rows):
        by_mode = {r.mode: r for r in rows if r.size == size}
        ratio = by_mode["batched"].steps_per_s / by_mode["loop"].steps_per_s
        lines.append(f"{size}: batched / loop throughput = {ratio:.2f}x")
    return "\n".join(lines)
