"""Chapter 5: induction heads on in-context Markov chains (Nichani, Damian and Lee 2024; Edelman et al. 2024).

Every sequence draws its own transition kernel from a Dirichlet prior, so no fixed weights can
predict it: a model must count transitions in the sequence it reads. Sections: the loss levels a
model can sit at and the chi-square information that ranks each position's possible parents
(exact or fixed-seed Monte Carlo); an explicit two-layer induction head equal to the count
estimator, and an order-m one in three layers of one head each (exact); the first gradient on
layer 1 (autograd) and the first stage of Nichani et al.'s staged training; one- and two-layer
transformers trained online (their final loss against the levels, layer 1's attention on the
causal graph, and kernels of another prior); two layers trained on a prior of restricted support
and tested outside it; Bietti et al.'s trigger task, and their simplified model in which only
three associative memories train.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any, TypedDict

import numpy as np
import torch
from scipy.stats import t as student_t
from torch import Tensor, nn

from .. import probes
from ..calibration import calibrated_map, count_chunks
from ..claims import Claim
from ..curves import budget_ran_out, still_descending
from ..data.incontext import InContextMarkov, chain_parents, tree_parents
from ..data.trigger import TriggerTask
from ..model import GPT, AssociativeMemories, Disentangled, GPTConfig, check_heads
from ..profiles import Custom, Interval, Param, at_least, in_range, positive, with_reference
from ..runtime import member_seed
from ..sections import Chapter, Outcome, RunContext, Section
from ..theory import induction as theory
from ..theory.induction import FORMED, PARENT_MASS, carried_weight, judged_positions
from ..trainer import TrainConfig, train

GRAPHS = ("chain", "tree")
MC_SIGMAS = 3.0  # a Monte Carlo difference counts when it exceeds three of its standard errors
RIVALS = {"alpha/2": 0.5, "2 alpha": 2.0}  # count estimators smoothed otherwise, the posterior predictive's rivals
GAP_CLOSED = 0.5  # a model nearer the Bayes level than the unigram one uses the transitions it has read
LOSS_NOISE = 1e-3  # a held-out loss that moved less than this has hardly started
GRADIENT_CHUNKS = 32  # equal parts of the sample whose gradients give the standard error
FAMILY_LEVEL = 0.01  # chance that any of a row's many comparisons is significant when nothing is wrong
MAX_ENUMERATED = 50_000  # sequences the construction is checked on, at most (every one of k^(T+1))


def _check_graph(name: str) -> None:
    if name not in GRAPHS:
        raise ValueError(f"the causal graph is one of {', '.join(GRAPHS)}, got {name!r}")


GRAPH = Custom(_check_graph, "chain (the parent is the token before) or tree (a fixed random parent)",
               lambda rng, near: GRAPHS[int(rng.integers(len(GRAPHS)))])

PARAMS = (
    Param("k", int, 3, 3, "states of the in-context chains", in_range(2, 8)),
    Param("alpha", float, 1.0, 1.0, "Dirichlet concentration of each kernel row (the prior)", Interval(0.05, 20.0)),
    Param("graph", str, "chain", "tree", "causal graph: chain or tree", GRAPH),
    Param("window", int, 4, 8, "a tree position's parent is drawn among this many positions before it", at_least(1)),
    Param("seed", int, 0, 0, "seed of the tree, the Monte Carlo estimates and the held-out sequences", at_least(0)),
    Param("T", int, 32, 128, "tokens a model reads", in_range(4, 512)),
    Param("level_samples", int, 20000, 100000, "sequences of the Monte Carlo loss levels", at_least(2)),
    Param("chi2_kernels", int, 2000, 10000, "prior draws averaged in the chi-square information", at_least(2)),
    Param("chi2_positions", int, 32, 64, "positions i (from the start) whose chi-square information is tabulated",
          at_least(2)),
    Param("construct_k", int, 3, 3, "states of the induction-head construction's check", in_range(2, 4)),
    Param("construct_T", int, 7, 8, "tokens of the construction's check (every sequence is enumerated)",
          in_range(2, 12)),
    Param("beta", float, 30.0, 30.0, "attention score scale of the constructions", Interval(5.0, 60.0)),
    Param("order", int, 2, 2, "order m of the chain the order-m section builds its induction head for",
          in_range(1, 4)),
    Param("grad_samples", int, 16000, 64000, "sequences of the gradient at the staged initialisation", at_least(2)),
    Param("grad_beta", float, 3.0, 3.0, "layer 2's score scale at the staged initialisation", Interval(0.1, 30.0)),
    Param("stage_steps", int, 600, 6000, "gradient steps of layer 1 alone (Nichani et al.'s first stage)",
          at_least(1)),
    Param("stage_lr", float, 60.0, 60.0, "step size of those plain gradient steps", positive),
    Param("d_model", int, 32, 64, "width of the trained transformers", at_least(1)),
    Param("n_head", int, 1, 2, "attention heads per layer (a tree needs two)", at_least(1)),
    Param("steps", int, 3000, 20000, "training steps (fresh sequences each step)", at_least(1)),
    Param("batch_size", int, 64, 64, "sequences per step", at_least(1)),
    Param("lr", float, 2e-2, 3e-3, "AdamW learning rate (cosine schedule after warm-up)", positive),
    Param("warmup", int, 50, 200, "linear warm-up steps", at_least(0)),
    Param("ood_alpha", float, 0.3, 0.3, "Dirichlet concentration of a second prior whose kernels test the models",
          Interval(0.05, 20.0)),
    Param("eval_size", int, 2048, 8192, "held-out sequences for the final losses, the attention and the OOD test",
          at_least(2)),
    Param("gamma", float, 0.2, 0.2, "floor of the support section's kernels: every entry at least gamma / k",
          Interval(0.01, 0.99)),
    Param("trigger_tokens", int, 16, 64, "tokens of the trigger task (Bietti et al.: 65 characters)", in_range(4, 256)),
    Param("triggers", int, 3, 5, "trigger tokens, each followed by its sequence's own output", at_least(1)),
    Param("trigger_T", int, 64, 256, "tokens a model reads in the trigger task", in_range(4, 512)),
    Param("trigger_steps", int, 1000, 20000, "training steps on the trigger task", at_least(1)),
    Param("memory_T", int, 64, 256, "tokens Bietti et al.'s simplified model reads (of the trigger task)",
          in_range(4, 512)),
    Param("memory_d", int, 64, 256, "width of the simplified model (its random embeddings)", at_least(1)),
    Param("memory_steps", int, 400, 10000, "gradient steps of the simplified model's three memories together",
          at_least(1)),
    Param("memory_lr", float, 10.0, 30.0, "step size of those plain gradient steps", positive),
)
# Sized by a one-seed pilot on the 2-core CPU (193 s alone for both depths): the tree at T = 64 with two heads left
# the unigram plateau after about 2500 steps and had settled by 6000, at gap closed 0.91 and parent weight 0.61.
# The trigger task at the seed's 65 tokens: a one-seed pilot at T = 256 (1500 steps, 5.4 min alone) formed the head
# after about 1000 steps and was still descending. Five seeds at T = 128 and 3000 steps (21 min alone) left 3 of 5
# two-layer runs descending at recall accuracy 0.36 to 0.70 (results/attempts/). At T = 256, the seed's length, a
# training step of both depths and 5 seeds takes 1.19 s alone (0.51 s at T = 128), and a trigger comes back more
# often per sequence: 2400 steps, about 50 minutes. The first stage (layer 1 of the disentangled model alone) at
# the tree's T = 64: 2000 steps of size 60 took a two-seed pilot past 0.95 on the parent at every judged position.
# Bietti et al.'s simplified model on the 65 tokens: one-seed pilots of 1500 plain gradient steps of size 30 formed
# the three memories in order at T = 64 (d = 128; steps 37, 74, 148) and T = 128 (d = 128; 37, 37, 296; 93 s); at the
# seed's T = 256 with d = 256 (not d = 64, the quick value, at which the positional memory cannot form) they formed in
# order too (W_KQ1 at step 675; 544 s for 1500 steps of one seed), so five seeds of 3000 steps there would take about
# 90 minutes, over the hour a reference section may take.
PARAMS = with_reference(PARAMS, {"graph": "tree", "T": 64, "n_head": 2, "d_model": 64, "steps": 10000, "lr": 1e-2,
                                 "stage_steps": 3000,
                                 "eval_size": 8192, "trigger_tokens": 65, "triggers": 5, "trigger_T": 256,
                                 "trigger_steps": 2400, "memory_T": 128, "memory_d": 128, "memory_steps": 3000,
                                 "memory_lr": 30.0})


def check(config: dict[str, Any], n_seeds: int) -> None:
    """d_model divisible by n_head, two heads for a tree, a construction check small enough to enumerate, and
    enough gradient samples for its error; before any section runs."""
    check_heads(config["d_model"], config["n_head"])
    if config["graph"] == "tree" and config["n_head"] < 2:
        raise ValueError("a tree needs n_head >= 2: layer 1 copies the parent of each token (for the keys) and the "
                         "parent of the next one (for the query), which differ in a tree")
    if config["triggers"] > config["trigger_tokens"] - 2:
        raise ValueError(f"the triggers leave at least two tokens for outputs: triggers <= trigger_tokens - 2, got "
                         f"{config['triggers']} of {config['trigger_tokens']}")
    if config["grad_samples"] < 2 * GRADIENT_CHUNKS:
        raise ValueError(f"the gradient's error needs grad_samples >= {2 * GRADIENT_CHUNKS}, "
                         f"got {config['grad_samples']}")
    if config["order"] >= config["construct_T"]:
        raise ValueError(f"an order-{config['order']} context is seen twice only in sequences longer than the "
                         f"order: construct_T > order, got construct_T = {config['construct_T']}")
    count = config["construct_k"] ** (config["construct_T"] + 1)
    if count > MAX_ENUMERATED:
        raise ValueError(f"the construction is checked on all construct_k^(construct_T+1) = {count} sequences; "
                         f"choose sizes with at most {MAX_ENUMERATED}")


def task_of(config: dict[str, Any]) -> InContextMarkov:
    """The chapter's in-context chain: the chain, or the tree drawn with ``seed``."""
    T = config["T"]
    parents = chain_parents(T) if config["graph"] == "chain" else tree_parents(T, config["window"], config["seed"])
    return InContextMarkov(config["k"], config["alpha"], parents)


