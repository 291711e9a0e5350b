"""The shortcuts chapter's sections: per section its ``TypedDict`` (which ``figures`` draws and ``judge``
reads) and the function that computes it: the algebra of the automata, the exact constructions (Theorem 10 with
the Lemma 13 bound, Lemmas 15/16, Algorithm 1), and the trained sections (the depth sweep, the hard automata,
parity's brittleness). Every section's rows come from ``judge``."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any, TypedDict

import numpy as np
import torch
from torch import Tensor, nn

from ... import heldout
from ...calibration import calibrated_map
from ...curves import still_descending
from ...data.automata import (
    AutomatonTask,
    PeriodicMix,
    Scratchpad,
    Semiautomaton,
    ShiftedPositions,
    bernoulli_probs,
    binary_with_count,
    cyclic,
    derived_series_from_generators,
    derived_series_orders,
    gridworld,
    groups_of,
    is_solvable,
    make_automaton,
    memory,
    scratchpad_parity,
    transformation_semigroup,
    transition_group,
    unshifted,
)
from ...data.dyck import ContrastiveDyck, Dyck, TypedDyck
from ...model import GPT, LSTM, GPTConfig, Paired, paired_gpt
from ...profiles import float_list, int_list
from ...runtime import member_seed, seed_everything
from ...sections import RunContext
from ...theory import shortcuts as theory
from ...trainer import Task, TrainConfig, TrainResult, train
from ...workers import TrainRequest, train_each
from .judge import (
    PAPER_BEST,
    PAPER_MEDIAN,
    STANDARD_ARM,
    automaton_names,
    contrastive_arm,
)

LOSS_NOISE = 0.005  # held-out sampling noise of an evaluated loss (nats): a smaller descent has hardly started


# ---------------------------------------------------------------- algebra
ALGEBRA_EXAMPLES = (
    "C2",
    "C3",
    "C2xC2xC2",
    "D6",
    "D8",
    "Q8",
    "A4",
    "S4",
    "A5",
    "S5",
    "A5xC2",
    "Grid9",
    "Dyck",
    "flipflop",
)  # A5xC2: non-solvable, though its name is no A_n or S_n


class AlgebraRow(TypedDict):
    name: str
    states: int  # |Q|
    symbols: int  # |Sigma|
    group: bool  # every input permutes the states
    size: int  # order of the transition group, or size of the transformation semigroup
    derived_series: list[int]  # orders along G > [G, G] > ...; empty for a semigroup
    solvable: bool  # is_solvable: all-pairs commutators, for every group of T(A)
    solvable_by_generators: bool  # the same groups, derived series from generators only (a second route)


class AlgebraData(TypedDict):
    rows: list[AlgebraRow]  # one per automaton of the chapter


def algebra_rows(
    names: list[str], second_route: Callable[[list[tuple[int, ...]]], list[int]] = derived_series_from_generators
) -> list[AlgebraRow]:
    """Size, derived series and solvability of each automaton, solvability computed two ways."""
    rows: list[AlgebraRow] = []
    for name in names:
        a = make_automaton(name)
        group = a.is_permutation_automaton()
        size = len(transition_group(a)) if group else len(transformation_semigroup(a))
        series = derived_series_orders(transition_group(a)) if group else []
        rows.append(
            {
                "name": name,
                "states": a.n_states,
                "symbols": a.n_symbols,
                "group": group,
                "size": size,
                "derived_series": series,
                "solvable": is_solvable(a),
                "solvable_by_generators": all(second_route(g)[-1] == 1 for g in groups_of(a)),
            }
        )
    return rows


def algebra(config: dict[str, Any], ctx: RunContext) -> AlgebraData:
    """Solvability of every automaton of the chapter, from derived series of its groups, computed two ways."""
    names = list(
        dict.fromkeys(automaton_names(config["sweep"]) + automaton_names(config["construct"]) + list(ALGEBRA_EXAMPLES))
    )
    return {"rows": algebra_rows(names)}


# ---------------------------------------------------------------- Theorem 10
class ConstructionCheck(TypedDict):
    name: str
    T: int
    depth: int  # layers of the build: ceil(log2 T)
    errors: int  # wrong states over all inputs and positions
    deviation: float  # max |read-out value - (q_t + 1)|
    lemma13_ratio: float  # max over layers and positions of the attention error / Lemma 13 bound
    d_model: int
    d_mlp: int


class TemperatureSweep(TypedDict):
    automaton: str  # the featured automaton
    T: int
    scales: list[float]  # gamma / Lemma 13's sufficient gamma
    accuracy: list[float]  # per scale
    errors: list[int]  # wrong states per scale, over `samples` inputs x T positions
    samples: int


class DepthCurve(TypedDict):
    T: list[int]  # sequence lengths
    transformer: list[int]  # Theorem 10's depth ceil(log2 T) at each


class ConstructionData(TypedDict):
    checks: list[ConstructionCheck]  # one per (automaton, T) case, the featured one last
    temperature: TemperatureSweep
    depth_vs_T: DepthCurve


Builder = Callable[[Semiautomaton, int, float], GPT]


def _check_construction(
    automaton: Semiautomaton,
    T: int,
    n: int,
    generator: torch.Generator,
    gamma_scale: float = 1.0,
    build: Builder = theory.prefix_composition_gpt,
) -> ConstructionCheck:
    """Run the Theorem 10 GPT on ``n`` random inputs; errors, read-out deviation, Lemma 13 ratio.

    ``build(automaton, T, gamma)`` makes the network; the tests pass broken ones.
    """
    gamma = gamma_scale * theory.sufficient_gamma(T, automaton.n_states)
    model = build(automaton, T, gamma)
    sigma, states = AutomatonTask(automaton, T).sample(n, generator)
    with torch.no_grad():
        logits, attention = model(theory.with_bos(sigma, automaton), return_attention=True)
    logits = logits[:, 1:]
    value = theory.read_out_value(logits, offset=1)
    bound = np.array([theory.lemma13_bound(t + 1, gamma * theory.lookback_gap(T)) for t in range(T + 1)])
    ratio = max(
        float((theory.attention_errors(a, theory.lookback_targets(T, layer)).max(dim=0).values.numpy() / bound).max())
        for layer, a in enumerate(attention)
    )
    return {
        "name": automaton.name,
        "T": T,
        "depth": model.config.n_layer,
        "errors": int((logits.argmax(-1) != states).sum()),
        "deviation": float((value - (states + 1)).abs().max()),
        "lemma13_ratio": ratio,
        "d_model": model.config.d_model,
        "d_mlp": model.config.mlp_width,
    }


def construction(config: dict[str, Any], ctx: RunContext) -> ConstructionData:
    """Theorem 10 built and run on several automata and lengths, a temperature sweep, and depth vs T."""
    generator = heldout.generator(heldout.AUTOMATON_EVAL)
    n = config["construct_samples"]
    cases = [(name, T) for name in automaton_names(config["construct"]) for T in int_list(config["construct_lengths"])]
    cases.append((config["automaton"], config["T"]))
    checks = [_check_construction(make_automaton(name), T, n, generator) for name, T in cases]
    featured = make_automaton(config["automaton"])
    scales = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.5]
    n_sweep = min(n, 32)  # the sweep rebuilds the featured automaton 11 times; S5 is large
    softened = [_check_construction(featured, config["T"], n_sweep, generator, s) for s in scales]
    temperature: TemperatureSweep = {
        "scales": scales,
        "accuracy": [1 - c["errors"] / (n_sweep * config["T"]) for c in softened],
        "errors": [c["errors"] for c in softened],
        "samples": n_sweep,
        "automaton": featured.name,
        "T": config["T"],
    }
    lengths = np.unique(np.round(np.logspace(0, 4, 60)).astype(int))
    return {
        "checks": checks,
        "temperature": temperature,
        "depth_vs_T": {"T": lengths.tolist(), "transformer": [theory.shortcut_depth(int(t)) for t in lengths]},
    }


# ---------------------------------------------------------------- Lemmas 15, 16 and Algorithm 1
class LemmaRow(TypedDict):
    lemma: str  # "15", "16" or "Alg. 1"
    automaton: str
    T: int
    layers: int | None  # None for Algorithm 1, run as an algorithm, not built as weights
    errors: int  # wrong states over all inputs and positions


class LemmasData(TypedDict):
    rows: list[LemmaRow]


def lemma_rows(
    T: int,
    n: int,
    generator: torch.Generator,
    counter: Callable[[int, int], GPT] = theory.counter_gpt,
    memory_unit: Callable[[int, int], GPT] = theory.memory_gpt,
    grid: Callable[[np.ndarray, int], np.ndarray] = theory.gridworld_by_boundaries,
) -> list[LemmaRow]:
    """Wrong states of the one-layer counters (C_2, C_3, C_5), memory units (2, 4 states) and Algorithm 1
    (Grid_4, Grid_9 at length 4T) on ``n`` random inputs; the tests pass broken constructions."""
    rows: list[LemmaRow] = []
    for modulus in (2, 3, 5):
        a = cyclic(modulus)
        sigma, states = AutomatonTask(a, T).sample(n, generator)
        with torch.no_grad():
            pred = counter(modulus, T)(theory.with_bos(sigma, a))[:, 1:].argmax(-1)
        rows.append({"lemma": "15", "automaton": a.name, "T": T, "layers": 1, "errors": int((pred != states).sum())})
    for m in (2, 4):
        a = memory(m)
        sigma, states = AutomatonTask(a, T).sample(n, generator)
        with torch.no_grad():
            pred = memory_unit(m, T)(sigma).argmax(-1)
        rows.append({"lemma": "16", "automaton": a.name, "T": T, "layers": 1, "errors": int((pred != states).sum())})
    for size in (4, 9):
        a = gridworld(size)
        sigma, states = AutomatonTask(a, 4 * T).sample(n, generator)
        errors = int((grid(sigma.numpy(), size) != states.numpy()).sum())
        rows.append({"lemma": "Alg. 1", "automaton": a.name, "T": 4 * T, "layers": None, "errors": errors})
    return rows


def lemmas(config: dict[str, Any], ctx: RunContext) -> LemmasData:
    """One-layer counter and memory constructions, and Algorithm 1 of Theorem 12, checked exactly."""
    return {
        "rows": lemma_rows(max(config["T"], 16), config["construct_samples"], heldout.generator(heldout.LEMMA_INPUTS))
    }


# ---------------------------------------------------------------- training
def _gpt_factory(
    vocab: int, T: int, depth: int, config: dict[str, Any], positional: str = "sinusoidal", **changes: Any
) -> Callable[[], GPT]:
    """GPT-2-like: layer norm, biases, sinusoidal positions (or ``positional``) up to ``T``, untied output over the
    states; ``changes`` set other fields of its ``GPTConfig``."""
    gpt_config = GPTConfig(
        vocab_size=vocab,
        block_size=T,
        n_layer=depth,
        n_head=config["n_head"],
        d_model=config["d_model"],
        positional=positional,  # type: ignore[arg-type]
        layer_norm=True,
        bias=True,
        tied=False,
        **changes,
    )
    return partial(GPT, gpt_config)  # a partial, not a lambda: it pickles, so a worker process can build it


def _schedule(steps: int, batch_size: int, lr: float, **changes: Any) -> TrainConfig:
    """The chapter's GPT schedule: a tenth of the steps as warm-up, then a cosine decay, twenty evaluations."""
    return TrainConfig(
        steps=steps, batch_size=batch_size, lr=lr, warmup=steps // 10, eval_every=max(1, steps // 20), **changes
    )


