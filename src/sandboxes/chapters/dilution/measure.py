"""The dilution chapter's sections: the exact checks of Propositions 3 to 5 (the bound, the two-layer construction,
the simulators) and the training runs that fill each section's data (one ``TypedDict`` per section, which
``figures`` draws and ``judge`` reads)."""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any, TypedDict

import numpy as np
import torch
from torch import Tensor, nn
from tqdm import tqdm

from ... import heldout
from ...calibration import calibrated_map, count_chunks
from ...curves import still_descending
from ...data.flipflop import (
    NOOP,
    ONE,
    ZERO,
    Annealed,
    FlipFlop,
    FlipFlopAutomaton,
    I,
    Mixture,
    R,
    Sharpened,
    W,
    all_strings,
    automaton_states,
    latest_write_position,
    read_errors,
)
from ...losses import attention_entropy
from ...model import GPT, LSTM, GPTConfig, WithAttention
from ...profiles import float_list, int_list
from ...sections import RunContext
from ...theory import dilution as theory
from ...trainer import TrainConfig, TrainResult, train
from ...workers import TrainRequest, train_each, train_spread
from .judge import BOUND_TOL, RARE_SETS, read_entropy

SIGMAS = (0.5, 1.0, 2.0, 3.0, 4.0, 6.0)
LENGTHS = (2, 4, 16, 64, 256, 1024, 4096)
THRESHOLDS = (0.5, 0.9, 0.99)
SIMULATOR = theory.SimulatorWeights()
CASE1_DELTA, CASE2_DELTA = 0.5, -0.45  # W_Qp^T W_Kp of the two failing simulators (switches at t = 23 and 143)


# ---------------------------------------------------------------- Proposition 4
class BoundData(TypedDict):
    sigmas: list[float]  # the spectral norms of the grid
    lengths: list[int]  # the sequence lengths of the grid
    random_max: list[list[float]]  # sigma x length: largest weight among 64 random forms and unit-ball inputs
    worst_ratio: list[list[float]]  # sigma x length: worst-case weight of a random 2-d form / the bound
    sigma_grid: list[float]  # the sigmas at which the dilution length is drawn
    thresholds: list[float]
    dilution_length: dict[str, list[int]]  # threshold (as a string) -> T* at each sigma of sigma_grid
    # sigma x length: the weight the extremal input's last query gives key 0 through a GPT attention layer
    extremal_weight: list[list[float]]
    worst_weight: list[list[float]]  # sigma x length: worst-case weight of a random 2-d form (worst_ratio * bound)
    # per sigma of the grid whose dilution length T* at the threshold lies in (2, max length]: (sigma, T*, the
    # extremal weight at T* - 1, the extremal weight at T*)
    crossings: list[tuple[float, int, float, float]]


def bound(config: dict[str, Any], ctx: RunContext) -> BoundData:
    """The bound on a grid: attained by an extremal input, never exceeded by random or worst-case ones."""
    return bound_data(config["threshold"])


def bound_data(
    threshold: float,
    extremal: Callable[[float, int], tuple[GPT, Tensor]] = theory.extremal_attention,
    length_fn: Callable[[float, float], int] = theory.dilution_length,
    sigmas: tuple[float, ...] = SIGMAS,
    lengths: tuple[int, ...] = LENGTHS,
    latent_radius: float = 1.0,
) -> BoundData:
    """The bound section's data for a given extremal input and dilution length.

    The chapter passes the theory's two functions and unit-ball latents; a test passes a wrong one (an extremal
    input of the wrong norm, a dilution length off by one, random latents outside the unit ball that the
    proposition assumes) and sees its row fail (``judge.bound_claims`` takes a wrong bound).
    """
    rng = np.random.default_rng(0)
    extremal_weight = np.zeros((len(sigmas), len(lengths)))
    random_max = np.zeros((len(sigmas), len(lengths)))
    worst_weight = np.zeros((len(sigmas), len(lengths)))
    worst_ratio = np.zeros((len(sigmas), len(lengths)))
    for a, sigma in enumerate(sigmas):
        for b, T in enumerate(lengths):
            extremal_weight[a, b] = _extremal_weight(sigma, T, extremal)
            random_max[a, b] = _random_max_weights(rng, sigma, T, n=64, radius=latent_radius).max()
            worst_weight[a, b] = theory.worst_case_max_weight(_random_form(rng, sigma, 2), T)
            worst_ratio[a, b] = worst_weight[a, b] / float(theory.max_weight_bound(T, sigma))
    crossings = []
    for sigma in sigmas:
        T_star = length_fn(sigma, threshold)
        if 2 < T_star <= max(lengths):  # the extremal input is a full T x T attention: keep T small
            crossings.append(
                (
                    sigma,
                    T_star,
                    _extremal_weight(sigma, T_star - 1, extremal),
                    _extremal_weight(sigma, T_star, extremal),
                )
            )
    sigma_grid = np.linspace(0.0, 6.0, 61)
    data: BoundData = {
        "sigmas": list(sigmas),
        "lengths": list(lengths),
        "random_max": random_max,
        "worst_ratio": worst_ratio,
        "sigma_grid": sigma_grid,
        "thresholds": list(THRESHOLDS),
        "dilution_length": {str(t): [length_fn(s, t) for s in sigma_grid] for t in THRESHOLDS},
        "extremal_weight": extremal_weight,
        "worst_weight": worst_weight,
        "crossings": crossings,
    }  # type: ignore[typeddict-item]
    return data


def _extremal_weight(
    sigma: float, T: int, extremal: Callable[[float, int], tuple[GPT, Tensor]] = theory.extremal_attention
) -> float:
    model, idx = extremal(sigma, T)
    with torch.no_grad():
        return float(model(idx, return_attention=True)[1][0][0, 0, -1, 0])