def parent_positions(task: InContextMarkov, length: int | None = None) -> list[int]:
    """Each position's one parent, -1 at a root (JSON has no None in an int list), for the first ``length``."""
    return [-1 if p is None else p for p in theory.single_parents(task)][:length]


def _generator(config: dict[str, Any], purpose: str) -> torch.Generator:
    """A generator for one purpose, fixed by the chapter's own settings and not by the order of the sections."""
    return torch.Generator().manual_seed(member_seed("induction", purpose, config["seed"]))


# ---------------------------------------------------------------- loss levels and the chi-square information
class LevelsData(TypedDict):
    levels: dict[str, list[float]]  # uniform / unigram / bayes -> [loss, standard error] in nats per token
    rivals: dict[str, list[float]]  # smoothing alpha/2 and 2 alpha -> [its loss minus Bayes's, standard error]
    parents: list[int]  # each position's parent (-1 at a root)
    information: list[list[float]]  # row i: E_pi I_chi2(s_i; s_j) for j < i (NaN from j = i on)
    information_error: list[list[float]]  # their standard errors over the prior draws


def information_table(task: InContextMarkov, n_kernels: int, seed: int,
                      positions: int) -> tuple[np.ndarray, np.ndarray]:
    """``E_pi I_chi2(s_i; s_j)`` and its standard error for every pair ``j < i <= positions``, as square tables."""
    size = min(len(task.parents), positions + 1)
    mean, error = np.full((size, size), np.nan), np.full((size, size), np.nan)
    for i in range(1, size):
        mean[i, :i], error[i, :i] = theory.chi2_information(task, i, n_kernels, seed)
    return mean, error


def levels_claims(rivals: dict[str, list[float]], information: np.ndarray, parents: list[int]) -> list[Claim]:
    """The posterior predictive no worse than its rivals smoothed by alpha/2 and 2 alpha, and the parent first in
    chi-square information at every position."""
    ranked = [i for i in range(2, len(information)) if parents[i] >= 0]
    wrong = [i for i in ranked if int(np.argmax(information[i, :i])) != parents[i]]
    margins = [information[i, parents[i]] - np.delete(information[i, :i], parents[i]).max() for i in ranked]
    return [
        Claim.at_least("Bayes optimality: the loss of the count estimators smoothed by alpha/2 and by 2 alpha minus "
                       "the posterior predictive's, on the same sequences (the smaller, in standard errors)",
                       -MC_SIGMAS, min(diff / max(error, 1e-300) for diff, error in rivals.values()),
                       "no predictor beats the posterior predictive in expectation; three standard errors of the "
                       "paired Monte Carlo difference", digits=3),
        Claim.exact(f"data processing: the parent has the largest chi-square information with s_i, at each of the "
                    f"{len(ranked)} positions with a parent and another earlier position", "0 positions wrong",
                    f"{len(wrong)} positions wrong", "exact per kernel, so exact on average; "
                    f"smallest margin {min(margins, default=np.nan):.3g}"),
    ]