def _accuracy(model: nn.Module, task: AutomatonTask, n: int) -> float:
    """Per-position accuracy on ``n`` held-out sequences (the paper's token-level accuracy), on every state, whatever
    share of them the training revealed."""
    sigma, states = replace(task, reveal=1.0).sample(n, heldout.generator(heldout.AUTOMATON_EVAL))
    with torch.no_grad():
        return float((model(sigma).argmax(-1) == states).float().mean())


class BoundaryAttention(TypedDict):
    weights: list[list[list[float]]]  # last layer, heads x query x key, on one held-out sequence
    states: list[int]  # the states of that sequence
    walls: list[int]  # the two wall states, 0 and |Q| - 1
    boundary_mass: list[float]  # per head: attention on positions at a wall, averaged over held-out sequences
    boundary_rate: float  # the same under uniform causal attention


class SweepData(TypedDict):
    names: list[str]  # automata of the sweep
    depths: list[int]
    accuracy: list[list[list[float]]]  # automaton x depth x seed: held-out per-position accuracy
    still_descending: list[list[list[bool]]]  # automaton x depth x seed: the loss had not settled at the end
    eval_steps: list[int]  # where the held-out loss was evaluated
    eval_loss: list[list[list[list[float]]]]  # automaton x depth x seed x evaluation (the thesis's Fig. 3.5b,c)
    T: int
    chance: list[float]  # 1 / |Q| per automaton
    solvable: list[bool]
    paper_best: dict[str, list[float | None] | None]  # the paper's accuracy (%) at depths 1..16, None if absent
    paper_median: dict[str, list[float | None] | None]
    grid_attention: BoundaryAttention | None  # seed 0's depth-2 GPT on the first gridworld; None without one


