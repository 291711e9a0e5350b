"""The HMM chapter's sections: per section its ``TypedDict`` (which ``figures`` draws and ``judge`` reads) and
the function that computes it: the exact checks (Theorems 4-9, Claim 1, Lemmas 7 and 9) keep the arrays their rows
compare, the learning section trains its predictors here; every section takes its rows from ``judge``, which also
computes the ideal learner that the page and the recovery's slope row set beside the learned predictors."""

from __future__ import annotations

import itertools
from typing import Any, TypedDict

import numpy as np
import torch

from ...curves import still_descending
from ...data.hmm import HMM, FiniteSample, MaskedPrediction, PerSymbol, check_ghmm, check_transition
from ...model import MultiLayerPerceptron
from ...profiles import int_list
from ...runtime import member_seed
from ...sections import RunContext
from ...theory import hmm as theory
from ...trainer import TrainConfig, train
from .judge import PRONY_MAX_K, RECOVERY_TOL, pairwise_gap, stream, two_token_gap, validity

LOSS_NOISE = 1e-3  # a held-out squared loss that moved less than this has hardly started
EXTRA_STARTS = 50  # further random starts of a G-HMM fit while none of the first has converged
FIT_RESIDUAL = 1e-9  # a G-HMM fit with a smaller RMS residual matches the predictor exactly
TWO_TOKEN = theory.TWO_TOKEN  # the task x_2 (x) x_3 | x_1
PAIRWISE = (1, (2,))  # the task x_2 | x_1
# the six two-token tasks x_t2 (x) x_t3 | x_t1, (t1, t2, t3) a permutation of (1, 2, 3)
TASK_ORDERS = tuple((g, tuple(t for t in (1, 2, 3) if t != g)[::s]) for g in (1, 2, 3) for s in (1, -1))


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """``"4x3,6x4"`` -> ``[(4, 3), (6, 4)]``: (d, k) pairs with ``d >= k``, ``2 <= k <= 8``."""
    try:
        shapes = [tuple(int(n) for n in item.split("x")) for item in str(text).split(",") if item.strip()]
    except ValueError:
        raise ValueError(f"expected sizes like 4x3,6x4, got {text!r}") from None
    if not shapes or any(len(s) != 2 or not 2 <= s[1] <= min(s[0], 8) for s in shapes):
        raise ValueError(f"each size is d x k with d >= k and 2 <= k <= 8, got {text!r}")
    return shapes


# ---------------------------------------------------------------- the paper's example (Theorem 6)
class PaperExampleData(TypedDict):
    angle: float  # rotation angle about (1, 1, 1) that maps the printed O to O~ (rad)
    implied_rotation: list[list[float]]  # R = O^+ O~
    sweep_angles: list[float]  # angles of the sweep of R(angle) applied to the printed (O, T)
    sweep_admissible: list[bool]  # per angle: the rotated parameters are non-negative
    sweep_pairwise_gap: list[float]  # per angle: max difference of the pairwise predictors (gaps 1-4)
    sweep_two_token_gap: list[float]  # per angle: max difference of the two-token predictors x2(x)x3|x1


def rotation_sweep(O: np.ndarray, T: np.ndarray, plane: np.ndarray, angles: np.ndarray) -> dict[str, list]:
    """Rotate ``(O, T)`` by each angle in ``plane``: admissibility and the pairwise and two-token predictor gaps."""
    sweep = [theory.rotated(O, T, theory.rotation_about_ones(3, a, plane)) for a in angles]
    return {
        "sweep_admissible": [bool(min(o.min(), t.min()) >= 0) for o, t in sweep],
        "sweep_pairwise_gap": [pairwise_gap(O, T, o, t, range(1, 5)) for o, t in sweep],
        "sweep_two_token_gap": [two_token_gap(O, T, o, t) for o, t in sweep],
    }


