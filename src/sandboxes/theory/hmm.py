"""Exact theory of masked prediction on HMMs (Liu, Hsu, Ravikumar, Risteski).

Closed-form optimal predictors of the pairwise tasks ``x_t | x_s`` and of the two-token tasks
``x_a (x) x_b | x_c`` on three adjacent tokens; rotations about ``(1, ..., 1)`` that leave every
pairwise predictor unchanged (Theorems 4 and 6), the pair's joint law (Remark 2) and the
matrix-power ambiguity (Claim 1);
Theorem 7 as an algorithm (the 3-tensor of a two-token predictor, Jennrich's simultaneous
diagonalisation, recovery up to a permutation, Kruskal ranks); and for G-HMMs the posterior,
its Householder partner (Lemma 7), a least-squares fit of the pairwise predictor that shows
Theorem 5 numerically, the two-token predictor and the recovery of Theorem 8 (cases 1 and 3, and case 2
with its partner for equiangular means), and the conditional density with both steps of Theorem 9
(Lemma 9's means from Hermite moments, by Prony's method, and eq. 2.79). Nothing here trains.

Conventions: ``O[x, h] = P(x_t = x | h_t = h)``, ``T[i, j] = P(h_{t+1} = i | h_t = j)``,
positions start at 1, and a predictor is an array whose first axis is the conditioning symbol.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
from numpy.polynomial.hermite_e import hermegauss, hermevander
from numpy.polynomial.polynomial import polyvander
from scipy.linalg import hankel
from scipy.optimize import least_squares
from scipy.special import softmax

from ..data.hmm import ROUND_OFF, check_ghmm, check_hmm

# ---------------------------------------------------------------- the paper's explicit example (Theorem 6)
PAPER_O = np.array(
    [
        [0.23016003, 0.3549092, 0.16493077],
        [0.30716059, 0.06962305, 0.37321636],
        [0.2580854, 0.26965425, 0.22226035],
        [0.20459398, 0.3058135, 0.23959252],
    ]
)
PAPER_O_TILDE = np.array(
    [
        [0.24120928, 0.35062535, 0.15816537],
        [0.28937626, 0.07433156, 0.38629218],
        [0.26077674, 0.26749114, 0.22173212],
        [0.20863772, 0.30755194, 0.23381033],
    ]
)
PAPER_T = np.array(
    [[0.56893146, 0.35811118, 0.07295736], [0.35811118, 0.10805638, 0.53383243], [0.07295736, 0.53383243, 0.39321021]]
)
PAPER_T_TILDE = np.array(
    [[0.59740926, 0.30452087, 0.09806987], [0.30452087, 0.1331689, 0.56231024], [0.09806987, 0.56231024, 0.33961989]]
)
PAPER_DIGITS = 8  # the paper prints its example to 8 decimals
PAPER_DETERMINANTS = {"O": 0.0110, "T": -0.1611}  # printed to 4 decimals; det O: product of singular values


# ---------------------------------------------------------------- optimal predictors
def posterior_matrix(emission: np.ndarray) -> np.ndarray:
    """``phi(e_j) = O^T e_j / ||O^T e_j||_1`` as the columns of a ``k x d`` matrix (uniform prior on h)."""
    return (emission / emission.sum(axis=1, keepdims=True)).T


def symbol_law(emission: np.ndarray) -> np.ndarray:
    """``P(x_t = e_j) = (O 1)_j / k``: the stationary law of one token."""
    return emission.sum(axis=1) / emission.shape[1]


def pairwise_predictor(emission: np.ndarray, transition: np.ndarray, given: int, target: int) -> np.ndarray:
    """``F[j] = E[x_target | x_given = e_j]``: ``O T^(t-s) phi`` forwards, ``O (T^T)^(s-t) phi`` backwards.

    Backwards uses the reversed chain, whose transition is ``T^T`` because the stationary law is uniform.
    """
    if given == target or min(given, target) < 1:
        raise ValueError(f"positions start at 1 and must differ, got given={given}, target={target}")
    step = transition if target > given else transition.T
    return (emission @ np.linalg.matrix_power(step, abs(target - given)) @ posterior_matrix(emission)).T


def _token_given_middle(emission: np.ndarray, transition: np.ndarray, position: int) -> np.ndarray:
    """``E[x_position | h_2]`` as a ``d x k`` matrix: ``O T^T``, ``O`` and ``O T`` for positions 1, 2, 3."""
    return {1: emission @ transition.T, 2: emission, 3: emission @ transition}[position]


def _check_triple(given: int, targets: tuple[int, int]) -> None:
    if sorted((given, *targets)) != [1, 2, 3]:
        raise ValueError(f"a two-token task uses the positions 1, 2, 3 once each, got given={given}, targets={targets}")


def cp_factors(
    emission: np.ndarray, transition: np.ndarray, given: int, targets: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rank-one factors ``(A, B, C)`` of the two-token predictor's 3-tensor (proof of Theorem 7).

    Given ``h_2`` the three tokens are independent, so ``F[j, a, b] = sum_i A[j, i] B[a, i] C[b, i]``
    with ``A[j, i] = P(h_2 = i | x_given = e_j)`` and ``B, C`` the laws of the targets given ``h_2``.
    For ``x_2 (x) x_3 | x_1`` this is ``A = diag(1 / ||row_j O||_1) O T^T``, ``B = O``, ``C = O T``.
    """
    _check_triple(given, targets)
    middle = _token_given_middle(emission, transition, given)
    posterior = middle / middle.sum(axis=1, keepdims=True)
    return (posterior, *(_token_given_middle(emission, transition, t) for t in targets))


def two_token_predictor(
    emission: np.ndarray, transition: np.ndarray, given: int, targets: tuple[int, int]
) -> np.ndarray:
    """``F[j, a, b] = E[x_t2 (x) x_t3 | x_given = e_j]_{ab}``, a ``d x d x d`` array."""
    A, B, C = cp_factors(emission, transition, given, targets)
    return np.einsum("ji,ai,bi->jab", A, B, C)