def _random_form(rng: np.random.Generator, sigma: float, d: int) -> np.ndarray:
    M = rng.normal(size=(d, d))
    return sigma * M / np.linalg.norm(M, 2)


def _random_max_weights(
    rng: np.random.Generator, sigma: float, T: int, n: int, d: int = 8, radius: float = 1.0
) -> np.ndarray:
    """Largest attention weight of the last query, for ``n`` random forms and latents in the ball of ``radius``."""
    out = np.empty(n)
    for k in range(n):
        M = _random_form(rng, sigma, d)
        x = rng.normal(size=(T, d))
        x *= radius * rng.uniform(0, 1, size=(T, 1)) ** (1 / d) / np.linalg.norm(x, axis=1, keepdims=True)
        scores = x @ M.T @ x[-1]  # x_j^T M^T x_T = x_T^T M x_j
        w = np.exp(scores - scores.max())
        out[k] = (w / w.sum()).max()
    return out


# ---------------------------------------------------------------- Proposition 3
class ConstructionData(TypedDict):
    sizes: list[int]  # block sizes of the sweep, the construction's weights held fixed
    safe_length: int  # largest block size at which the closed-form conditions certify it
    onset: int  # first block size at which 'w 1 i 0 r' is answered wrongly (closed form)
    base: int  # the block size the weights are built for
    exhaustive: tuple[int, int]  # (wrong, total) reads over every string of length 4..exhaustive_up_to
    exhaustive_up_to: int  # 16, or the block size where that is shorter
    at_base: tuple[int, int]  # (wrong, total) reads on random strings, p_i in 0.98, 0.8, 0.1, 0, at the base length
    witness_scan: int | None  # first block size at which the GPT itself answers 'w 1 i 0 r' wrongly
    errors: dict[str, list[int]]  # p_i (as a string) -> wrong reads on random strings at each size
    witness_at_onset: int  # occurrences of 'w b i (1-b) r' in the random strings at block size `onset`
    self_selection: list[float]  # at each size: smallest layer-1 weight an unwritten bit gives itself
    conditions: dict[str, list[float]]  # written / not_written / latest_wins -> slack at each size


Build = Callable[[theory.FlipFlopWeights, int | None], GPT]


def construction(config: dict[str, Any], ctx: RunContext) -> ConstructionData:
    """The 2-layer construction: exact on every short string and on random ones; then held fixed as T grows."""
    return construction_data(theory.FlipFlopWeights(base=config["base"]), config["n_construction"])


def exhaustive_lengths(base: int) -> range:
    """Even string lengths 4..16 that fit the construction's block size ``base`` (its input drops the last bit)."""
    return range(4, min(16, base) + 1, 2)