def _train_automata(
    names: list[str], depths: list[int], steps: int, config: dict[str, Any], ctx: RunContext, reveal: float = 1.0
) -> list[tuple[int, list[int], TrainResult, list[AutomatonTask]]]:
    """Every seed of the automata ``names`` trained at each of ``depths`` for ``steps`` steps (a tenth of them
    warm-up, twenty evaluations), spread over ``ctx.workers`` processes: per depth and vocabulary size, the depth's
    index, the indices of its automata, their vmapped ensemble (automaton-major) and its tasks. A member's vocabulary
    and seed come from its own automaton, so the others change none of its numbers. ``reveal``: the share of target
    states the loss sees (:class:`AutomatonTask`)."""
    automata = [make_automaton(n) for n in names]
    vocabs = [max(a.n_states, a.n_symbols) for a in automata]
    train_config = _schedule(steps, config["batch_size"], config["lr"])
    planned, requests = [], []
    for j, depth in enumerate(depths):
        for vocab in sorted(set(vocabs)):
            group = [i for i, v in enumerate(vocabs) if v == vocab]
            tasks = [AutomatonTask(automata[i], config["T"], reveal=reveal) for i in group for _ in ctx.seeds]
            seeds = [member_seed(names[i], s) for i in group for s in ctx.seeds]
            planned.append((j, group, tasks))
            requests.append(
                TrainRequest(_gpt_factory(vocab, config["T"], depth, config), tasks, train_config, seeds, ctx.device)
            )
    trained = train_each(requests, ctx.workers, ctx.progress)
    return [(j, group, result, tasks) for (j, group, tasks), result in zip(planned, trained)]


def _scores(
    trained: TrainResult, tasks: list[AutomatonTask], config: dict[str, Any], n_automata: int
) -> tuple[np.ndarray, np.ndarray]:
    """Held-out accuracy and whether the loss had not settled, automaton x seed, of one ensemble."""
    scores = calibrated_map(lambda member: _accuracy(*member, config["eval_size"]), list(zip(trained.models, tasks)))
    return (np.reshape(scores, (n_automata, -1)), still_descending(trained, LOSS_NOISE).reshape(n_automata, -1))


def _by_depth(
    runs: list[tuple[int, list[int], TrainResult, list[AutomatonTask]]],
    shape: tuple[int, int, int],
    config: dict[str, Any],
) -> tuple[np.ndarray, np.ndarray, list[int], np.ndarray]:
    """From the runs of :func:`_train_automata` (``shape``: automata x depths x seeds): held-out accuracy and whether
    the loss had not settled, per run; the evaluated steps and each run's held-out loss at them (one more axis)."""
    acc, moving = np.zeros(shape), np.zeros(shape, dtype=bool)
    loss, eval_steps = np.zeros((*shape, 0)), []
    for j, group, trained, tasks in runs:
        acc[group, j], moving[group, j] = _scores(trained, tasks, config, len(group))
        eval_steps = [int(step) for step in trained.eval_steps]
        if loss.shape[-1] != len(eval_steps):
            loss = np.zeros((*shape, len(eval_steps)))
        loss[group, j] = np.reshape(trained.eval_loss, (len(group), shape[2], -1))
    return acc, moving, eval_steps, loss


def sweep(config: dict[str, Any], ctx: RunContext) -> SweepData:
    """Accuracy against depth for every automaton of the sweep (the paper's Figs. 3.15 and 3.16)."""
    names = list(
        dict.fromkeys(
            automaton_names(config["sweep"])
            + [config["automaton"]]
            + automaton_names(config["easy"])
            + automaton_names(config["hard"])
        )
    )
    depths = sorted(set(int_list(config["depths"]) + [config["depth"], config["shallow_depth"]]))
    automata = [make_automaton(n) for n in names]
    grid = next((i for i, a in enumerate(automata) if a.name.startswith("Grid")), None)
    runs = _train_automata(names, depths, config["steps"], config, ctx)
    acc, moving, eval_steps, loss = _by_depth(runs, (len(names), len(depths), len(ctx.seeds)), config)
    attention = None
    for j, group, trained, _ in runs:
        if grid in group and depths[j] == 2:
            attention = _boundary_attention(
                trained.models[group.index(grid) * len(ctx.seeds)], automata[grid], config["T"]
            )
    data: SweepData = {
        "names": names,
        "depths": depths,
        "accuracy": acc,
        "still_descending": moving,
        "eval_steps": eval_steps,
        "eval_loss": loss,
        "T": config["T"],
        "chance": [1.0 / a.n_states for a in automata],
        "solvable": [is_solvable(a) for a in automata],
        "paper_best": {n: PAPER_BEST.get(n) for n in names},
        "paper_median": {n: PAPER_MEDIAN.get(n) for n in names},
        "grid_attention": attention,
    }
    return data


class SupervisionData(TypedDict):
    names: list[str]  # the `reveal_automata`
    reveals: list[float]  # the shares of states revealed in training, largest first
    depth: int
    T: int
    accuracy: dict[str, list[list[list[float]]]]  # "gpt" / "lstm" -> automaton x reveal x seed, every state scored
    still_descending: dict[str, list[list[list[bool]]]]  # the same shape
    chance: list[float]


