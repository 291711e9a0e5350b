"""The induction chapter's sections: the loss levels and chi-square information (exact or fixed-seed Monte Carlo),
the hand-written induction heads, the first gradient, and the training runs that fill each section's data (one
``TypedDict`` per section, which ``figures`` draws and ``judge`` reads), with the readings of trained
models they take (held-out losses, layer 1's attention, the memory-recall probes)."""

from __future__ import annotations

import copy
import math
import sys
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any, NamedTuple, TypedDict

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F
from tqdm import tqdm

from ... import probes
from ...calibration import calibrated_map, count_chunks
from ...curves import still_descending
from ...data.incontext import (
    InContextMarkov,
    LastTokenTask,
    chain_parents,
    random_parents,
    tree_parents,
    with_test_token,
)
from ...data.trigger import TriggerTask
from ...losses import IGNORE_INDEX
from ...model import GPT, AssociativeMemories, Disentangled, GPTConfig, WindowHeads
from ...profiles import float_list, int_list
from ...runtime import member_seed, seed_everything
from ...sections import RunContext
from ...theory import induction as theory
from ...trainer import TrainConfig, TrainResult, train
from .judge import GRADIENT_CHUNKS, parent_margins
from .tasks import (
    BIGRAM_CONCENTRATION,
    CURVE_SEQUENCES,
    stage_probes,
    task_of,
    trigger_held_out,
    trigger_task,
    trigger_widths,
    width_config,
)
from .tasks import generator as _generator

RIVALS = {"alpha/2": 0.5, "2 alpha": 2.0}  # count estimators smoothed otherwise, the posterior predictive's rivals
LOSS_NOISE = 1e-3  # a held-out loss that moved less than this has hardly started


def parent_positions(task: InContextMarkov, length: int | None = None) -> list[int]:
    """Each position's one parent, -1 at a root (JSON has no None in an int list), for the first ``length``."""
    return [-1 if p is None else p for p in theory.single_parents(task)][:length]


# ---------------------------------------------------------------- loss levels and the chi-square information
class LevelsData(TypedDict):
    levels: dict[str, list[float]]  # uniform / unigram / bayes -> [loss, standard error] in nats per token
    rivals: dict[str, list[float]]  # smoothing alpha/2 and 2 alpha -> [its loss minus Bayes's, standard error]
    parents: list[int]  # each position's parent (-1 at a root)
    information: list[list[float]]  # row i: E_pi I_chi2(s_i; s_j) for j < i (NaN from j = i on)
    information_error: list[list[float]]  # their standard errors over the prior draws
    regime: dict[str, list[float]]  # "stationary" / "uniform" start -> theory.chi2_regime's [identity, excess]


def information_table(
    task: InContextMarkov, n_kernels: int, seed: int, positions: int
) -> tuple[np.ndarray, np.ndarray]:
    """``E_pi I_chi2(s_i; s_j)`` and its standard error for every pair ``j < i <= positions``, as square tables."""
    size = min(len(task.parents), positions + 1)
    mean, error = np.full((size, size), np.nan), np.full((size, size), np.nan)
    for i in range(1, size):
        mean[i, :i], error[i, :i] = theory.chi2_information(task, i, n_kernels, seed)
    return mean, error


def levels(config: dict[str, Any], ctx: RunContext) -> LevelsData:
    """The uniform, unigram and Bayes levels on fixed-seed sequences, and the chi-square information table."""
    task = task_of(config)
    seq = task.sequences(config["level_samples"], _generator(config, "levels")).numpy()
    unigram = theory.sequence_losses(theory.unigram_predictive(task, seq), seq)
    bayes = theory.sequence_losses(theory.bayes_predictive(task, seq), seq)
    rivals = {
        name: list(
            _mean_and_error(
                theory.sequence_losses(theory.bayes_predictive(replace(task, alpha=factor * task.alpha), seq), seq)
                - bayes
            )
        )
        for name, factor in RIVALS.items()
    }
    information, error = information_table(
        task, config["chi2_kernels"], member_seed("chi2", config["seed"]), config["chi2_positions"]
    )
    kernels = task.kernels(config["chi2_kernels"], torch.Generator().manual_seed(member_seed("chi2", config["seed"])))
    starts = {"stationary": theory.stationary_roots(kernels), "uniform": np.full(kernels.shape[:2], 1 / task.n_states)}
    regime = {
        name: list(theory.chi2_regime(task, kernels, config["chi2_positions"], root)) for name, root in starts.items()
    }
    parents = parent_positions(task)
    data: LevelsData = {
        "levels": {
            "uniform": [float(np.log(task.n_states)), 0.0],
            "unigram": list(_mean_and_error(unigram)),
            "bayes": list(_mean_and_error(bayes)),
        },
        "rivals": rivals,
        "parents": parents,
        "information": information,
        "information_error": error,
        "regime": regime,
    }  # type: ignore[typeddict-item]
    return data


def _mean_and_error(values: np.ndarray) -> tuple[float, float]:
    return float(values.mean()), float(values.std(ddof=1) / np.sqrt(len(values)))


# ---------------------------------------------------------------- the explicit induction head
class ConstructionData(TypedDict):
    k: int
    T: int
    beta: float
    sequences: int  # every sequence of construct_T + 1 symbols
    max_error: float  # largest |construction - count estimator| where the current token was seen before
    bound: float  # the softmax leakage bound
    example: list[int]  # one sequence, for the figure
    attention: list[list[list[float]]]  # the construction's two attention patterns on it (layer x T x T)


def leakage_bound(T: int, beta: float) -> float:
    """How far the construction may be from the count estimator: mass ``T e^-beta`` leaks past the matching keys,
    and layer 1's own leak makes the matching scores unequal by up to ``2 beta T e^-beta``; plus float64 round-off."""
    return T * np.exp(-beta) * (1 + 2 * beta) + 1e-12