def levels(config: dict[str, Any], ctx: RunContext) -> Outcome[LevelsData]:
    """The uniform, unigram and Bayes levels on fixed-seed sequences, and the chi-square information table."""
    task = task_of(config)
    seq = task.sequences(config["level_samples"], _generator(config, "levels")).numpy()
    unigram = theory.sequence_losses(theory.unigram_predictive(task, seq), seq)
    bayes = theory.sequence_losses(theory.bayes_predictive(task, seq), seq)
    rivals = {name: list(_mean_and_error(theory.sequence_losses(theory.bayes_predictive(
        replace(task, alpha=factor * task.alpha), seq), seq) - bayes)) for name, factor in RIVALS.items()}
    information, error = information_table(task, config["chi2_kernels"], member_seed("chi2", config["seed"]),
                                            config["chi2_positions"])
    parents = parent_positions(task)
    data: LevelsData = {
        "levels": {"uniform": [float(np.log(task.n_states)), 0.0], "unigram": list(_mean_and_error(unigram)),
                   "bayes": list(_mean_and_error(bayes))},
        "rivals": rivals, "parents": parents, "information": information,
        "information_error": error}  # type: ignore[typeddict-item]
    return Outcome(levels_claims(rivals, information, parents), data)


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


def construction_claims(max_error: float, bound: float, sequences: int) -> list[Claim]:
    return [Claim.at_most(f"the two-layer construction writes the in-context count estimator (max error over all "
                          f"{sequences} sequences, positions whose token was seen before)", bound, max_error,
                          "softmax leakage T e^-beta (1 + 2 beta), derived; float64 round-off", digits=3)]


def construction(config: dict[str, Any], ctx: RunContext) -> Outcome[ConstructionData]:
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
        "k": k, "T": T, "beta": beta, "sequences": len(every),
        "max_error": float(np.abs(got - want)[seen].max()), "bound": leakage_bound(T, beta),
        "example": example[0].tolist(),
        "attention": [a[0, 0].numpy() for a in attention]}  # type: ignore[typeddict-item]
    return Outcome(construction_claims(data["max_error"], data["bound"], data["sequences"]), data)


# ---------------------------------------------------------------- the k-th order induction head
class HigherOrderData(TypedDict):
    order: int
    k: int
    T: int
    beta: float
    sequences: int  # every sequence of construct_T + 1 symbols
    max_error: float  # largest |construction - order-m count estimator| where the last m tokens were seen before
    bound: float  # the leakage bound (infinite where it says nothing)
    example: list[int]  # one sequence, for the figure
    attention: list[list[list[float]]]  # the construction's three attention patterns on it (layer x T x T)
    levels: dict[str, list[float]]  # on the order-m chain: uniform / unigram / bigram / bayes -> [loss, std error]
    levels_T: int  # the length of that chain (the chapter's T; the construction's is construct_T)


def higher_order_claims(max_error: float, bound: float, sequences: int,
                        order: int) -> tuple[list[Claim], tuple[str, ...]]:
    """The construction's row, or no row (with the reason) where the leakage bound is vacuous: two probability
    vectors are never more than 1 apart, so a bound of 1 or more cannot fail."""
    if not bound < 1:
        return [], (f"no row for the order-{order} construction: at this beta its leakage bound is {bound:.3g}, "
                    f"which two probability vectors never exceed; raise beta",)
    return [Claim.at_most(f"the three-layer construction writes the in-context order-{order} count estimator (max "
                          f"error over all {sequences} sequences, positions whose last {order} tokens were seen "
                          f"before)", bound, max_error, "softmax leakage of the three layers, derived "
                          "(higher_order_leakage); float64 round-off", digits=3)], ()


