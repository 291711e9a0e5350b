"""Training throughput: one model, K models one after another, and K models batched.

The book's models are tiny, so one of them leaves a GPU mostly idle; :func:`sandboxes.trainer.train`
can train K seeds as one vmapped ensemble instead. This module measures what that buys on the
device at hand, for a model of each chapter's size, with the real trainer (sampling included), and
sets our training step beside the Markov paper's own loop, imported from a checkout of its code.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
import time
import types
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from . import performance
from .calibration import calibrating
from .data.markov import MarkovChain, symmetric_kernel
from .model import GPT, GPTConfig
from .results import current_commit, provenance
from .runtime import device_name
from .theory.markov import binary_config
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
    train(
        lambda: GPT(config),
        task,
        TrainConfig(steps=2, batch_size=batch_size, eval_every=2, eval_size=batch_size),
        seeds[:2],
        device,
        batched=mode != "loop",
        progress=False,
    )  # warm-up: kernels, allocator
    result = train(lambda: GPT(config), task, train_config, seeds, device, batched=mode != "loop", progress=False)
    member_steps = len(seeds) * steps
    return Throughput(
        size,
        mode,
        len(seeds),
        member_steps / result.wall_time,
        member_steps * batch_size * config.block_size / result.wall_time,
    )


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


# ---------------------------------------------------------------- against the Markov paper's own training loop
PAPER_LENGTH, PAPER_BATCH, PAPER_WIDTH = 1024, 16, 8  # Makkuva et al.'s public defaults: T, batch, d (one layer)


@dataclass(frozen=True)
class Round:
    """One round of the side-by-side comparison: ms per training step of their loop and of ours."""

    theirs_ms: float
    ours_ms: float

    @property
    def ratio(self) -> float:
        return self.theirs_ms / self.ours_ms


def _module_at(path: Path, name: str) -> types.ModuleType:
    """The module in the file ``path``, loaded under ``name`` (their ``models`` and ``optim`` would shadow others)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _authors_loop(checkout: Path, p: float, q: float) -> Callable[[int], float]:
    """Their step (batch, count update, forward, backward, AdamW with their parameter groups and one-cycle schedule)
    imported from a checkout of ``Markov-LLM/src``, as a function of a number of steps that returns ms per step.

    Their model module imports a tokenizer and a logger it never uses in training; stand-ins are put in their place
    where those packages are missing."""
    stand_ins = [
        name for name in ("tiktoken", "wandb") if name not in sys.modules and importlib.util.find_spec(name) is None
    ]
    sys.modules.update({name: types.SimpleNamespace(get_encoding=lambda encoding: None) for name in stand_ins})
    try:  # their modules keep the stand-ins they imported; nothing else in this process sees them
        base, utils = (
            _module_at(checkout / part, name)
            for part, name in (("models/base.py", "markov_paper_base"), ("optim/utils.py", "markov_paper_utils"))
        )
    finally:
        for name in stand_ins:
            del sys.modules[name]
    config = types.SimpleNamespace(
        vocab_size=2,
        n_embd=PAPER_WIDTH,
        n_layer=1,
        n_head=1,
        sequence_length=PAPER_LENGTH,
        dropout=0.0,
        bias=False,
        memory=-1,
        device="cpu",
        wandb=False,
        bce=False,
        no_tying=False,
    )
    model = base.GPTBase(config)
    named = dict(model.named_parameters())
    groups = [{**g, "params": [named[n] for n in g["params"]]} for g in model.get_parameter_group_specs()]
    opt = torch.optim.AdamW(groups, lr=2e-3, betas=(0.9, 0.95), weight_decay=1e-3)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        opt,
        max_lr=2e-3,
        total_steps=10**6,
        pct_start=0.02,
        anneal_strategy="cos",
        cycle_momentum=False,
        div_factor=1e2,
        final_div_factor=0.05,
    )
    kernel, counts = torch.tensor([[1 - p, p], [q, 1 - q]]), base.AddBeta(0.5, (2, 2), "cpu")
    generator, initial = torch.Generator().manual_seed(0), types.SimpleNamespace(initial="steady")
    model.train()

    def steps_ms(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            x, y = utils.get_batch(kernel, PAPER_LENGTH, PAPER_BATCH, generator, initial)
            counts.train(x)
            model(x, targets=y)["loss"].backward()
            opt.step()
            schedule.step()
            opt.zero_grad(set_to_none=True)
        return (time.perf_counter() - start) / n * 1e3

    return steps_ms


def _our_loop(p: float, q: float) -> Callable[[int], float]:
    """Our trainer on the same model and chain, as ms per step: the trainer's own step timer (the one that plans a
    cluster run), which leaves out the call's set-up, its first step and its held-out evaluations."""
    task = MarkovChain.binary(p, q, PAPER_LENGTH)

    def steps_ms(n: int) -> float:
        config = TrainConfig(steps=n + 1, batch_size=PAPER_BATCH, lr=2e-3, eval_every=n + 1, eval_size=PAPER_BATCH)
        with calibrating(n + 1) as calls:
            train(lambda: GPT(binary_config(PAPER_WIDTH, PAPER_LENGTH, tied=True)), task, config, [0], progress=False)
        timing = calls[0].timing
        return timing.step_s / timing.steps * 1e3

    return steps_ms


MAX_THEIR_STEPS = 9_000  # their attention draws and logs its weights at its 10000th call


def against_authors(checkout: Path, rounds: int, steps: int, p: float = 0.5, q: float = 0.8) -> list[Round]:
    """Their training step and ours at the paper's setting (T = 1024, batch 16, d = 8, one tied layer, no
    compilation), alternating in one process, ``rounds`` rounds of ``steps`` timed steps after 2 warm-up steps each."""
    if steps < 1 or rounds < 1 or 2 + rounds * steps > MAX_THEIR_STEPS:
        raise ValueError(
            f"time at least one step in at least one round, and at most {MAX_THEIR_STEPS} of their steps "
            "in all (their model plots its attention at its 10000th)"
        )
    theirs, ours = _authors_loop(checkout, p, q), _our_loop(p, q)
    theirs(2), ours(2)
    return [Round(theirs(steps), ours(steps)) for _ in range(rounds)]


TARGET_RATIO = 4.0  # issue 43: our step at least four times faster than their loop, in every round


def our_step_profiled(steps: int, p: float = 0.5, q: float = 0.8) -> dict:
    """What holds our step at the paper's setting: its work counted and the least time that takes at this machine's
    measured peaks (:func:`performance.least_time`), and ``steps`` steps of the trainer profiled by operator."""
    peaks = performance.measure_peaks()
    task = MarkovChain.binary(p, q, PAPER_LENGTH)
    work = performance.count_step(GPT(binary_config(PAPER_WIDTH, PAPER_LENGTH, tied=True)), task, PAPER_BATCH)
    with profile(activities=[ProfilerActivity.CPU]) as profiled:
        _our_loop(p, q)(steps)
    return {
        "peaks": asdict(peaks),
        "member_step": asdict(work),
        "least_ms": performance.least_time(work, peaks) * 1e3,
        "operators": performance.top_operators(profiled),
    }


def against_record(rounds: list[Round], steps: int, ours_profiled: dict, wall_time: float) -> dict:
    """The rounds as the performance page shows them: each round's ms per step, the CPU path and threads they ran
    on, what holds our step (:func:`our_step_profiled`), and where they were made."""
    machine = device_name(torch.device("cpu"))
    return {
        "setting": {"length": PAPER_LENGTH, "batch_size": PAPER_BATCH, "width": PAPER_WIDTH, "steps": steps},
        "capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "rounds": [{"theirs_ms": r.theirs_ms, "ours_ms": r.ours_ms} for r in rounds],
        "ours_profiled": ours_profiled,
        "provenance": provenance("cpu", machine, wall_time, current_commit()),
    }


def against_report(rounds: list[Round]) -> str:
    """Each round's ms per step and ratio, then the medians."""
    lines = [
        f"round {i}: theirs {r.theirs_ms:.1f} ms, ours {r.ours_ms:.1f} ms, {r.ratio:.2f} times faster"
        for i, r in enumerate(rounds, start=1)
    ]
    theirs, ours = (statistics.median(getattr(r, f) for r in rounds) for f in ("theirs_ms", "ours_ms"))
    ratios = [r.ratio for r in rounds]
    lines.append(
        f"median: theirs {theirs:.1f} ms, ours {ours:.1f} ms (ratio of the medians {theirs / ours:.2f}); "
        f"ratio per round: median {statistics.median(ratios):.2f}, slowest {min(ratios):.2f}"
    )
    return "\n".join(lines)
