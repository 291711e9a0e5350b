"""Exact theory of associative memories (Bietti et al. 2023; Cabannes, Dohmatob, Bietti 2024; Nichani, Lee, Bietti
2025): the gradient of a linear memory's cross-entropy as a sum of outer products, the memory one step writes, the
capacity of the outer-product construction under a Gaussian model of its margins, and the loss levels of the factual
recall task. Nothing here trains.

Conventions: input embeddings ``E`` (one row ``e_z`` per input), output embeddings ``U`` (one row ``u_k`` per output),
a memory ``W`` (d x d) scores output ``k`` for input ``z`` as ``u_k^T W e_z``; a joint law ``joint[z, k] = p(z, k)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import integrate, optimize
from scipy.special import log_softmax, softmax
from scipy.stats import norm

ASYMPTOTIC_CONSTANT = 1 / 8  # N ln N / d^2 at the capacity of the construction as d grows (derived on the page)
CAPACITY_ODDS = 0.5  # the capacity is the N at which the construction recalls every association with this probability


def scores(W: np.ndarray, U: np.ndarray, E: np.ndarray) -> np.ndarray:
    """``scores[z, k] = u_k^T W e_z``: the logits a linear memory gives every output for every input."""
    return E @ W.T @ U.T


def memory_loss(W: np.ndarray, U: np.ndarray, E: np.ndarray, joint: np.ndarray) -> float:
    """The population cross-entropy E_{(z, y) ~ p}[-log softmax(u^T W e_z)_y] of a linear memory."""
    return float(-(joint * log_softmax(scores(W, U, E), axis=1)).sum())


def memory_gradient(W: np.ndarray, U: np.ndarray, E: np.ndarray, joint: np.ndarray) -> np.ndarray:
    """The lemma (Bietti et al. 2023): grad L(W) = sum_k E_z[(p_W(k | z) - p(k | z)) u_k e_z^T], a sum of outer
    products weighted by the prediction errors."""
    errors = joint.sum(axis=1, keepdims=True) * softmax(scores(W, U, E), axis=1) - joint  # p(z) (p_W(k|z) - p(k|z))
    return U.T @ errors.T @ E


def one_step_memory(f: np.ndarray, U: np.ndarray, E: np.ndarray, lr: float) -> np.ndarray:
    """One gradient step of size ``lr`` from W = 0 on z uniform over the inputs and y = f(z):
    W_1 = (lr / N) sum_z (u_f(z) - mean_k u_k) e_z^T, the lemma at uniform predictions (the slides' 1/N is 1/K)."""
    return lr / len(E) * (U[f] - U.mean(axis=0)).T @ E


def margin_spreads(n: float, d: int) -> tuple[float, float]:
    """Standard deviations of the two parts of the construction's margin (u_f(x) - u_y)^T W e_x around its mean 1,
    for n associations of unit embeddings in dimension d: the part every candidate y of one input shares
    (sum over x' of u_f(x).u_f(x') e_x'.e_x, variance (n - 1) / d^2) and each candidate's own part (its two single
    dot products, 2 / d, and its share of the sum, (n - 1) / d^2)."""
    return math.sqrt((n - 1) / d**2), math.sqrt(2 / d + (n - 1) / d**2)


def single_product_share(n: float, d: int) -> float:
    """The share of a candidate's own margin variance carried by its two single dot products, whose bounded law the
    Gaussian model replaces by a normal one: the model holds where this is small."""
    return (2 / d) / (2 / d + (n - 1) / d**2)


def perfect_recall_probability(n: float, d: int) -> float:
    """P(the construction W = sum_x u_f(x) e_x^T recalls all n associations) in dimension d, under a Gaussian model
    of the margins: given an input's shared part, its n - 1 candidates err independently; inputs err independently."""
    common, own = margin_spreads(n, d)
    rivals = n - 1

    def input_errs(a: float) -> float:  # P(some rival beats the answer | shared part = common * a)
        return norm.pdf(a) * -math.expm1(rivals * math.log1p(-min(norm.sf((1 + common * a) / own), 1 - 1e-16)))

    errs, _ = integrate.quad(input_errs, -40, 40, points=[-0.5 / common], limit=200)
    return math.exp(n * math.log1p(-min(errs, 1 - 1e-16)))


@lru_cache(maxsize=64)
def predicted_capacity(d: int) -> float:
    """The n at which the construction recalls every association with probability CAPACITY_ODDS (Gaussian model);
    cached, since a page asks for each d twice and each solve takes about a second."""
    return math.exp(
        optimize.brentq(
            lambda log_n: perfect_recall_probability(math.exp(log_n), d) - CAPACITY_ODDS,
            math.log(2),
            math.log(4 * d * d),
        )
    )


def capacity_constant(n: float, d: int) -> float:
    """N ln N / d^2: the constant of the capacity law N ln N ~ c d^2."""
    return n * math.log(n) / d**2


def mlp_capacity_constant(stored: np.ndarray, dims: np.ndarray, ratios: np.ndarray) -> float:
    """The median over runs (dimension x width ratio x seed) of N ln N / (m d): the constant of the law
    N ln N ~ c m d."""
    return float(np.median(stored * np.log(stored) / (dims[:, None, None] ** 2 * ratios[None, :, None])))


def facts_per_parameter(sizes: np.ndarray, params: np.ndarray) -> float:
    """The median over runs (shape x dimension x seed) of S R / P with S = R: the constant of a linear law."""
    return float(np.median(sizes**2 / params[:, :, None]))


def _mean_entropy(rows: np.ndarray) -> float:
    """Mean over rows of the entropy (nats) of each row's empirical law of values."""
    total = 0.0
    for row in rows:
        p = np.unique(row, return_counts=True)[1] / len(row)
        total -= float((p * np.log(p)).sum())
    return total / len(rows)


def fact_levels(facts: np.ndarray, per_relation: int) -> dict[str, float]:
    """The losses of the four predictors of the factual recall task on uniform subjects and relations: uniform over
    every answer, from the relation alone (H(a | r), the hallucination), from the subject alone (H(a | s)), and
    from both (0, the facts)."""
    return {
        "uniform": math.log(facts.shape[1] * per_relation),
        "relation": _mean_entropy(facts.T),
        "subject": _mean_entropy(facts),
        "facts": 0.0,
    }


# ---------------------------------------------------------------- a one-layer transformer set by hand for the facts
BUILT_FAILURES = 0.01  # expected wrong facts (union bound) at the dimension the hand-set layer is built in
MLP_GAP_EXTRA = 8  # the MLP-held layer's extra gap variance, in units of 1/d (built_gap_sd)


def built_gap_sd(relations: int, per_relation: int, d: int, extra: int = 0) -> float:
    """Standard deviation of the logit gap between a fact's answer a* and one rival b that the hand-set layer scores
    (y_s + z_r)^T u, with y_s the sum of the subject's R answers and z_r the sum of the relation's A answers, for
    unembeddings with N(0, 1/d) entries. The sum holds 2 u_a*, u_b once and R + A - 3 other answers, so the gap is
    2|u_a*|^2 - |u_b|^2 - u_a*.u_b + sum_o u_o.(u_a* - u_b): mean 1, variance (8 + 2 + 1 + 2 (R + A - 3)) / d.
    The same holds for both kinds of rival (the relation's other answers and the subject's answers to the other
    relations). ``extra`` adds variance in units of 1/d: for the layer whose MLP holds the sums (``MLP_GAP_EXTRA``),
    4 for the copied embeddings (x_s + x_r).(u_a* - u_b) and 4 for the gates' jitter (each gate opens to 1/2 plus a
    N(0, 1/d) term, doubled by the readout, on a sum one unit apart for one kind of rival)."""
    return math.sqrt((2 * relations + 2 * per_relation + 5 + extra) / d)


def built_failures(subjects: int, relations: int, per_relation: int, d: int, extra: int = 0) -> float:
    """Union bound on the expected number of facts the hand-set layer gets wrong in dimension ``d``, under the
    Gaussian model of :func:`built_gap_sd`: S R facts, each with R + A - 2 rivals one unit below the answer (the
    other answers, two units below, are left out: their terms are smaller by orders of magnitude)."""
    rivals = relations + per_relation - 2
    return subjects * relations * rivals * float(norm.sf(1 / built_gap_sd(relations, per_relation, d, extra)))


def built_dim(
    subjects: int, relations: int, per_relation: int, failures: float = BUILT_FAILURES, extra: int = 0
) -> int:
    """The smallest d at which :func:`built_failures` is at most ``failures``: the dimension the hand-set layer is
    built in. It grows as (R + A) ln(S R (R + A)), the theorem's d >~ R + A_max with its logarithm (1 where no fact
    has a rival)."""
    if built_failures(subjects, relations, per_relation, 1, extra) <= failures:
        return 1
    d = 1
    while built_failures(subjects, relations, per_relation, 2 * d, extra) > failures:
        d *= 2
    lo, hi = d, 2 * d  # the bound falls with d: bisect for the first d within it
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if built_failures(subjects, relations, per_relation, mid, extra) > failures else (lo, mid)
    return hi


def relation_failures(relations: int, per_relation: int, d: int) -> float:
    """Union bound on the expected number of relations whose answer the hand-set layer takes outside the relation's
    own answers for a subject it holds no slot for: the logits are then z_r^T u, and for any fixed b in A_r each of
    the (R - 1) A other answers a beats it with probability P(N(1, (2A + 1) / d) < 0) (the gap
    |u_b|^2 - u_b.u_a + sum_b' u_b'.(u_b - u_a))."""
    return relations * (relations - 1) * per_relation * float(norm.sf(1 / math.sqrt((2 * per_relation + 1) / d)))


def uncovered_share_sd(subjects: int, uncovered: int, relations: int, per_relation: int) -> float:
    """Standard deviation of the share of subjects without a slot whose answer is their relation's default, one
    answer per relation chosen by the embeddings alone: per relation a hypergeometric count (``uncovered`` draws
    from ``subjects``, S / A of them successes, as the balanced facts table has it where A divides S), averaged over
    the R independent relations."""
    p = 1 / per_relation
    per_relation_var = p * (1 - p) * (subjects - uncovered) / max(subjects - 1, 1) / uncovered
    return math.sqrt(per_relation_var / relations)


def chance_share_sd(uncovered: int, relations: int, per_relation: int) -> float:
    """Standard deviation of the share of ``uncovered`` subjects' facts answered right where each fact's answer is
    an independent uniform pick among the relation's A answers (the binomial share, p = 1/A over the uncovered S R
    facts): the limit where each subject's own embedding picks its answer, the upper end of a share whose lower end
    (one answer a relation, the embeddings alone) is :func:`uncovered_share_sd`."""
    p = 1 / per_relation
    return math.sqrt(p * (1 - p) / (uncovered * relations))


# ---------------------------------------------------------------- distributional associations against in-context recall
def learning_thresholds(tokens: int, noise: float) -> tuple[float, float]:
    """When the noise token and the answer count as learned at a recall: layer 2's MLP carries half the way from the
    uniform 1/N to the noise token's ``noise`` (zeroing it takes that much away), and the answer's probability is
    halfway from 1/N to ``1 - noise``."""
    start = 1.0 / tokens
    return (noise - start) / 2, (start + 1.0 - noise) / 2


def first_reached(updates: np.ndarray, curve: np.ndarray, threshold: float) -> float:
    """The first evaluated update count at which ``curve`` reaches ``threshold`` (NaN: never)."""
    reached = np.flatnonzero(curve >= threshold)
    return float(updates[reached[0]]) if len(reached) else math.nan


def learned_updates(data: Mapping[str, Any]) -> np.ndarray:
    """``(N, seed, 2)``: from a noisy recall section's data (its ``tokens``, ``noise_p``, ``eval_steps`` and
    ``curves``), the updates after which layer 2's MLP carried the noise token and after which the answer was
    learned (:func:`learning_thresholds`; NaN: not within the run's budget). The trainer evaluates after a step, so
    the evaluation of step ``s`` follows ``s + 1`` updates."""
    updates = np.asarray(data["eval_steps"], dtype=float) + 1
    found = []
    for tokens, curves in zip(data["tokens"], data["curves"]):
        noise, answer = learning_thresholds(tokens, data["noise_p"])
        runs = np.asarray(curves, dtype=float)
        mlp_share = runs[..., 0] - runs[..., 2]  # the noise token's probability that zeroing layer 2's MLP takes away
        found.append(
            [
                [first_reached(updates, share, noise), first_reached(updates, run[:, 1], answer)]
                for share, run in zip(mlp_share, runs)
            ]
        )
    return np.asarray(found, dtype=float)


def recall_samples(data: Mapping[str, Any]) -> np.ndarray:
    """``(N, seed, 2)``: :func:`learned_updates` counted in scored recalls seen (updates x batch x recalls per
    sequence), the samples the loss learns from."""
    scale = data["batch"] * np.asarray(data["recalls_per_sequence"], dtype=float)[:, None, None]
    return learned_updates(data) * scale


def growth_exponent(tokens: list[int], samples: np.ndarray) -> float:
    """The least-squares slope of log samples on log N over every run (``samples``: N x seed)."""
    x = np.repeat(np.log(np.asarray(tokens, dtype=float)), samples.shape[1])
    return float(np.polyfit(x, np.log(samples.ravel()), 1)[0])


def log_factor_exponent(tokens: list[int]) -> float:
    """The slope of log ln N on log N over ``tokens``: the exponent a law of O(ln N) samples shows across them. Each
    threshold asks for a logit margin of about ln N over the other tokens, so a learner that needs O(1) samples per
    unit of margin shows this exponent, not 0."""
    x = np.log(np.asarray(tokens, dtype=float))
    return float(np.polyfit(x, np.log(x), 1)[0])