def paper_example(config: dict[str, Any], ctx: RunContext) -> PaperExampleData:
    """The printed d=4, k=3 pair: same four pairwise predictors, different parameters, a rotation about 1."""
    O, T, O2 = theory.PAPER_O, theory.PAPER_T, theory.PAPER_O_TILDE
    plane = theory.ones_complement_basis(3)
    implied = theory.implied_rotation(O, O2)
    angles = np.linspace(-np.pi, np.pi, 181)
    sweep = rotation_sweep(O, T, plane, angles)
    data: PaperExampleData = {
        "angle": theory.rotation_angle(implied, plane),
        "implied_rotation": implied,
        "sweep_angles": angles,
        **sweep,
    }  # type: ignore[typeddict-item]
    return data


# ---------------------------------------------------------------- generated counterexamples (Theorems 4, 6)
class CounterexampleData(TypedDict):
    emission: list[list[float]]  # O (d x k)
    transition: list[list[float]]  # T (k x k), T_ij = P(h_t+1 = i | h_t = j)
    other_emission: list[list[float]]  # O~ = O R
    other_transition: list[list[float]]  # T~ = R^T T R
    angle: float  # rotation angle of R about 1 (rad)
    two_token_distance: float  # max entry difference of the two-token predictors x2(x)x3|x1
    factor_condition: float  # largest condition number of the CP factors of the two HMMs' two-token tensors
    kruskal_ranks: list[int]  # Kruskal ranks of the factors A, B, C of the two-token tensor (k each, by Assumption 7)


def counterexample(config: dict[str, Any], ctx: RunContext) -> CounterexampleData:
    """A large-rotation pair for the chapter's (d, k): valid, pairwise-identical, not a relabelling."""
    pair = theory.counterexample(config["d"], config["k"], stream(config, 1), config["candidates"])
    O, T, O2, T2 = pair["emission"], pair["transition"], pair["other_emission"], pair["other_transition"]
    data: CounterexampleData = {
        "emission": O,
        "transition": T,
        "other_emission": O2,
        "other_transition": T2,
        "angle": pair["angle"],
        "two_token_distance": pair["two_token_gap"],
        "factor_condition": pair["factor_condition"],
        "kruskal_ranks": [theory.kruskal_rank(f) for f in theory.cp_factors(O, T, *TWO_TOKEN)],
    }
    return data


# ---------------------------------------------------------------- Claim 1: matrix powers
class PowersData(TypedDict):
    powers: list[int]  # t = 2 .. max_power
    difference: list[float]  # per t: max |T - T~|
    power_difference: list[float]  # per t: max |T^t - T~^t|
    valid: int  # how many of the T~ are doubly stochastic with rank 3 (sandboxes.data.hmm.check_transition)


def powers_data(pairs: list[tuple[int, np.ndarray, np.ndarray]]) -> PowersData:
    """Claim 1's data from the pairs ``(t, T, T~)``: the differences of the matrices and of their t-th powers, and
    how many ``T~`` are valid transitions."""
    valid = 0
    for _, _, T2 in pairs:
        try:
            check_transition(T2)
            valid += 1
        except ValueError:
            pass
    return {
        "powers": [t for t, *_ in pairs],
        "difference": [float(np.abs(T - T2).max()) for _, T, T2 in pairs],
        "power_difference": [
            float(np.abs(np.linalg.matrix_power(T, t) - np.linalg.matrix_power(T2, t)).max()) for t, T, T2 in pairs
        ],
        "valid": valid,
    }


def powers(config: dict[str, Any], ctx: RunContext) -> PowersData:
    """``T~ = R T`` with ``R^t = I``: stochastic, different, same t-th power, for t = 2 .. max_power."""
    return powers_data([(t, *theory.power_counterexample(t)) for t in range(2, config["max_power"] + 1)])


# ---------------------------------------------------------------- Theorem 7 as an algorithm
class RecoveryData(TypedDict):
    errors: dict[str, list[float]]  # per size "dxk": max entry error after relabelling, per random HMM and task order
    tolerance: float  # the tolerance of the recovery claim