def construction_data(
    weights: theory.FlipFlopWeights, n: int, build: Build = theory.flipflop_construction
) -> ConstructionData:
    """Wrong reads of ``build(weights, block_size)`` (the construction, or a broken one in a test) and the closed forms."""  # noqa: E501
    model = build(weights, None)
    exhaustive = [_errors(model, all_strings(length)) for length in exhaustive_lengths(weights.base)]
    generator = heldout.generator(heldout.FLIPFLOP_CONSTRUCTION)
    sets = {p: FlipFlop.with_ignore(weights.base, p).sequences(n, generator) for p in (0.98, 0.8, 0.1, 0.0)}
    at_base = [_errors(model, seq) for seq in sets.values()]
    safe, onset = theory.safe_length(weights), theory.witness_onset(weights)
    step = max(2, weights.base // 8 * 2)  # even block sizes only: a flip-flop string has an even length
    sizes = sorted(set(range(weights.base, 5 * weights.base // 2 + 1, step)) | {safe, onset - 2, onset})
    sweep: dict[float, list[int]] = {p: [] for p in (0.98, 0.8, 0.1)}
    selection, witnesses = [], 0
    for size in sizes:
        fixed = build(weights, size)
        generator = heldout.generator(heldout.LENGTH_SWEEP + size)
        for p in sweep:
            seq = FlipFlop.with_ignore(size, p).sequences(n, generator)
            sweep[p].append(_errors(fixed, seq)[0])
            witnesses += witness_count(seq) if size == onset else 0
        selection.append(_self_selection(fixed, seq[:64]))
    return {
        "sizes": sizes,
        "safe_length": safe,
        "onset": onset,
        "base": weights.base,
        "exhaustive": (sum(e for e, _ in exhaustive), sum(t for _, t in exhaustive)),
        "exhaustive_up_to": exhaustive_lengths(weights.base)[-1],
        "at_base": (sum(e for e, _ in at_base), sum(t for _, t in at_base)),
        "witness_scan": _witness_scan(weights, build),
        "errors": {str(p): v for p, v in sweep.items()},
        "self_selection": selection,
        "witness_at_onset": witnesses,
        "conditions": {
            k: [theory.construction_conditions(weights, s)[k] for s in sizes]
            for k in ("written", "not_written", "latest_wins")
        },
    }


def witness_count(seq: Tensor) -> int:
    """Occurrences of the witness pattern 'w b i (1-b) r', either bit, at instruction positions of ``seq``."""
    windows = seq.unfold(1, 5, 2)  # (B, windows, 5), each starting at an instruction
    count = 0
    for bit, other in ((ONE, ZERO), (ZERO, ONE)):
        count += int((windows == torch.tensor([W, bit, I, other, R])).all(dim=-1).sum())
    return count


def _witness_scan(weights: theory.FlipFlopWeights, build: Build = theory.flipflop_construction) -> int | None:
    """First even block size from ``base`` at which the GPT itself answers the witness read wrongly."""
    x = torch.tensor([theory.WITNESS])
    for size in range(weights.base, 8 * weights.base, 2):
        with torch.no_grad():
            if read_errors(build(weights, size)(x), x)[0]:
                return size
    return None


def _errors(model: nn.Module, seq: Tensor, chunk: int = 256) -> tuple[int, int]:
    """Wrong and total reads of ``model`` on full strings (the input drops the last bit)."""

    def read(part: Tensor) -> tuple[int, int]:
        x = part[:, :-1]
        return read_errors(model(x.to(_device(model))).cpu(), x)

    with torch.no_grad():
        counts = calibrated_map(read, count_chunks(seq, chunk))
    return sum(w for w, _ in counts), sum(t for _, t in counts)


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def _self_selection(model: GPT, seq: Tensor) -> float:
    """Smallest layer-1 weight a bit that was not written gives itself (it must stay above 1/2); NaN if the
    strings have no such bit (short or all-write strings)."""
    x = seq[:, :-1]
    with torch.no_grad():
        att = model(x, return_attention=True)[1][0][:, 0]
    pos = torch.arange(1, x.shape[1], 2)
    weights = att[:, pos, pos][x[:, pos - 1] != W]
    return float(weights.min()) if weights.numel() else float("nan")


# ---------------------------------------------------------------- Proposition 5
class SimulatorRun(TypedDict):
    delta: float  # W_Qp^T W_Kp of this simulator
    case1_top: list[int]  # case 1's input (a write at 0, then noops): the top-scored key at each query
    case2_top: list[int]  # case 2's inputs (writes at 0 and t - 1): the top-scored key at query t = 2, 3, ...
    case2_out: list[int]  # case 2's inputs: the output (argmax) at query t = 2, 3, ...
    # delta = 0 only: queries of 4 random strings of 2048 whose top key is not the latest write
    random_misses: int | None
    random_wrong: int | None  # delta = 0 only: wrong states on those strings


# three simulators (keys with spaces, so the functional form) and the two closed-form switches
SimulatorData = TypedDict(
    "SimulatorData",
    {
        "case 1": SimulatorRun,  # delta > 0
        "case 2": SimulatorRun,  # delta < 0
        "orthogonal": SimulatorRun,  # delta = 0
        "case1_switch": int,  # first query of case 1 whose top key is a noop
        "case2_switch": int,  # first query of case 2 whose top key is the stale write
    },
)


def simulator(config: dict[str, Any], ctx: RunContext) -> SimulatorData:
    """Linear positions: a position-position term makes the top score leave the latest write; without it, never."""
    return simulator_data()


def simulator_data(
    build: Callable[[theory.SimulatorWeights], GPT] = theory.simulator, length: int = 240, random_length: int = 2048
) -> SimulatorData:
    """Top keys and outputs of ``build(weights)`` (the simulator, or a broken one in a test) on the proof's inputs."""
    data: dict[str, Any] = {}
    for name, delta in (("case 1", CASE1_DELTA), ("case 2", CASE2_DELTA), ("orthogonal", 0.0)):
        model = build(replace(SIMULATOR, delta=delta))
        case2_seq = theory.case2_sequences(length)
        rows = torch.arange(2, length)
        with torch.no_grad():
            case2_out = model(case2_seq).argmax(-1)[rows, rows]
        run: dict[str, Any] = {
            "delta": delta,
            "case1_top": _top_key(model, theory.case1_sequence(length))[0].tolist(),
            "case2_top": _top_key(model, case2_seq)[rows, rows].tolist(),
            "case2_out": case2_out.tolist(),
            "random_misses": None,
            "random_wrong": None,
        }
        if delta == 0:
            long = _random_simulator_strings(random_length, 4)
            run["random_misses"] = int((_top_key(model, long) != latest_write_position(long)).sum())
            with torch.no_grad():
                run["random_wrong"] = int((model(long).argmax(-1) != automaton_states(long)).sum())
        data[name] = run
    data["case1_switch"] = theory.case1_switch(replace(SIMULATOR, delta=CASE1_DELTA))
    data["case2_switch"] = theory.case2_switch(replace(SIMULATOR, delta=CASE2_DELTA))
    return data  # type: ignore[return-value]


def _top_key(model: GPT, seq: Tensor) -> Tensor:
    """``(B, T)``: the key with the highest attention weight at every query."""
    with torch.no_grad():
        return model(seq, return_attention=True)[1][0][:, 0].argmax(-1)


def _random_simulator_strings(length: int, n: int) -> Tensor:
    """Strings of writes (probability 0.05 each) and noops, starting with a write."""
    g = heldout.generator(heldout.SIMULATOR_STRINGS)
    u = torch.rand(n, length, generator=g)
    seq = torch.where(u < 0.025, theory.WRITE0, torch.where(u < 0.05, theory.WRITE1, theory.NOOP))
    seq[:, 0] = theory.WRITE1
    return seq


# ---------------------------------------------------------------- training
class LayerSharpness(TypedDict):
    # the sharpest head at each read, averaged per position bin (None: no read in the bin)
    max_weight: list[float | None]  # mean largest attention weight
    entropy: list[float | None]  # mean entropy of the attention row (nats)
    sigma: list[float | None]  # median Proposition 4 sigma of the head at the read


class Sharpness(TypedDict):
    bin_edges: list[float]  # position bins of the reads
    layers: list[LayerSharpness]  # one per layer
    # largest weight minus its Proposition 4 bound over the queries, heads and layers where the bound is below
    # 1 - BOUND_TOL (elsewhere, the first query above all, weight and bound are both 1 and nothing is tested);
    # None when there is no such query
    excess: float | None
    tested: int  # how many (query, head, layer) triples entered ``excess``


class TrainingData(TypedDict):
    counts: dict[str, dict[str, list[tuple[int, int]]]]  # transformer / lstm -> test set -> per seed (wrong, total)
    eval_steps: list[int]
    eval_loss: list[list[float]]  # transformer seeds x evaluations
    lstm_eval_steps: list[int]
    lstm_eval_loss: list[list[float]]  # LSTM seeds x evaluations
    sharpness: dict[str, list[Sharpness]]  # transformer -> per seed
    still_descending: dict[str, int]  # transformer / lstm -> runs whose loss had not settled at the end


class SecondPhaseData(TypedDict):
    counts: dict[str, dict[str, list[tuple[int, int]]]]  # plain / sharpened / rare -> test set -> per seed
    eval_steps: list[int]  # the first phase's evaluations, then the second phase's, shifted to follow it
    second_phase_start: int
    eval_loss: dict[str, list[list[float]]]  # plain / sharpened / rare -> seeds x evaluations (first phase, then own)
    sharpness: dict[str, list[Sharpness]]  # plain / sharpened -> per seed
    still_descending: dict[str, int]  # plain / sharpened / rare -> runs whose loss had not settled at the end


def _gpt_config(config: dict[str, Any]) -> GPTConfig:
    return GPTConfig(
        vocab_size=5,
        block_size=config["T"],
        n_layer=config["n_layer"],
        n_head=config["n_head"],
        d_model=config["d_model"],
        tied=False,
        positional="learned",
        layer_norm=config["layer_norm"],
    )


def _schedule(steps: int, batch: int, lr: float, weight_decay: float, warmup: int) -> TrainConfig:
    return TrainConfig(
        steps=steps,
        batch_size=batch,
        lr=lr,
        weight_decay=weight_decay,
        warmup=warmup,
        schedule="linear",
        final_lr_fraction=0.0,
        eval_every=max(1, steps // 20),
        eval_size=256,
    )


def _first_phase(config: dict[str, Any], ctx: RunContext, steps: int) -> TrainResult:
    """Transformers trained on FFL(p_i) from scratch for ``steps`` (warm-up, then linear decay to zero), their seeds
    spread over ``ctx.workers`` processes; once per run where both sections train ``steps`` (quick: the training
    section's models are those the second phases start from)."""
    schedule = _schedule(steps, config["batch_size"], config["lr"], config["weight_decay"], config["warmup"])
    task = FlipFlop.with_ignore(config["T"], config["p_i"])
    request = TrainRequest(
        partial(GPT, _gpt_config(config)), task, schedule, ctx.seeds, ctx.device, config["batched_seeds"]
    )
    return ctx.train_once(("first phase", steps), lambda: train_spread(request, ctx.workers, ctx.progress))


def training(config: dict[str, Any], ctx: RunContext) -> TrainingData:
    """Transformers and LSTMs on FFL(p_i), counted on in-distribution, sparse and dense strings."""
    first = _first_phase(config, ctx, config["steps"])
    lstm = train(
        lambda: LSTM(5, config["lstm_hidden"]),
        FlipFlop.with_ignore(config["T"], config["p_i"]),
        _schedule(config["lstm_steps"], config["batch_size"], config["lstm_lr"], 0.0, 0),
        batched=False,
        seeds=ctx.seeds,
        device=ctx.device,
        progress=ctx.progress,
    )
    moving = {
        kind: int(still_descending(run, LOSS_NOISE).sum()) for kind, run in (("transformer", first), ("lstm", lstm))
    }
    tests = _test_sets(config)
    counts = {
        kind: _count(run.models, tests, ctx.device, kind, ctx.progress)
        for kind, run in (("transformer", first), ("lstm", lstm))
    }
    sharpness = {
        "transformer": calibrated_map(lambda m: _sharpness(m, tests["in-distribution"][:64], ctx.device), first.models)
    }
    data: TrainingData = {
        "counts": counts,
        "eval_steps": first.eval_steps,
        "eval_loss": first.eval_loss,
        "lstm_eval_steps": lstm.eval_steps,
        "lstm_eval_loss": lstm.eval_loss,
        "sharpness": sharpness,
        "still_descending": moving,
    }
    return data


def second_phases(config: dict[str, Any], ctx: RunContext) -> SecondPhaseData:
    """From one first phase, three second phases on the same batches: plain (the control), with the sharpening
    penalty, and on the rare-string mixture; counted on the same strings."""
    task = FlipFlop.with_ignore(config["T"], config["p_i"])
    first = _first_phase(config, ctx, config["start_steps"])
    second = _second_schedule(config)
    run = dict(seeds=ctx.seeds, device=ctx.device, progress=ctx.progress, batched=config["batched_seeds"])
    phases = {"plain": _plain_phase(config, ctx, first)}
    if config["sharpen"] > 0:
        phases["sharpened"] = train(
            [_copier(m, WithAttention) for m in first.models], Sharpened(task, config["sharpen"]), second, **run
        )
    mixture = Mixture(config["T"], tuple(float_list(config["rare_mix"])))
    phases["rare"] = train([_copier(m) for m in first.models], mixture, second, **run)
    models = {kind: [getattr(m, "gpt", m) for m in phase.models] for kind, phase in phases.items()}
    moving = {kind: int(still_descending(phase, LOSS_NOISE, continued=True).sum()) for kind, phase in phases.items()}
    tests = _test_sets(config)
    counts = {kind: _count(ms, tests, ctx.device, kind, ctx.progress) for kind, ms in models.items()}
    sharpness = {
        kind: calibrated_map(lambda m: _sharpness(m, tests["in-distribution"][:64], ctx.device), models[kind])
        for kind in ("plain", "sharpened")
        if kind in models
    }
    start = int(first.eval_steps[-1] + 1)
    data: SecondPhaseData = {
        "counts": counts,
        "eval_steps": np.concatenate([first.eval_steps, start + phases["plain"].eval_steps]),
        "second_phase_start": start,
        "eval_loss": {
            kind: np.concatenate([first.eval_loss, phase.eval_loss], axis=1) for kind, phase in phases.items()
        },
        "sharpness": sharpness,
        "still_descending": moving,
    }
    return data


def _second_schedule(config: dict[str, Any]) -> TrainConfig:
    return _schedule(
        config["finetune_steps"], config["batch_size"], config["finetune_lr"], config["weight_decay"], config["warmup"]
    )


def _plain_phase(config: dict[str, Any], ctx: RunContext, first: TrainResult) -> TrainResult:
    """The plain second phase from ``first`` (the paired control), trained once per run for both sections that
    compare with it."""
    task = FlipFlop.with_ignore(config["T"], config["p_i"])
    run = dict(seeds=ctx.seeds, device=ctx.device, progress=ctx.progress, batched=config["batched_seeds"])
    return ctx.train_once(
        ("plain second phase", config["start_steps"]),
        lambda: train([_copier(m) for m in first.models], task, _second_schedule(config), **run),
    )


class SharpeningData(TypedDict):
    coefficients: list[float]  # the penalty's weights, 0 (the plain twin) first
    counts: dict[str, list[list[tuple[int, int]]]]  # sparse / dense -> coefficient -> per seed (wrong, total)
    read_entropy: list[list[float]]  # coefficient -> per seed: the last layer's read entropy (judge.read_entropy)
    final_loss: list[list[float]]  # coefficient -> per seed: held-out loss at the end (the penalty's included)
    still_descending: list[int]  # coefficient -> runs whose loss had not settled at the end


def sharpening(config: dict[str, Any], ctx: RunContext) -> SharpeningData:
    """The second phases' sharpening penalty at each weight of ``sharpen_grid``, every run from the same first
    phase and on the same batches as the plain twin (weight 0), counted on the sparse and dense strings."""
    task = FlipFlop.with_ignore(config["T"], config["p_i"])
    first = _first_phase(config, ctx, config["start_steps"])
    run = dict(seeds=ctx.seeds, device=ctx.device, progress=ctx.progress, batched=config["batched_seeds"])
    coefficients = [0.0] + float_list(config["sharpen_grid"])
    phases = [_plain_phase(config, ctx, first)] + [
        train(
            [_copier(m, WithAttention) for m in first.models], Sharpened(task, weight), _second_schedule(config), **run
        )
        for weight in coefficients[1:]
    ]
    tests = _test_sets(config)
    rare = {name: tests[name] for name in RARE_SETS}
    data = _penalty_runs(coefficients, phases, rare, tests["in-distribution"][:64], ctx, "sharpen", continued=True)
    return data  # type: ignore[return-value]


class SharpenedTrainingData(TypedDict):
    coefficients: list[float]  # the penalty's weights, 0 (the plain twins) first
    counts: dict[str, list[list[tuple[int, int]]]]  # test set -> coefficient -> per seed (wrong, total)
    read_entropy: list[list[float]]  # coefficient -> per seed: the last layer's read entropy (judge.read_entropy)
    final_loss: list[list[float]]  # coefficient -> per seed: held-out loss of the reads at the end (no penalty)
    still_descending: list[int]  # coefficient -> runs whose held-out loss of the reads had not settled at the end


def sharpened_training(config: dict[str, Any], ctx: RunContext) -> SharpenedTrainingData:
    """Transformers trained from scratch for ``start_steps`` with the entropy penalty at each weight of
    ``sharpen_from_start``, annealed in linearly from 0 at the first step (:class:`~sandboxes.data.flipflop.Annealed`),
    beside plain twins (one seed, initialisation and batch stream each; ``sharpen_start_seeds`` seeds), counted on
    the in-distribution, sparse and dense strings."""
    task = FlipFlop.with_ignore(config["T"], config["p_i"])
    schedule = _schedule(
        config["start_steps"], config["batch_size"], config["lr"], config["weight_decay"], config["warmup"]
    )
    seeds = list(range(config["sharpen_start_seeds"]))
    coefficients = [0.0] + float_list(config["sharpen_from_start"])
    requests = [
        TrainRequest(
            partial(GPT, _gpt_config(config)) if w == 0 else partial(_attending_gpt, _gpt_config(config)),
            Annealed(task, w) if w > 0 else task,
            schedule,
            seeds,
            ctx.device,
            config["batched_seeds"],
        )
        for w in coefficients
    ]
    phases = train_each(requests, ctx.workers, ctx.progress)
    tests = _test_sets(config)
    data = _penalty_runs(coefficients, phases, tests, tests["in-distribution"][:64], ctx, "from the start")
    return data  # type: ignore[return-value]


def _penalty_runs(
    coefficients: list[float],
    phases: list[TrainResult],
    tests: dict[str, Tensor],
    sample: Tensor,
    ctx: RunContext,
    label: str,
    continued: bool = False,
) -> dict[str, Any]:
    """What both R6 sections keep of runs trained at each of the penalty's ``coefficients`` (0, the plain twin,
    first): wrong reads on ``tests``, the last layer's read entropy on ``sample``, the final held-out loss and the
    runs still descending (a second phase read as ``continued``)."""
    models = [[getattr(m, "gpt", m) for m in phase.models] for phase in phases]
    counted = [_count(ms, tests, ctx.device, f"{label} {c:g}", ctx.progress) for c, ms in zip(coefficients, models)]
    return {
        "coefficients": coefficients,
        "counts": {name: [counts[name] for counts in counted] for name in tests},
        "read_entropy": [
            [read_entropy(s) for s in calibrated_map(lambda m: _sharpness(m, sample, ctx.device), ms)] for ms in models
        ],
        "final_loss": [phase.eval_loss[:, -1].tolist() for phase in phases],
        "still_descending": [int(still_descending(phase, LOSS_NOISE, continued=continued).sum()) for phase in phases],
    }


# ---------------------------------------------------------------- the sparse tail against the length (R1's trend)
class TailLengthData(TypedDict):
    lengths: list[int]
    # length -> test set -> per seed (wrong reads, reads)
    counts: list[dict[str, list[tuple[int, int]]]]
    still_descending: list[int]  # length -> runs whose loss had not settled at the end
    final_loss: list[list[float]]  # length -> per seed: held-out loss on the reads at the end


def tail_length(config: dict[str, Any], ctx: RunContext) -> TailLengthData:
    """The training section's transformers at each length of `tail_lengths` (`tail_steps` steps, `tail_seeds` seeds,
    the rest as there), each counted on in-distribution, sparse and dense strings of its length: the trend of the
    sparse tail toward the thesis's T = 512."""
    lengths = int_list(config["tail_lengths"])
    schedule = _schedule(
        config["tail_steps"], config["batch_size"], config["lr"], config["weight_decay"], config["warmup"]
    )
    seeds = list(range(config["tail_seeds"]))
    data: dict[str, list] = {"lengths": lengths, "counts": [], "still_descending": [], "final_loss": []}
    for T in lengths:
        at_T = {**config, "T": T}
        request = TrainRequest(
            partial(GPT, _gpt_config(at_T)),
            FlipFlop.with_ignore(T, config["p_i"]),
            schedule,
            seeds,
            ctx.device,
            config["batched_seeds"],
        )
        result = train_spread(request, ctx.workers, ctx.progress)
        data["counts"].append(_count(result.models, _test_sets(at_T), ctx.device, f"T = {T}", ctx.progress))
        data["still_descending"].append(int(still_descending(result, LOSS_NOISE).sum()))
        data["final_loss"].append(result.eval_loss[:, -1].tolist())
    return data  # type: ignore[return-value]


# ---------------------------------------------------------------- resource scaling (R5's sweep shape)
class ScalingData(TypedDict):
    widths: list[int]
    budgets: list[int]  # training steps, each a run of its own (its schedule decays to zero at its end)
    # width -> budget -> test set -> per seed (wrong reads, reads)
    counts: list[list[dict[str, list[tuple[int, int]]]]]
    still_descending: list[list[int]]  # width -> budget -> runs whose loss had not settled at the end
    final_loss: list[list[list[float]]]  # width -> budget -> per seed: held-out loss on the reads at the end


def scaling(config: dict[str, Any], ctx: RunContext) -> ScalingData:
    """The training section's transformers at each width of ``scale_widths``, trained for each budget of
    ``scale_steps`` (``scale_seeds`` seeds a cell, each budget a run of its own whose schedule ends at it), each
    counted on the in-distribution, sparse and dense strings: R5's error against size and steps."""
    widths, budgets = int_list(config["scale_widths"]), int_list(config["scale_steps"])
    seeds = list(range(config["scale_seeds"]))
    task = FlipFlop.with_ignore(config["T"], config["p_i"])
    requests = [
        TrainRequest(
            partial(GPT, _gpt_config({**config, "d_model": width})),
            task,
            _schedule(steps, config["batch_size"], config["lr"], config["weight_decay"], config["warmup"]),
            seeds,
            ctx.device,
            config["batched_seeds"],
        )
        for width in widths
        for steps in budgets
    ]
    runs = iter(train_each(requests, ctx.workers, ctx.progress))
    tests = _test_sets(config)
    data: dict[str, list] = {
        "widths": widths,
        "budgets": budgets,
        "counts": [],
        "still_descending": [],
        "final_loss": [],
    }
    for width in widths:
        cells = [next(runs) for _ in budgets]
        data["counts"].append(
            [
                _count(run.models, tests, ctx.device, f"width {width}, {steps} steps", ctx.progress)
                for run, steps in zip(cells, budgets)
            ]
        )
        data["still_descending"].append([int(still_descending(run, LOSS_NOISE).sum()) for run in cells])
        data["final_loss"].append([run.eval_loss[:, -1].tolist() for run in cells])
    return data  # type: ignore[return-value]


# ---------------------------------------------------------------- trained simulators (R8, Figs. 3.33 and 3.34)
EXAMPLE_STRING = (1, 2, 0, 2, 2, 0, 1, 2, 2, 2, 1, 2, 0, 2, 2, 2)  # the attention maps' input (writes and noops)


class FirstWrong(TypedDict):
    predicted: int | None  # first query whose top key leaves the latest write, from the weights (None: none)
    measured: int | None  # the same, from the trained model's attention
    without_delta: int | None  # the same from the weights with the position-position term delta set to 0
    key: int | None  # the measured top key at the measured first such query (a position)
    output_wrong: int | None  # first query whose output state is wrong


class AutomatonRun(TypedDict):
    p_noop: float
    weight: float  # the entropy penalty's weight (0: the plain twin)
    eval_loss: list[list[float]]  # per seed, the held-out loss at each evaluation (the penalty included)
    still_descending: int  # seeds whose loss had not settled at the end
    state_errors: list[float]  # per seed: wrong states among all positions of held-out strings at p_noop
    earlier_write: list[float]  # per seed: noop queries whose top key is an earlier write, not the latest
    top_weight: list[float]  # per seed: mean largest attention weight at noop queries
    delta: list[float]  # per seed: W_Qp^T W_Kp with positions t / T
    first_wrong: list[dict[str, FirstWrong]]  # per seed: Prop 5's case 1 and 2 and Fig. 3.33b up to drift_length
    attention: list[list[list[float]]]  # per seed: the attention map on EXAMPLE_STRING


class WrongWriteData(TypedDict):
    automaton_T: int  # the training length
    drift_length: int  # the longest of Prop 5's inputs read
    example: list[int]  # the string the attention maps are drawn on
    eval_steps: list[int]
    runs: list[AutomatonRun]  # each p_noop with the plain twin (weight 0) first, then the penalty


def _automaton_config(config: dict[str, Any]) -> GPTConfig:
    """The thesis's 1-layer 1-head model with linear positions (Prop 5's setting; ``p_t = t / automaton_T``)."""
    return GPTConfig(
        vocab_size=3,
        block_size=config["automaton_T"],
        n_layer=1,
        n_head=1,
        d_model=config["automaton_d_model"],
        tied=False,
        positional="linear",
        n_outputs=2,
    )


def _attending_gpt(config: GPTConfig) -> WithAttention:
    return WithAttention(GPT(config))


def wrong_write(config: dict[str, Any], ctx: RunContext) -> WrongWriteData:
    """1-layer 1-head transformers on the flip-flop automaton at each ``p_noop``, plain and with the entropy penalty
    (twins: one seed, one initialisation, one batch stream), read at noop queries: where the top key sits, how sharp
    it is, and where Proposition 5's inputs make it leave the latest write."""
    model = _automaton_config(config)
    steps, lr = config["automaton_steps"], config["automaton_lr"]
    schedule = _schedule(steps, config["batch_size"], lr, config["weight_decay"], config["warmup"])
    grid = [(p, w) for p in float_list(config["automaton_p_noop"]) for w in (0.0, config["automaton_sharpen"])]
    requests = [
        TrainRequest(
            partial(GPT, model) if w == 0 else partial(_attending_gpt, model),
            _automaton_task(config["automaton_T"], p, w),
            schedule,
            ctx.seeds,
            ctx.device,
            config["batched_seeds"],
        )
        for p, w in grid
    ]
    results = train_each(requests, ctx.workers, ctx.progress)
    runs = []
    for (p, w), result in zip(grid, results):
        gpts = [getattr(m, "gpt", m) for m in result.models]
        test = FlipFlopAutomaton(config["automaton_T"], p).sequences(
            config["n_automaton"], heldout.generator(heldout.AUTOMATON_STRINGS)
        )
        reads = calibrated_map(partial(_automaton_reading, test=test, drift_length=config["drift_length"]), gpts)
        run: dict[str, Any] = {
            "p_noop": p,
            "weight": w,
            "eval_loss": result.eval_loss.tolist(),
            "still_descending": int(still_descending(result, LOSS_NOISE).sum()),
        }
        run.update({key: [r[key] for r in reads] for key in reads[0]})
        runs.append(run)
    return {
        "automaton_T": config["automaton_T"],
        "drift_length": config["drift_length"],
        "example": list(EXAMPLE_STRING),
        "eval_steps": results[0].eval_steps.tolist(),
        "runs": runs,  # type: ignore[typeddict-item]
    }


def _automaton_task(length: int, p_noop: float, weight: float) -> FlipFlopAutomaton | Sharpened:
    """The automaton at ``p_noop``, with the entropy penalty where ``weight`` > 0."""
    task = FlipFlopAutomaton(length, p_noop)
    return Sharpened(task, weight) if weight > 0 else task


def _automaton_reading(model: GPT, test: Tensor, drift_length: int) -> dict[str, Any]:
    """One trained head read on held-out strings, on Prop 5's inputs and on the example string."""
    with torch.no_grad():
        logits, attention = model(test, return_attention=True)
    weights = attention[0][:, 0]
    noop = test == NOOP
    top = weights.argmax(dim=-1)
    latest = latest_write_position(test)
    earlier = noop & (top != latest) & (test.gather(1, top) != NOOP)
    reader = extended(model, max(model.config.block_size, len(EXAMPLE_STRING)))  # the unit scale trains shorter
    with torch.no_grad():
        example = reader(torch.tensor([EXAMPLE_STRING]), return_attention=True)[1][0][0, 0]
    scores = theory.noop_query_scores(model)
    return {
        "state_errors": float((logits.argmax(-1) != automaton_states(test)).float().mean()),
        "earlier_write": float(earlier.sum() / noop.sum()),
        "top_weight": float(weights.max(dim=-1).values[noop].mean()),
        "delta": scores.delta,
        "first_wrong": _first_wrong(model, drift_length),
        "attention": [[round(float(v), 4) for v in row] for row in example],
    }


def extended(model: GPT, length: int) -> GPT:
    """A float64 copy of a linear-position GPT that reads strings up to ``length`` with the same ``p_t``."""
    with torch.random.fork_rng():  # its initial weights are overwritten: leave the global stream as it was
        copy_ = GPT(replace(model.config, block_size=length)).double()
    copy_.load_state_dict(model.state_dict())
    with torch.no_grad():
        copy_.wpe.mul_(length / model.config.block_size)
    return copy_


def _first_wrong(
    model: GPT, length: int, predict: Callable[[GPT], theory.NoopQueryScores] = theory.noop_query_scores
) -> dict[str, FirstWrong]:
    """Per drift input (Prop 5's two, Fig. 3.33b's), the first query whose top key is not the latest write: from the
    weights' decomposition (``predict``; a test passes a wrong one), from it without the position-position term, and
    from the model's own attention, with the key it then attends to; and the first query whose output is wrong."""
    long = extended(model, length)
    scores = predict(long)
    out: dict[str, FirstWrong] = {}
    for name, (seq, queries) in theory.drift_inputs(length).items():
        right = latest_write_position(seq).gather(1, queries[:, None]).squeeze(1)
        predicted = theory.predicted_top_keys(scores, seq, queries)
        flat = theory.predicted_top_keys(replace(scores, delta=0.0), seq, queries)
        measured, states = _measured_top_keys(long, seq, queries)
        first = _first(queries, measured != right)
        out[name] = {
            "predicted": _first(queries, predicted != right),
            "measured": first,
            "without_delta": _first(queries, flat != right),
            "key": None if first is None else int(measured[queries == first][0]),
            "output_wrong": _first(queries, states != automaton_states(seq).gather(1, queries[:, None]).squeeze(1)),
        }
    return out


def _first(queries: Tensor, wrong: Tensor) -> int | None:
    return int(queries[wrong][0]) if wrong.any() else None


def _measured_top_keys(model: GPT, seq: Tensor, queries: Tensor, chunk: int = 16) -> tuple[Tensor, Tensor]:
    """The top key and the output state at ``queries[b]`` of ``seq[b]`` from forward passes, each chunk cut after
    its last query (causal: later inputs change nothing); strings equal throughout run once."""
    if (seq == seq[:1]).all():
        with torch.no_grad():
            logits, attention = model(seq[:1, : int(queries.max()) + 1], return_attention=True)
        return attention[0][0, 0][queries].argmax(dim=-1), logits[0, queries].argmax(dim=-1)
    keys, states = [], []
    for rows in torch.arange(len(queries)).split(chunk):
        cut, picked = int(queries[rows].max()) + 1, torch.arange(len(rows))
        with torch.no_grad():
            logits, attention = model(seq[rows, :cut], return_attention=True)
        keys.append(attention[0][:, 0][picked, queries[rows]].argmax(dim=-1))
        states.append(logits[picked, queries[rows]].argmax(dim=-1))
    return torch.cat(keys), torch.cat(states)


def _count(
    models: list[nn.Module],
    tests: dict[str, Tensor],
    device: torch.device,
    label: str = "",
    progress: bool | None = None,
) -> dict[str, list[tuple[int, int]]]:
    """Wrong and total reads of every model on every test set (evaluated on ``device``, returned to the CPU)."""
    bar = tqdm(total=len(models), desc=f"counting {label} reads", disable=not progress, leave=False, file=sys.stderr)

    def count(model: nn.Module) -> dict[str, tuple[int, int]]:
        model.to(device)
        counts = {name: _errors(model, seq) for name, seq in tests.items()}
        model.cpu()
        bar.update()
        return counts

    per_model = calibrated_map(count, models)
    bar.close()
    return {name: [counts[name] for counts in per_model] for name in tests}


def _copier(model: nn.Module, wrap: type[nn.Module] | None = None):
    """A factory that hands the trainer a fresh copy of a trained model (optionally wrapped)."""

    def make() -> nn.Module:
        fresh = copy.deepcopy(model)
        return wrap(fresh) if wrap is not None else fresh

    return make


def _test_sets(config: dict[str, Any]) -> dict[str, Tensor]:
    """Held-out strings from fixed seeds that no training stream uses."""
    T = config["T"]
    spec = {
        "in-distribution": (config["p_i"], config["n_in_distribution"]),
        "sparse": (config["sparse_p_i"], config["n_sparse"]),
        "dense": (config["dense_p_i"], config["n_dense"]),
    }
    return {
        name: FlipFlop.with_ignore(T, p).sequences(n, heldout.generator(heldout.FLIPFLOP_TEST_SETS + k))
        for k, (name, (p, n)) in enumerate(spec.items())
    }


def _sharpness(
    model: GPT,
    seq: Tensor,
    device: torch.device,
    bins: int = 8,
    sigmas_of: Callable[[GPT, Tensor], list[Tensor]] = theory.effective_sigmas,
) -> Sharpness:
    """Sharpest head of each layer at read queries, binned by the read's position.

    Per bin: mean largest weight, mean entropy and median Proposition 4 ``sigma`` of the head
    with the largest weight at each read; ``excess`` is the largest weight minus its bound over
    every query, head and layer where the bound is below ``1 - BOUND_TOL`` (a theorem says it is
    at most 0). ``sigmas_of`` is the theory's effective sigma; a test passes a wrong one.
    """
    model = model.to(device)
    x = seq[:, :-1].to(device)
    with torch.no_grad():
        _, attention = model(x, return_attention=True)
        sigmas = sigmas_of(model, x)
    model.cpu()
    reads = (x == R).cpu()
    length = x.shape[1]
    which = (torch.arange(length).expand_as(x)[reads] * bins // length).numpy()
    out: dict[str, Any] = {"bin_edges": [b * length / bins for b in range(bins + 1)], "layers": []}
    excess, tested = -np.inf, 0
    for att, sigma in zip(attention, sigmas):
        top = att.max(dim=-1).values.cpu().permute(0, 2, 1)  # (B, T, H)
        sigma = sigma.cpu().permute(0, 2, 1)
        limit = theory.max_weight_bound(np.arange(1, length + 1)[None, :, None], sigma.numpy())
        informative = limit < 1 - BOUND_TOL
        if informative.any():
            excess = max(excess, float((top.numpy() - limit)[informative].max()))
            tested += int(informative.sum())
        best = top[reads].argmax(dim=1, keepdim=True)  # the sharpest head at each read
        values = {"max_weight": top, "entropy": attention_entropy(att).cpu().permute(0, 2, 1), "sigma": sigma}
        picked = {k: v[reads].gather(1, best).squeeze(1).numpy() for k, v in values.items()}
        layer = {}
        for key, value in picked.items():
            reduce = np.median if key == "sigma" else np.mean
            layer[key] = [float(reduce(value[which == b])) if (which == b).any() else None for b in range(bins)]
        out["layers"].append(layer)
    out["excess"] = excess if tested else None
    out["tested"] = tested
    return out


LOSS_NOISE = 0.005  # held-out sampling noise of an evaluated loss (nats): a smaller descent has hardly started