def _telling_example(inputs: np.ndarray, seen: np.ndarray) -> int:
    """A sequence for the figure: every symbol in it and as many windows seen before as any such sequence has (the
    middle one of those), so that layer 3 has matches to show."""
    varied = np.array([len(np.unique(row)) for row in inputs]) == inputs.max() + 1
    matches = np.where(varied, seen.sum(axis=1), -1)
    best = np.flatnonzero(matches == matches.max())
    return int(best[len(best) // 2])


def higher_order(config: dict[str, Any], ctx: RunContext) -> Outcome[HigherOrderData]:
    """The order-m induction head in three layers of one head each, against the order-m count estimator on every
    sequence of the chosen size; and the loss levels of an order-m chain."""
    k, T, beta, m = config["construct_k"], config["construct_T"], config["beta"], config["order"]
    every = np.stack(np.meshgrid(*[np.arange(k)] * (T + 1), indexing="ij"), axis=-1).reshape(-1, T + 1)
    model = theory.higher_order_head(k, m, T, beta)
    want = theory.count_predictive(InContextMarkov.chain(k, 1.0, T, order=m), every)
    with torch.no_grad():
        got = theory.higher_order_average(model, torch.from_numpy(every[:, :-1])).numpy()
    seen = ~np.isnan(want[..., 0])
    example = torch.from_numpy(every[_telling_example(every[:, :-1], seen), :-1])[None]
    with torch.no_grad():
        _, attention = model(example, return_attention=True)
    chain = InContextMarkov.chain(config["k"], config["alpha"], config["T"], order=m)
    levels = theory.order_levels(chain, config["level_samples"], member_seed("induction", "order", config["seed"]))
    data: HigherOrderData = {
        "order": m, "k": k, "T": T, "beta": beta, "sequences": len(every),
        "max_error": float(np.abs(got - want)[seen].max()), "bound": theory.higher_order_leakage(T, beta, m),
        "example": example[0].tolist(), "attention": [a[0, 0].numpy() for a in attention],  # type: ignore[misc]
        "levels": {name: list(level) for name, level in levels.items()}, "levels_T": config["T"]}
    claims, silent = higher_order_claims(data["max_error"], data["bound"], data["sequences"], m)
    return Outcome(claims, data, silent)


# ---------------------------------------------------------------- the first gradient
class GradientData(TypedDict):
    gradient: list[list[float]]  # dL/dA[t, j], layer 1's positional score from t to j, at the staged initialisation
    parents: list[int]


def significance(comparisons: int) -> float:
    """How many standard errors (estimated from GRADIENT_CHUNKS parts) make one of ``comparisons`` differences
    significant at FAMILY_LEVEL for the whole family (Bonferroni, Student's t)."""
    return float(student_t.ppf(1 - FAMILY_LEVEL / max(comparisons, 1), GRADIENT_CHUNKS - 1))


def gradient_claims(parts: np.ndarray, parents: list[int], scored: np.ndarray) -> list[Claim]:
    """The parent gets the most negative gradient at every position: holds where it is significantly first
    everywhere, fails where another position is significantly more negative anywhere, else undecided (more samples
    decide it). Each difference's error is taken over the parts, so the rows' sum-to-zero coupling is kept.

    Row ``t`` of layer 1 writes the key that layer 2 reads at ``t``, and only the ``scored`` queries (a ``(T,)``
    mask) at ``t`` or later read it: past the last of them the gradient is exactly zero, and no sample size would
    rank it, so those rows are not judged (a tree can end with positions whose child is not the next token)."""
    last = int(np.flatnonzero(scored).max(initial=-1))
    ranked = [t for t in range(2, min(parts.shape[1], last + 1)) if parents[t] >= 0]
    if not ranked:
        return []
    sigmas = significance(sum(t - 1 for t in ranked))
    wrong, resolved = 0, 0
    for t in ranked:
        p = parents[t]
        others = [j for j in range(t) if j != p]
        margins = parts[:, t, others] - parts[:, t, p, None]  # positive where the parent's gradient is more negative
        mean, error = margins.mean(axis=0), margins.std(axis=0, ddof=1) / np.sqrt(len(parts))
        wrong += bool((mean < -sigmas * error).any())
        resolved += bool((mean > sigmas * error).all())
    claim = Claim.exact(f"key lemma: at the staged initialisation the gradient on layer 1's score from t to its "
                        f"parent is the most negative, at each of the {len(ranked)} positions",
                        f"{len(ranked)} positions", f"{resolved} positions",
                        f"autograd on a fixed sample; a difference counts at {sigmas:.2f} of its errors over "
                        f"{len(parts)} parts (level {FAMILY_LEVEL:g} for all comparisons together: Bonferroni, "
                        f"Student's t); another position significantly more negative at {wrong}")
    return [claim if resolved == len(ranked) or wrong else
            replace(claim, holds=None, reason=f"{claim.reason}; undecided at this sample size: "
                                              f"more sequences (--set grad_samples=...) decide it")]


def gradient(config: dict[str, Any], ctx: RunContext) -> Outcome[GradientData]:
    """The first gradient on layer 1's positional scores, by autograd, at the hand-built head with layer 1 blank."""
    task = task_of(config)
    seq = task.sequences(config["grad_samples"], _generator(config, "gradient"))
    model = theory.staged_initialisation(config["k"], config["T"], config["grad_beta"])
    parts = theory.score_gradient(model, seq, GRADIENT_CHUNKS, task.parent_queries())
    parents = parent_positions(task, config["T"])
    data: GradientData = {"gradient": parts.mean(axis=0), "parents": parents}  # type: ignore[typeddict-item]
    claims = gradient_claims(parts, parents, task.parent_queries().numpy())
    return Outcome(claims, data, () if claims else (
        "key lemma: no position after the first two has a parent and is read by a scored query, so no gradient "
        "ranks a parent; a longer T gives some",))


# ---------------------------------------------------------------- the first stage, trained
class StagedData(TypedDict):
    eval_steps: list[int]
    eval_loss: list[list[float]]  # seed x evaluation, the scored targets of held-out sequences
    parents: list[int]
    parent_weight: list[list[list[float]]]  # seed -> head (one) -> per position t >= 1: softmax(A)[t, p(t)]
    attention: list[list[float]]  # softmax(A) of the first seed, T x T
    still_descending: int  # runs whose loss or worst judged weight on the parent was still moving at the end


WEIGHT_NOISE = 0.01  # a worst weight on the parent that rose less than this over a run has hardly started


def staged_schedule(config: dict[str, Any]) -> TrainConfig:
    """Plain gradient steps of constant size on fresh sequences, as the theorem's first stage takes them."""
    steps = config["stage_steps"]
    return TrainConfig(steps=steps, batch_size=config["batch_size"], lr=config["stage_lr"], schedule="constant",
                       optimizer="sgd", eval_every=max(1, steps // 40), eval_size=256)


def staged(config: dict[str, Any], ctx: RunContext) -> Outcome[StagedData]:
    """Nichani et al.'s first stage: layer 1's positional scores trained alone from zero, layer 2 held at the
    staged initialisation; the attention it ends with, against the graph."""
    task = replace(task_of(config), scored="parent_query")
    parents = parent_positions(task, config["T"])

    def attention(model: Disentangled) -> np.ndarray:
        return model.first_attention(config["T"]).detach().double().cpu().numpy()

    def worst(model: Disentangled) -> list[float]:
        return [float(carried_weight(parent_weight(attention(model)[None], parents), parents).min())]

    run = train(lambda: Disentangled(config["k"], config["T"], config["grad_beta"]), task, staged_schedule(config),
                ctx.seeds, ctx.device, progress=ctx.progress, probe=worst)
    tables = [attention(m) for m in run.models]
    moving = still_descending(run, LOSS_NOISE) | still_descending(run, WEIGHT_NOISE, curve=-run.probes[..., 0])
    data: StagedData = {
        "eval_steps": run.eval_steps, "eval_loss": run.eval_loss, "parents": parents,
        "parent_weight": [parent_weight(table[None], parents) for table in tables],
        "attention": tables[0],
        "still_descending": int(moving.sum()),
    }  # type: ignore[typeddict-item]
    claims, silent = staged_rows(config, data)
    return Outcome(claims, data, silent)


def staged_rows(config: dict[str, Any], data: StagedData) -> tuple[list[Claim], tuple[str, ...]]:
    """The first stage's rows, from its data alone (the reference check recomputes them); it leaves none out."""
    return staged_claims(data), ()


def staged_claims(data: StagedData) -> list[Claim]:
    """After the first stage, layer 1 puts more than half its weight on the parent at every judged position."""
    settled = budget_ran_out(data["still_descending"], "runs were still moving (loss or worst weight)",
                             "stage_steps")
    judged = judged_positions(data["parents"])
    per_seed = [float(carried_weight(w, data["parents"]).min()) for w in data["parent_weight"]]
    return [Claim.at_least(f"layer 1 trained alone by gradient descent (the first stage), every seed: its weight "
                           f"on the causal parent, worst of the first {len(judged)} positions", PARENT_MASS,
                           min(per_seed), "Thm (2): the first attention tends to the graph's adjacency, ‖A - G‖∞ ≲ "
                           "1/T; more weight on the parent than on all other positions together", digits=3
                           ).eventually(*settled).held_to_spread(PARENT_MASS, per_seed, "--seeds", upper=False)]


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


def _gpt(config: dict[str, Any], n_layer: int, vocab: str = "k", length: str = "T") -> GPTConfig:
    """The chapter's attention-only GPT, reading ``config[vocab]`` tokens over ``config[length]`` positions."""
    return GPTConfig(vocab_size=config[vocab], block_size=config[length], n_layer=n_layer, n_head=config["n_head"],
                     d_model=config["d_model"], tied=False, positional="learned", mlp=False)


def _schedule(config: dict[str, Any], steps_key: str = "steps") -> TrainConfig:
    """Online training for ``config[steps_key]`` steps with a cosine schedule; 40 evaluations on a small held-out
    set along the way."""
    steps = config[steps_key]
    return TrainConfig(steps=steps, batch_size=config["batch_size"], lr=config["lr"],
                       warmup=min(config["warmup"], steps - 1), eval_every=max(1, steps // 40), eval_size=256)


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
    levels = {"uniform": float(np.log(task.n_states)),
              "unigram": float(theory.sequence_losses(theory.unigram_predictive(task, array), array).mean()),
              "bayes": float(theory.sequence_losses(theory.bayes_predictive(task, array), array).mean())}
    loss = {kind: [float(_loss_per_sequence(m, seq).mean()) for m in ms] for kind, ms in models.items()}
    gap = levels["unigram"] - levels["bayes"]
    return {"levels": levels, "loss": loss,
            "gap_closed": {kind: [(levels["unigram"] - x) / gap for x in xs] for kind, xs in loss.items()}}


def layer_one_attention(model: GPT, seq: Tensor) -> np.ndarray:
    """Layer 1's attention averaged over ``seq``, one ``(T, T)`` table per head."""
    def read(part: Tensor) -> np.ndarray:
        return model(part[:, :-1], return_attention=True)[1][0].double().sum(dim=0, keepdim=True).numpy()
    return _chunked(read, seq).sum(axis=0) / len(seq)


def parent_weight(attention: np.ndarray, parents: list[int]) -> np.ndarray:
    """Layer 1's weight from each position ``t >= 1`` onto its parent, one row per head (NaN at a root)."""
    rows = list(range(1, attention.shape[-1]))
    return np.where(np.array([parents[t] >= 0 for t in rows]),
                    attention[:, rows, [max(parents[t], 0) for t in rows]], np.nan)


def training(config: dict[str, Any], ctx: RunContext) -> Outcome[TrainingData]:
    """One- and two-layer transformers trained online; final losses, layer 1's attention, kernels off the prior."""
    task = task_of(config)
    schedule = _schedule(config)
    runs = {kind: train(lambda n=n: GPT(_gpt(config, n)), task, schedule, ctx.seeds, ctx.device,
                        progress=ctx.progress) for kind, n in KINDS.items()}
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
    }  # type: ignore[typeddict-item]
    claims, silent = training_rows(config, data)
    return Outcome(claims, data, silent)


def training_rows(config: dict[str, Any], data: TrainingData) -> tuple[list[Claim], tuple[str, ...]]:
    """The training section's rows and the reasons for the rows it does not make, from its data alone (as run, or
    as read back from a result file, where the reference check recomputes them)."""
    return training_claims(data), (one_layer_silence(config), GPT_ATTENTION_SILENCE)


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


def support(config: dict[str, Any], ctx: RunContext) -> Outcome[SupportData]:
    """Two layers trained on noisy permutations only, then read kernels from outside that support; beside them the
    count estimator and the training prior's own Bayes predictor."""
    inside_task, outside_task = support_tasks(config)
    run = train(lambda: GPT(_gpt(config, 2)), inside_task, _schedule(config), ctx.seeds, ctx.device,
                progress=ctx.progress)
    models = [m.cpu() for m in run.models]
    inside_seq = inside_task.sequences(config["eval_size"], _generator(config, "support-inside"))
    outside_seq, kernels = outside_task.sequences_and_kernels(config["eval_size"],
                                                              _generator(config, "support-outside"))
    array = outside_seq.numpy()
    inside, outside = (held_out(task, seq, {"two_layers": models})
                       for task, seq in ((inside_task, inside_seq), (outside_task, outside_seq)))
    model_probs = [_probabilities(m, outside_seq) for m in models]
    distance = {"models": [float(last_row_distance(p, array, kernels, outside_task).mean()) for p in model_probs],
                "count_estimator": [float(last_row_distance(theory.bayes_predictive(outside_task, array), array,
                                                            kernels, outside_task).mean())]}
    advantage: list[list[float]] = []
    if config["k"] <= theory.MAX_PERMUTED_STATES:
        for part, seq in ((inside, inside_seq.numpy()), (outside, array)):
            part["levels"]["prior_bayes"] = float(theory.sequence_losses(
                theory.permutation_predictive(inside_task, seq), seq).mean())
        rival = theory.permutation_predictive(inside_task, array)
        distance["prior_bayes"] = [float(last_row_distance(rival, array, kernels, outside_task).mean())]
        rival_loss = theory.sequence_losses(rival, array)
        advantage = [list(_mean_and_error(rival_loss - theory.sequence_losses(p, array))) for p in model_probs]
    data: SupportData = {"inside": inside, "outside": outside, "advantage": advantage, "distance": distance,
                         "still_descending": int(still_descending(run, LOSS_NOISE).sum())}
    claims, silent = support_rows(config, data)
    return Outcome(claims, data, silent)


def support_rows(config: dict[str, Any], data: SupportData) -> tuple[list[Claim], tuple[str, ...]]:
    """The support section's rows and the reason for the row it does not make, from its data alone (the reference
    check recomputes them)."""
    if config["k"] <= theory.MAX_PERMUTED_STATES:
        return support_claims(data), ()
    return support_claims(data), (f"support: the training prior's Bayes predictor sums over k! permutations and is "
                                  f"computed for k <= {theory.MAX_PERMUTED_STATES}; at k = {config['k']} the row "
                                  "that compares the models with it is not made",)


def support_claims(data: SupportData) -> list[Claim]:
    """Trained on noisy permutations, two layers beat that prior's own Bayes predictor on kernels outside it."""
    if not data["advantage"]:
        return []
    settled = budget_ran_out(data["still_descending"], "runs were still descending", "steps")
    return [Claim.at_least("two layers trained on noisy permutations only, every seed, on Dirichlet kernels "
                           "outside that support (same floor): the training prior's Bayes loss minus the model's, on "
                           "the same sequences (the smallest, in standard errors)", MC_SIGMAS,
                           min(mean / max(error, 1e-300) for mean, error in data["advantage"]),
                           "corollary: the learned head tracks the kernel it reads, in the prior's support or not; a "
                           "model that only fit its training prior would be that prior's Bayes predictor, which leans "
                           "on permutations (exact over the k! permutations and 64 strengths); three standard "
                           "errors of the paired difference", digits=3).eventually(*settled)]


# ---------------------------------------------------------------- the trigger task
BIGRAM_CONCENTRATION = 0.5  # Dirichlet rows of the global bigram: peaked, as a language's letter bigram is


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


def trigger_task(config: dict[str, Any]) -> TriggerTask:
    """The trigger task of the chapter's settings; its bigram and triggers fixed by ``seed``."""
    return TriggerTask(config["trigger_tokens"], config["triggers"], config["trigger_T"], BIGRAM_CONCENTRATION,
                       config["seed"])


def output_positions(task: TriggerTask, seq: np.ndarray) -> dict[str, np.ndarray]:
    """Masks over the inputs where the target is a trigger's output: its first occurrence, and a later one."""
    recall = task.recall_positions(seq)
    return {"first": np.isin(seq[:, :-1], task.triggers) & ~recall, "recall": recall}


def accuracy_at(predictions: np.ndarray, seq: np.ndarray, masks: dict[str, np.ndarray]) -> dict[str, float]:
    """Share of the masked positions where ``predictions`` (``(n, length)`` tokens) is the next token."""
    right = predictions == seq[:, 1:]
    return {name: float(right[mask].mean()) if mask.any() else float("nan") for name, mask in masks.items()}


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
    triggers = torch.from_numpy(task.triggers)
    out_recall = probes.recall_share(probes.bilinear_scores(tokens[outputs], second[1].T, unembed), outputs)
    copied = tokens @ first[1].T  # layer 1's write for each token it attends to
    match = max(probes.recall_share(probes.bilinear_scores(tokens[triggers], kq, copied), triggers)
                for kq in second[0])
    later = torch.arange(1, len(positions))
    previous = max(probes.recall_share(probes.causal(probes.bilinear_scores(positions, kq, positions))[later],
                                       later - 1) for kq in first[0])
    return [out_recall, match, previous]


def previous_token_weight(model: GPT, task: TriggerTask, seq: np.ndarray) -> dict[str, float]:
    """Layer 1's weight from each position onto the one before, averaged where that token is a trigger and
    elsewhere, in the head that puts the most on a trigger: a positional previous-token head weighs both alike."""
    steps = np.arange(1, seq.shape[1] - 1)
    weight = _chunked(lambda part: model(part[:, :-1], return_attention=True)[1][0].double().numpy()[
        :, :, steps, steps - 1], torch.from_numpy(seq))  # (B, H, T - 1)
    trigger_before = np.isin(seq[:, :-2], task.triggers)[:, None].repeat(weight.shape[1], axis=1)
    if not trigger_before.any():
        return {"after_trigger": float("nan"), "elsewhere": float(weight.mean())}
    after = np.where(trigger_before, weight, np.nan)
    head = int(np.nanargmax(np.nanmean(after, axis=(0, 2))))
    return {"after_trigger": float(weight[:, head][trigger_before[:, head]].mean()),
            "elsewhere": float(weight[:, head][~trigger_before[:, head]].mean())}


def trigger(config: dict[str, Any], ctx: RunContext) -> Outcome[TriggerData]:
    """One- and two-layer transformers trained on the trigger task; accuracy on the outputs of triggers."""
    task = trigger_task(config)
    schedule = _schedule(config, "trigger_steps")
    runs = {kind: train(lambda n=n: GPT(_gpt(config, n, "trigger_tokens", "trigger_T")), task, schedule, ctx.seeds,
                        ctx.device, progress=ctx.progress,
                        probe=partial(trigger_memories, task=task) if n == 2 else None)
            for kind, n in KINDS.items()}
    seq = task.sequences(config["eval_size"], _generator(config, "trigger")).numpy()
    masks = output_positions(task, seq)
    accuracy: dict[str, dict[str, list[float]]] = {name: {} for name in masks}
    for kind, run in runs.items():
        for model in run.models:
            predictions = _chunked(lambda part, model=model: model.cpu()(part[:, :-1]).argmax(dim=-1).numpy(),
                                   torch.from_numpy(seq))
            for name, value in accuracy_at(predictions, seq, masks).items():
                accuracy[name].setdefault(kind, []).append(value)
    previous = [previous_token_weight(model, task, seq) for model in runs["two_layers"].models]
    data: TriggerData = {
        "eval_steps": runs["two_layers"].eval_steps,
        "eval_loss": {kind: run.eval_loss for kind, run in runs.items()},
        "chance": 1.0 / len(task.outputs_possible),
        "accuracy": accuracy,
        "positions": {name: int(mask.sum()) for name, mask in masks.items()},
        "previous_weight": {part: [weights[part] for weights in previous] for part in ("after_trigger", "elsewhere")},
        "memory_names": list(MEMORIES),
        "memories": runs["two_layers"].probes,
        "still_descending": {kind: int(still_descending(run, LOSS_NOISE).sum()) for kind, run in runs.items()},
    }  # type: ignore[typeddict-item]
    claims, silent = trigger_rows(config, data)
    return Outcome(claims, data, silent)


def trigger_rows(config: dict[str, Any], data: TriggerData) -> tuple[list[Claim], tuple[str, ...]]:
    """The trigger section's rows and the reasons for the rows it does not make, from its data alone (as run, or as
    read back from a result file, where the reference check recomputes them)."""
    silent = (one_layer_silence({**config, "T": config["trigger_T"]}), MEMORY_SILENCE)
    if not data["positions"]["recall"]:
        silent += ("trigger task: no held-out sequence has a trigger twice, so no accuracy is judged where the "
                   "output was seen before; more tokens or sequences (--set trigger_T=... or eval_size=...) give "
                   "some",)
    return trigger_claims(data), silent




def formation_steps(data: TriggerData | MemoriesData) -> np.ndarray:
    """Per seed and memory, the first evaluated step at which the recall probe reached ``FORMED`` (inf: never)."""
    probed = np.asarray(data["memories"], dtype=float) >= FORMED
    steps = np.asarray(data["eval_steps"], dtype=float)
    return np.where(probed.any(axis=1), steps[probed.argmax(axis=1)], np.inf)


def trigger_claims(data: TriggerData) -> list[Claim]:
    """Two layers recall a trigger's output from context, more than halfway from chance to always (where some
    held-out trigger comes twice)."""
    if not data["positions"]["recall"]:
        return []
    settled = budget_ran_out(data["still_descending"]["two_layers"], "two-layer runs were still descending",
                             "trigger_steps")
    halfway, per_seed = (1.0 + data["chance"]) / 2, data["accuracy"]["recall"]["two_layers"]
    return [Claim.at_least("trigger task, two layers, every seed: accuracy on a trigger's output where the trigger "
                           "came earlier in the sequence", halfway, min(per_seed),
                           "induction head (Bietti et al.; the construction above): the output read in context is "
                           "certain, so an induction head is always right; a guess that ignores the earlier "
                           "occurrence is right with probability 1 / (tokens that can be outputs); halfway between",
                           digits=3).eventually(*settled).held_to_spread(halfway, per_seed, "--seeds", upper=False)]


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
    return TriggerTask(config["trigger_tokens"], config["triggers"], config["memory_T"], BIGRAM_CONCENTRATION,
                       config["seed"], scored="recall")


def memory_model(config: dict[str, Any]) -> AssociativeMemories:
    """The simplified model of the chapter's trigger task, its random embeddings drawn from the current seed."""
    return AssociativeMemories(config["trigger_tokens"], config["memory_T"], config["memory_d"])


def memory_probes(model: AssociativeMemories, task: TriggerTask) -> list[float]:
    """The recall probes of the simplified model's three memories, in the order of ``MEMORIES``: ``W_OV2`` reads
    each output token's embedding out as that token (against every token); ``W_KQ2`` matches each trigger against
    the copy ``W_OV1 e`` of every token, best on the trigger's own; ``W_KQ1`` sends each position to the one
    before (against every earlier one)."""
    outputs, triggers = torch.from_numpy(task.outputs_possible), torch.from_numpy(task.triggers)
    written = probes.recall_share(probes.bilinear_scores(model.tokens[outputs], model.ov2.T, model.outputs), outputs)
    copied = model.tokens @ model.ov1.T
    matched = probes.recall_share(probes.bilinear_scores(model.tokens[triggers], model.kq2, copied), triggers)
    later = torch.arange(1, len(model.positions))
    scores = probes.causal(probes.bilinear_scores(model.positions, model.kq1, model.positions))
    previous = probes.recall_share(scores[later], later - 1)
    return [written, matched, previous]


def memory_schedule(config: dict[str, Any]) -> TrainConfig:
    """Plain gradient steps of constant size on fresh sequences, all three memories at once, evaluated and probed
    100 times: the first two memories form within a few dozen steps of each other."""
    steps = config["memory_steps"]
    return TrainConfig(steps=steps, batch_size=config["batch_size"], lr=config["memory_lr"], schedule="constant",
                       optimizer="sgd", eval_every=max(1, steps // 100), eval_size=256)


def memories(config: dict[str, Any], ctx: RunContext) -> Outcome[MemoriesData]:
    """Bietti et al.'s simplified model: its three memories trained together, probed along the way."""
    task = memory_task(config)
    run = train(lambda: memory_model(config), task, memory_schedule(config), ctx.seeds, ctx.device,
                progress=ctx.progress, probe=partial(memory_probes, task=task))
    data: MemoriesData = {
        "memory_names": list(MEMORIES), "eval_steps": run.eval_steps, "eval_loss": run.eval_loss,
        "memories": run.probes, "still_descending": int(still_descending(run, LOSS_NOISE).sum()),
    }  # type: ignore[typeddict-item]
    claims, silent = memories_rows(config, data)
    return Outcome(claims, data, silent)


def memories_rows(config: dict[str, Any], data: MemoriesData) -> tuple[list[Claim], tuple[str, ...]]:
    """The memories section's rows and the reasons for the rows it does not make, from its data alone (as run, or
    as read back from a result file, where the reference check recomputes them)."""
    chance = probe_chance(config)
    order_silent = [note for silent, note in (
        (config["memory_d"] < max(config["trigger_tokens"], config["memory_T"]), NARROW_SILENCE),
        (chance >= FORMED / 2, f"memory order. A random matrix recalls {chance:.2f} of some memory's associations "
                               f"by chance, so reaching {FORMED} says little; more tokens or positions (--set "
                               f"trigger_tokens=... or memory_T=...) make the row"),
        (not np.any(data["eval_loss"]), "memory order. No held-out sequence had a trigger twice, so the loss that "
                                        "decides whether a run had settled was never measured; more tokens (--set "
                                        "memory_T=...) give some"),
    ) if silent]
    return [] if order_silent else memories_claims(data), (SEQUENTIAL_SILENCE, *order_silent)


NARROW_SILENCE = ("memory order. Bietti et al. observe it with embeddings at least as wide as there are tokens and "
                  "positions (d = T = 256), where random embeddings are nearly orthonormal; memory_d is below "
                  "that regime, so the probes are shown as measured")


def probe_chance(config: dict[str, Any]) -> float:
    """The largest share of associations a probe recalls by chance: one candidate in N for the two token memories,
    one of the t earlier positions at position t for the positional one (averaged over positions)."""
    positional = float(np.mean(1.0 / np.arange(1, config["memory_T"])))
    return max(1.0 / config["trigger_tokens"], positional)


SEQUENTIAL_SILENCE = ("the three sequential gradient steps. Bietti et al.'s theorem recovers the memories with one "
                      "step each, top down, in a simplified setting; this chapter has not yet restored its "
                      "hypotheses from the paper, so it makes no row of it")


IN_ORDER = "in order in every seed"


def out_of_order(data: MemoriesData) -> tuple[list[int], list[int]]:
    """The seeds that formed a memory before one the order puts before it (which may never have formed), and the
    others that have not formed every memory."""
    formed = formation_steps(data)
    swapped = [k for k, seed in enumerate(formed) if any(seed[j] < seed[i] for i, j in itertools.combinations(
        range(len(seed)), 2))]
    return swapped, [k for k, seed in enumerate(formed) if k not in swapped and not np.all(np.isfinite(seed))]


def memories_claims(data: MemoriesData) -> list[Claim]:
    """Trained together, the three memories form top down: W_OV of layer 2, then W_KQ of layer 2, then W_KQ of
    layer 1. A memory that has not formed yet makes the row undecided while the loss still falls; one formed out
    of order fails it whatever the budget."""
    swapped, never = out_of_order(data)
    measured = "; ".join([f"out of order in seed {', '.join(map(str, swapped))}"] * bool(swapped)
                         + [f"a memory never formed in seed {', '.join(map(str, never))}"] * bool(never)) or IN_ORDER
    settled, unsettled = budget_ran_out(data["still_descending"], "runs were still descending", "memory_steps")
    return [Claim.exact("simplified model trained by gradient descent: the step at which each memory's recall first "
                        "reaches 1/2, W_OV of layer 2 no later than W_KQ of layer 2, no later than W_KQ of layer 1",
                        IN_ORDER, measured,
                        "Bietti et al. (the slides' natural learning order): W_OV2 first, W_KQ2 next, W_KQ1 last; "
                        "a memory that never formed breaks the order").eventually(settled or bool(swapped), unsettled)]


GPT_ATTENTION_SILENCE = ("layer 1's attention. Thm (2) concerns the disentangled transformer trained in stages, whose "
                         "first stage the section above runs and judges; for the GPT trained end to end by AdamW it "
                         "says nothing, so the GPT's weight on the parent is shown as a measurement")


MEMORY_SILENCE = ("memory order. Bietti et al. see it in a simplified model with random embeddings held fixed, in "
                  "which only the three memories train, and the next section judges it there; here every weight "
                  "trains, and layer 1 may find a trigger by its content instead of storing the positional "
                  "previous-token memory, so the order is shown as a measurement")


PRECISION_BITS = 32  # float32 weights and activations


def one_layer_silence(config: dict[str, Any]) -> str:
    """Why no row judges one layer: the lower bound H m p = Omega(T) has no stated constant."""
    size = config["n_head"] * config["d_model"] * PRECISION_BITS
    return (f"one layer. Sanford et al. show that a one-layer transformer solving induction needs heads x width x "
            f"precision H m p = Omega(T), with no constant stated; here H m p = {size} bits against T = "
            f"{config['T']}, so the bound does not rule one layer out, and its loss is shown as a measurement")


def training_claims(data: TrainingData) -> list[Claim]:
    """Two layers: nearer the Bayes level than the unigram one, in and out of distribution."""
    settled = budget_ran_out(data["still_descending"]["two_layers"], "two-layer runs were still descending", "steps")
    inside, outside = data["in_distribution"], data["out_of_distribution"]
    return [
        Claim.at_least("two layers, every seed: share of the unigram-to-Bayes gap closed on held-out sequences",
                       GAP_CLOSED, min(inside["gap_closed"]["two_layers"]),
                       "Thm (1) proves L - OPT -> 0 for the disentangled model trained in stages; this row asks "
                       "the same of the GPT trained end to end, which the theorem does not cover. Nearer the Bayes "
                       "level than the unigram one means counting transitions in context", digits=3
                       ).eventually(*settled).held_to_spread(GAP_CLOSED, inside["gap_closed"]["two_layers"], "--seeds",
                                                             upper=False),
        Claim.at_least("two layers, every seed, on kernels from another prior (Dirichlet(ood_alpha), the same "
                       "support): share of the gap between the unigram and the training prior's Bayes estimator "
                       "closed", GAP_CLOSED, min(outside["gap_closed"]["two_layers"]),
                       "corollary (for kernels in or out of the prior's support): the learned head estimates in "
                       "context whatever the kernel. The corollary assumes every entry at least gamma / k, a floor "
                       "Dirichlet(ood_alpha) kernels lack", digits=3).eventually(*settled).held_to_spread(
                           GAP_CLOSED, outside["gap_closed"]["two_layers"], "--seeds", upper=False),
    ]


def against_seed(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Rows for the page's seed-versus-measurement table."""
    def spread(values: list[float]) -> str:
        return f"{min(values):.2f} to {max(values):.2f}" if len(values) > 1 else f"{values[0]:.2f}"

    rows = []
    if "trigger" in data:
        run = data["trigger"]
        formed = [", ".join("never" if np.isinf(x) else f"{x:.0f}" for x in seed) for seed in formation_steps(run)]
        rows.append(("trigger task: the step at which each memory-recall probe first reaches 1/2 (two layers)",
                     ", then ".join(run["memory_names"]) + " (the last by position: the token before)",
                     "per seed: " + "; ".join(formed) + "; layer 1's weight on the token before: "
                     f"{spread(run['previous_weight']['after_trigger'])} where it is a trigger, "
                     f"{spread(run['previous_weight']['elsewhere'])} elsewhere"))
        rows.append(("trigger task (Bietti et al., the 65 characters of a Shakespeare bigram): accuracy on a "
                     "trigger's output seen earlier in the sequence", "one layer about 55 %, two layers about 99 %",
                     f"one layer {spread(run['accuracy']['recall']['one_layer'])}, two layers "
                     f"{spread(run['accuracy']['recall']['two_layers'])} (chance {run['chance']:.2f})"))
    if "memories" in data:
        run = data["memories"]
        formed = [", ".join("never" if np.isinf(x) else f"{x:.0f}" for x in seed) for seed in formation_steps(run)]
        rows.append(("simplified model (Bietti et al.: random embeddings fixed, three memories trained): the step "
                     "at which each recall probe first reaches 1/2", ", then ".join(run["memory_names"]),
                     "per seed: " + "; ".join(formed)))
    if "support" in data:
        run = data["support"]
        rows.append(("trained on noisy permutations, tested on Dirichlet kernels (corollary: π̃ need not be in "
                     "the prior's support)", "‖f - π̃(·|s_T)‖∞ ≲ T^-cγ",
                     f"gap closed {spread(run['outside']['gap_closed']['two_layers'])}; last-position distance "
                     f"to π̃ {spread(run['distance']['models'])} (count estimator "
                     f"{spread(run['distance']['count_estimator'])}, the training prior's Bayes predictor "
                     f"{spread(run['distance'].get('prior_bayes', [float('nan')]))})"))
    staged: list[tuple[str, str, str]] = []
    if "staged" in data:
        run = data["staged"]
        staged = [("layer 1 after the first stage (Nichani et al., Thm (2): ‖A - G‖∞ ≲ 1/T)",
                   "the causal graph's adjacency", "weight on the parent, worst of the judged positions: "
                   + spread([float(carried_weight(w, run["parents"]).min()) for w in run["parent_weight"]]))]
    if "training" not in data:
        return staged + rows
    run = data["training"]
    inside, outside = run["in_distribution"], run["out_of_distribution"]
    gpt = [
        ("two layers reach the Bayes level (Nichani et al., Thm (1): L - OPT ≲ T^-cγ)",
         "the gap to OPT vanishes as T grows", f"gap closed {spread(inside['gap_closed']['two_layers'])}"),
        ("one layer (Sanford et al.; slides)", "needs heads x width x precision = Ω(T); so at a fixed size, "
         "above the Bayes level",
         f"gap closed {spread(inside['gap_closed']['one_layer'])}"),
        ("the GPT's layer 1, trained end to end (no row: Thm (2) is about the staged disentangled model)",
         "the causal graph's adjacency, for the theorem's model",
         "weight on the parent in the head that reads it, worst of the judged positions: " + spread(
             [float(carried_weight(w, run["parents"]).min()) for w in run["parent_weight"]["two_layers"]])),
        ("another prior (corollary: any kernel)", "tracks the in-context estimator",
         f"gap closed {spread(outside['gap_closed']['two_layers'])}"),
    ] + rows
    return staged + gpt


# quick: three seeds, not two: a row held to the seeds' spread takes Student's t at n - 1 degrees of freedom, 6.3 for
# two seeds, so the small difference between two seeds that another kernel path makes could leave the gap-closed
# rows undecided (issue 48: 0.62 and 0.67 on ATen's default path put the mean's bound at 0.495 against 0.5)
CHAPTER = Chapter("induction", "Induction heads on in-context Markov chains", PARAMS,
                  seeds={"quick": 3, "reference": 5, "full": 10},
                  sections=(
                      Section("levels", "The loss levels and the chi-square information", levels),
                      Section("construction", "An induction head written by hand", construction),
                      Section("higher_order", "Order m in three layers of one head", higher_order),
                      Section("gradient", "The first gradient points layer 1 at the parents", gradient),
                      Section("staged", "The first stage trained: layer 1 finds the graph", staged, trains=True,
                              rows=staged_rows),
                      Section("training", "Training one and two layers", training, trains=True,
                              rows=training_rows),
                      Section("support", "Trained on a restricted prior, tested outside it", support, trains=True,
                              rows=support_rows),
                      Section("trigger", "The trigger task: recall from context", trigger, trains=True,
                              rows=trigger_rows),
                      Section("memories", "Three associative memories, in order", memories, trains=True,
                              rows=memories_rows),
                  ), check=check, reference_sections=("staged", "training", "support", "trigger", "memories"))