def recovery_errors(
    shapes: list[tuple[int, int]], n_hmms: int, rng: np.random.Generator, told: tuple | None = None
) -> dict[str, list[float]]:
    """Per size, the error of (O, T) recovered from each random HMM's exact predictor, for each task order.

    ``told`` are the task orders that recovery is told, one per order of ``TASK_ORDERS`` (default: the true
    ones); a test passes mislabelled ones.
    """
    errors: dict[str, list[float]] = {}
    for d, k in shapes:
        errs = []
        for _ in range(n_hmms):
            O, T = theory.random_hmm(d, k, rng)
            for made, told_order in zip(TASK_ORDERS, told or TASK_ORDERS):
                O_hat, T_hat = theory.recover(theory.two_token_predictor(O, T, *made), *told_order, k, rng)
                errs.append(theory.parameter_distance(O, T, O_hat, T_hat))
        errors[f"{d}x{k}"] = errs
    return errors


def recovery(config: dict[str, Any], ctx: RunContext) -> RecoveryData:
    """Exact two-token predictors of random HMMs -> (O, T) up to relabelling, for all six task orders."""
    errors = recovery_errors(parse_shapes(config["shapes"]), config["random_hmms"], stream(config, 2))
    return {"errors": errors, "tolerance": RECOVERY_TOL}