def predictor_distance(first: np.ndarray, second: np.ndarray, weights: np.ndarray) -> float:
    """``sqrt(sum_j w_j ||F[j] - G[j]||^2)``: the excess squared loss of one predictor at the other's optimum."""
    diff = (first - second).reshape(first.shape[0], -1)
    return float(np.sqrt(weights @ (diff**2).sum(axis=1)))


# ---------------------------------------------------------------- rotations about (1, ..., 1): Theorems 4, 6, Claim 1
def ones_complement_basis(k: int) -> np.ndarray:
    """An orthonormal basis of the hyperplane orthogonal to ``(1, ..., 1)``, as ``k x (k-1)`` columns."""
    q, _ = np.linalg.qr(np.column_stack([np.ones(k), np.eye(k)[:, : k - 1]]))
    return q[:, 1:]


def random_plane(k: int, rng: np.random.Generator) -> np.ndarray:
    """Two orthonormal columns spanning a random plane orthogonal to ``(1, ..., 1)``."""
    if k < 3:
        raise ValueError(f"a rotation about (1, ..., 1) other than the identity needs k >= 3, got k = {k}")
    q, _ = np.linalg.qr(rng.normal(size=(k - 1, 2)))
    return ones_complement_basis(k) @ q


def rotation_about_ones(k: int, angle: float, plane: np.ndarray | None = None) -> np.ndarray:
    """The rotation by ``angle`` in ``plane`` (default: the first two basis vectors of ``1^perp``).

    It fixes ``(1, ..., 1)``, so its rows and columns sum to 1 (the paper's Claim 2); for ``k = 3``
    the plane is all of ``1^perp`` and this is the paper's rotation about ``(1, 1, 1) / sqrt 3``.
    """
    if k < 3:
        raise ValueError(f"a rotation about (1, ..., 1) other than the identity needs k >= 3, got k = {k}")
    u, w = (ones_complement_basis(k)[:, :2] if plane is None else plane).T
    return (
        np.eye(k)
        + (np.cos(angle) - 1) * (np.outer(u, u) + np.outer(w, w))
        + np.sin(angle) * (np.outer(w, u) - np.outer(u, w))
    )