def construction(config: dict[str, Any], ctx: RunContext) -> ConstructionData:
    """The explicit induction head against the count estimator, on every sequence of the chosen size."""
    k, T, beta = config["construct_k"], config["construct_T"], config["beta"]
    every = np.stack(np.meshgrid(*[np.arange(k)] * (T + 1), indexing="ij"), axis=-1).reshape(-1, T + 1)
    model = theory.induction_head(k, T, beta)
    want = theory.count_predictive(InContextMarkov.chain(k, 1.0, T), every)
    with torch.no_grad():
        got = theory.successor_average(model, torch.from_numpy(every[:, :-1])).numpy()
        example = torch.from_numpy(every[len(every) // 3, :-1])[None]
        _, attention = model(example, return_attention=True)
    seen = ~np.isnan(want[..., 0])
    data: ConstructionData = {
        "k": k,
        "T": T,
        "beta": beta,
        "sequences": len(every),
        "max_error": float(np.abs(got - want)[seen].max()),
        "bound": leakage_bound(T, beta),
        "example": example[0].tolist(),
        "attention": [a[0, 0].numpy() for a in attention],
    }  # type: ignore[typeddict-item]
    return data


# ---------------------------------------------------------------- the k-th order induction head
class TwoLayerOrderData(TypedDict):
    order: int
    k: int
    T: int
    beta: float
    sequences: int  # every sequence of construct_T + 1 symbols
    max_error: float  # largest |construction - order-m count estimator| where the last m tokens were seen before
    bound: float  # the leakage bound (infinite where it says nothing)
    example: list[int]  # one sequence, for the figure
    attention: list[list[list[float]]]  # the construction's attention patterns on it (layer x T x T)


class MultiHeadOrderData(TwoLayerOrderData):
    """The multi-head construction's check, and each head of its layer 1 on the example."""

    heads: list[list[list[float]]]  # layer 1's attention on the example, one table per head


class HigherOrderData(TwoLayerOrderData):
    """The three-layer construction's check, and the loss levels of an order-m chain."""

    levels: dict[str, list[float]]  # on the order-m chain: uniform / unigram / bigram / bayes -> [loss, std error]
    levels_T: int  # the length of that chain (the chapter's T; the construction's is construct_T)


def _telling_example(inputs: np.ndarray, seen: np.ndarray) -> int:
    """A sequence for the figure: every symbol in it and as many windows seen before as any such sequence has (the
    middle one of those), so that layer 3 has matches to show."""
    varied = np.array([len(np.unique(row)) for row in inputs]) == inputs.max() + 1
    matches = np.where(varied, seen.sum(axis=1), -1)
    best = np.flatnonzero(matches == matches.max())
    return int(best[len(best) // 2])


def check_order_construction(
    config: dict[str, Any],
    head: Callable[[int, int, int, float], GPT],
    average: Callable[[GPT, Tensor], Tensor],
    leakage: Callable[[int, float, int], float],
) -> TwoLayerOrderData:
    """Build ``head`` at the construction sizes of ``config``, run it on every sequence of ``construct_T + 1``
    symbols and compare what ``average`` reads off it with the order-m count estimator at the positions whose last
    m tokens were seen before; ``leakage`` gives the bound."""
    k, T, beta, m = config["construct_k"], config["construct_T"], config["beta"], config["order"]
    model = head(k, m, T, beta)
    every = np.stack(np.meshgrid(*[np.arange(k)] * (T + 1), indexing="ij"), axis=-1).reshape(-1, T + 1)
    want = theory.count_predictive(InContextMarkov.chain(k, 1.0, T, order=m), every)
    with torch.no_grad():
        got = average(model, torch.from_numpy(every[:, :-1])).numpy()
    seen = ~np.isnan(want[..., 0])
    example = torch.from_numpy(every[_telling_example(every[:, :-1], seen), :-1])[None]
    with torch.no_grad():
        _, attention = model(example, return_attention=True)
    return {
        "order": m,
        "k": k,
        "T": T,
        "beta": beta,
        "sequences": len(every),
        "max_error": float(np.abs(got - want)[seen].max()),
        "bound": leakage(T, beta, m),
        "example": example[0].tolist(),
        "attention": [a[0, 0].numpy() for a in attention],  # type: ignore[misc]
    }


def higher_order(config: dict[str, Any], ctx: RunContext) -> HigherOrderData:
    """The order-m induction head in three layers of one head each, against the order-m count estimator on every
    sequence of the chosen size; and the loss levels of an order-m chain."""
    checked = check_order_construction(
        config, theory.higher_order_head, theory.higher_order_average, theory.higher_order_leakage
    )
    m = config["order"]
    chain = InContextMarkov.chain(config["k"], config["alpha"], config["T"], order=m)
    levels = theory.order_levels(chain, config["level_samples"], member_seed("induction", "order", config["seed"]))
    return {
        **checked,
        "levels": {name: list(level) for name, level in levels.items()},
        "levels_T": config["T"],
    }


# ---------------------------------------------------------------- the k-th order induction head in two layers
def two_layer_order(config: dict[str, Any], ctx: RunContext) -> TwoLayerOrderData:
    """The order-m induction head in two layers of one head each, against the order-m count estimator on every
    sequence of the chosen size."""
    return check_order_construction(
        config, theory.two_layer_order_head, theory.two_layer_order_average, theory.two_layer_order_leakage
    )


def multi_head_order(config: dict[str, Any], ctx: RunContext) -> MultiHeadOrderData:
    """The order-m induction head in two layers with one head per parent in layer 1, against the order-m count
    estimator on every sequence of the chosen size; and what each head of layer 1 reads on the example."""
    checked = check_order_construction(
        config, theory.multi_head_order_head, theory.multi_head_order_average, theory.multi_head_order_leakage
    )
    model = theory.multi_head_order_head(config["construct_k"], config["order"], config["construct_T"], config["beta"])
    with torch.no_grad():
        _, attention = model(torch.tensor([checked["example"]]), return_attention=True)
    return {**checked, "heads": [head.numpy().tolist() for head in attention[0][0]]}  # type: ignore[index]


# ---------------------------------------------------------------- the first gradient
class GradientData(TypedDict):
    gradient: list[list[float]]  # dL/dA[t, j], layer 1's positional score from t to j, where the first stage starts
    parts: int  # the equal parts of the sample whose gradients give the standard errors
    margin: list[list[float]]  # dL/dA[t, j] - dL/dA[t, p(t)], mean over the parts (NaN off the ranked entries)
    margin_error: list[list[float]]  # its standard error
    exact: list[list[float]]  # the derived exact gradient at stage_beta, averaged over the same parts
    small_scale: list[list[float]]  # autograd's gradient with layer 2 at LEMMA_BETA, over that scale
    first_order: list[list[float]]  # the derived first-order gradient over the scale, on the same sequences
    overlap_rows: list[int]  # the rows t whose long-sequence limit is computed
    overlap: list[list[float]]  # per such row: chi2_overlap times -(1 - floor) / (k (t + 1) T), for j = 0..t
    parents: list[int]


class GradientGraphs(TypedDict):
    graphs: dict[str, GradientData]  # per causal graph: the stages' own (stage_graph) first, then the chain and tree


OVERLAP_ROWS = 4  # rows of the first gradient (positions with a parent) whose long-sequence limit the figure draws


def gradient_graphs(config: dict[str, Any]) -> list[str]:
    """The graphs the first gradient is taken on: the stages' own, then the chain and the tree where it is neither
    (the chain, where an earlier model's other entries alternated in sign; the tree, a parent not the token before)."""
    return [config["stage_graph"], *(graph for graph in ("chain", "tree") if graph != config["stage_graph"])]


def gradient(config: dict[str, Any], ctx: RunContext) -> GradientGraphs:
    """The first gradient where the first stage starts, on each graph of :func:`gradient_graphs`."""
    return {"graphs": {graph: graph_gradient(config, graph) for graph in gradient_graphs(config)}}


def graph_gradient(config: dict[str, Any], graph: str) -> GradientData:
    """The first gradient on layer 1's positional scores where the first stage starts on ``graph``, by autograd; the
    derived first-order gradient against autograd at a tiny scale of layer 2; and its long-sequence limit on a few
    rows."""
    task = theorem_task(config, graph)
    chain, k, T = task.chain, config["stage_k"], config["stage_T"]
    seq, law = task.sequences_and_laws(config["grad_samples"], _generator(config, f"gradient {graph}"))
    inputs = seq[:, :-1]

    def model(scale: float) -> Disentangled:
        return Disentangled(k, T, scale, output="probability", floor=OUTPUT_FLOOR).double()

    start = model(config["stage_beta"])
    parts = theory.last_token_gradient(start, inputs, torch.from_numpy(law), GRADIENT_CHUNKS)
    scale = float(start.second[0, 0])  # stage_beta as the model holds it (set in float32)
    small = theory.last_token_gradient(model(theory.LEMMA_BETA), inputs, torch.from_numpy(law), 1)[0]
    prior = chain.kernels(config["chi2_kernels"], torch.Generator().manual_seed(member_seed("chi2", config["seed"])))
    parents = parent_positions(chain, T)
    children = [t for t in range(1, T) if parents[t] >= 0]
    rows = sorted({children[int(i)] for i in np.linspace(len(children) // 4, len(children) - 1, OVERLAP_ROWS)})
    margin, margin_error = parent_margins(parts, parents)
    exact = [
        theory.exact_first_gradient(x, y, OUTPUT_FLOOR, scale)
        for x, y in zip(np.array_split(inputs.numpy(), GRADIENT_CHUNKS), np.array_split(law, GRADIENT_CHUNKS))
    ]
    data: GradientData = {
        "gradient": parts.mean(axis=0),
        "exact": np.mean(exact, axis=0),
        "parts": len(parts),
        "margin": margin,
        "margin_error": margin_error,
        "small_scale": small / theory.LEMMA_BETA,
        "first_order": theory.first_order_gradient(inputs.numpy(), law, OUTPUT_FLOOR),
        "overlap_rows": rows,
        "overlap": [
            theory.chi2_overlap(chain, prior, t, OUTPUT_FLOOR) * -(1 - OUTPUT_FLOOR) / (k * (t + 1) * T) for t in rows
        ],
        "parents": parents,
    }  # type: ignore[typeddict-item]
    return data


# ---------------------------------------------------------------- the first stage, trained
class StageRun(TypedDict):
    graph: str  # the causal graph of the sequences: chain, tree or random
    loss: str  # which targets the loss scores: LAST_TOKEN (the theorem's) or EVERY_POSITION (the ablation)
    parents: list[int]  # each input position's parent (-1 at a root; the test token is one)
    eval_steps: list[int]
    eval_loss: list[list[float]]  # seed x evaluation, on held-out sequences
    parent_weight: list[list[list[float]]]  # seed -> head (one) -> per position t >= 1: softmax(A)[t, p(t)]
    attention: list[list[float]]  # softmax(A) of the first seed, T x T
    still_descending: int  # runs whose loss or worst weight on the parent was still moving at the end


class OptRate(TypedDict):
    lengths: list[int]  # T: stage_T / 8, / 4, / 2 and stage_T, those of at least RATE_SHORTEST tokens
    excess: dict[str, list[list[float]]]  # layer 1 ("graph", or "uniform" as a contrast) -> per length: mean and
    # standard error over fresh held-out sequences of the reduced model's last-token loss at its best scale minus
    # OPT's, paired
    scale: dict[str, list[float]]  # layer 1 -> per length: layer 2's best scale


class SecondStage(TypedDict):
    eval_steps: list[int]
    eval_loss: list[list[float]]  # seed x evaluation, the trainer's held-out sequences
    loss: dict[str, list[float]]  # per seed on the held-out sequences: "first" (after stage 1), "both" (after 2)
    excess: list[list[float]]  # per seed: mean and standard error over sequences of its loss minus the best
    # reduced model's (layer 1 the graph, layer 2 at its best scale), paired on the same sequences
    over_opt: list[list[float]]  # per seed: the same of its loss minus OPT's (the floored prior's Bayes predictor)
    best_over_opt: list[float]  # the same of the best reduced model's loss minus OPT's
    rate: OptRate  # the best reduced model's excess over OPT at stage_T and shorter lengths (no training)
    levels: dict[str, float]  # on the held-out sequences: the in-context unigram, the smoothed count estimator and
    # OPT ("opt": the floored prior's posterior predictive, theory.floored_predictive)
    scales: list[float]  # layer 2's scales tried with layer 1 the graph
    scale_loss: list[float]  # their mean losses on the held-out sequences
    scale_error: list[float]  # the standard errors of those means
    first_scale: float  # layer 2's scale through stage 1 (stage_beta)
    match_scale: list[float]  # per seed: layer 2's mean diagonal after stage 2
    still_descending: int


RATE_SHORTEST = 8  # the shortest length L - OPT is read at: below it the test token's parent has almost no history


def rate_lengths(stage_T: int) -> list[int]:
    """The lengths at which L - OPT is read against T: stage_T and its halvings down to RATE_SHORTEST, at most four."""
    return sorted({stage_T // 2**j for j in range(4) if stage_T // 2**j >= RATE_SHORTEST})


def best_over_opt(config: dict[str, Any], length: int, purpose: str) -> dict[str, tuple[tuple[float, float], float]]:
    """Per layer 1 (the graph's adjacency, or uniform attention as a contrast), the reduced model's last-token loss
    at its best scale minus OPT's on the same fresh held-out sequences of the stages' task at ``length`` tokens:
    mean, standard error (paired) and the scale."""
    task = theorem_task({**config, "stage_T": length}, config["stage_graph"])
    seq, law = task.sequences_and_laws(config["opt_samples"], _generator(config, purpose))
    opt = last_token_cross_entropy(
        theory.floored_predictive(task.chain, seq.numpy(), positions=(task.chain.length - 1,)), law
    )
    made = {}
    for first, parents in (("graph", task.chain.parents), ("uniform", ((),) * len(task.chain.parents))):
        losses = theory.match_scale_losses(parents, seq[:, :-1], law, OUTPUT_FLOOR, theory.MATCH_SCALES)
        best = int(np.argmin(losses.mean(axis=1)))
        made[first] = _mean_and_error(losses[best] - opt), float(theory.MATCH_SCALES[best])
    return made


def opt_rate(config: dict[str, Any]) -> OptRate:
    """Thm (1)'s L - OPT against T where it needs no training: the reduced model at its best scale, with layer 1
    the graph and, for contrast, uniform, at each length."""
    lengths = rate_lengths(config["stage_T"])
    made = [best_over_opt(config, length, f"opt-rate-{length}") for length in lengths]
    return {
        "lengths": lengths,
        "excess": {first: [list(m[first][0]) for m in made] for first in ("graph", "uniform")},
        "scale": {first: [m[first][1] for m in made] for first in ("graph", "uniform")},
    }


class StagedData(TypedDict):
    runs: list[StageRun]  # the theorem's loss on stage_graph (and on the chain), then the ablation on the chain
    second: SecondStage  # stage 2 after the first run's stage 1


LAST_TOKEN, EVERY_POSITION = "last token", "every position"
WEIGHT_NOISE = 0.01  # a worst weight on the parent that rose less than this over a run has hardly started
OUTPUT_FLOOR = 1e-3  # the reduced model's law is mixed with this much of the uniform one: an absent token costs
# ln(k / OUTPUT_FLOOR) nats, not infinity


# ---------------------------------------------------------------- the unigram configuration, near-stationary
STATIONARY_DOUBLINGS = 3  # lengths stage_T, 2 stage_T, ... 2^3 stage_T


class StationaryData(TypedDict):
    lengths: list[int]
    squared_norm: dict[str, list[list[float]]]  # configuration -> per length: [|grad|^2 estimate, standard error]


def stationary_lengths(config: dict[str, Any]) -> list[int]:
    """The lengths the gradient is computed at: ``stage_T`` doubled ``STATIONARY_DOUBLINGS`` times."""
    return [config["stage_T"] * 2**j for j in range(STATIONARY_DOUBLINGS + 1)]


def stationary_first(length: int, configuration: str) -> np.ndarray:
    """Layer 1's attention ``(length, length)`` in each configuration: uniform over the prefix (Varre et al.'s
    unigram point, both layers uniform), or on the token before (still the unigram while layer 2 is uniform)."""
    if configuration == "uniform":
        causal = np.tril(np.ones((length, length)))
        return causal / causal.sum(axis=1, keepdims=True)
    before = np.zeros((length, length))
    before[np.arange(1, length), np.arange(length - 1)] = 1.0
    before[0, 0] = 1.0
    return before


STATIONARY_CONFIGURATIONS = ("uniform", "previous")


def stationary(config: dict[str, Any], ctx: RunContext) -> StationaryData:
    """The gradient of the reduced model's last-token loss on layer 2's matrix where layer 2 is uniform (the model
    predicts the in-context unigram), on the chain, at growing lengths: layer 1 uniform (the unigram point) and on
    the token before (the same predictor, from which induction starts)."""
    lengths, norms = stationary_lengths(config), {name: [] for name in STATIONARY_CONFIGURATIONS}
    for length in lengths:
        task = theorem_task({**config, "stage_T": length}, "chain")
        seq, law = task.sequences_and_laws(config["grad_samples"], _generator(config, f"stationary-{length}"))
        for name in STATIONARY_CONFIGURATIONS:
            parts = theory.blank_second_gradient(
                seq[:, :-1].numpy(), law, OUTPUT_FLOOR, stationary_first(length, name), GRADIENT_CHUNKS
            )
            norms[name].append(list(theory.squared_norm(parts)))
    return {"lengths": lengths, "squared_norm": norms}


def plain_steps(
    config: dict[str, Any], steps_key: str, lr_key: str, evaluations: int, eval_size: int = 256
) -> TrainConfig:
    """Plain gradient steps of constant size (no momentum, no decay) on fresh sequences, as the theorems take them,
    evaluated ``evaluations`` times on ``eval_size`` held-out sequences."""
    steps = config[steps_key]
    return TrainConfig(
        steps=steps,
        batch_size=config["batch_size"],
        lr=config[lr_key],
        schedule="constant",
        optimizer="sgd",
        eval_every=max(1, steps // evaluations),
        eval_size=eval_size,
    )


def staged_schedule(config: dict[str, Any]) -> TrainConfig:
    """The first stage's steps."""
    return plain_steps(config, "stage_steps", "stage_lr", 40)


def stage_body(config: dict[str, Any], graph: str) -> tuple[tuple[int, ...], ...]:
    """The graph of the ``stage_T - 1`` positions before the test token: chain, tree (window) or random."""
    last = config["stage_T"] - 2
    if graph == "chain":
        return chain_parents(last)
    if graph == "tree":
        return tree_parents(last, config["window"], config["seed"])
    return random_parents(last, config["seed"])


def theorem_task(config: dict[str, Any], graph: str) -> LastTokenTask:
    """Nichani et al.'s task on ``graph``: the stages' chain, a test token last, its child the one target."""
    k, alpha, floor = config["stage_k"], config["stage_alpha"], config["gamma"]
    return LastTokenTask(InContextMarkov(k, alpha, with_test_token(stage_body(config, graph)), floor=floor))


def stage_task(config: dict[str, Any], graph: str, loss: str) -> LastTokenTask | InContextMarkov:
    """The first stage's task: Nichani et al.'s (the graph, then a test token whose child is scored), or the
    ablation's (the chain of ``stage_T`` tokens, every target scored, each a child of the position that reads it)."""
    if loss == LAST_TOKEN:
        return theorem_task(config, graph)
    k, alpha, floor = config["stage_k"], config["stage_alpha"], config["gamma"]
    return InContextMarkov(k, alpha, chain_parents(config["stage_T"]), floor=floor, scored="parent_query")


def stage_runs(config: dict[str, Any]) -> list[tuple[str, str]]:
    """(graph, loss) of each run: the theorem's loss on ``stage_graph`` and on the chain, and the ablation."""
    graphs = dict.fromkeys((config["stage_graph"], "chain"))
    return [(graph, LAST_TOKEN) for graph in graphs] + [("chain", EVERY_POSITION)]


def reduced_model(config: dict[str, Any], k: int, first: Tensor | None = None) -> Disentangled:
    """Nichani et al.'s reduced model on ``k`` states, its output read as the predicted law: at the first stage's
    start (layer 1 blank and trained, layer 2 held at ``stage_beta``), or, given layer 1's scores ``first``, at the
    second's (layer 1 held, layer 2 trained)."""
    return Disentangled(
        k,
        config["stage_T"],
        config["stage_beta"],
        train_match=first is not None,
        output="probability",
        floor=OUTPUT_FLOOR,
        first=first,
        train_first=first is None,
    )


def layer_one(model: Disentangled, length: int) -> np.ndarray:
    """Layer 1's attention ``(length, length)``: the same for every input, since its scores are positional."""
    return model.first_attention(length).detach().double().cpu().numpy()


def first_stage(config: dict[str, Any], ctx: RunContext, task: LastTokenTask | InContextMarkov, k: int) -> TrainResult:
    """Stage 1 on ``task``: layer 1 alone from zero, probed for its worst weight on a parent."""
    chain = task.chain if isinstance(task, LastTokenTask) else task
    parents = parent_positions(chain, config["stage_T"])

    def worst(model: Disentangled) -> list[float]:
        return [float(np.nanmin(parent_weight(layer_one(model, config["stage_T"])[None], parents)))]

    return train(
        lambda: reduced_model(config, k),
        task,
        staged_schedule(config),
        ctx.seeds,
        ctx.device,
        progress=ctx.progress,
        probe=worst,
    )


def second_stage_run(
    config: dict[str, Any], ctx: RunContext, task: LastTokenTask, k: int, first: TrainResult
) -> TrainResult:
    """Stage 2 on ``task``: layer 2 alone from ``stage_beta I``, layer 1 held at each seed's first stage."""
    firsts = [m.first.detach().clone() for m in first.models]
    return train(
        [partial(reduced_model, config, k, f) for f in firsts],
        task,
        second_schedule(config),
        ctx.seeds,
        ctx.device,
        progress=ctx.progress,
    )


def last_token_log_law(model: Disentangled, inputs: Tensor) -> np.ndarray:
    """Per sequence, ``(n, k)``: the log of the law ``model`` predicts at the last position, in float64."""
    with torch.no_grad():
        return copy.deepcopy(model).double()(inputs)[:, -1].numpy()


def last_token_losses(model: Disentangled, inputs: Tensor, law: np.ndarray) -> np.ndarray:
    """Per sequence, the last token's cross-entropy of ``model`` against ``law``, in float64."""
    return -(law * last_token_log_law(model, inputs)).sum(axis=-1)


def last_token_cross_entropy(probs: np.ndarray, law: np.ndarray) -> np.ndarray:
    """Per sequence, the last-token cross-entropy of a predictor's ``(n, length, k)`` predictions against ``law``."""
    return -(law * np.log(probs[:, -1])).sum(axis=-1)


def last_token_loss(probs: np.ndarray, law: np.ndarray) -> float:
    """The mean last-token cross-entropy of a predictor's ``(n, length, k)`` predictions against ``law``."""
    return float(last_token_cross_entropy(probs, law).mean())


def second_schedule(config: dict[str, Any]) -> TrainConfig:
    """Stage 2's plain gradient steps on layer 2 alone, of constant size."""
    return plain_steps(config, "stage2_steps", "stage2_lr", 40)


def second_stage(config: dict[str, Any], ctx: RunContext, first: TrainResult) -> SecondStage:
    """Nichani et al.'s second stage after ``first``; its held-out loss against the smoothed count estimator's and
    the best reduced model's (layer 1 the graph, layer 2 one scale)."""
    task, k = theorem_task(config, config["stage_graph"]), config["stage_k"]
    run = second_stage_run(config, ctx, task, k, first)
    seq, law = task.sequences_and_laws(config["eval_size"], _generator(config, "second-stage"))
    inputs, array = seq[:, :-1], seq.numpy()
    scale_loss = theory.match_scale_losses(task.chain.parents, inputs, law, OUTPUT_FLOOR, theory.MATCH_SCALES)
    best = scale_loss[int(np.argmin(scale_loss.mean(axis=1)))]
    both = [last_token_losses(m, inputs, law) for m in run.models]
    opt = last_token_cross_entropy(
        theory.floored_predictive(task.chain, array, positions=(task.chain.length - 1,)), law
    )
    return {
        "eval_steps": run.eval_steps,
        "eval_loss": run.eval_loss,
        "loss": {
            "first": [float(last_token_losses(m, inputs, law).mean()) for m in first.models],
            "both": [float(x.mean()) for x in both],
        },
        "excess": [list(_mean_and_error(x - best)) for x in both],
        "over_opt": [list(_mean_and_error(x - opt)) for x in both],
        "best_over_opt": list(_mean_and_error(best - opt)),
        "rate": opt_rate(config),
        "levels": {
            "unigram": last_token_loss(theory.unigram_predictive(task.chain, array), law),
            "smoothed": last_token_loss(theory.bayes_predictive(task.chain, array), law),
            "opt": float(opt.mean()),
        },
        "scales": [float(x) for x in theory.MATCH_SCALES],
        "scale_loss": scale_loss.mean(axis=1).tolist(),
        "scale_error": (scale_loss.std(axis=1, ddof=1) / np.sqrt(scale_loss.shape[1])).tolist(),
        "first_scale": config["stage_beta"],
        "match_scale": [float(m.second.detach().diagonal().mean()) for m in run.models],
        "still_descending": int(still_descending(run, LOSS_NOISE, continued=True).sum()),
    }  # type: ignore[typeddict-item]


def staged(config: dict[str, Any], ctx: RunContext) -> StagedData:
    """Nichani et al.'s two stages on their loss, and the first on the ablation's; the attention each first stage
    ends with, against its graph."""
    T = config["stage_T"]
    runs: list[StageRun] = []
    theorems: list[TrainResult] = []
    for graph, loss in stage_runs(config):
        task = stage_task(config, graph, loss)
        parents = parent_positions(task.chain if isinstance(task, LastTokenTask) else task, T)
        run = first_stage(config, ctx, task, config["stage_k"])
        theorems = theorems or [run]  # the first run's: stage 2 starts there
        tables = [layer_one(m, T) for m in run.models]
        moving = still_descending(run, LOSS_NOISE) | still_descending(run, WEIGHT_NOISE, curve=-run.probes[..., 0])
        runs.append(
            {
                "graph": graph,
                "loss": loss,
                "parents": parents,
                "eval_steps": run.eval_steps,
                "eval_loss": run.eval_loss,
                "parent_weight": [parent_weight(table[None], parents) for table in tables],
                "attention": tables[0],
                "still_descending": int(moving.sum()),
            }  # type: ignore[typeddict-item]
        )
    return {"runs": runs, "second": second_stage(config, ctx, theorems[0])}


# ---------------------------------------------------------------- the two stages on a restricted prior
class CorollaryData(TypedDict):
    loss: list[float]  # per seed, on kernels outside the training prior, after both stages
    excess: list[list[float]]  # per seed: mean and standard error of its loss minus the graph's (at the scale best
    # on the training prior), per sequence, on the same sequences
    levels: dict[str, float]  # outside: the training prior's Bayes predictor ("prior_bayes", where computed), the
    # smoothed count estimator ("smoothed"), the in-context unigram; and "graph": the graph at that scale
    graph_error: float  # the standard error of the graph's mean loss
    distance: dict[str, list[list[float]]]  # outside, at the last position: mean and standard error over sequences
    # of the max-norm distance ‖f - π̃(·|s_T)‖∞ to the law of the test token's child, per seed ("models") and for
    # the graph at that scale, the smoothed count estimator and the training prior's Bayes predictor (one each)
    scale: float  # layer 2's scale best on the training prior, with layer 1 the graph
    worst_weight: list[float]  # per seed: layer 1's worst weight on a parent after the first stage
    still_descending: int  # seeds whose first stage (loss or worst weight) or second stage was still moving


def corollary(config: dict[str, Any], ctx: RunContext) -> CorollaryData:
    """The two stages trained on noisy permutations (the support section's prior, on the stages' graph and length),
    then read kernels from outside that prior's support; beside them that prior's own Bayes predictor, the smoothed
    count estimator and the graph at the scale best on the training prior."""
    k, T = config["k"], config["stage_T"]
    graph = with_test_token(stage_body(config, config["stage_graph"]))
    inside = InContextMarkov(k, config["alpha"], graph, rows="permutation", floor=config["gamma"])
    outside = replace(inside, rows="dirichlet")
    first = first_stage(config, ctx, LastTokenTask(inside), k)
    run = second_stage_run(config, ctx, LastTokenTask(inside), k, first)

    def sample(task: InContextMarkov, purpose: str) -> tuple[Tensor, np.ndarray, np.ndarray]:
        seq, law = LastTokenTask(task).sequences_and_laws(config["eval_size"], _generator(config, purpose))
        return seq[:, :-1], seq.numpy(), law

    inputs, _, law = sample(inside, "corollary-inside")
    fit = theory.match_scale_losses(graph, inputs, law, OUTPUT_FLOOR, theory.MATCH_SCALES).mean(axis=1)
    scale = float(theory.MATCH_SCALES[int(np.argmin(fit))])
    inputs, array, law = sample(outside, "corollary-outside")
    graph_log_law = theory.match_scale_log_law(graph, inputs, k, OUTPUT_FLOOR, scale)
    graph_loss = -(law * graph_log_law).sum(axis=-1)
    losses = [last_token_losses(m, inputs, law) for m in run.models]
    smoothed = theory.bayes_predictive(outside, array)
    levels = {
        "graph": float(graph_loss.mean()),
        "smoothed": last_token_loss(smoothed, law),
        "unigram": last_token_loss(theory.unigram_predictive(outside, array), law),
    }

    def distance(predicted: np.ndarray) -> list[float]:
        return list(_mean_and_error(np.abs(predicted - law).max(axis=-1)))

    distances = {
        "models": [distance(np.exp(last_token_log_law(m, inputs))) for m in run.models],
        "graph": [distance(np.exp(graph_log_law))],
        "smoothed": [distance(smoothed[:, -1])],
    }
    if k <= theory.MAX_PERMUTED_STATES:
        prior = theory.permutation_predictive(inside, array)
        levels["prior_bayes"] = last_token_loss(prior, law)
        distances["prior_bayes"] = [distance(prior[:, -1])]
    parents = parent_positions(inside, T)
    return {
        "loss": [float(x.mean()) for x in losses],
        "excess": [list(_mean_and_error(x - graph_loss)) for x in losses],
        "levels": levels,
        "graph_error": _mean_and_error(graph_loss)[1],
        "distance": distances,
        "scale": scale,
        "worst_weight": [float(np.nanmin(parent_weight(layer_one(m, T)[None], parents))) for m in first.models],
        "still_descending": int(
            (
                still_descending(first, LOSS_NOISE)
                | still_descending(first, WEIGHT_NOISE, curve=-first.probes[..., 0])
                | still_descending(run, LOSS_NOISE, continued=True)
            ).sum()
        ),
    }


# ---------------------------------------------------------------- training
KINDS = {"two_layers": 2, "one_layer": 1}


class HeldOut(TypedDict):
    levels: dict[str, float]  # uniform / unigram / bayes on these sequences
    loss: dict[str, list[float]]  # kind -> per seed
    gap_closed: dict[str, list[float]]  # kind -> per seed: (unigram - model) / (unigram - bayes)


class TrainingData(TypedDict):
    eval_steps: list[int]
    eval_loss: dict[str, list[list[float]]]  # kind -> seeds x evaluations (the trainer's small held-out set)
    in_distribution: HeldOut
    out_of_distribution: HeldOut  # kernels from Dirichlet(ood_alpha); levels of the estimators for the training prior
    parents: list[int]
    parent_weight: dict[str, list[list[list[float]]]]  # kind -> seed -> head -> per position t >= 1: layer 1's
    # weight on t's parent, mean over held-out sequences (NaN at a root)
    attention: list[list[list[float]]]  # layer 1 of the first two-layer seed, one table per head, mean over held-out
    still_descending: dict[str, int]
    strategies: list[str]  # Edelman et al.'s strategies (theory.STRATEGIES), in the order they see training meet them
    strategy_distance: dict[str, list[list[list[float]]]]  # kind -> seed -> evaluation -> strategy: the mean
    # KL(strategy || model) over the positions of STAGE_PROBES held-out sequences (theory.strategy_distances)


def _gpt(config: dict[str, Any], n_layer: int, vocab: str = "k", length: str = "T") -> GPTConfig:
    """The chapter's attention-only GPT, reading ``config[vocab]`` tokens over ``config[length]`` positions."""
    return GPTConfig(
        vocab_size=config[vocab],
        block_size=config[length],
        n_layer=n_layer,
        n_head=config["n_head"],
        d_model=config["d_model"],
        tied=False,
        positional="learned",
        mlp=False,
    )


def _schedule(config: dict[str, Any], steps_key: str = "steps", lr_key: str = "lr") -> TrainConfig:
    """Online training for ``config[steps_key]`` steps at peak rate ``config[lr_key]`` with a cosine schedule;
    ``config["evaluations"]`` evaluations on a small held-out set along the way."""
    steps = config[steps_key]
    return TrainConfig(
        steps=steps,
        batch_size=config["batch_size"],
        lr=config[lr_key],
        warmup=min(config["warmup"], steps - 1),
        eval_every=max(1, steps // config["evaluations"]),
        eval_size=CURVE_SEQUENCES,
    )


EVAL_CHUNK = 512  # held-out sequences per forward pass: with the attention weights of (chunk, heads, T, T) kept
# for a figure, 8192 sequences at T = 256 at once would hold gigabytes


def _chunked(read: Callable[[Tensor], np.ndarray], seq: Tensor) -> np.ndarray:
    """``read`` applied to ``seq`` in chunks of ``EVAL_CHUNK`` sequences, without gradients, joined on axis 0."""
    with torch.no_grad():
        return np.concatenate(calibrated_map(read, count_chunks(seq, EVAL_CHUNK)))


def _loss_per_sequence(model: nn.Module, seq: Tensor) -> np.ndarray:
    def read(part: Tensor) -> np.ndarray:
        logits = model(part[:, :-1]).double()
        return -torch.log_softmax(logits, -1).gather(-1, part[:, 1:, None])[..., 0].mean(dim=1).numpy()

    return _chunked(read, seq)


def held_out(task: InContextMarkov, seq: Tensor, models: dict[str, list[nn.Module]]) -> HeldOut:
    """The levels of ``task``'s estimators and each model's loss on the sequences ``seq``."""
    array = seq.numpy()
    levels = {
        "uniform": float(np.log(task.n_states)),
        "unigram": float(theory.sequence_losses(theory.unigram_predictive(task, array), array).mean()),
        "bayes": float(theory.sequence_losses(theory.bayes_predictive(task, array), array).mean()),
    }
    loss = {kind: [float(_loss_per_sequence(m, seq).mean()) for m in ms] for kind, ms in models.items()}
    gap = levels["unigram"] - levels["bayes"]
    return {
        "levels": levels,
        "loss": loss,
        "gap_closed": {kind: [(levels["unigram"] - x) / gap for x in xs] for kind, xs in loss.items()},
    }


def layer_one_attention(model: GPT, seq: Tensor) -> np.ndarray:
    """Layer 1's attention averaged over ``seq``, one ``(T, T)`` table per head."""

    def read(part: Tensor) -> np.ndarray:
        return model(part[:, :-1], return_attention=True)[1][0].double().sum(dim=0, keepdim=True).numpy()

    return _chunked(read, seq).sum(axis=0) / len(seq)


def parent_weight(attention: np.ndarray, parents: list[int]) -> np.ndarray:
    """Layer 1's weight from each position ``t >= 1`` onto its parent, one row per head (NaN at a root)."""
    rows = list(range(1, attention.shape[-1]))
    return np.where(
        np.array([parents[t] >= 0 for t in rows]), attention[:, rows, [max(parents[t], 0) for t in rows]], np.nan
    )


def strategy_probe(task: InContextMarkov, seq: Tensor) -> Callable[[nn.Module], list[float]]:
    """A probe of a model's distance to each of Edelman et al.'s strategies on ``seq``
    (:func:`theory.strategy_distances`), for the trainer to read at each evaluation."""
    strategies = theory.strategy_predictions(task, seq.numpy())

    def probe(model: nn.Module) -> list[float]:
        logits = model(seq[:, :-1].to(next(model.parameters(), seq).device)).double().cpu()
        return theory.strategy_distances(torch.log_softmax(logits, -1).numpy(), strategies)

    return probe


def training(config: dict[str, Any], ctx: RunContext) -> TrainingData:
    """One- and two-layer transformers trained online, probed for their distance to each of Edelman et al.'s
    strategies along the way; final losses, layer 1's attention, kernels off the prior."""
    task = task_of(config)
    schedule = _schedule(config)
    probe = strategy_probe(task, stage_probes(config))
    runs = {
        kind: train(
            lambda n=n: GPT(_gpt(config, n)), task, schedule, ctx.seeds, ctx.device, progress=ctx.progress, probe=probe
        )
        for kind, n in KINDS.items()
    }
    models = {kind: [m.cpu() for m in run.models] for kind, run in runs.items()}
    seq = task.sequences(config["eval_size"], _generator(config, "held-out"))
    ood_task = replace(task, alpha=config["ood_alpha"])
    ood_seq = ood_task.sequences(config["eval_size"], _generator(config, "out-of-distribution"))
    parents = parent_positions(task, config["T"])
    tables = {kind: [layer_one_attention(m, seq) for m in ms] for kind, ms in models.items()}
    weights = {kind: [parent_weight(t, parents) for t in ts] for kind, ts in tables.items()}
    data: TrainingData = {
        "eval_steps": runs["two_layers"].eval_steps,
        "eval_loss": {kind: run.eval_loss for kind, run in runs.items()},
        "in_distribution": held_out(task, seq, models),
        "out_of_distribution": held_out(task, ood_seq, models),
        "parents": parents,
        "parent_weight": weights,
        "attention": tables["two_layers"][0],
        "still_descending": {kind: int(still_descending(run, LOSS_NOISE).sum()) for kind, run in runs.items()},
        "strategies": list(theory.STRATEGIES),
        "strategy_distance": {kind: run.probes.tolist() for kind, run in runs.items()},
    }  # type: ignore[typeddict-item]
    return data


# ---------------------------------------------------------------- training on a chain of order m
ORDER_KINDS = {"three_layers": 3, "two_layers": 2}  # Rajaraman et al.'s depth, and Ekbote et al.'s; one head each


class OrderTrainingData(TypedDict):
    order: int
    eval_steps: list[int]
    eval_loss: dict[str, list[list[float]]]  # kind -> seeds x evaluations (the trainer's small held-out set)
    levels: dict[str, float]  # uniform, every lesser estimator (theory.lesser_predictors) and bayes, on the held-out
    smoothing: dict[str, float]  # each lesser estimator's best multiple of alpha (of LESSER_SMOOTHINGS) there
    lesser: str  # the lesser estimator with the lowest level there
    gap_error: float  # standard error of that estimator's excess over the Bayes level, over those sequences
    loss: dict[str, list[float]]  # kind -> per seed
    gap_closed: dict[str, list[float]]  # kind -> per seed: (lesser - model) / (lesser - bayes)
    still_descending: dict[str, list[bool]]  # kind -> per seed
    lag_weight: dict[str, list[list[float]]]  # kind -> per seed: layer 1's mean weight j back, j = 0 .. order + 1,
    # over the held-out sequences and the positions t > order (absent from results made before it was measured)


def lag_profile(attention: np.ndarray, lags: int) -> list[float]:
    """One head's ``(T, T)`` attention as its mean weight on the key ``j`` back, ``j < lags``, over the queries
    ``t >= lags - 1`` (those that have every such key)."""
    T = attention.shape[-1]
    return [float(np.mean([attention[t, t - j] for t in range(lags - 1, T)])) for j in range(lags)]


def order_gpt(config: dict[str, Any], n_layer: int) -> GPTConfig:
    """One head per layer with an MLP after each attention: the non-linearity Rajaraman et al.'s construction needs
    (theirs is a layer norm, which ``order_layer_norm`` adds; :func:`theory.higher_order_head` uses the MLP)."""
    return GPTConfig(
        vocab_size=config["k"],
        block_size=config["order_T"],
        n_layer=n_layer,
        n_head=1,
        d_model=config["order_d"],
        tied=False,
        positional="learned",
        mlp=True,
        layer_norm=config["order_layer_norm"],
    )


LESSER_SMOOTHINGS = (0.5, 1.0, 2.0, 4.0)  # multiples of alpha each lesser estimator is tried with: a context pooled
# from several of the chain's own is smoothed best by more than alpha, and the best on the held-out sequences themselves
# only makes the lesser level lower, so the rows harder


def order_levels_on(task: InContextMarkov, seq: np.ndarray) -> tuple[dict[str, float], dict[str, float], str, float]:
    """On ``seq``: the uniform level, every lesser estimator's (:func:`theory.lesser_predictors`, each at its best of
    ``LESSER_SMOOTHINGS``) and the order-m Bayes level; each lesser one's best smoothing (a multiple of alpha), the
    name of the best lesser one, and the standard error of its excess over the Bayes level."""
    chunk = theory.level_chunk(task)
    parts = np.split(seq, range(chunk, len(seq), chunk))

    def losses(law: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        return np.concatenate([theory.sequence_losses(law(part), part) for part in parts])

    per_sequence = {"uniform": np.full(len(seq), np.log(task.n_states))}
    smoothing: dict[str, float] = {}
    for factor in LESSER_SMOOTHINGS:
        for name, law in theory.lesser_predictors(replace(task, alpha=factor * task.alpha)).items():
            tried = losses(law)
            if name not in per_sequence or tried.mean() < per_sequence[name].mean():
                per_sequence[name], smoothing[name] = tried, factor
    per_sequence["bayes"] = losses(partial(theory.bayes_predictive, task))
    levels = {name: float(x.mean()) for name, x in per_sequence.items()}
    lesser = min((name for name in levels if name != "bayes"), key=levels.__getitem__)
    excess = per_sequence[lesser] - per_sequence["bayes"]
    return levels, smoothing, lesser, float(excess.std(ddof=1) / np.sqrt(len(excess)))


def order_training(config: dict[str, Any], ctx: RunContext) -> OrderTrainingData:
    """Three layers and two layers of one head trained online on an order-m chain; their held-out loss against the
    order-m level and every lesser estimator's. Nothing trains at order 1, where no lesser estimator is left."""
    order = config["order"]
    if order < 2:
        empty: OrderTrainingData = {
            "order": order,
            "eval_steps": [],
            "eval_loss": {},
            "levels": {},
            "smoothing": {},
            "lesser": "",
            "gap_error": math.nan,
            "loss": {},
            "gap_closed": {},
            "still_descending": {},
            "lag_weight": {},
        }
        return empty
    task = InContextMarkov.chain(config["k"], config["alpha"], config["order_T"], order=order)
    schedule = _schedule(config, "order_steps", "order_lr")
    runs = {
        kind: train(lambda n=n: GPT(order_gpt(config, n)), task, schedule, ctx.seeds, ctx.device, progress=ctx.progress)
        for kind, n in ORDER_KINDS.items()
    }
    draw, n, chunk = _generator(config, "order held-out"), config["eval_size"], theory.level_chunk(task)
    seq = torch.cat([task.sequences(min(chunk, n - start), draw) for start in range(0, n, chunk)])
    levels, smoothing, lesser, gap_error = order_levels_on(task, seq.numpy())
    loss = {kind: [float(_loss_per_sequence(m.cpu(), seq).mean()) for m in run.models] for kind, run in runs.items()}
    gap = levels[lesser] - levels["bayes"]
    return {
        "order": order,
        "eval_steps": runs["three_layers"].eval_steps,
        "eval_loss": {kind: run.eval_loss for kind, run in runs.items()},
        "levels": levels,
        "smoothing": smoothing,
        "lesser": lesser,
        "gap_error": gap_error,
        "loss": loss,
        "gap_closed": {
            kind: [(levels[lesser] - x) / gap if gap else math.nan for x in xs] for kind, xs in loss.items()
        },
        "still_descending": {kind: still_descending(run, LOSS_NOISE).tolist() for kind, run in runs.items()},
        "lag_weight": {
            kind: [lag_profile(layer_one_attention(m.cpu(), seq)[0], order + 2) for m in run.models]
            for kind, run in runs.items()
        },
    }


class ParentHeadsData(TypedDict):
    order: int
    heads: int
    window: int
    eval_steps: list[int]
    eval_loss: list[list[float]]  # seeds x evaluations (the trainer's small held-out set)
    levels: dict[str, float]  # as OrderTrainingData's, on this section's own held-out sequences
    lesser: str
    loss: list[float]  # per seed, held out
    gap_closed: list[float]  # per seed: (lesser - model) / (lesser - bayes)
    lag_weight: list[list[list[float]]]  # seeds x heads x window: layer 1's weight j tokens back, j < window
    lag_weight_start: list[list[list[float]]]  # the same at initialisation (the untrained models)
    still_descending: list[bool]


def parent_heads(config: dict[str, Any], ctx: RunContext) -> ParentHeadsData:
    """Two layers with several relative-position heads in layer 1 (:class:`WindowHeads`) trained online on the
    order-m chain: how much of each head's weight sits on each of the last ``heads_window`` tokens, trained and
    untrained, and the held-out loss against the order-m level and the best lesser estimator's."""
    task = InContextMarkov.chain(config["k"], config["alpha"], config["order_T"], order=config["order"])
    heads, window = config["heads"], config["heads_window"]

    def make() -> WindowHeads:
        return WindowHeads(config["k"], heads, window)

    starts = []
    for seed in ctx.seeds:
        seed_everything(seed)  # as the trainer seeds each member before it builds it
        starts.append(torch.softmax(make().lags.detach().double(), -1).tolist())
    run = train(make, task, _schedule(config, "heads_steps", "heads_lr"), ctx.seeds, ctx.device, progress=ctx.progress)
    draw, n, chunk = _generator(config, "parent heads held-out"), config["eval_size"], theory.level_chunk(task)
    seq = torch.cat([task.sequences(min(chunk, n - start), draw) for start in range(0, n, chunk)])
    levels, _, lesser, _ = order_levels_on(task, seq.numpy())
    loss = [float(_loss_per_sequence(m.cpu(), seq).mean()) for m in run.models]
    gap = levels[lesser] - levels["bayes"]
    return {
        "order": config["order"],
        "heads": heads,
        "window": window,
        "eval_steps": run.eval_steps.tolist(),
        "eval_loss": run.eval_loss.tolist(),
        "levels": levels,
        "lesser": lesser,
        "loss": loss,
        "gap_closed": [(levels[lesser] - x) / gap if gap else math.nan for x in loss],
        "lag_weight": [torch.softmax(m.lags.detach().cpu().double(), -1).tolist() for m in run.models],
        "lag_weight_start": starts,
        "still_descending": still_descending(run, LOSS_NOISE).tolist(),
    }


# ---------------------------------------------------------------- a prior of restricted support
class SupportData(TypedDict):
    inside: HeldOut  # noisy permutations (the training prior); its levels add the prior's Bayes predictor
    outside: HeldOut  # Dirichlet(alpha) kernels with the same floor, outside the training prior's support; its
    # "bayes" level is the count estimator smoothed by alpha (the Bayes predictor of no prior here)
    advantage: list[list[float]]  # per seed, outside: the training prior's Bayes loss minus the model's, per
    # sequence, mean and standard error (empty where that predictor is not computed)
    distance: dict[str, list[float]]  # outside, at the last position: mean max-norm distance to the true kernel row,
    # per seed for the models, one value each for the count estimator and the prior's Bayes predictor
    still_descending: int


def support_tasks(config: dict[str, Any]) -> tuple[InContextMarkov, InContextMarkov]:
    """The restricted training prior (noisy permutations) and the test prior outside its support (Dirichlet rows),
    both with the floor ``gamma`` that the theorem's hypothesis min pi >= gamma / k asks for."""
    task = task_of(config)
    return (replace(task, rows="permutation", floor=config["gamma"]), replace(task, floor=config["gamma"]))


def last_row_distance(probs: np.ndarray, seq: np.ndarray, kernels: np.ndarray, task: InContextMarkov) -> np.ndarray:
    """Per sequence, the max-norm distance between ``probs`` at the last position and the kernel row it should be."""
    truth = kernels[np.arange(len(seq)), task.contexts(seq, task.length)]
    return np.abs(probs[:, -1] - truth).max(axis=-1)


def _probabilities(model: nn.Module, seq: Tensor) -> np.ndarray:
    return _chunked(lambda part: torch.softmax(model(part[:, :-1]).double(), -1).numpy(), seq)


def support(config: dict[str, Any], ctx: RunContext) -> SupportData:
    """Two layers trained on noisy permutations only, then read kernels from outside that support; beside them the
    count estimator and the training prior's own Bayes predictor."""
    inside_task, outside_task = support_tasks(config)
    run = train(
        lambda: GPT(_gpt(config, 2)), inside_task, _schedule(config), ctx.seeds, ctx.device, progress=ctx.progress
    )
    models = [m.cpu() for m in run.models]
    inside_seq = inside_task.sequences(config["eval_size"], _generator(config, "support-inside"))
    outside_seq, kernels = outside_task.sequences_and_kernels(
        config["eval_size"], _generator(config, "support-outside")
    )
    array = outside_seq.numpy()
    inside, outside = (
        held_out(task, seq, {"two_layers": models})
        for task, seq in ((inside_task, inside_seq), (outside_task, outside_seq))
    )
    model_probs = [_probabilities(m, outside_seq) for m in models]
    distance = {
        "models": [float(last_row_distance(p, array, kernels, outside_task).mean()) for p in model_probs],
        "count_estimator": [
            float(last_row_distance(theory.bayes_predictive(outside_task, array), array, kernels, outside_task).mean())
        ],
    }
    advantage: list[list[float]] = []
    if config["k"] <= theory.MAX_PERMUTED_STATES:
        for part, seq in ((inside, inside_seq.numpy()), (outside, array)):
            part["levels"]["prior_bayes"] = float(
                theory.sequence_losses(theory.permutation_predictive(inside_task, seq), seq).mean()
            )
        rival = theory.permutation_predictive(inside_task, array)
        distance["prior_bayes"] = [float(last_row_distance(rival, array, kernels, outside_task).mean())]
        rival_loss = theory.sequence_losses(rival, array)
        advantage = [list(_mean_and_error(rival_loss - theory.sequence_losses(p, array))) for p in model_probs]
    data: SupportData = {
        "inside": inside,
        "outside": outside,
        "advantage": advantage,
        "distance": distance,
        "still_descending": int(still_descending(run, LOSS_NOISE).sum()),
    }
    return data


# ---------------------------------------------------------------- the trigger task
class TriggerData(TypedDict):
    eval_steps: list[int]
    eval_loss: dict[str, list[list[float]]]  # kind -> seeds x evaluations
    chance: float  # accuracy of any guess that ignores the earlier occurrence: 1 / (tokens that can be outputs)
    accuracy: dict[str, dict[str, list[float]]]  # "first" / "recall" -> kind -> per seed, on held-out sequences
    positions: dict[str, int]  # "first" / "recall" -> how many held-out positions were judged
    previous_weight: dict[str, list[float]]  # two layers, per seed: layer 1's weight on the token before, where it
    # is a trigger ("after_trigger") and elsewhere
    memory_names: list[str]  # the probed memories, in the order Bietti et al. see them form
    memories: list[list[list[float]]]  # two layers: seed x evaluation x memory, the recall probes
    still_descending: dict[str, int]


def is_trigger(tokens: np.ndarray, triggers: np.ndarray) -> np.ndarray:
    """Whether each of ``tokens`` ``(n, L)`` is one of its row's ``triggers`` ``(n, n_triggers)``."""
    return (tokens[:, :, None] == triggers[:, None, :]).any(axis=-1)


def output_positions(task: TriggerTask, seq: np.ndarray, triggers: np.ndarray) -> dict[str, np.ndarray]:
    """Masks over the inputs where the target is a trigger's output (``triggers``: each sequence's own): its first
    occurrence, and a later one."""
    recall = task.recall_positions(seq, triggers)
    return {"first": is_trigger(seq[:, :-1], triggers) & ~recall, "recall": recall}


def accuracy_at(predictions: np.ndarray, seq: np.ndarray, masks: dict[str, np.ndarray]) -> dict[str, float]:
    """Share of the masked positions where ``predictions`` (``(n, length)`` tokens) is the next token."""
    right = predictions == seq[:, 1:]
    return {name: float(right[mask].mean()) if mask.any() else float("nan") for name, mask in masks.items()}


def trigger_accuracy(model: GPT, seq: np.ndarray, masks: dict[str, np.ndarray]) -> dict[str, float]:
    """``accuracy_at`` of ``model``'s next-token guesses on the held-out ``seq``."""
    predictions = _chunked(lambda part: model.cpu()(part[:, :-1]).argmax(dim=-1).numpy(), torch.from_numpy(seq))
    return accuracy_at(predictions, seq, masks)


MEMORIES = ("W_OV of layer 2", "W_KQ of layer 2", "W_KQ of layer 1")  # in the order Bietti et al. see them form


def _head_matrices(attention: nn.Module) -> tuple[list[Tensor], Tensor]:
    """Each head's ``W_KQ = W_Q^T W_K`` (the score of query x against key y is ``x^T W_KQ y``, unscaled) and the
    layer's ``W_OV`` (what it writes for a value x), from the fused projections."""
    d = attention.proj.weight.shape[0]
    w_q, w_k, w_v = attention.qkv.weight.split(d)
    size = d // attention.n_head
    heads = [slice(h * size, (h + 1) * size) for h in range(attention.n_head)]
    return [w_q[h].T @ w_k[h] for h in heads], attention.proj.weight @ w_v


def trigger_memories(model: GPT, task: TriggerTask) -> list[float]:
    """Bietti et al.'s memory-recall probes of a two-layer GPT, in the order of ``MEMORIES``: layer 2 reads an
    output token's embedding out as that token; layer 2 matches a trigger against the key whose predecessor,
    copied by layer 1, is that trigger; layer 1 sends each position to the one before. Each key-query memory is
    read in its best head."""
    tokens, unembed, positions = model.wte.weight, model.head.weight, model.wpe
    first, second = (_head_matrices(block.attn) for block in model.blocks[:2])
    outputs = torch.from_numpy(task.outputs_possible)
    triggers = torch.from_numpy(task.candidates)  # every token, where sequences draw their own triggers
    out_recall = probes.recall_share(probes.bilinear_scores(tokens[outputs], second[1].T, unembed), outputs)
    copied = tokens @ first[1].T  # layer 1's write for each token it attends to
    match = max(probes.recall_share(probes.bilinear_scores(tokens[triggers], kq, copied), triggers) for kq in second[0])
    later = torch.arange(1, len(positions))
    previous = max(
        probes.recall_share(probes.causal(probes.bilinear_scores(positions, kq, positions))[later], later - 1)
        for kq in first[0]
    )
    return [out_recall, match, previous]


def previous_token_weight(model: GPT, seq: np.ndarray, triggers: np.ndarray) -> dict[str, float]:
    """Layer 1's weight from each position onto the one before, averaged where that token is one of its sequence's
    ``triggers`` and elsewhere, in the head that puts the most on a trigger: a positional previous-token head
    weighs both alike."""
    steps = np.arange(1, seq.shape[1] - 1)
    weight = _chunked(
        lambda part: model(part[:, :-1], return_attention=True)[1][0].double().numpy()[:, :, steps, steps - 1],
        torch.from_numpy(seq),
    )  # (B, H, T - 1)
    trigger_before = is_trigger(seq[:, :-2], triggers)[:, None].repeat(weight.shape[1], axis=1)
    if not trigger_before.any():
        return {"after_trigger": float("nan"), "elsewhere": float(weight.mean())}
    after = np.where(trigger_before, weight, np.nan)
    head = int(np.nanargmax(np.nanmean(after, axis=(0, 2))))
    return {
        "after_trigger": float(weight[:, head][trigger_before[:, head]].mean()),
        "elsewhere": float(weight[:, head][~trigger_before[:, head]].mean()),
    }


def trigger(config: dict[str, Any], ctx: RunContext) -> TriggerData:
    """One- and two-layer transformers trained on the trigger task; accuracy on the outputs of triggers."""
    task = trigger_task(config)
    schedule = _schedule(config, "trigger_steps")
    runs = {
        kind: train(
            lambda n=n: GPT(_gpt(config, n, "trigger_tokens", "trigger_T")),
            task,
            schedule,
            ctx.seeds,
            ctx.device,
            progress=ctx.progress,
            probe=partial(trigger_memories, task=task) if n == 2 else None,
        )
        for kind, n in KINDS.items()
    }
    seq, triggers = trigger_held_out(config)
    masks = output_positions(task, seq, triggers)
    accuracy: dict[str, dict[str, list[float]]] = {name: {} for name in masks}
    for kind, run in runs.items():
        for model in run.models:
            for name, value in trigger_accuracy(model, seq, masks).items():
                accuracy[name].setdefault(kind, []).append(value)
    previous = [previous_token_weight(model, seq, triggers) for model in runs["two_layers"].models]
    data: TriggerData = {
        "eval_steps": runs["two_layers"].eval_steps,
        "eval_loss": {kind: run.eval_loss for kind, run in runs.items()},
        "chance": task.chance,
        "accuracy": accuracy,
        "positions": {name: int(mask.sum()) for name, mask in masks.items()},
        "previous_weight": {part: [weights[part] for weights in previous] for part in ("after_trigger", "elsewhere")},
        "memory_names": list(MEMORIES),
        "memories": runs["two_layers"].probes,
        "still_descending": {kind: int(still_descending(run, LOSS_NOISE).sum()) for kind, run in runs.items()},
    }  # type: ignore[typeddict-item]
    return data


# ---------------------------------------------------------------- the trigger task's width against its length
class TriggerWidthData(TypedDict):
    T: int  # tokens read (width_T)
    widths: list[int]
    eval_steps: list[int]
    memory_names: list[str]
    memories: list[list[list[list[float]]]]  # width x seed x evaluation x memory, the recall probes
    recall: list[list[float]]  # width x seed: accuracy on a trigger's output seen earlier in the sequence
    previous_weight: dict[str, list[list[float]]]  # "after_trigger" / "elsewhere" -> width x seed
    still_descending: list[int]  # per width, runs whose held-out loss was still falling at the end


def trigger_width(config: dict[str, Any], ctx: RunContext) -> TriggerWidthData:
    """Two-layer GPTs on the trigger task at ``width_T`` tokens, one ensemble per width of ``trigger_widths``: where
    layer 1 stores the positional previous-token memory and where it looks back by a trigger's content instead."""
    at = width_config(config)
    task = trigger_task(at)
    seq, triggers = trigger_held_out(at)
    masks = output_positions(task, seq, triggers)
    # the curves serve only to say whether a run still descends: at most eval_size sequences, where a reader's few
    # held-out sequences at a long length and a wide model would otherwise make each evaluation cost minutes
    schedule = replace(_schedule(config, "trigger_steps"), eval_size=min(CURVE_SEQUENCES, config["eval_size"]))
    widths = trigger_widths(config)
    runs = [
        train(
            lambda width=width: GPT(_gpt({**at, "d_model": width}, 2, "trigger_tokens", "trigger_T")),
            task,
            schedule,
            ctx.seeds,
            ctx.device,
            progress=ctx.progress,
            probe=partial(trigger_memories, task=task),
        )
        for width in widths
    ]
    previous = [[previous_token_weight(model, seq, triggers) for model in run.models] for run in runs]
    data: TriggerWidthData = {
        "T": config["width_T"],
        "widths": widths,
        "eval_steps": runs[0].eval_steps,
        "memory_names": list(MEMORIES),
        "memories": [run.probes for run in runs],
        "recall": [[trigger_accuracy(model, seq, masks)["recall"] for model in run.models] for run in runs],
        "previous_weight": {
            part: [[weights[part] for weights in per_width] for per_width in previous]
            for part in ("after_trigger", "elsewhere")
        },
        "still_descending": [int(still_descending(run, LOSS_NOISE).sum()) for run in runs],
    }  # type: ignore[typeddict-item]
    return data


# ---------------------------------------------------------------- Bietti et al.'s simplified model
class MemoriesData(TypedDict):
    memory_names: list[str]
    eval_steps: list[int]
    eval_loss: list[list[float]]  # seeds x evaluations
    memories: list[list[list[float]]]  # seed x evaluation x memory, the recall probes during training
    still_descending: int


def memory_task(config: dict[str, Any]) -> TriggerTask:
    """The trigger task at ``memory_T`` tokens, scored only where the output is recalled, as Bietti et al. train the
    simplified model."""
    return TriggerTask(
        config["trigger_tokens"],
        config["triggers"],
        config["memory_T"],
        BIGRAM_CONCENTRATION,
        config["seed"],
        scored="recall",
        zipf=config["trigger_zipf"],
        choice=config["trigger_choice"],
    )


def memory_model(
    config: dict[str, Any],
    trained: tuple[str, ...] = AssociativeMemories.MEMORIES,
    start: dict[str, Tensor] | None = None,
) -> AssociativeMemories:
    """The simplified model of the chapter's trigger task, its random embeddings drawn from the current seed: all
    three memories trained from zero, or those ``trained`` from ``start``."""
    return AssociativeMemories(config["trigger_tokens"], config["memory_T"], config["memory_d"], trained, start)


def probe_scores(model: AssociativeMemories, name: str, weight: Tensor, task: TriggerTask) -> tuple[Tensor, Tensor]:
    """The scores a recall probe of memory ``name`` counts, read on ``weight`` in place of the model's matrix (one
    row per association, one column per candidate), and each association's target: ``ov2`` reads each output
    token's embedding out as that token (against every token); ``kq2`` matches each trigger against the copy
    ``W_OV1 e`` of every token, best on the trigger's own; ``kq1`` sends each position to the one before (against
    every earlier one, later keys ruled out)."""
    if name == "ov2":
        outputs = torch.from_numpy(task.outputs_possible)
        return probes.bilinear_scores(model.tokens[outputs], weight.T, model.outputs), outputs
    if name == "kq2":
        triggers = torch.from_numpy(task.triggers)
        return probes.bilinear_scores(model.tokens[triggers], weight, model.tokens @ model.ov1.T), triggers
    later = torch.arange(1, len(model.positions))
    return probes.causal(probes.bilinear_scores(model.positions, weight, model.positions))[later], later - 1


def memory_probes(model: AssociativeMemories, task: TriggerTask) -> list[float]:
    """The recall probes of the simplified model's three memories (:func:`probe_scores`), in the order of
    ``MEMORIES``."""
    return [
        probes.recall_share(*probe_scores(model, name, getattr(model, name), task)) for name in ("ov2", "kq2", "kq1")
    ]


def memory_schedule(config: dict[str, Any]) -> TrainConfig:
    """Plain gradient steps of constant size on fresh sequences, all three memories at once, evaluated and probed
    100 times: the first two memories form within a few dozen steps of each other."""
    return plain_steps(config, "memory_steps", "memory_lr", 100)


def memories(config: dict[str, Any], ctx: RunContext) -> MemoriesData:
    """Bietti et al.'s simplified model: its three memories trained together, probed along the way."""
    task = memory_task(config)
    run = train(
        lambda: memory_model(config),
        task,
        memory_schedule(config),
        ctx.seeds,
        ctx.device,
        progress=ctx.progress,
        probe=partial(memory_probes, task=task),
    )
    data: MemoriesData = {
        "memory_names": list(MEMORIES),
        "eval_steps": run.eval_steps,
        "eval_loss": run.eval_loss,
        "memories": run.probes,
        "still_descending": int(still_descending(run, LOSS_NOISE).sum()),
    }  # type: ignore[typeddict-item]
    return data


# ---------------------------------------------------------------- the memories one at a time
SEPARATE_ORDER = ("ov2", "kq2", "kq1")  # the model's matrices in the order of ``MEMORIES``, top down


class SeparateData(TypedDict):
    memory_names: list[str]
    joint_steps: list[int]  # the memories section's evaluated steps
    joint: list[list[list[float]]]  # its probes, seed x evaluation x memory (the three trained together)
    stage_steps: list[int]  # evaluated steps within each stage's run, the same for every stage
    stages: list[list[list[list[float]]]]  # stage x seed x evaluation x memory: the probes, one memory trained
    stage_updates: list[list[int]]  # seed x stage: the updates its memory took to form (-1: not within the budget)


SEPARATE_HELD_OUT = 8  # a stage is read by its probes alone; the held-out loss the trainer logs at each of its 100
# evaluations is never used, and at 256 sequences it took half the section's time


def separate_schedule(config: dict[str, Any]) -> TrainConfig:
    """A stage's plain gradient steps, of the joint run's size, probed 100 times."""
    return plain_steps(config, "separate_steps", "memory_lr", 100, SEPARATE_HELD_OUT)


def separate(config: dict[str, Any], ctx: RunContext, memories: MemoriesData) -> SeparateData:
    """The simplified model's memories trained one at a time, top down: each stage trains its memory until it has
    formed (recall ``FORMED``), and the next starts from there (a seed whose memory never formed goes on from the
    stage's end); set beside the memories section's joint run."""
    task = memory_task(config)
    probe = partial(memory_probes, task=task)
    starts: list[dict[str, Tensor]] = [{} for _ in ctx.seeds]
    runs, updates = [], []
    for index, name in enumerate(SEPARATE_ORDER):
        makers = [partial(memory_model, config, (name,), start) for start in starts]
        run = train(makers, task, separate_schedule(config), ctx.seeds, ctx.device, progress=ctx.progress, probe=probe)
        formed = theory.first_formed(run.eval_steps, run.probes)[:, index]
        needed = [int(step) + 1 if np.isfinite(step) else -1 for step in formed]
        runs.append(run)
        updates.append(needed)
        if index + 1 < len(SEPARATE_ORDER):
            ended = []
            for seed, maker, model, steps in zip(ctx.seeds, makers, run.models, needed):
                if steps > 0:  # the same seed retraced to the update its memory formed at
                    retrace = replace(separate_schedule(config), steps=steps)
                    model = train(maker, task, retrace, [seed], ctx.device).models[0]
                ended.append({n: getattr(model, n).detach().clone() for n in SEPARATE_ORDER})
            starts = ended
    return {
        "memory_names": list(MEMORIES),
        "joint_steps": memories["eval_steps"],
        "joint": memories["memories"],
        "stage_steps": runs[0].eval_steps,
        "stages": [run.probes for run in runs],
        "stage_updates": [list(seed) for seed in zip(*updates)],
    }  # type: ignore[typeddict-item]


# ---------------------------------------------------------------- three gradient steps, one per memory
STEP_CHUNK = 256  # sequences per chunk of a population gradient
STEP_PARTS = 64  # equal parts of its chunks, whose gradients give each probe margin's standard error
STEP_HELD_OUT = 1024  # held-out sequences on which the recall accuracy after the steps is read


class ThreeStepsData(TypedDict):
    width: int  # the orthonormal parts' width, 3 N + 2 T
    parts: int  # the parts of each gradient's sequences that give the margins' standard errors
    start_gradients: list[float]  # Frobenius norms of dL/dW_KQ1 and dL/dW_KQ2 at zero, in that order
    after_first_gradients: list[float]  # |dL/dW_KQ1| after the first step, as the model is and with it cut
    chance: float  # recall accuracy of a uniform guess among the possible outputs
    first_accuracy: float  # recall accuracy after the first step
    first_probes: list[float]  # the three probes (``memory_probes``) after the first step
    first_margins: list[list[float]]  # per output token: W_OV2's probe margin on the first step and its error
    second_margins: list[list[float]]  # per trigger: W_KQ2's probe margin on the second step and its error
    second_sizes: list[float]  # the lengths of the second step tried
    probes: list[list[float]]  # second length x memory: the probes after the three steps
    lags: list[list[int]]  # second length x query position: how far back W_KQ1's largest positional score lies
    lag_margins: list[list[list[float]]]  # second length x query position 1..T-1: W_KQ1's margin and its error
    accuracy: list[float]  # second length: recall accuracy after the three steps
    cut_probes: list[list[float]]  # the same with the first step's writing on layer 1's copies cut
    cut_lags: list[list[int]]
    cut_lag_margins: list[list[list[float]]]
    widths_length: float  # the second length at which the random widths step: the best of the orthonormal ones
    widths: list[int]  # widths of random (not orthonormal) parts
    width_probes: list[list[float]]  # width x memory
    width_lags: list[list[int]]
    recalls: list[int]  # the scored recalls in each memory's sequences (W_OV2's, W_KQ2's, W_KQ1's)


def steps_task(config: dict[str, Any]) -> TriggerTask:
    """The trigger task at ``steps_T`` tokens, scored where the output is recalled (as the memories section)."""
    return replace(memory_task(config), length=config["steps_T"])


def population_gradient(
    model: AssociativeMemories, name: str, config: dict[str, Any], bar: tqdm | None = None, samples: int = 0
) -> tuple[Tensor, Tensor]:
    """The gradient of the scored loss on memory ``name`` over ``steps_samples`` fresh sequences (or ``samples``),
    each scored token weighing the same: the population gradient, by Monte Carlo; and the same over each of
    ``STEP_PARTS`` equal parts of the sequences ``(parts, d, d)``, for its error. The sequences are fixed by the
    memory's name and the seed, the same for every model stepped (common random numbers); ``bar`` counts them."""
    task = steps_task(config)
    generator = torch.Generator().manual_seed(member_seed("induction", "three steps", name, config["seed"]))
    weight = getattr(model, name)

    def chunk(size: int) -> tuple[Tensor, int]:
        inputs, targets = task.sample(size, generator)
        scored = targets != IGNORE_INDEX
        if bar is not None:
            bar.update(size)
        if not scored.any():
            return torch.zeros_like(weight), 0
        loss = F.cross_entropy(model(inputs)[scored], targets[scored], reduction="sum")
        return torch.autograd.grad(loss, weight)[0], int(scored.sum())

    samples = samples or config["steps_samples"]
    sizes = [STEP_CHUNK] * (samples // STEP_CHUNK) + [samples % STEP_CHUNK] * bool(samples % STEP_CHUNK)
    chunks = calibrated_map(chunk, sizes)
    groups = np.array_split(np.arange(len(chunks)), min(STEP_PARTS, len(chunks)))
    sums = torch.stack([sum((chunks[i][0] for i in group), torch.zeros_like(weight)) for group in groups])
    counts = torch.tensor([sum(chunks[i][1] for i in group) for group in groups], dtype=weight.dtype)
    return sums.sum(dim=0) / counts.sum().clamp(min=1), sums / counts.clamp(min=1)[:, None, None]


def sample_recalls(name: str, config: dict[str, Any]) -> int:
    """The scored recalls in the sequences :func:`population_gradient` draws for memory ``name``: the sample's
    whole information about the memory's associations."""
    task = steps_task(config)
    generator = torch.Generator().manual_seed(member_seed("induction", "three steps", name, config["seed"]))
    samples = config["steps_samples"]
    sizes = [STEP_CHUNK] * (samples // STEP_CHUNK) + [samples % STEP_CHUNK] * bool(samples % STEP_CHUNK)
    return sum(int((task.sample(size, generator)[1] != IGNORE_INDEX).sum()) for size in sizes)


def step_margins(
    model: AssociativeMemories, name: str, gradient: Tensor, parts: Tensor, task: TriggerTask
) -> list[list[float]]:
    """Per association of memory ``name``, stepped from zero along ``-gradient``: how far its target's probe score
    stands above the best other candidate's, and the standard error of that margin over the gradient's ``parts``
    (the other candidate the best on the whole gradient; NaN with fewer than two parts)."""
    scores, targets = probe_scores(model, name, -gradient, task)
    rows = torch.arange(len(targets))
    others = scores.clone()
    others[rows, targets] = -math.inf
    runner = others.argmax(dim=-1)

    def margin(read: Tensor) -> Tensor:
        return read[rows, targets] - read[rows, runner]

    per_part = torch.stack([margin(probe_scores(model, name, -part, task)[0]) for part in parts])
    whole = margin(scores)
    error = per_part.std(dim=0) / math.sqrt(len(parts)) if len(parts) > 1 else torch.full_like(whole, math.nan)
    return torch.stack([whole, error], dim=-1).tolist()


def take_step(model: AssociativeMemories, name: str, size: float, gradient: Tensor, norm: float | None = None) -> None:
    """One gradient step on memory ``name`` of Frobenius length ``size`` (none where the gradient vanishes), or
    of ``size / norm`` times the gradient where ``norm`` is given."""
    norm = float(gradient.norm()) if norm is None else norm
    if norm > 0:
        with torch.no_grad():
            getattr(model, name).sub_(size * gradient / norm)


def positional_lags(model: AssociativeMemories) -> list[int]:
    """For each query position, how many positions back W_KQ1's largest positional score lies (keys after it ruled
    out; 0 at the first position)."""
    with torch.no_grad():
        scores = probes.causal(probes.bilinear_scores(model.positions, model.kq1, model.positions))
    return (torch.arange(len(scores)) - scores.argmax(dim=-1)).tolist()


def recall_accuracy(model: AssociativeMemories, config: dict[str, Any]) -> float:
    """Share of the scored tokens (recalls) of held-out sequences that the model's largest logit predicts."""
    inputs, targets = steps_task(config).sample(STEP_HELD_OUT, _generator(config, "three steps held out"))
    right, scored = 0, 0
    with torch.no_grad():
        for x, y in zip(inputs.split(STEP_CHUNK), targets.split(STEP_CHUNK)):
            kept = y != IGNORE_INDEX
            right += int((model(x).argmax(dim=-1)[kept] == y[kept]).sum())
            scored += int(kept.sum())
    return right / scored if scored else math.nan


def stepped_start(config: dict[str, Any], width: int, orthonormal: bool) -> AssociativeMemories:
    """The simplified model at zero (both attentions uniform, nothing written), its fixed parts drawn by its own
    settings."""
    torch.manual_seed(member_seed("induction", "three steps", width, orthonormal, config["seed"]))
    return AssociativeMemories(config["trigger_tokens"], config["steps_T"], width, orthonormal=orthonormal)


class Stepped(NamedTuple):
    first: AssociativeMemories  # after the first step
    models: list[AssociativeMemories]  # after all three, one per length of the second step
    margins: dict[str, list]  # "ov2", "kq2": per association [margin, error]; "kq1": per length, the same


def three_step_runs(
    config: dict[str, Any], start: AssociativeMemories, sizes: list[float], bar: tqdm | None = None, cut: bool = False
) -> Stepped:
    """The simplified model after one population gradient step on each memory, top down (``W_OV2``, ``W_KQ2``,
    ``W_KQ1``), one model per length of the second step in ``sizes`` (the first and third are ``step_first``,
    ``step_third``), with each step's probe margins. With ``cut`` the first step keeps only what it writes on the
    token embeddings (its length as uncut), so that layer 2 reads nothing of layer 1's copies."""
    task = steps_task(config)
    model = copy.deepcopy(start)
    gradient, parts = population_gradient(model, "ov2", config, bar)
    norm = float(gradient.norm())
    if cut:
        keep = model.tokens.T @ model.tokens
        gradient, parts = gradient @ keep, parts @ keep
    margins: dict[str, list] = {"ov2": step_margins(model, "ov2", gradient, parts, task)}
    take_step(model, "ov2", config["step_first"], gradient, norm)
    gradient, parts = population_gradient(model, "kq2", config, bar)
    margins["kq2"] = step_margins(model, "kq2", gradient, parts, task)
    models, margins["kq1"] = [], []
    for size in sizes:
        stepped = copy.deepcopy(model)
        take_step(stepped, "kq2", size, gradient)
        third, third_parts = population_gradient(stepped, "kq1", config, bar)
        margins["kq1"].append(step_margins(stepped, "kq1", third, third_parts, task))
        take_step(stepped, "kq1", config["step_third"], third)
        models.append(stepped)
    return Stepped(model, models, margins)


def three_steps(config: dict[str, Any], ctx: RunContext) -> ThreeStepsData:
    """Bietti et al.'s three gradient steps on the population loss of the simplified model, top down, in the limit of
    infinite width (orthonormal parts): the memories after each step with their margins over the Monte Carlo error,
    for several lengths of the second step, as the model is and with the first step's writing on layer 1's copies
    cut; then random parts of finite width at the best of those lengths."""
    task, N, T = steps_task(config), config["trigger_tokens"], config["steps_T"]
    width = 3 * N + 2 * T
    sizes = sorted(set(float_list(config["step_second"])))
    widths = int_list(config["steps_widths"])
    gradients = 2 * (2 + len(sizes)) + 3 * len(widths)  # as it is and cut, then each random width
    total = gradients * config["steps_samples"] + 4 * STEP_CHUNK
    progress = sys.stderr.isatty() if ctx.progress is None else ctx.progress
    with tqdm(total=total, desc="three steps: sequences", disable=not progress, leave=False, file=sys.stderr) as bar:
        start = stepped_start(config, width, True)
        start_gradients = [
            float(population_gradient(start, name, config, bar, STEP_CHUNK)[0].norm()) for name in ("kq1", "kq2")
        ]
        stepped = three_step_runs(config, start, sizes, bar)
        cut = three_step_runs(config, start, sizes, bar, cut=True)
        after_first = [
            float(population_gradient(run.first, "kq1", config, bar, STEP_CHUNK)[0].norm()) for run in (stepped, cut)
        ]
        lags = [positional_lags(m) for m in stepped.models]
        best = sizes[int(np.argmax([theory.previous_share(lag) for lag in lags]))]
        narrow = [three_step_runs(config, stepped_start(config, w, False), [best], bar).models[0] for w in widths]
    data: ThreeStepsData = {
        "width": width,
        "parts": min(STEP_PARTS, -(-config["steps_samples"] // STEP_CHUNK)),
        "start_gradients": start_gradients,
        "after_first_gradients": after_first,
        "chance": 1 / len(task.outputs_possible),
        "first_accuracy": recall_accuracy(stepped.first, config),
        "first_probes": memory_probes(stepped.first, task),
        "first_margins": stepped.margins["ov2"],
        "second_margins": stepped.margins["kq2"],
        "second_sizes": sizes,
        "probes": [memory_probes(m, task) for m in stepped.models],
        "lags": lags,
        "lag_margins": stepped.margins["kq1"],
        "accuracy": [recall_accuracy(m, config) for m in stepped.models],
        "cut_probes": [memory_probes(m, task) for m in cut.models],
        "cut_lags": [positional_lags(m) for m in cut.models],
        "cut_lag_margins": cut.margins["kq1"],
        "recalls": [sample_recalls(name, config) for name in ("ov2", "kq2", "kq1")],
        "widths_length": best,
        "widths": widths,
        "width_probes": [memory_probes(m, task) for m in narrow],
        "width_lags": [positional_lags(m) for m in narrow],
    }
    return data