# ---------------------------------------------------------------- learning from samples
def _train_predictors(config: dict[str, Any], ctx: RunContext, hmms: list[HMM], task: tuple) -> tuple[np.ndarray, int]:
    """Predictors learned from N samples: ``(2 HMMs, len(samples), seeds, d, output)`` at the d one-hot inputs,
    and how many of them were still descending when their budget ran out."""
    sizes = int_list(config["samples"])
    members = list(itertools.product(range(2), range(len(sizes)), ctx.seeds))
    given, targets = task
    tasks = [
        PerSymbol(
            FiniteSample(MaskedPrediction(hmms[h], given, targets), sizes[i], member_seed("samples", h, sizes[i], s))
        )
        for h, i, s in members
    ]
    d = hmms[0].d
    width = (d, config["hidden"], d ** len(targets))
    schedule = TrainConfig(
        steps=config["steps"],
        batch_size=config["batch_size"],
        lr=config["lr"],
        weight_decay=0.0,
        final_lr_fraction=1e-3,
        eval_every=max(1, config["steps"] // 20),
    )
    trained = train(
        lambda: MultiLayerPerceptron(width),
        tasks,
        schedule,
        [s for *_, s in members],
        ctx.device,
        progress=ctx.progress,
    )
    with torch.no_grad():
        outputs = [model(torch.eye(d)).double().numpy() for model in trained.models]
    moving = int(still_descending(trained, LOSS_NOISE).sum())
    return np.array(outputs).reshape(2, len(sizes), len(ctx.seeds), d, -1), moving


def _distances(learned: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """RMS distance between seeds of one HMM (within) and between the two HMMs (cross), per sample size."""
    within, cross = [], []
    for per_size in learned.transpose(1, 0, 2, 3, 4):
        seed_pairs = list(itertools.combinations(range(per_size.shape[1]), 2))
        pairs = [(per_size[h, a], per_size[h, b]) for h in range(2) for a, b in seed_pairs]
        within.append(np.sqrt(np.mean([theory.predictor_distance(f, g, weights) ** 2 for f, g in pairs])))
        cross.append(
            np.sqrt(
                np.mean(
                    [
                        theory.predictor_distance(f, g, weights) ** 2
                        for f, g in itertools.product(per_size[0], per_size[1])
                    ]
                )
            )
        )
    return np.array(within), np.array(cross)


class LearnedTask(TypedDict):
    within: list[float]  # per N: RMS distance between seeds of one HMM (the noise)
    cross: list[float]  # per N: RMS distance between the two HMMs' learned predictors
    excess: list[float]  # per N: sqrt(cross^2 - within^2), the distance beyond noise
    exact_gap: float  # distance between the two HMMs' optimal predictors
    sampling_error: list[float]  # per N: expected distance of the best fit to N samples, sqrt(sum_j (1 - |f_j|^2) / N)
    error: list[list[list[float]]]  # HMM x N x seed: distance of the learned predictor to its optimal one


class LearnedRecovery(TypedDict):
    own: list[list[list[float]]]  # HMM x N x seed: max entry error of (O, T) recovered, against its own HMM
    other: list[list[list[float]]]  # the same, against the other HMM of the pair


class LearningData(TypedDict):
    still_descending: int  # predictors whose held-out loss had not settled when their budget ran out
    samples: list[float]  # the sample sizes N
    pairwise: LearnedTask  # x2 | x1
    two_token: LearnedTask  # x2 (x) x3 | x1
    recovery: LearnedRecovery  # from the learned two-token predictors


def exact_predictors(hmms: list[HMM], task: tuple) -> list[np.ndarray]:
    """The optimal predictors of ``task`` for each HMM, as ``d x output`` arrays."""
    given, targets = task
    return [
        theory.pairwise_predictor(h.emission, h.transition, given, targets[0])
        if len(targets) == 1
        else theory.two_token_predictor(h.emission, h.transition, given, targets).reshape(h.d, -1)
        for h in hmms
    ]


def learned_task(learned: np.ndarray, exact: list[np.ndarray], weights: np.ndarray, sizes: np.ndarray) -> LearnedTask:
    """Distances of learned predictors ``(HMM, N, seed, d, output)``: between seeds, between HMMs, to the optimum."""
    within, cross = _distances(learned, weights)
    # E[cross^2] = gap^2 + E[within^2]; rounding at 1e-12 keeps a round-off-sized gap from being printed
    gap = round(theory.predictor_distance(exact[0], exact[1], weights), 12)
    # the best fit to N samples, the empirical conditional mean, has E||f_N - f||_w^2 = sum_j (1 - ||f_j||^2) / N
    sampling = np.sqrt((1 - (exact[0] ** 2).sum(axis=1)).sum() / sizes)
    error = np.array(
        [
            [[theory.predictor_distance(f, exact[h], weights) for f in per_size] for per_size in per_hmm]
            for h, per_hmm in enumerate(learned)
        ]
    )
    return {
        "within": within,
        "cross": cross,
        "excess": np.sqrt(np.maximum(cross**2 - within**2, 0.0)),
        "exact_gap": gap,
        "sampling_error": sampling,
        "error": error,
    }  # type: ignore[typeddict-item]


def learned_recovery(learned: np.ndarray, hmms: list[HMM]) -> LearnedRecovery:
    """Recover (O, T) from each learned two-token predictor: error against the truth and against the other HMM
    (NaN for a predictor that is not finite, which a diverged run leaves)."""
    d, k = hmms[0].d, hmms[0].k
    rng = np.random.default_rng(0)
    own = np.full(learned.shape[:3], np.nan)
    other = np.full(learned.shape[:3], np.nan)
    for h, i, s in np.ndindex(*learned.shape[:3]):
        if not np.isfinite(learned[h, i, s]).all():
            continue
        O_hat, T_hat = theory.recover(learned[h, i, s].reshape(d, d, d), *TWO_TOKEN, k, rng, als_steps=100)
        own[h, i, s] = theory.parameter_distance(hmms[h].emission, hmms[h].transition, O_hat, T_hat)
        other[h, i, s] = theory.parameter_distance(hmms[1 - h].emission, hmms[1 - h].transition, O_hat, T_hat)
    return {"own": own, "other": other}  # type: ignore[typeddict-item]


def learning(config: dict[str, Any], ctx: RunContext, counterexample: CounterexampleData) -> LearningData:
    """Learn x2|x1 and x2(x)x3|x1 from N samples of the two counterexample HMMs; recover (O, T) from the latter."""
    pair = counterexample
    hmms = [HMM(pair["emission"], pair["transition"]), HMM(pair["other_emission"], pair["other_transition"])]
    sizes = np.array(int_list(config["samples"]), dtype=float)
    weights = theory.symbol_law(hmms[0].emission)
    trained = {
        name: _train_predictors(config, ctx, hmms, task)
        for name, task in (("pairwise", PAIRWISE), ("two_token", TWO_TOKEN))
    }
    learned = {name: outputs for name, (outputs, _) in trained.items()}
    data: LearningData = {
        "still_descending": sum(moving for _, moving in trained.values()),
        "samples": sizes,  # type: ignore[typeddict-item]
        "pairwise": learned_task(learned["pairwise"], exact_predictors(hmms, PAIRWISE), weights, sizes),
        "two_token": learned_task(learned["two_token"], exact_predictors(hmms, TWO_TOKEN), weights, sizes),
        "recovery": learned_recovery(learned["two_token"], hmms),
    }
    return data


# ---------------------------------------------------------------- G-HMM: Theorem 5, Lemma 7
class GhmmData(TypedDict):
    means: list[list[float]]  # M (d x k), unit-norm columns
    transition: list[list[float]]  # T (k x k)
    partner_means: list[list[float]]  # H M, the Householder partner
    partner_transition: list[list[float]]  # T~ = (HM)^+ M T
    outcomes: dict[str, dict[str, int]]  # per fit mode ("free T", "columns of T sum to 1"): random starts per end
    points: list[list[float]]  # the random x (ghmm_points x d) at which the fits match the predictor, and the rows
    # compare the partner's posterior and predictor with the G-HMM's


def ghmm_fit_outcomes(
    M: np.ndarray,
    T: np.ndarray,
    HM: np.ndarray,
    HT: np.ndarray,
    points: np.ndarray,
    starts: int,
    constrained: bool,
    rng: np.random.Generator,
    **fit: Any,
) -> dict[str, int]:
    """Fit the pairwise predictor of ``(M, T)`` from ``starts`` random starts, and more (at most ``EXTRA_STARTS``)
    while none has converged, so that the rows always judge at least one fit; count where the fits end."""
    values = theory.ghmm_pairwise_predictor(M, T, points)
    counts = {"(M, T)": 0, "(HM, T~)": 0, "other zero-residual": 0, "not converged": 0}
    tried = 0
    while tried < starts or (tried < starts + EXTRA_STARTS and counts["not converged"] == tried):
        tried += 1
        M_fit, T_fit, residual = theory.fit_ghmm(points, values, M.shape[1], constrained, rng, **fit)
        if residual > FIT_RESIDUAL:
            counts["not converged"] += 1
        elif theory.parameter_distance(M, T, M_fit, T_fit) < 1e-6:
            counts["(M, T)"] += 1
        elif theory.parameter_distance(HM, HT, M_fit, T_fit) < 1e-6:
            counts["(HM, T~)"] += 1
        else:
            counts["other zero-residual"] += 1
    return counts


def ghmm(config: dict[str, Any], ctx: RunContext) -> GhmmData:
    """Householder partner keeps the posterior; fits of the pairwise predictor land on it only without stochasticity."""
    rng = stream(config, 3)
    d, k = config["d"], config["k"]
    M, T = theory.random_ghmm(d, k, rng)
    HM = theory.householder_partner(M)
    HT = theory.partner_transition(M, T, HM)
    points = 1.5 * rng.normal(size=(config["ghmm_points"], d))
    outcomes = {
        name: ghmm_fit_outcomes(M, T, HM, HT, points, config["ghmm_starts"], constrained, rng)
        for name, constrained in (("free T", False), ("columns of T sum to 1", True))
    }
    return {
        "means": M,
        "transition": T,
        "partner_means": HM,
        "partner_transition": HT,
        "outcomes": outcomes,
        "points": points,
    }  # type: ignore[typeddict-item]


# ---------------------------------------------------------------- G-HMM: Theorems 8 and 9
GHMM_ORDERS = tuple(order for order in TASK_ORDERS if 2 in order[1])  # cases 1 and 3: x_2 among the targets
MIDDLE_ORDERS = tuple(order for order in TASK_ORDERS if order[0] == 2)  # case 2: x_1 (x) x_3 | x_2, either way round
LINE = 2.5  # the line x = s u, |s| <= LINE, along which the figure compares the partner with the G-HMM


class GhmmTensorData(TypedDict):
    orders: list[str]  # the task orders x_t2 (x) x_t3 | x_t1 recovered from: cases 1 and 3, then case 2
    errors: dict[str, list[float]]  # per order: max entry error of (M, T) recovered, per G-HMM (the section's first)
    tolerance: float  # the tolerance of the recovery claims
    symmetric_gap: float  # case 2: max difference of x1(x)x3|x2 of an equiangular G-HMM and its middle partner
    symmetric_distance: float  # case 2: parameter distance of that G-HMM and its partner (min over relabellings)
    symmetric_partner_valid: str  # "yes", or "no: ..." where the partner breaks Assumptions 5, 8 or 9
    two_state_gap: float  # case 2 at k = 2: max difference of x1(x)x3|x2 of a random G-HMM and its middle partner
    transition_error: float  # Thm 9: max entry error of T = Psi^-T D Phi^-1 from densities, with the means
    mixture_errors: list[float]  # Lemma 9: max entry error of (means, weights) of p(x_2 | x_1), per G-HMM (k <= 4)
    law_errors: list[float]  # Thm 9 from the law alone (Lemma 9, then eq. 2.79): error of (M, T), per G-HMM (k <= 4)
    partner_two_token_gap: float  # max difference of the two-token predictors of (M, T) and (HM, T~) at the points
    partner_density_gap: float  # max difference of (2 pi)^(d/2) p(x_2 | x_1) of (M, T) and (HM, T~) at the points
    line: list[float]  # positions s of x_1 = s u along a random unit direction u
    line_mean: list[list[float]]  # G-HMM, partner: first coordinate of E[x_2 | x_1 = s u]
    line_density: list[list[float]]  # G-HMM, partner: (2 pi)^(d/2) p(x_2 = mu_1 | x_1 = s u)


def _ghmm_recover(
    values: np.ndarray, points: np.ndarray, order: tuple, k: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``(M, T)`` from the predictor values of task ``order``: case 2 (``x_2`` given) or cases 1 and 3."""
    given, targets = order
    if given == 2:
        return theory.ghmm_recover_middle(values, points, targets, k, rng)
    return theory.ghmm_recover(values, points, given, targets, k, rng)


def middle_counterexample(
    M: np.ndarray, T: np.ndarray, M2: np.ndarray, T2: np.ndarray, points: np.ndarray
) -> tuple[float, float]:
    """Max difference of two G-HMMs' ``x_1 (x) x_3 | x_2`` predictors at ``points``, and their parameter distance."""
    gap = np.abs(
        theory.ghmm_two_token_predictor(M, T, *MIDDLE_ORDERS[0], points)
        - theory.ghmm_two_token_predictor(M2, T2, *MIDDLE_ORDERS[0], points)
    ).max()
    return float(gap), theory.parameter_distance(M, T, M2, T2)


def law_recovery(
    M: np.ndarray, T: np.ndarray, given: np.ndarray, rng: np.random.Generator, hermite: bool = True
) -> tuple[float, float]:
    """Errors of Lemma 9's (means, weights) of ``p(x_2 | x_1 = given)``, and of ``(M, T)`` with eq. 2.79 after it.

    The recovery sees only the law's marginal densities; eq. 2.79 then reads its densities at ``k`` points
    near the recovered means. ``hermite=False`` takes raw moments, so that a test can break the rows.
    """
    d, k = M.shape
    law = theory.ghmm_conditional_marginal(M, T, given)
    M_hat, w_hat = theory.ghmm_mixture_from_law(law, d, k, rng, hermite)
    anchors = 2 * M_hat.T
    T_hat = theory.ghmm_transition_from_density(M_hat, theory.ghmm_density_matrix(M, T, anchors, anchors), anchors)
    weights = T @ theory.ghmm_posterior(M, given[None])[0]
    return theory.mixture_distance(M, weights, M_hat, w_hat), theory.parameter_distance(M, T, M_hat, T_hat)


def ghmm_tensor_data(
    config: dict[str, Any],
    M: np.ndarray,
    T: np.ndarray,
    HM: np.ndarray,
    HT: np.ndarray,
    rng: np.random.Generator,
    told: tuple | None = None,
) -> GhmmTensorData:
    """Recover from the section's G-HMM and ``random_hmms - 1`` random ones; compare the partner's predictors and laws.

    ``told`` are the task orders that recovery is told (default: the true ones, cases 1 and 3 then case 2);
    a test passes wrong ones.
    """
    d, k = M.shape
    points = 1.5 * rng.normal(size=(config["ghmm_points"], d))
    models = [(M, T)] + [theory.random_ghmm(d, k, rng) for _ in range(config["random_hmms"] - 1)]
    errors: dict[str, list[float]] = {}
    for order, told_order in zip(GHMM_ORDERS + MIDDLE_ORDERS, told or GHMM_ORDERS + MIDDLE_ORDERS):
        errs = []
        for means, transition in models:
            values = theory.ghmm_two_token_predictor(means, transition, *order, points)
            recovered = _ghmm_recover(values, points, told_order, k, rng)
            errs.append(theory.parameter_distance(means, transition, *recovered))
        errors[f"x{order[1][0]}(x)x{order[1][1]}|x{order[0]}"] = errs
    symmetric = theory.symmetric_ghmm(d, k, rng)
    partner = theory.middle_partner(*symmetric)
    gap, distance = middle_counterexample(*symmetric, *partner, points)
    two_state = theory.random_ghmm(d, 2, rng)  # any two unit means have a Gram matrix with equal row sums
    two_state_gap = middle_counterexample(*two_state, *theory.middle_partner(*two_state), points)[0]
    law = [law_recovery(m, t, 0.5 * rng.normal(size=d), rng) for m, t in models] if k <= PRONY_MAX_K else []
    anchors = 2 * M.T  # k points near the means: Psi and Phi well conditioned
    density = theory.ghmm_density_matrix(M, T, anchors, anchors)
    u = rng.normal(size=d)
    line = np.linspace(-LINE, LINE, 101)
    along = line[:, None] * (u / np.linalg.norm(u))
    return {
        "orders": list(errors),
        "errors": errors,
        "tolerance": RECOVERY_TOL,
        "symmetric_gap": gap,
        "symmetric_distance": distance,
        "symmetric_partner_valid": validity(check_ghmm, partner),
        "two_state_gap": two_state_gap,
        "transition_error": float(np.abs(theory.ghmm_transition_from_density(M, density, anchors) - T).max()),
        "mixture_errors": [e for e, _ in law],
        "law_errors": [e for _, e in law],
        "partner_two_token_gap": float(
            np.abs(
                theory.ghmm_two_token_predictor(M, T, *TWO_TOKEN, points)
                - theory.ghmm_two_token_predictor(HM, HT, *TWO_TOKEN, points)
            ).max()
        ),
        "partner_density_gap": float(
            np.abs(
                theory.ghmm_density_matrix(M, T, points, points) - theory.ghmm_density_matrix(HM, HT, points, points)
            ).max()
        ),
        "line": line,
        "line_mean": [theory.ghmm_pairwise_predictor(m, t, along)[:, 0] for m, t in ((M, T), (HM, HT))],
        "line_density": [theory.ghmm_density_matrix(m, t, M.T[:1], along)[0] for m, t in ((M, T), (HM, HT))],
    }  # type: ignore[return-value]


def ghmm_tensor(config: dict[str, Any], ctx: RunContext, ghmm: GhmmData) -> GhmmTensorData:
    """Two-token tasks identify a generic G-HMM (Thm 8), the conditional law any (Thm 9); the partner fails both."""
    M, T, HM, HT = (np.asarray(ghmm[key]) for key in ("means", "transition", "partner_means", "partner_transition"))
    return ghmm_tensor_data(config, M, T, HM, HT, stream(config, 4))