def supervision(config: dict[str, Any], ctx: RunContext) -> SupervisionData:
    """The thesis's incomplete supervision (Figs. 3.7b and 3.19): GPTs of `reveal_depth` layers and LSTMs trained on
    the `reveal_automata` with each target state revealed to the loss with probability p (each of `reveals`), then
    scored on every state of held-out sequences. A member's seed is its automaton's and seed index, the same at every
    p, so the runs at two p differ only in what the loss saw."""
    names, reveals = automaton_names(config["reveal_automata"]), sorted(float_list(config["reveals"]), reverse=True)
    automata = [make_automaton(n) for n in names]
    accuracy = {kind: np.zeros((len(names), len(reveals), len(ctx.seeds))) for kind in ("gpt", "lstm")}
    moving = {kind: np.zeros((len(names), len(reveals), len(ctx.seeds)), dtype=bool) for kind in ("gpt", "lstm")}
    lstm_config = TrainConfig(
        steps=config["lstm_steps"],
        batch_size=config["batch_size"],
        lr=1e-2,
        eval_every=max(1, config["lstm_steps"] // 20),
    )
    for r, reveal in enumerate(reveals):
        trained = _train_automata(names, [config["reveal_depth"]], config["reveal_steps"], config, ctx, reveal)
        for _, group, result, tasks in trained:
            accuracy["gpt"][group, r], moving["gpt"][group, r] = _scores(result, tasks, config, len(group))
        for i, automaton in enumerate(automata):
            vocab = max(automaton.n_states, automaton.n_symbols)
            task = AutomatonTask(automaton, config["T"], reveal=reveal)
            seeds = [member_seed(names[i], s) for s in ctx.seeds]
            result = train(
                partial(LSTM, vocab, 32), task, lstm_config, seeds, ctx.device, batched=False, progress=ctx.progress
            )
            accuracy["lstm"][i, r], moving["lstm"][i, r] = _scores(result, [task] * len(seeds), config, 1)
    return {
        "names": names,
        "reveals": reveals,
        "depth": config["reveal_depth"],
        "T": config["T"],
        "accuracy": {kind: a.tolist() for kind, a in accuracy.items()},
        "still_descending": {kind: m.tolist() for kind, m in moving.items()},
        "chance": [1.0 / a.n_states for a in automata],
    }


class HardData(TypedDict):
    names: list[str]  # the `hard` automata
    depths: list[int]  # 1 .. shallow_depth
    steps: int  # hard_steps
    T: int
    accuracy: list[list[list[float]]]  # automaton x depth x seed: held-out per-position accuracy
    still_descending: list[list[list[bool]]]  # automaton x depth x seed
    eval_steps: list[int]  # where the held-out loss was evaluated
    eval_loss: list[list[list[list[float]]]]  # automaton x depth x seed x evaluation
    chance: list[float]
    solvable: list[bool]
    paper_best: dict[str, list[float | None] | None]  # the paper's best accuracy (%) at depths 1..16
    paper_median: dict[str, list[float | None] | None]


def hard(config: dict[str, Any], ctx: RunContext) -> HardData:
    """The `hard` automata at every depth up to `shallow_depth`, trained until their loss stops moving: a row that
    they stay below solved there needs runs that settled, and the sweep's budget leaves them descending."""
    names, depths, steps = (
        automaton_names(config["hard"]),
        list(range(1, config["shallow_depth"] + 1)),
        config["hard_steps"],
    )
    automata = [make_automaton(n) for n in names]
    runs = _train_automata(names, depths, steps, config, ctx)
    acc, moving, eval_steps, loss = _by_depth(runs, (len(names), len(depths), len(ctx.seeds)), config)
    data: HardData = {
        "names": names,
        "depths": depths,
        "steps": steps,
        "T": config["T"],
        "accuracy": acc,
        "still_descending": moving,
        "eval_steps": eval_steps,
        "eval_loss": loss,
        "chance": [1.0 / a.n_states for a in automata],
        "solvable": [is_solvable(a) for a in automata],
        "paper_best": {n: PAPER_BEST.get(n) for n in names},
        "paper_median": {n: PAPER_MEDIAN.get(n) for n in names},
    }
    return data


def _boundary_attention(model: GPT, automaton: Semiautomaton, T: int) -> BoundaryAttention:
    """Last-layer attention of a trained gridworld GPT on one sequence, with the wall times marked.

    ``boundary_mass`` is the attention each head puts on positions where the walk is at a wall,
    averaged over held-out sequences and query positions; ``boundary_rate`` is the share of such
    positions among those attended to under uniform attention, the baseline it should beat.
    """
    sigma, states = AutomatonTask(automaton, T).sample(256, heldout.generator(heldout.ATTENTION_MAPS))
    with torch.no_grad():
        _, attention = model(sigma, return_attention=True)
    last = attention[-1]  # (B, H, T, T)
    wall = ((states == 0) | (states == automaton.n_states - 1)).double()
    mass = torch.einsum("bhij,bj->bhi", last.double(), wall).mean(dim=(0, 2))
    causal = torch.ones(T, T, dtype=torch.float64).tril()
    rate = (torch.einsum("ij,bj->bi", causal / causal.sum(1, keepdim=True), wall)).mean()
    return {
        "weights": last[0].numpy(),
        "states": states[0].numpy(),
        "walls": [0, automaton.n_states - 1],
        "boundary_mass": mass.numpy(),
        "boundary_rate": float(rate),
    }


# ---------------------------------------------------------------- brittleness
def _scratchpad_factory(
    config: dict[str, Any], block_size: int, vocab: int = 4, recency: bool = True
) -> Callable[[], GPT]:
    """A one-layer GPT without positions whose attention is recency-biased, for a scratchpad task of ``vocab`` tokens
    (parity's 4 by default); its logits over the tokens, of which the states' are read. Without ``recency``, the same
    GPT with the chapter's sinusoidal positions in place of the bias (the thesis's control)."""
    gpt_config = GPTConfig(
        vocab_size=vocab,
        block_size=block_size,
        n_layer=1,
        n_head=config["n_head"],
        d_model=config["d_model"],
        positional="none" if recency else "sinusoidal",
        layer_norm=True,
        bias=True,
        tied=False,
        recency_slope=config["recency"] if recency else 0.0,
    )
    return partial(GPT, gpt_config)  # a partial, not a lambda: it pickles, so a worker process can build it


def _scratchpad_accuracy(model: GPT, sigma: Tensor, automaton: Semiautomaton | None = None) -> float:
    """Accuracy of autoregressive scratchpad decoding of ``automaton`` (parity by default): each predicted state is
    fed back in."""
    automaton = automaton or cyclic(2)
    states = torch.from_numpy(automaton.run(sigma.numpy()))
    return float((_scratchpad_states(model, sigma, automaton) == states).float().mean())


def _scratchpad_states(model: GPT, sigma: Tensor, automaton: Semiautomaton) -> Tensor:
    """The states a scratchpad model decodes autoregressively. A string whose every state is predicted right when the
    true states are fed back decodes to exactly those states, so only the others are decoded step by step."""
    states = torch.from_numpy(automaton.run(sigma.numpy()))
    interleaved = torch.stack([sigma, states + automaton.n_symbols], dim=2).flatten(1)[:, :-1]
    with torch.no_grad():
        predicted = model(interleaved)[:, 0::2, : automaton.n_states].argmax(-1)
    astray = (predicted != states).any(dim=1)
    if astray.any():
        predicted[astray] = _decoded_states(model, sigma[astray], automaton)
    return predicted


def _decoded_states(model: GPT, sigma: Tensor, automaton: Semiautomaton) -> Tensor:
    """The states a scratchpad model decodes for ``sigma``, one step at a time, each prediction fed back in."""
    n, T = sigma.shape
    tokens = torch.empty(n, 0, dtype=torch.long)
    predicted = torch.empty(n, T, dtype=torch.long)
    with torch.no_grad():
        for t in range(T):
            tokens = torch.cat([tokens, sigma[:, t : t + 1]], dim=1)
            predicted[:, t] = model(tokens)[:, -1, : automaton.n_states].argmax(-1)
            tokens = torch.cat([tokens, predicted[:, t : t + 1] + automaton.n_symbols], dim=1)
    return predicted


class ParityScores(TypedDict):
    by_prob: list[list[float]]  # seed x test law Pr[sigma = 1], at the training length
    by_length: list[list[float]]  # seed x test length, at Pr[sigma = 1] = 1/2


class CountedParityScores(ParityScores):
    by_count: list[list[float]]  # seed x number of ones (0..T) at the training length


class BrittlenessData(TypedDict):
    T: int  # training length
    probs: list[float]  # test laws
    lengths: list[int]  # test lengths
    counts: list[int]  # 0..T ones
    gpt: CountedParityScores
    lstm: CountedParityScores
    scratchpad: ParityScores  # no counts: the recurrent solutions are flat in every view; one suffices
    still_descending: dict[str, int]  # gpt / lstm / scratchpad -> runs whose loss had not settled at the end


def brittleness(config: dict[str, Any], ctx: RunContext) -> BrittlenessData:
    """Parity: a GPT trained at Pr[sigma=1]=1/2 against an LSTM and a recency-biased scratchpad GPT,
    under a shifted input law, at fixed counts of ones, and at other lengths (Figs. 3.8, 3.9)."""
    T, steps = config["parity_length"], config["parity_steps"]
    parity = cyclic(2)
    task = AutomatonTask(parity, T)
    lengths = sorted({max(2, T // 2), T, (3 * T) // 2, 2 * T})
    cfg = _schedule(steps, config["batch_size"], config["lr"])
    gpt_config = GPTConfig(
        vocab_size=2,
        block_size=max(lengths),
        n_layer=config["parity_depth"],
        n_head=config["n_head"],
        d_model=config["d_model"],
        positional="sinusoidal",
        layer_norm=True,
        bias=True,
        tied=False,
    )
    runs = {"gpt": train(lambda: GPT(gpt_config), task, cfg, ctx.seeds, ctx.device, progress=ctx.progress)}
    lstm_cfg = TrainConfig(
        steps=config["lstm_steps"],
        batch_size=config["batch_size"],
        lr=1e-2,
        eval_every=max(1, config["lstm_steps"] // 20),
    )
    runs["lstm"] = train(
        lambda: LSTM(2, hidden=32), task, lstm_cfg, ctx.seeds, ctx.device, batched=False, progress=ctx.progress
    )
    pad_cfg = _schedule(config["scratchpad_steps"], config["batch_size"], config["lr"])
    runs["scratchpad"] = train(
        _scratchpad_factory(config, 2 * max(lengths)),
        scratchpad_parity(T),
        pad_cfg,
        ctx.seeds,
        ctx.device,
        progress=ctx.progress,
    )
    gpt, lstm, pad = (runs[kind].models for kind in ("gpt", "lstm", "scratchpad"))
    n = config["eval_size"]
    probs = float_list(config["shift_probs"])
    out: dict[str, Any] = {
        "T": T,
        "probs": probs,
        "lengths": lengths,
        "counts": list(range(T + 1)),
        "still_descending": {kind: int(still_descending(run, LOSS_NOISE).sum()) for kind, run in runs.items()},
    }
    for name, models in (("gpt", gpt), ("lstm", lstm), ("scratchpad", pad)):

        def score(sigma: Tensor, model: nn.Module, name: str = name) -> float:
            if name == "scratchpad":
                return _scratchpad_accuracy(model, sigma)
            with torch.no_grad():
                return float((model(sigma).argmax(-1) == torch.from_numpy(parity.run(sigma.numpy()))).float().mean())

        def draw(p: float, length: int) -> Tensor:
            generator = heldout.generator(heldout.AUTOMATON_EVAL)
            return AutomatonTask(parity, length, bernoulli_probs(p)).sample(n, generator)[0]

        def views(m: nn.Module, name: str = name) -> dict[str, list[float]]:
            scores = {
                "by_prob": [score(draw(p, T), m) for p in probs],
                "by_length": [score(draw(0.5, L), m) for L in lengths],
            }
            if name != "scratchpad":  # the recurrent solutions are flat in every view; one suffices for it
                scores["by_count"] = [
                    score(binary_with_count(n // 4, T, c, heldout.generator(heldout.AUTOMATON_EVAL)), m)
                    for c in range(T + 1)
                ]
            return scores

        per_model = calibrated_map(views, models)  # a plan times the first model and the last, scaled to all
        out[name] = {view: [scores[view] for scores in per_model] for view in per_model[0]}
    return out


# ---------------------------------------------------------------- length generalisation
# the curves of the thesis's Fig. 3.21, and its scratchpad without the recency bias (said, not drawn)
LENGTH_ARMS = ("absolute", "shifted", "none", "lstm", "scratchpad", "scratchpad_plain")


def _length_scores(model: nn.Module, arm: str, automaton: Semiautomaton, sigma: Tensor) -> list[float]:
    """Accuracy at each position of the strings ``sigma`` of one learner of ``arm``: the scratchpad decoded
    autoregressively, the shifted GPT read from position 0."""
    states = torch.from_numpy(automaton.run(sigma.numpy()))
    if arm.startswith("scratchpad"):
        predicted = _scratchpad_states(model, sigma, automaton)
    else:
        with torch.no_grad():
            predicted = model(unshifted(sigma) if arm == "shifted" else sigma).argmax(-1)
    return (predicted == states).float().mean(dim=0).tolist()


class LengthsData(TypedDict):
    T: int  # training length
    lengths: list[int]  # test lengths, T among them
    automata: list[str]
    arms: list[str]  # LENGTH_ARMS
    max_shift: int  # the shifted arm's largest position offset
    # automaton -> arm -> seed x position: accuracy at each position of held-out strings of the longest length; every
    # learner is causal, so positions below L score strings of length L (theory.length_accuracy)
    by_position: dict[str, dict[str, list[list[float]]]]
    still_descending: dict[str, dict[str, list[bool]]]  # automaton -> arm -> seed: loss not settled at the end


def lengths(config: dict[str, Any], ctx: RunContext) -> LengthsData:
    """The thesis's Figs. 3.9/3.21: per automaton of `lg_automata`, five learners trained at length `lg_T` and scored
    at every position of held-out strings of the longest length of `lg_lengths` (every learner is causal, so their
    first L positions score strings of length L): a GPT with sinusoidal positions
    ("absolute"), the same GPT trained with a random offset in 0..`lg_shift` added to every batch's positions
    ("shifted", read from position 0 at test), one without positions ("none"), the LSTM, the recency-biased
    scratchpad GPT of the brittleness section, decoded autoregressively, and the same scratchpad GPT with
    sinusoidal positions in place of the recency bias ("scratchpad_plain"). With no test length beyond `lg_T` there is
    nothing to judge (the quick profile), so nothing is trained."""
    T, depth, shift = config["lg_T"], config["lg_depth"], config["lg_shift"]
    test_lengths = sorted({T, *int_list(config["lg_lengths"])})
    longest = test_lengths[-1]
    schedule = _schedule(config["lg_steps"], config["batch_size"], config["lr"])
    lstm_steps = config["lstm_steps"]
    lstm_schedule = TrainConfig(
        steps=lstm_steps, batch_size=config["batch_size"], lr=1e-2, eval_every=max(1, lstm_steps // 20)
    )
    pad_schedule = _schedule(config["scratchpad_steps"], config["batch_size"], config["lr"])
    out: dict[str, Any] = {
        "T": T,
        "lengths": test_lengths,
        "automata": automaton_names(config["lg_automata"]),
        "arms": list(LENGTH_ARMS),
        "max_shift": shift,
        "by_position": {},
        "still_descending": {},
    }
    if longest <= T:
        return out  # type: ignore[return-value]
    requests, tests = [], {}
    for name in out["automata"]:
        automaton = make_automaton(name)
        task, vocab = AutomatonTask(automaton, T), max(automaton.n_states, automaton.n_symbols)
        pad = Scratchpad(task)
        gpt = partial(_gpt_factory, vocab, longest, depth, config)
        requests += [
            TrainRequest(gpt(), task, schedule, ctx.seeds, ctx.device),
            TrainRequest(
                _gpt_factory(vocab, max(longest, shift + T), depth, config, offset_input=True),
                ShiftedPositions(task, shift),
                schedule,
                ctx.seeds,
                ctx.device,
            ),
            TrainRequest(gpt("none"), task, schedule, ctx.seeds, ctx.device),
            TrainRequest(partial(LSTM, vocab, 32), task, lstm_schedule, ctx.seeds, ctx.device, batched=False),
            *(
                TrainRequest(
                    _scratchpad_factory(config, 2 * longest, pad.vocab_size, recency),
                    pad,
                    pad_schedule,
                    ctx.seeds,
                    ctx.device,
                )
                for recency in (True, False)
            ),
        ]
        tests[name] = AutomatonTask(automaton, longest).sample(
            config["eval_size"], heldout.generator(heldout.AUTOMATON_EVAL)
        )[0]
    trained = iter(train_each(requests, ctx.workers, ctx.progress))  # in LENGTH_ARMS order, automaton by automaton
    for name in out["automata"]:
        automaton, runs = make_automaton(name), dict(zip(LENGTH_ARMS, trained))
        out["by_position"][name] = {
            arm: [_length_scores(m.eval(), arm, automaton, tests[name]) for m in run.models]
            for arm, run in runs.items()
        }
        out["still_descending"][name] = {arm: still_descending(run, LOSS_NOISE).tolist() for arm, run in runs.items()}
    return out  # type: ignore[return-value]


# ---------------------------------------------------------------- Dyck: many attention patterns
# "[[[()]]](((())))": type 0 is "(", type 1 is "["; open brackets are even tokens, closing ones odd. The thesis's
# special prefix (Sec. 3.6.3.1), with brackets of both types at every depth from 1 to 4 but "[" at 4
DYCK_PREFIX = (2, 2, 2, 0, 1, 3, 3, 3, 0, 0, 0, 0, 1, 1, 1, 1)


class DyckData(TypedDict):
    positions: list[str]  # the positional encodings trained, one arm each
    prefix: list[int]
    accuracy: dict[str, list[float]]  # arm -> seed: held-out closing brackets predicted right (among the closers)
    untrained_accuracy: dict[str, list[float]]  # the same models at their initialisation
    stack_weight: dict[str, list[float]]  # arm -> seed: layer 2's weight on the last unmatched open bracket
    untrained_stack_weight: dict[str, list[float]]
    attention: dict[str, list[list[list[float]]]]  # arm -> seed x query x key: layer 2's attention on the prefix
    variation: dict[str, float]  # arm -> mean over pairs of seeds of ||A1 - A2||_F^2 on the prefix
    untrained_variation: dict[str, float]
    random_variation: float  # its expectation for rows uniform on their simplices
    still_descending: dict[str, list[bool]]


def _dyck_gpt(config: dict[str, Any], positional: str) -> Callable[[], GPT]:
    """The thesis's model for Fig. 3.3: a standard two-layer GPT of one head, width and MLP width `dyck_d`."""
    gpt_config = GPTConfig(
        vocab_size=2 * config["dyck_k"],
        block_size=config["dyck_T"] - 1,
        n_layer=2,
        n_head=1,
        d_model=config["dyck_d"],
        d_mlp=config["dyck_d"],
        positional=positional,  # type: ignore[arg-type]
        layer_norm=True,
        bias=True,
        tied=False,
    )
    return partial(GPT, gpt_config)


def _closing_accuracy(model: GPT, inputs: Tensor, targets: Tensor) -> float:
    """Share of held-out positions whose next token closes at which the closing bracket the model scores highest is
    the right one (the thesis's accuracy: a prefix ending in a closing bracket has one correct closer)."""
    with torch.no_grad():
        closers = model(inputs)[..., 1::2].argmax(-1) * 2 + 1
    closing = targets % 2 == 1
    return float((closers == targets)[closing].float().mean())


def _stack_weight(model: GPT, inputs: Tensor, targets: Tensor) -> float:
    """Layer 2's mean weight on the innermost unmatched open bracket, over the held-out queries whose next token
    closes it and which are not that bracket themselves (there a head on its own position would count): 1 for the
    stack-like head of Ebrahimi et al. and Yao et al., about 0.1 for uniform attention."""
    with torch.no_grad():
        _, attention = model(inputs, return_attention=True)
    weights = attention[-1][:, 0]
    picked = []
    for b, tokens in enumerate(inputs.tolist()):
        for t, key in enumerate(theory.last_unmatched_open(tokens)):
            if 0 <= key < t and int(targets[b, t]) % 2 == 1:
                picked.append(float(weights[b, t, key]))
    return float(np.mean(picked))


def _prefix_attention(model: GPT) -> Tensor:
    """Layer 2's attention pattern on the special prefix, query x key."""
    with torch.no_grad():
        _, attention = model(torch.tensor([DYCK_PREFIX]), return_attention=True)
    return attention[-1][0, 0]


def _mean_variation(patterns: list[Tensor]) -> float:
    """Wen et al.'s attention variation, ||A1 - A2||_F^2, averaged over every pair of patterns."""
    pairs = [float(((a - b) ** 2).sum()) for i, a in enumerate(patterns) for b in patterns[i + 1 :]]
    return float(np.mean(pairs))


def dyck(config: dict[str, Any], ctx: RunContext) -> DyckData:
    """Wen et al.'s Dyck experiment (thesis Sec. 3.6.3.1): `dyck_seeds` two-layer GPTs of one head per positional
    encoding of `dyck_positions`, trained by Adam on Dyck_{k,D} prefixes, then held-out accuracy on closing brackets,
    how stack-like layer 2 attends, and how much its pattern on the special prefix varies between seeds. A member's
    seed is its encoding's and index's, so adding seeds or an encoding changes no other member's run."""
    task = Dyck(config["dyck_k"], config["dyck_depth"], config["dyck_q"], config["dyck_T"])
    inputs, targets = task.sample(config["eval_size"], heldout.generator(heldout.DYCK_EVAL))
    steps = config["dyck_steps"]
    schedule = _schedule(steps, config["batch_size"], config["dyck_lr"], weight_decay=0.0)  # Adam, as the thesis trains
    positions = [p.strip() for p in config["dyck_positions"].split(",")]
    data: dict[str, Any] = {key: {} for key in DyckData.__annotations__ if key not in ("positions", "prefix")}
    for positional in positions:
        seeds = [member_seed("dyck", positional, s) for s in range(config["dyck_seeds"])]
        make = _dyck_gpt(config, positional)
        untrained = []
        for seed in seeds:
            seed_everything(seed)  # as the trainer seeds before it builds a member: its starting weights
            untrained.append(make())
        result = train(make, task, schedule, seeds, ctx.device, progress=ctx.progress)
        for key, models in (("", [m.eval() for m in result.models]), ("untrained_", untrained)):
            data[f"{key}accuracy"][positional] = [_closing_accuracy(m, inputs, targets) for m in models]
            data[f"{key}stack_weight"][positional] = [_stack_weight(m, inputs, targets) for m in models]
            patterns = [_prefix_attention(m) for m in models]
            data[f"{key}variation"][positional] = _mean_variation(patterns) if len(patterns) > 1 else float("nan")
            if not key:
                data["attention"][positional] = [p.tolist() for p in patterns]
        data["still_descending"][positional] = still_descending(result, LOSS_NOISE).tolist()
    data["random_variation"] = theory.random_attention_variation(len(DYCK_PREFIX))
    return {"positions": positions, "prefix": list(DYCK_PREFIX), **data}  # type: ignore[typeddict-item]


# ---------------------------------------------------------------- positional encodings and length
ENCODINGS = ("sinusoidal", "linear")  # the two the thesis compares in Fig. 3.22


class EncodingsData(TypedDict):
    automaton: str
    T: int  # training length; every model is scored on held-out sequences of length 2T
    encodings: list[str]
    by_position: dict[str, list[list[float]]]  # encoding -> seed x position 0..2T-1: held-out accuracy there
    still_descending: dict[str, list[bool]]  # encoding -> seed
    chance: float  # a guess blind to the inputs: 1 / |Q| for an automaton, the majority label's share for (abab)*


def _accuracy_by_position(model: nn.Module, sigma: Tensor, states: Tensor) -> list[float]:
    """Held-out accuracy at each position, over the sequences ``sigma``."""
    with torch.no_grad():
        return (model(sigma).argmax(-1) == states).float().mean(0).tolist()


def encodings(config: dict[str, Any], ctx: RunContext) -> EncodingsData:
    """The thesis's Fig. 3.22: GPTs with sinusoidal and with linear positions trained on `pe_automaton` at length
    `pe_T`, then scored at every position of held-out sequences of length 2T. Seed s of both encodings is
    ``member_seed("encodings", s)``: the same batches in the same order, so the two arms differ in their positions
    (and the initial weights the extra linear direction shifts). The first T positions of a sequence of length 2T are
    distributed as a sequence of length T (the inputs are i.i.d. from the start state), so their accuracy is the
    in-distribution one."""
    automaton, T = make_automaton(config["pe_automaton"]), config["pe_T"]
    vocab = max(automaton.n_states, automaton.n_symbols)
    runs = _encoding_runs(config, ctx, AutomatonTask(automaton, T), AutomatonTask(automaton, 2 * T), vocab, "encodings")
    runs.pop("majority")
    return {
        "automaton": config["pe_automaton"],
        "T": T,
        "encodings": list(ENCODINGS),
        "chance": 1.0 / automaton.n_states,
        **runs,
    }  # type: ignore[typeddict-item]


def abab(config: dict[str, Any], ctx: RunContext) -> EncodingsData:
    """The thesis's partially observed ``(abab)*`` (Sec. 3.4.5.2.1, Figs. 3.18 and 3.22): the runs of :func:`encodings`
    on :class:`PeriodicMix` (half the strings periodic, the target whether the prefix is in ``(abab)*``). The first T
    positions of a held-out string of length 2T are distributed as a string of length T (the string's kind is drawn
    first, then its letters), so their accuracy is the in-distribution one; "chance" is the majority label's share."""
    T = config["pe_T"]
    runs = _encoding_runs(config, ctx, PeriodicMix(T), PeriodicMix(2 * T), 2, "abab", config["abab_steps"])
    chance = runs.pop("majority")
    return {"automaton": "(abab)*", "T": T, "encodings": list(ENCODINGS), "chance": chance, **runs}  # type: ignore


def _encoding_runs(
    config: dict[str, Any], ctx: RunContext, task: Task, test: Task, vocab: int, name: str, steps: int | None = None
) -> dict[str, Any]:
    """Each of ``ENCODINGS`` trained on ``task`` for ``steps`` (default ``pe_steps``; seed s: ``member_seed(name,
    s)``, the same batches for both) and
    scored at every position of held-out strings of ``test``; with the majority label's share of those targets
    (``majority``, which a section that wants it pops)."""
    sigma, targets = test.sample(config["eval_size"], heldout.generator(heldout.AUTOMATON_EVAL))
    schedule = _schedule(steps or config["pe_steps"], config["pe_batch"], config["pe_lr"])
    seeds = [member_seed(name, s) for s in range(config["pe_seeds"])]
    data: dict[str, Any] = {"by_position": {}, "still_descending": {}}
    for positional in ENCODINGS:
        make = _gpt_factory(vocab, sigma.shape[1], config["pe_depth"], config, positional)  # up to the test length
        result = train(make, task, schedule, seeds, ctx.device, progress=ctx.progress)
        data["by_position"][positional] = [_accuracy_by_position(m.eval(), sigma, targets) for m in result.models]
        data["still_descending"][positional] = still_descending(result, LOSS_NOISE).tolist()
    data["majority"] = float(torch.bincount(targets.flatten()).max() / targets.numel())
    return data


# ---------------------------------------------------------------- Dyck: regularising for balance
class BalanceData(TypedDict):
    arms: list[str]  # "standard", then "contrastive <weight>" per weight of the sweep (an older run: "contrastive")
    T: int  # training length
    long: list[int]  # the prefix lengths of the length-generalisation test, lowest and highest
    accuracy: dict[str, list[float]]  # arm -> seed: closing brackets right on held-out prefixes of length T
    long_accuracy: dict[str, list[float]]  # arm -> seed: the same on prefixes of the `long` lengths
    violation: dict[str, list[float]]  # arm -> seed: the balance violation beta of the trained weights
    untrained_violation: list[float]  # seed: beta at the initialisation every training shares
    still_descending: dict[str, list[bool]]


def _balance_gpt(config: dict[str, Any], task: TypedDyck, paired: bool = False) -> Callable[[], GPT | Paired]:
    """The thesis's model for Fig. 3.40: a minimal first layer (the (type, depth) ids of :class:`TypedDyck`, embedded)
    under one layer of Wen et al.'s form (Eq. 3.23: one head, the attention's output normalised, an MLP), no
    positions; its logits over the brackets."""
    gpt_config = GPTConfig(
        vocab_size=task.vocab_size,
        block_size=max(config["bal_to"], config["dyck_T"] + 2 * config["dyck_depth"]),  # no positions: any length
        n_layer=1,
        n_head=1,
        d_model=config["dyck_d"],
        d_mlp=config["dyck_d"],
        positional="none",
        norm_attention_output=True,
        tied=False,
        n_outputs=task.dyck.vocab_size,
    )
    return partial(paired_gpt if paired else GPT, gpt_config)  # paired: the contrastive loss reads two inputs


def _typed_pair(task: TypedDyck, bracket: int, depth: int) -> int:
    """The id of ``bracket`` leaving grammar depth ``depth``."""
    return bracket * (task.dyck.depth + 1) + depth


def pair_terms(model: GPT) -> tuple[Tensor, Tensor]:
    """The attention scores of every token id as a query (rows) on every id as a key, and each id's value after the
    output projection, centred as the layer norm centres it: the pieces of the thesis's u(query, key) = exp(score)
    x centred value (Eq. 3.29, whose first argument is the query in Eqs. 3.30-3.34), in float64."""
    if model.config.n_head != 1 or not model.config.norm_attention_output or model.config.bias:
        raise ValueError("the balance violation reads one head without biases whose output is normalised (Eq. 3.23)")
    with torch.no_grad():
        x = model.wte.weight.double()
        attn = model.blocks[0].attn
        w_q, w_k, w_v = attn.qkv.weight.double().split(x.shape[1])
        values = x @ w_v.T @ attn.proj.weight.double().T
        scores = (x @ w_q.T) @ (x @ w_k.T).T / math.sqrt(x.shape[1])
    return scores, values - values.mean(dim=1, keepdim=True)


def balance_violation(model: GPT, task: TypedDyck) -> float:
    """Wen et al.'s balance violation beta = mean over d, d', i, j of ||S_{d,d',i,j}|| / P_{d,j} (the thesis's Eqs.
    3.29, 3.33-3.35), read from the weights of a one-head model of :func:`_balance_gpt`: S is what a matching pair (an
    open bracket of type i at depth d', its closer at d' - 1) adds to the unnormalised attention output at a closing
    bracket of type j leaving depth d, centred as the layer norm centres it; P is the size of that output on the
    shortest prefix that reaches the query (open brackets t of depths 1..d, an open bracket of type j at d + 1, its
    closer) with t the smallest-output prefix whose last open bracket differs from the smallest one's. Both are taken
    at the same query, depth d in 1..D-1 (the thesis's P reads one level shallower than its S: a slip). Perfect balance,
    which Theorem 1 makes necessary for a model that predicts every length, is beta = 0; NaN where P is 0."""
    k, D = task.dyck.k, task.dyck.depth
    scores, values = pair_terms(model)
    open_, close = (lambda i, d: _typed_pair(task, 2 * i, d)), (lambda i, d: _typed_pair(task, 2 * i + 1, d))
    ratios = []
    for j in range(k):
        for d in range(1, D):
            query = close(j, d)
            weights = torch.exp(scores[query] - scores[query].max())  # one scale per query: ratios keep it

            def u(key: int, w: Tensor = weights) -> Tensor:
                return w[key] * values[key]

            def q_size(prefix: tuple[int, ...], j: int = j, d: int = d) -> float:
                keys = [
                    task.start,
                    *(open_(t, depth + 1) for depth, t in enumerate(prefix)),
                    open_(j, d + 1),
                    close(j, d),
                ]
                return float(torch.linalg.vector_norm(sum(u(key) for key in keys)))

            prefixes = list(itertools.product(range(k), repeat=d))
            smallest = min(prefixes, key=q_size)
            scale = min(q_size(p) for p in prefixes if p[-1] != smallest[-1])
            if scale == 0:  # every centred output vanishes (a width of 1 leaves the layer norm no direction)
                return float("nan")
            for i in range(k):
                for d_pair in range(1, D + 1):
                    pair = u(open_(i, d_pair)) + u(close(i, d_pair - 1))
                    ratios.append(float(torch.linalg.vector_norm(pair)) / scale)
    return float(np.mean(ratios))


def _typed_closing_accuracy(model: GPT, task: TypedDyck, tokens: Tensor, first: int) -> float:
    """Share of the closing brackets at positions ``first`` on of Dyck prefixes ``tokens`` that the model predicts
    (the highest-scoring closer; a prefix ending in a closer has one right closer), read behind the starting token."""
    with torch.no_grad():
        logits = model(task.typed(tokens)[:, :-1])
    closers = logits[..., 1::2].argmax(-1) * 2 + 1
    scored = (tokens % 2 == 1) & (torch.arange(tokens.shape[1]) >= first)
    return float((closers == tokens)[scored].float().mean())


def balance(config: dict[str, Any], ctx: RunContext) -> BalanceData:
    """The thesis's Fig. 3.40 (Sec. 3.6.3.2): `bal_seeds` models of :func:`_balance_gpt` trained on Dyck prefixes of
    `dyck_T` brackets, plainly and with the contrastive term at each weight of `bal_weights` (the thesis does not
    state its own), the same seeds (initial weights) in every training; each scored on held-out prefixes of `dyck_T`
    and of lengths `bal_from` to `bal_to` (the thesis: 400 to 500, about 16 times the training length) and its balance
    violation read from its weights."""
    dyck = Dyck(config["dyck_k"], config["dyck_depth"], config["dyck_q"], config["dyck_T"])
    task = TypedDyck(dyck)
    lo, hi = config["bal_from"], config["bal_to"]
    schedule = _schedule(config["bal_steps"], config["batch_size"], config["dyck_lr"], weight_decay=0.0)
    seeds = [member_seed("balance", s) for s in range(config["bal_seeds"])]
    make, paired, weights = _balance_gpt(config, task), _balance_gpt(config, task, paired=True), config["bal_weights"]
    arms = [STANDARD_ARM, *(contrastive_arm(w) for w in float_list(weights))]
    requests = [TrainRequest(make, task, schedule, seeds, ctx.device)]  # in the order of arms
    for weight in float_list(weights):
        requests.append(TrainRequest(paired, ContrastiveDyck(task, weight), schedule, seeds, ctx.device))
    untrained = []
    for seed in seeds:
        seed_everything(seed)  # as the trainer seeds before it builds a member: the weights every training starts from
        untrained.append(make())
    short = dyck.sequences(config["eval_size"], heldout.generator(heldout.DYCK_EVAL))
    long = replace(dyck, length=hi).sequences(config["eval_size"], heldout.generator(heldout.DYCK_EVAL))
    out: dict[str, Any] = {"arms": arms, "T": dyck.length, "long": [lo, hi]}
    out |= {key: {} for key in ("accuracy", "long_accuracy", "violation", "still_descending")}
    for arm, run in zip(arms, train_each(requests, ctx.workers, ctx.progress)):
        models = [(m.model if isinstance(m, Paired) else m).eval() for m in run.models]
        out["accuracy"][arm] = [_typed_closing_accuracy(m, task, short, 0) for m in models]
        out["long_accuracy"][arm] = [_typed_closing_accuracy(m, task, long, lo - 1) for m in models]
        out["violation"][arm] = [balance_violation(m, task) for m in models]
        out["still_descending"][arm] = still_descending(run, LOSS_NOISE).tolist()
    out["untrained_violation"] = [balance_violation(m, task) for m in untrained]
    return out  # type: ignore[return-value]