def rotated(emission: np.ndarray, transition: np.ndarray, rotation: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(O R, R^T T R)``: every pairwise predictor is unchanged, since ``phi -> R^T phi`` and ``R R^T = I``."""
    return emission @ rotation, rotation.T @ transition @ rotation


def rotation_angle(rotation: np.ndarray, plane: np.ndarray) -> float:
    """The signed angle by which ``rotation`` turns the first vector ``u`` of ``plane`` towards the second ``w``."""
    u, w = plane.T
    return float(np.arctan2(w @ rotation @ u, u @ rotation @ u))


def implied_rotation(emission: np.ndarray, other: np.ndarray) -> np.ndarray:
    """The ``k x k`` matrix ``R = O^+ O~`` with ``O R = O~`` when both share a column space."""
    return np.linalg.lstsq(emission, other, rcond=None)[0]


def circulant_transition(a: float) -> np.ndarray:
    """``a I + (1 - a) P`` with ``P`` the cyclic shift on 3 states: the paper's ``T`` for Claim 1."""
    return a * np.eye(3) + (1 - a) * np.roll(np.eye(3), 1, axis=0)


def power_counterexample(power: int, a: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Claim 1: ``T~ = R T`` with ``R`` the rotation by ``-2 pi / power`` about ``(1, 1, 1)``, so ``T~^t = T^t``.

    ``R`` is a polynomial in the cyclic shift, so it commutes with the circulant ``T`` and
    ``T~^t = R^t T^t = T^t``. The sign of the angle is the one for which ``T~`` stays non-negative
    for ``a = 1/2`` (the paper's ``R(theta)^-1``).
    """
    if power < 2:
        raise ValueError(f"Claim 1 is about powers t >= 2, got {power}")
    transition = circulant_transition(a)
    plane = ones_complement_basis(3)
    return transition, rotation_about_ones(3, -2 * np.pi / power, plane) @ transition


# ---------------------------------------------------------------- random HMMs and counterexamples
RELABELLING = 1e-9  # a pair closer than this under some relabelling is the same HMM up to round-off
UNIFORM_SHARE = 0.1  # weight of the uniform law in random O and T: no entry below UNIFORM_SHARE / size


def random_doubly_stochastic(k: int, rng: np.random.Generator) -> np.ndarray:
    """A strictly positive random point of the Birkhoff polytope: Dirichlet weights on ``k + 1`` random
    permutation matrices, mixed with the uniform matrix so that no entry is 0 (an exact zero would make
    almost every rotation of ``T`` negative, and so no counterexample)."""
    weights = rng.dirichlet(np.ones(k + 1))
    mixture = sum(w * np.eye(k)[rng.permutation(k)] for w in weights)
    return (1 - UNIFORM_SHARE) * mixture + UNIFORM_SHARE / k


def random_hmm(d: int, k: int, rng: np.random.Generator, max_condition: float = 100.0) -> tuple[np.ndarray, np.ndarray]:
    """``(O, T)`` with strictly positive emission columns (Dirichlet(1) mixed with the uniform law, as ``T``)
    and a random doubly stochastic ``T``.

    Draws are repeated until both matrices have condition number at most ``max_condition``,
    so that round-off in the recovery stays near machine precision.
    """
    while True:
        emission = (1 - UNIFORM_SHARE) * rng.dirichlet(np.ones(d), size=k).T + UNIFORM_SHARE / d
        transition = random_doubly_stochastic(k, rng)
        if max(np.linalg.cond(emission), np.linalg.cond(transition)) <= max_condition:
            return check_hmm(emission, transition)


def parameter_distance(
    emission: np.ndarray, transition: np.ndarray, other_emission: np.ndarray, other_transition: np.ndarray
) -> float:
    """``min over permutations P of max(|O~ - O P|, |T~ - P^T T P|)``, entrywise: 0 iff equal up to relabelling."""
    k = emission.shape[1]
    if k > 8:
        raise ValueError(f"the distance tries all k! relabellings; k = {k} is too many (at most 8)")
    perms = np.array(list(itertools.permutations(range(k))))
    gap_o = np.abs(other_emission[None] - emission[:, perms].transpose(1, 0, 2)).max(axis=(1, 2))
    relabelled = transition[perms[:, :, None], perms[:, None, :]]
    gap_t = np.abs(other_transition[None] - relabelled).max(axis=(1, 2))
    return float(np.maximum(gap_o, gap_t).min())


def factor_condition(emission: np.ndarray, transition: np.ndarray) -> float:
    """Largest condition number of the three CP factors of ``x_2 (x) x_3 | x_1``: how much noise recovery amplifies."""
    return max(float(np.linalg.cond(f)) for f in cp_factors(emission, transition, 1, (2, 3)))


def counterexample_angles(coarse: int = 36, halvings: int = 12) -> np.ndarray:
    """Angles in ``(0, pi]`` to try: ``coarse`` even steps, then halvings of the smallest down to ``pi / coarse / 2^halvings``.

    Any strictly positive ``(O, T)`` stays non-negative under small enough rotations, so the small
    angles make the search succeed for every size; the large ones give the most distinguishable pairs.
    """  # noqa: E501
    return np.concatenate(
        [np.linspace(np.pi / coarse, np.pi, coarse), np.pi / coarse / 2.0 ** np.arange(1, halvings + 1)]
    )


def counterexample(
    d: int, k: int, rng: np.random.Generator, candidates: int = 200, max_condition: float = 5.0
) -> dict[str, np.ndarray | float]:
    """A pair ``(O, T)``, ``(O R, R^T T R)`` of valid HMMs whose two-token predictors differ the most.

    Among ``candidates`` random HMMs, random rotation planes and the angles of
    :func:`counterexample_angles`, keep the admissible pairs (non-negative rotated parameters that
    are no relabelling of the originals) and return the one with the largest distance between the
    ``x_2 (x) x_3 | x_1`` predictors: the easiest pair for a learner to tell apart, yet with identical
    pairwise predictors. Pairs whose CP factors have condition number at most ``max_condition`` (so
    that parameters recovered from a noisy predictor stay stable) come first; random HMMs with
    ``k >= 4`` rarely have one, and then the best of the others is returned (``factor_condition``
    says which). Every candidate has an admissible angle, since its entries are positive.
    """
    best: dict[str, np.ndarray | float] = {}
    for _ in range(candidates):
        emission, transition = random_hmm(d, k, rng)
        plane = random_plane(k, rng)
        exact = two_token_predictor(emission, transition, 1, (2, 3))
        for angle in counterexample_angles():
            other_emission, other_transition = rotated(emission, transition, rotation_about_ones(k, angle, plane))
            if min(other_emission.min(), other_transition.min()) < 0:
                continue
            gap = predictor_distance(
                exact, two_token_predictor(other_emission, other_transition, 1, (2, 3)), symbol_law(emission)
            )
            condition = max(factor_condition(emission, transition), factor_condition(other_emission, other_transition))
            rank = (condition <= max_condition, gap)
            if (not best or rank > best["rank"]) and parameter_distance(
                emission, transition, other_emission, other_transition
            ) >= RELABELLING:
                best = {
                    "emission": emission,
                    "transition": transition,
                    "other_emission": other_emission,
                    "other_transition": other_transition,
                    "angle": float(angle),
                    "two_token_gap": gap,
                    "factor_condition": condition,
                    "rank": rank,
                }
    if not best:  # unreachable for strictly positive HMMs: the smallest angle is admissible
        raise ValueError(f"no admissible rotation found for d={d}, k={k}")
    best.pop("rank")
    return best


# ---------------------------------------------------------------- Theorem 7 as an algorithm
def kruskal_rank(matrix: np.ndarray, rtol: float = 1e-9) -> int:
    """The largest ``r`` such that every ``r`` columns are linearly independent (relative tolerance ``rtol``)."""
    scale = np.linalg.norm(matrix, 2)
    for r in range(1, matrix.shape[1] + 1):
        if r > matrix.shape[0]:  # more columns than coordinates are always dependent
            return r - 1
        for cols in itertools.combinations(range(matrix.shape[1]), r):
            if np.linalg.svd(matrix[:, cols], compute_uv=False)[-1] <= rtol * scale:
                return r - 1
    return matrix.shape[1]


def _jennrich_once(
    tensor: np.ndarray, rank: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One simultaneous diagonalisation with a random pair ``(u, v)``; see :func:`jennrich`."""
    d1, d2, d3 = tensor.shape
    basis_b = np.linalg.svd(tensor.transpose(1, 0, 2).reshape(d2, -1), full_matrices=False)[0][:, :rank]
    basis_c = np.linalg.svd(tensor.transpose(2, 0, 1).reshape(d3, -1), full_matrices=False)[0][:, :rank]
    core = np.einsum("jab,ap,bq->jpq", tensor, basis_b, basis_c)
    u, v = rng.normal(size=(2, d1))
    slice_u, slice_v = np.tensordot(u, core, axes=1), np.tensordot(v, core, axes=1)
    values, vectors = np.linalg.eig(slice_u @ np.linalg.inv(slice_v))
    b_core = vectors.real.copy()
    pairs = np.flatnonzero(values.imag > 0)  # noise made two ratios complex: LAPACK lists each pair side by side
    b_core[:, pairs + 1] = vectors[:, pairs].imag  # a real basis of their plane, for ALS to sort out
    c_core = np.linalg.solve(b_core, core.sum(axis=0)).T  # B'^-1 sum_j W_j = diag(A^T 1) C'^T
    B, C = basis_b @ b_core, basis_c @ c_core
    khatri_rao = np.einsum("ai,bi->abi", B, C).reshape(d2 * d3, rank)
    A = np.linalg.lstsq(khatri_rao, tensor.reshape(d1, -1).T, rcond=None)[0].T
    return A, B, C


def cp_residual(tensor: np.ndarray, factors: tuple[np.ndarray, np.ndarray, np.ndarray]) -> float:
    """``||W - sum_i A_i (x) B_i (x) C_i||``, Frobenius: how well the factors explain the tensor."""
    return float(np.linalg.norm(tensor - np.einsum("ji,ai,bi->jab", *factors)))


def jennrich(
    tensor: np.ndarray, rank: int, rng: np.random.Generator, tries: int = 10
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Factors ``(A, B, C)`` with ``W = sum_i A_i (x) B_i (x) C_i``, unique up to permutation and scale.

    Simultaneous diagonalisation: project modes 2 and 3 on their top-``rank`` singular subspaces,
    contract mode 1 with two random vectors ``u, v`` to get ``W_u = B' diag(A^T u) C'^T`` and
    ``W_v``; the eigenvectors of ``W_u W_v^-1`` are the columns of ``B'``, then ``C'`` and ``A``
    follow by linear algebra. Exact when ``B`` and ``C`` have full column rank and the ratios
    ``(A^T u)_i / (A^T v)_i`` are distinct, which holds almost surely when ``A`` has Kruskal rank >= 2.
    Nearly equal ratios amplify round-off and noise, so the best of ``tries`` random draws of
    ``(u, v)`` (smallest residual) is kept.
    """
    return min((_jennrich_once(tensor, rank, rng) for _ in range(tries)), key=lambda f: cp_residual(tensor, f))


def refine(
    tensor: np.ndarray, factors: tuple[np.ndarray, np.ndarray, np.ndarray], iterations: int = 100
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Alternating least squares from ``factors``: each step solves exactly for one factor given the other two.

    Jennrich uses two slices of the tensor; these steps use all of it, which matters when the
    tensor is a learned, noisy predictor. An exact decomposition is a fixed point.
    """
    A, B, C = factors
    for _ in range(iterations):
        A = np.einsum("jab,ai,bi->ji", tensor, B, C) @ np.linalg.pinv((B.T @ B) * (C.T @ C))
        B = np.einsum("jab,ji,bi->ai", tensor, A, C) @ np.linalg.pinv((A.T @ A) * (C.T @ C))
        C = np.einsum("jab,ji,ai->bi", tensor, A, B) @ np.linalg.pinv((A.T @ A) * (B.T @ B))
    return A, B, C


TWO_TOKEN = (1, (2, 3))  # x_2 (x) x_3 | x_1: the task whose tensor Theorem 7 decomposes


def recover(
    predictor: np.ndarray, given: int, targets: tuple[int, int], k: int, rng: np.random.Generator, als_steps: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``(O, T)`` up to a relabelling from a two-token predictor ``F[j, a, b]`` (Theorem 7 made constructive).

    Decompose ``F`` into ``(A, B, C)``; the columns of ``B`` and ``C`` are laws, so dividing by their
    sums removes the scale; ``A`` holds ``P(h_2 | x_given)``, whose rows times the row sums of ``O``
    (``= B 1``, as ``T`` is doubly stochastic) give the third law. Then ``O = E[x_2 | h_2]`` and
    ``T = O^+ E[x_3 | h_2]``. A learned predictor is noisy: ``als_steps`` of :func:`refine` then
    fit the decomposition to the whole tensor.
    """
    _check_triple(given, targets)
    A, B, C = refine(predictor, jennrich(predictor, k, rng), als_steps)
    sums_b, sums_c = B.sum(axis=0), C.sum(axis=0)
    B, C, A = B / sums_b, C / sums_c, A * sums_b * sums_c
    laws = {targets[0]: B, targets[1]: C, given: B.sum(axis=1, keepdims=True) * A}
    emission = laws[2]
    return emission, np.linalg.lstsq(emission, laws[3], rcond=None)[0]


def empirical_two_token_predictor(
    emission: np.ndarray, transition: np.ndarray, n: int, rng: np.random.Generator
) -> np.ndarray:
    """The best fit of ``x_2 (x) x_3 | x_1`` to ``n`` sampled triples, their conditional frequencies: what an ideal
    learner hands to :func:`recover` (uniform rows for a symbol never drawn)."""
    joint = symbol_law(emission)[:, None, None] * two_token_predictor(emission, transition, *TWO_TOKEN)
    counts = rng.multinomial(n, joint.ravel() / joint.sum()).reshape(joint.shape).astype(float)
    totals = counts.sum(axis=(1, 2), keepdims=True)
    return np.where(totals > 0, counts / np.maximum(totals, 1), 1.0 / counts[0].size)


def ideal_recovery_errors(
    emission: np.ndarray, transition: np.ndarray, sizes: list[int], draws: int, rng: np.random.Generator
) -> np.ndarray:
    """``(len(sizes), draws)`` parameter errors of ``(O, T)`` recovered from an ideal learner's predictor at each
    sample size: how much the recovery amplifies sampling noise, with no optimiser in the way."""
    k = emission.shape[1]
    return np.array(
        [
            [
                parameter_distance(
                    emission,
                    transition,
                    *recover(
                        empirical_two_token_predictor(emission, transition, n, rng), *TWO_TOKEN, k, rng, als_steps=100
                    ),
                )
                for _ in range(draws)
            ]
            for n in sizes
        ]
    )


# ---------------------------------------------------------------- G-HMM: Theorem 5 and Lemma 7
def ghmm_posterior(means: np.ndarray, points: np.ndarray) -> np.ndarray:
    """``phi(x)_i = softmax_i(-||x - mu_i||^2 / 2)`` for each row of ``points``: an ``n x k`` array."""
    sq = ((points[:, :, None] - means[None]) ** 2).sum(axis=1)
    return softmax(-0.5 * sq, axis=1)


def ghmm_pairwise_predictor(means: np.ndarray, transition: np.ndarray, points: np.ndarray) -> np.ndarray:
    """``E[x_2 | x_1 = x] = M T phi(x)`` for each row ``x`` of ``points``: an ``n x d`` array."""
    return ghmm_posterior(means, points) @ transition.T @ means.T


def random_ghmm(
    d: int, k: int, rng: np.random.Generator, max_condition: float = 100.0
) -> tuple[np.ndarray, np.ndarray]:
    """``(M, T)`` with Gaussian-direction unit means and a random doubly stochastic ``T``, both well conditioned."""
    while True:
        means = rng.normal(size=(d, k))
        means /= np.linalg.norm(means, axis=0)
        transition = random_doubly_stochastic(k, rng)
        if max(np.linalg.cond(means), np.linalg.cond(transition)) <= max_condition:
            return check_ghmm(means, transition)


def householder_partner(means: np.ndarray) -> np.ndarray:
    """``H M`` with ``H = I - 2 v v^T``, ``v`` the unit vector along ``(M^+)^T 1`` (Lemma 7).

    ``v^T mu_i`` is the same for every mean, so ``H`` translates all means by one vector while
    keeping their norms: the posterior ``phi`` does not change.
    """
    v = np.linalg.pinv(means).T @ np.ones(means.shape[1])
    v /= np.linalg.norm(v)
    return means - 2 * np.outer(v, v @ means)


def partner_transition(means: np.ndarray, transition: np.ndarray, other_means: np.ndarray) -> np.ndarray:
    """``T~ = M~^+ M T``: the transition that makes ``M~ T~ phi = M T phi``; for ``M~ = H M`` its columns sum to -1."""
    return np.linalg.pinv(other_means) @ means @ transition


def fit_ghmm(
    points: np.ndarray,
    values: np.ndarray,
    k: int,
    column_sums_one: bool,
    rng: np.random.Generator,
    unit_norm: bool = True,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Fit ``(M, T)`` with unit-norm means to predictor values ``M T phi(x)`` from one random start.

    With ``column_sums_one`` the last row of ``T`` is ``1 - (sum of the others)``, the part of
    stochasticity that the proof of Theorem 5 uses; otherwise ``T`` is free. Returns the fitted
    ``(M, T)`` and the root-mean-square residual. ``unit_norm=False`` drops Assumption 9 (the means
    are free), so that a test can break the fit.
    """
    d = points.shape[1]
    free_rows = k - 1 if column_sums_one else k

    def unpack(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raw = theta[: d * k].reshape(d, k)
        rows = theta[d * k :].reshape(free_rows, k)
        transition = np.vstack([rows, 1 - rows.sum(axis=0)]) if column_sums_one else rows
        return (raw / np.linalg.norm(raw, axis=0) if unit_norm else raw), transition

    def residual(theta: np.ndarray) -> np.ndarray:
        return (ghmm_pairwise_predictor(*unpack(theta), points) - values).ravel()

    start = np.concatenate([rng.normal(size=d * k), rng.dirichlet(np.ones(k), size=free_rows).ravel()])
    fit = least_squares(residual, start, method="lm", xtol=1e-15, ftol=1e-15, gtol=1e-15, max_nfev=4000)
    means, transition = unpack(fit.x)
    return means, transition, float(np.sqrt(np.mean(fit.fun**2)))


# ---------------------------------------------------------------- Remark 2: the joint law of two tokens
def pair_law(emission: np.ndarray, transition: np.ndarray, gap: int) -> np.ndarray:
    """``P(x_1 = a, x_{1+gap} = b)`` from the stationary start: ``O diag(1/k) (T^gap)^T O^T``, the pair's whole law.

    For one-hot tokens this law is everything any loss on ``x_{1+gap} | x_1`` can see (Remark 2).
    """
    k = emission.shape[1]
    return emission @ np.linalg.matrix_power(transition, gap).T @ emission.T / k


# ---------------------------------------------------------------- G-HMM: Theorems 8 and 9
def ghmm_scaled_likelihood(means: np.ndarray, points: np.ndarray) -> np.ndarray:
    """``psi(x)_i = exp(-||x - mu_i||^2 / 2)`` for each row of ``points``: the density up to ``(2 pi)^(-d/2)``."""
    return np.exp(-0.5 * ((points[:, :, None] - means[None]) ** 2).sum(axis=1))


def _ghmm_given_middle(means: np.ndarray, transition: np.ndarray, position: int) -> np.ndarray:
    """``E[x_position | h_2]`` as a ``d x k`` matrix: ``M T^T``, ``M``, ``M T`` (``T^T`` reverses the chain)."""
    return {1: means @ transition.T, 2: means, 3: means @ transition}[position]


def ghmm_middle_posterior(means: np.ndarray, transition: np.ndarray, given: int, points: np.ndarray) -> np.ndarray:
    """``P(h_2 = i | x_given = x)`` for each row of ``points``: ``T phi``, ``phi``, ``T^T phi`` at positions 1, 2, 3."""
    phi = ghmm_posterior(means, points)
    return {1: phi @ transition.T, 2: phi, 3: phi @ transition}[given]


def ghmm_two_token_predictor(
    means: np.ndarray, transition: np.ndarray, given: int, targets: tuple[int, int], points: np.ndarray
) -> np.ndarray:
    """``E[x_t2 (x) x_t3 | x_given = x]`` for each row of ``points``: an ``n x d x d`` array (Theorem 8)."""
    _check_triple(given, targets)
    B, C = (_ghmm_given_middle(means, transition, t) for t in targets)
    return np.einsum("ni,ai,bi->nab", ghmm_middle_posterior(means, transition, given, points), B, C)


def ghmm_recover(
    values: np.ndarray, points: np.ndarray, given: int, targets: tuple[int, int], k: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``(M, T)`` up to relabelling from two-token predictor values at ``points``, for ``x_2`` among the targets.

    The proof of Theorem 8 (case 1, and case 3 by symmetry): ``W = sum_j x_j (x) F(x_j)`` has the rank-one
    factors ``(sum_j x_j P(h_2 | x_j), E[x_2 | h_2], E[x_other | h_2])``; Kruskal (here Jennrich) gives them up
    to scale. Unit norms (Assumption 9) fix the columns of ``M`` up to sign, unit sums of ``T`` fix the
    other factor, and of the ``2^k`` sign patterns the one that reproduces the values is kept.
    """
    _check_triple(given, targets)
    if 2 not in targets:
        raise ValueError("this constructive recovery needs x_2 among the targets (cases 1 and 3 of Theorem 8)")
    tensor = np.einsum("ja,jbc->abc", points, values)
    _, B, C = jennrich(tensor, k, rng)
    middle, other = (B, C) if targets[0] == 2 else (C, B)
    unit = middle / np.linalg.norm(middle, axis=0)
    best: tuple[float, np.ndarray, np.ndarray] = (np.inf, unit, unit)
    for signs in itertools.product((1.0, -1.0), repeat=k):
        means = unit * np.array(signs)
        law = np.linalg.lstsq(means, other, rcond=None)[0]  # columns of T (other = x_3) or rows of T (x_1), up to scale
        law = law / law.sum(axis=0)
        transition = law if 3 in targets else law.T
        residual = float(np.abs(ghmm_two_token_predictor(means, transition, given, targets, points) - values).max())
        if residual < best[0]:
            best = (residual, means, transition)
    return best[1], best[2]


def ghmm_transition_from_density(means: np.ndarray, density: np.ndarray, points: np.ndarray) -> np.ndarray:
    """``T = Psi^-T D Phi^-1`` (Theorem 9, eq. 2.79) from ``D[a, b] = (2 pi)^(d/2) p(x_2 = x_a | x_1 = x_b)``.

    With the means known, ``D = Psi^T T Phi`` for the ``k`` points, ``Psi`` and ``Phi`` the scaled likelihoods
    and posteriors as columns; both are invertible for generic points.
    """
    psi, phi = ghmm_scaled_likelihood(means, points).T, ghmm_posterior(means, points).T
    return np.linalg.solve(psi.T, density) @ np.linalg.inv(phi)


def ghmm_density_matrix(
    means: np.ndarray, transition: np.ndarray, targets: np.ndarray, given: np.ndarray
) -> np.ndarray:
    """``D[a, b] = psi(x_a)^T T phi(x_b) = (2 pi)^(d/2) p(x_2 = targets_a | x_1 = given_b)``, the mixture formula."""
    return ghmm_scaled_likelihood(means, targets) @ transition @ ghmm_posterior(means, given).T


# ---------------------------------------------------------------- G-HMM: Theorem 8, case 2 (x_1 (x) x_3 | x_2)
def _log_ratio_slopes(posterior: np.ndarray, points: np.ndarray) -> np.ndarray:
    """``mu_i - mu_1`` (one column each): slopes of ``log phi_i(x) - log phi_1(x)``, affine in ``x``, by least squares.

    Each row is weighted by ``1 / sqrt(1/phi_i^2 + 1/phi_1^2)``, the inverse of the round-off a small
    posterior puts into the logarithm.
    """
    logs, design = np.log(posterior), np.column_stack([points, np.ones(len(points))])
    slopes = []
    for i in range(1, posterior.shape[1]):
        weight = 1 / np.hypot(1 / posterior[:, i], 1 / posterior[:, 0])
        fit = np.linalg.lstsq(design * weight[:, None], (logs[:, i] - logs[:, 0]) * weight, rcond=None)[0]
        slopes.append(fit[:-1])
    return np.column_stack(slopes)


def unit_norm_candidates(differences: np.ndarray, basis: np.ndarray) -> list[np.ndarray]:
    """The two ``M`` with unit columns in the span of the orthonormal ``basis`` and ``mu_i - mu_1 = differences``.

    ``|mu_1 + delta_i| = 1 = |mu_1|`` gives ``delta_i . mu_1 = -|delta_i|^2 / 2``: ``k - 1`` linear equations
    for ``mu_1 = U z`` in the ``k``-dimensional span, a line that meets the unit sphere twice: ``M`` and ``H M``
    (Lemma 7).
    """
    system = differences.T @ basis
    base = np.linalg.lstsq(system, -0.5 * (differences**2).sum(axis=0), rcond=None)[0]
    along = np.linalg.svd(system)[2][-1]
    height = np.sqrt(max(1 - base @ base, 0.0))
    offsets = np.column_stack([np.zeros(len(basis)), differences])
    return [(basis @ (base + sign * height * along))[:, None] + offsets for sign in (1.0, -1.0)]


def ghmm_recover_middle(
    values: np.ndarray, points: np.ndarray, targets: tuple[int, int], k: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``(M, T)`` up to relabelling from values of the predictor ``x_1 (x) x_3 | x_2`` (Theorem 8, case 2).

    ``F(x) = sum_i phi_i(x) E[x_1 | h_2 = i] (x) E[x_3 | h_2 = i]``, so the values stacked over the points
    are a 3-tensor with CP factors ``(Phi, M T^T, M T)``; Jennrich gives them up to scale. The rows of
    ``Phi`` sum to one, which fixes its scale; the log-ratios of the posterior are affine in ``x`` with
    slopes ``mu_i - mu_1``, which lie in the column space of ``M T`` (so ``k + 1`` generic points suffice
    for the fit, on the points' coordinates in that space); unit norms leave ``M`` or ``H M``
    (:func:`unit_norm_candidates`); each gives ``T`` from ``M T`` with unit column sums, and the candidate
    kept has a stochastic ``T`` and reproduces the values. Both do exactly when ``(M^T M)^-1 1`` is parallel
    to ``1`` and ``T <= 2/k`` entrywise (:func:`middle_partner`): then the task does not identify the
    G-HMM, and either may be returned.
    """
    _check_triple(2, targets)
    ordered = values if targets == (1, 3) else values.transpose(0, 2, 1)
    factor, _, third = jennrich(ordered, k, rng)
    posterior = factor * np.linalg.lstsq(factor, np.ones(len(factor)), rcond=None)[0]

    def candidate(means: np.ndarray) -> tuple[tuple[bool, float], np.ndarray, np.ndarray]:
        transition = np.linalg.lstsq(means, third, rcond=None)[0]
        transition /= transition.sum(axis=0)
        residual = float(np.abs(ghmm_two_token_predictor(means, transition, 2, (1, 3), points) - ordered).max())
        return (bool(transition.min() < -ROUND_OFF), residual), means, transition

    basis = np.linalg.svd(third, full_matrices=False)[0]
    differences = basis @ _log_ratio_slopes(posterior, points @ basis)
    candidates = unit_norm_candidates(differences, basis)
    _, means, transition = min((candidate(m) for m in candidates), key=lambda c: c[0])
    return _gauss_newton(means, transition, ordered, points)


def _gauss_newton(
    means: np.ndarray,
    transition: np.ndarray,
    values: np.ndarray,
    points: np.ndarray,
    steps: int = 2,
    step: float = 1e-7,
) -> tuple[np.ndarray, np.ndarray]:
    """``steps`` Gauss-Newton steps on every entry of ``(M, T)`` against the values of ``x_1 (x) x_3 | x_2``.

    Fixing ``v^T mu_1`` by a unit norm loses digits when ``H M`` lies near ``M`` (a square root near a
    double root); the predictor fixes it well, so two steps from the constructive answer return it to
    round-off. Local steps: they do not carry a wrong candidate to the right one.
    """
    d, k = means.shape

    def residual(theta: np.ndarray) -> np.ndarray:
        model = theta[: d * k].reshape(d, k), theta[d * k :].reshape(k, k)
        return (ghmm_two_token_predictor(*model, 2, (1, 3), points) - values).ravel()

    theta = np.concatenate([means.ravel(), transition.ravel()])
    for _ in range(steps):
        base = residual(theta)
        jacobian = np.column_stack([(residual(theta + step * e) - base) / step for e in np.eye(len(theta))])
        theta = theta - np.linalg.lstsq(jacobian, base, rcond=None)[0]
    return theta[: d * k].reshape(d, k), theta[d * k :].reshape(k, k)


def middle_partner(means: np.ndarray, transition: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(H M, u 1^T - T)`` with ``u = 2 (M^T M)^-1 1 / (1^T (M^T M)^-1 1)``: the ``H M`` candidate of case 2.

    ``H M = M (I - u 1^T)``, so ``H M (u 1^T - T) = -M T``: the factor ``E[x_3 | h_2]`` only flips sign, and
    ``E[x_1 | h_2]`` flips too, leaving ``x_1 (x) x_3 | x_2`` unchanged, exactly when ``u = (2/k) 1`` (the Gram
    matrix ``M^T M`` has equal row sums, as for every ``k = 2``). If also ``T <= 2/k`` entrywise, the partner is
    a G-HMM: the proof of case 2 sets the recovered factors equal where they are equal only up to scale.
    """
    inverse_gram_ones = np.linalg.solve(means.T @ means, np.ones(means.shape[1]))
    u = 2 * inverse_gram_ones / inverse_gram_ones.sum()
    return householder_partner(means), np.outer(u, np.ones(len(u))) - transition


def symmetric_ghmm(
    d: int, k: int, rng: np.random.Generator, max_condition: float = 100.0
) -> tuple[np.ndarray, np.ndarray]:
    """A G-HMM whose :func:`middle_partner` is a G-HMM too: equiangular unit means and ``T <= 2/k`` entrywise.

    The means have Gram matrix ``(1 - r) I + r 1 1^T`` (equal row sums), and ``T`` mixes the uniform matrix
    with a random doubly stochastic one at weight ``0.9 / (k - 1)``, which keeps every entry below ``2/k``.
    """
    share = 0.9 / (k - 1)
    while True:
        r = rng.uniform(-0.5 / (k - 1), 0.5)
        frame = np.linalg.qr(rng.normal(size=(d, k)))[0]
        means = frame @ np.linalg.cholesky((1 - r) * np.eye(k) + r).T
        transition = (1 - share) / k + share * random_doubly_stochastic(k, rng)
        if max(np.linalg.cond(means), np.linalg.cond(transition)) <= max_condition:
            return check_ghmm(means, transition)


# ---------------------------------------------------------------- G-HMM: Theorem 9, Lemma 9 (the means from moments)
HERMITE_NODES = 40  # Gauss-Hermite nodes per axis: exact for degree 79, and e^(mu y) is resolved to round-off


def ghmm_conditional_marginal(
    means: np.ndarray, transition: np.ndarray, given: np.ndarray
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The law of ``x_2`` given ``x_1 = given`` as its marginal densities: ``(Q, y) -> p(Q^T x_2 = y_j)`` per row.

    ``Q`` is ``d x j`` with orthonormal columns and ``y`` is ``n x j``: ``Q^T x_2`` is the mixture
    ``sum_i w_i N(Q^T mu_i, I_j)`` with ``w = T phi(given)``. This is what Lemma 9's recovery is given.
    """
    weights = transition @ ghmm_posterior(means, given[None])[0]

    def marginal(directions: np.ndarray, points: np.ndarray) -> np.ndarray:
        scale = (2 * np.pi) ** (-directions.shape[1] / 2)
        return scale * ghmm_scaled_likelihood(directions.T @ means, points) @ weights

    return marginal


def _quadrature(dimensions: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes ``y`` and weights ``W`` with ``sum_j W_j p(y_j) f(y_j) = int p f`` on ``R^dimensions``, Gauss-Hermite.

    The rule integrates against ``exp(-|y|^2 / 2)``, so ``exp(|y|^2 / 2)`` is folded into the weights.
    """
    nodes, weights = hermegauss(HERMITE_NODES)
    grid = np.stack(np.meshgrid(*[nodes] * dimensions, indexing="ij"), axis=-1).reshape(-1, dimensions)
    product = np.prod(np.meshgrid(*[weights] * dimensions, indexing="ij"), axis=0).ravel()
    return grid, product * np.exp(0.5 * (grid**2).sum(axis=1))


def _powers(y: np.ndarray, degree: int, hermite: bool) -> np.ndarray:
    """``He_n(y)`` (or ``y^n`` if not ``hermite``) for ``n = 0 .. degree``, one column each."""
    return hermevander(y, degree) if hermite else polyvander(y, degree)


def prony(moments: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes ``z`` (sorted) and weights ``w`` with ``moments[n] = sum_i w_i z_i^n`` for ``n < 2k``.

    The Hankel matrices ``H0 = V diag(w) V^T`` and ``H1 = V diag(w z) V^T`` (``V[n, i] = z_i^n``) form a
    pencil whose eigenvalues are the nodes, the roots of the polynomial that annihilates the sequence;
    the weights then solve the Vandermonde system.
    """
    low, high = hankel(moments[:k], moments[k - 1 : 2 * k - 1]), hankel(moments[1 : k + 1], moments[k : 2 * k])
    nodes = np.sort(np.linalg.eigvals(np.linalg.solve(low, high)).real)
    return nodes, np.linalg.solve(np.vander(nodes, k, increasing=True).T, moments[:k])


def _direction_moments(
    marginal: Callable[[np.ndarray, np.ndarray], np.ndarray], direction: np.ndarray, k: int, hermite: bool
) -> np.ndarray:
    """``E[He_n(u^T X)]`` for ``n < 2k`` by quadrature of the 1-D marginal along the unit vector ``u``."""
    grid, weights = _quadrature(1)
    return _powers(grid[:, 0], 2 * k - 1, hermite).T @ (weights * marginal(direction[:, None], grid))


def _mixed_moments(
    marginal: Callable[[np.ndarray, np.ndarray], np.ndarray], frame: np.ndarray, k: int, hermite: bool
) -> np.ndarray:
    """``E[He_n(Y_0) Y_m]`` for ``n < k`` and ``m = 1 .. d-1``, ``Y = Q^T X``, from the 2-D marginals: ``(d-1) x k``."""
    grid, weights = _quadrature(2)
    basis = _powers(grid[:, 0], k - 1, hermite)
    return np.array(
        [basis.T @ (weights * marginal(frame[:, [0, m]], grid) * grid[:, 1]) for m in range(1, frame.shape[1])]
    )


def _prony_along(
    marginal: Callable[[np.ndarray, np.ndarray], np.ndarray], frame: np.ndarray, k: int, hermite: bool
) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """Prony along the first column of ``frame``: ``cond(V) / min |w|``, the frame, the nodes and the weights.

    The first is how much the Vandermonde solve for the other coordinates amplifies round-off.
    """
    nodes, weights = prony(_direction_moments(marginal, frame[:, 0], k, hermite), k)
    amplification = np.linalg.cond(np.vander(nodes, k, increasing=True)) / np.abs(weights).min()
    return float(amplification), frame, nodes, weights


def ghmm_mixture_from_law(
    marginal: Callable[[np.ndarray, np.ndarray], np.ndarray],
    d: int,
    k: int,
    rng: np.random.Generator,
    hermite: bool = True,
    tries: int = 50,
) -> tuple[np.ndarray, np.ndarray]:
    """Means (``d x k``) and weights of a unit-covariance Gaussian mixture from its moments (Lemma 9, constructive).

    Given only the marginal densities of the law (:func:`ghmm_conditional_marginal`), integrated by
    Gauss-Hermite quadrature. Along a unit ``u`` the Hermite moments remove the unit noise,
    ``E[He_n(u^T X)] = sum_i w_i (u^T mu_i)^n``, and :func:`prony` returns the projections and weights when
    they are distinct; of ``tries`` random frames the one that amplifies round-off least is kept.
    The mixed moments ``E[He_n(Y_0) Y_m] = sum_i w_i z_i^n (Q^T mu_i)_m`` give the other coordinates by a
    Vandermonde solve. ``hermite=False`` takes raw moments, ignoring the noise, so that a test can break it.
    """
    frames = (np.linalg.qr(rng.normal(size=(d, d)))[0] for _ in range(tries))
    _, frame, nodes, weights = min((_prony_along(marginal, f, k, hermite) for f in frames), key=lambda t: t[0])
    mixed = _mixed_moments(marginal, frame, k, hermite)
    others = np.linalg.solve(np.vander(nodes, k, increasing=True).T * weights, mixed.T)  # k x (d-1)
    return frame @ np.vstack([nodes, others.T]), weights


def mixture_distance(
    means: np.ndarray, weights: np.ndarray, other_means: np.ndarray, other_weights: np.ndarray
) -> float:
    """``min over relabellings of max(|M~ - M P|, |w~ - P^T w|)``: :func:`parameter_distance` with ``T = diag(w)``."""
    return parameter_distance(means, np.diag(weights), other_means, np.diag(other_weights))
