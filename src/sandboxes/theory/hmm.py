"""Exact theory of masked prediction on HMMs (Liu, Hsu, Ravikumar, Risteski).

Closed-form optimal predictors of the pairwise tasks ``x_t | x_s`` and of the two-token tasks
``x_a (x) x_b | x_c`` on three adjacent tokens; rotations about ``(1, ..., 1)`` that leave every
pairwise predictor unchanged (Theorems 4 and 6), the pair's joint law (Remark 2) and the
matrix-power ambiguity (Claim 1);
Theorem 7 as an algorithm (the 3-tensor of a two-token predictor, Jennrich's simultaneous
diagonalisation, recovery up to a permutation, Kruskal ranks); and for G-HMMs the posterior,
its Householder partner (Lemma 7), a least-squares fit of the pairwise predictor that shows
Theorem 5 numerically, the two-token predictor and the recovery of Theorem 8 (cases 1 and 3),
and the conditional density with the last step of Theorem 9. Nothing here trains.

Conventions: ``O[x, h] = P(x_t = x | h_t = h)``, ``T[i, j] = P(h_{t+1} = i | h_t = j)``,
positions start at 1, and a predictor is an array whose first axis is the conditioning symbol.
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy.optimize import least_squares
from scipy.special import softmax

from ..data.hmm import check_ghmm, check_hmm

# ---------------------------------------------------------------- the paper's explicit example (Theorem 6)
SEED_O = np.array([[0.23016003, 0.3549092, 0.16493077], [0.30716059, 0.06962305, 0.37321636],
                   [0.2580854, 0.26965425, 0.22226035], [0.20459398, 0.3058135, 0.23959252]])
SEED_O_TILDE = np.array([[0.24120928, 0.35062535, 0.15816537], [0.28937626, 0.07433156, 0.38629218],
                         [0.26077674, 0.26749114, 0.22173212], [0.20863772, 0.30755194, 0.23381033]])
SEED_T = np.array([[0.56893146, 0.35811118, 0.07295736], [0.35811118, 0.10805638, 0.53383243],
                   [0.07295736, 0.53383243, 0.39321021]])
SEED_T_TILDE = np.array([[0.59740926, 0.30452087, 0.09806987], [0.30452087, 0.1331689, 0.56231024],
                         [0.09806987, 0.56231024, 0.33961989]])
SEED_DIGITS = 8  # the paper prints its example to 8 decimals
SEED_DETERMINANTS = {"O": 0.0110, "T": -0.1611}  # printed to 4 decimals; det O: product of singular values


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


def cp_factors(emission: np.ndarray, transition: np.ndarray, given: int,
               targets: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rank-one factors ``(A, B, C)`` of the two-token predictor's 3-tensor (proof of Theorem 7).

    Given ``h_2`` the three tokens are independent, so ``F[j, a, b] = sum_i A[j, i] B[a, i] C[b, i]``
    with ``A[j, i] = P(h_2 = i | x_given = e_j)`` and ``B, C`` the laws of the targets given ``h_2``.
    For ``x_2 (x) x_3 | x_1`` this is ``A = diag(1 / ||row_j O||_1) O T^T``, ``B = O``, ``C = O T``.
    """
    _check_triple(given, targets)
    middle = _token_given_middle(emission, transition, given)
    posterior = middle / middle.sum(axis=1, keepdims=True)
    return (posterior, *(_token_given_middle(emission, transition, t) for t in targets))


def two_token_predictor(emission: np.ndarray, transition: np.ndarray, given: int,
                        targets: tuple[int, int]) -> np.ndarray:
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
    return (np.eye(k) + (np.cos(angle) - 1) * (np.outer(u, u) + np.outer(w, w))
            + np.sin(angle) * (np.outer(w, u) - np.outer(u, w)))


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
def random_doubly_stochastic(k: int, rng: np.random.Generator) -> np.ndarray:
    """A random point of the Birkhoff polytope: Dirichlet weights on ``k + 1`` random permutation matrices."""
    weights = rng.dirichlet(np.ones(k + 1))
    return sum(w * np.eye(k)[rng.permutation(k)] for w in weights)


def random_hmm(d: int, k: int, rng: np.random.Generator, max_condition: float = 100.0) -> tuple[np.ndarray, np.ndarray]:
    """``(O, T)`` with Dirichlet(1) emission columns and a random doubly stochastic ``T``.

    Draws are repeated until both matrices have condition number at most ``max_condition``,
    so that round-off in the recovery stays near machine precision.
    """
    while True:
        emission = rng.dirichlet(np.ones(d), size=k).T
        transition = random_doubly_stochastic(k, rng)
        if max(np.linalg.cond(emission), np.linalg.cond(transition)) <= max_condition:
            return check_hmm(emission, transition)


def parameter_distance(emission: np.ndarray, transition: np.ndarray, other_emission: np.ndarray,
                       other_transition: np.ndarray) -> float:
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


def counterexample(d: int, k: int, rng: np.random.Generator, candidates: int = 200, angles: int = 36,
                   max_condition: float = 5.0) -> dict[str, np.ndarray | float]:
    """A pair ``(O, T)``, ``(O R, R^T T R)`` of valid HMMs whose two-token predictors differ the most.

    Among ``candidates`` random HMMs, random rotation planes and ``angles`` angles in ``(0, pi]``,
    keep the admissible pairs (non-negative rotated parameters that are no relabelling of the
    originals, and CP factors with condition number at most ``max_condition``, so that parameters
    recovered from a noisy predictor stay stable) and return the one with the largest distance
    between the ``x_2 (x) x_3 | x_1`` predictors: the easiest pair for a learner to tell apart,
    yet with identical pairwise predictors.
    """
    best: dict[str, np.ndarray | float] = {"two_token_gap": -1.0}
    for _ in range(candidates):
        emission, transition = random_hmm(d, k, rng)
        plane = random_plane(k, rng)
        if factor_condition(emission, transition) > max_condition:
            continue
        exact = two_token_predictor(emission, transition, 1, (2, 3))
        for angle in np.linspace(np.pi / angles, np.pi, angles):
            other_emission, other_transition = rotated(emission, transition, rotation_about_ones(k, angle, plane))
            if min(other_emission.min(), other_transition.min()) < 0:
                continue
            gap = predictor_distance(exact, two_token_predictor(other_emission, other_transition, 1, (2, 3)),
                                     symbol_law(emission))
            if (gap > best["two_token_gap"] and factor_condition(other_emission, other_transition) <= max_condition
                    and parameter_distance(emission, transition, other_emission, other_transition) > 1e-3):
                best = {"emission": emission, "transition": transition, "other_emission": other_emission,
                        "other_transition": other_transition, "angle": float(angle), "two_token_gap": gap}
    if best["two_token_gap"] < 0:
        raise ValueError(f"no admissible rotation found for d={d}, k={k}; try more candidates")
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


def _jennrich_once(tensor: np.ndarray, rank: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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


def jennrich(tensor: np.ndarray, rank: int, rng: np.random.Generator,
             tries: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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


def refine(tensor: np.ndarray, factors: tuple[np.ndarray, np.ndarray, np.ndarray],
           iterations: int = 100) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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


def recover(predictor: np.ndarray, given: int, targets: tuple[int, int], k: int,
            rng: np.random.Generator, als_steps: int = 0) -> tuple[np.ndarray, np.ndarray]:
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


# ---------------------------------------------------------------- G-HMM: Theorem 5 and Lemma 7
def ghmm_posterior(means: np.ndarray, points: np.ndarray) -> np.ndarray:
    """``phi(x)_i = softmax_i(-||x - mu_i||^2 / 2)`` for each row of ``points``: an ``n x k`` array."""
    sq = ((points[:, :, None] - means[None]) ** 2).sum(axis=1)
    return softmax(-0.5 * sq, axis=1)


def ghmm_pairwise_predictor(means: np.ndarray, transition: np.ndarray, points: np.ndarray) -> np.ndarray:
    """``E[x_2 | x_1 = x] = M T phi(x)`` for each row ``x`` of ``points``: an ``n x d`` array."""
    return ghmm_posterior(means, points) @ transition.T @ means.T


def random_ghmm(d: int, k: int, rng: np.random.Generator,
                max_condition: float = 100.0) -> tuple[np.ndarray, np.ndarray]:
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


def fit_ghmm(points: np.ndarray, values: np.ndarray, k: int, column_sums_one: bool,
             rng: np.random.Generator, unit_norm: bool = True) -> tuple[np.ndarray, np.ndarray, float]:
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
        rows = theta[d * k:].reshape(free_rows, k)
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


def ghmm_middle_posterior(means: np.ndarray, transition: np.ndarray, given: int,
                          points: np.ndarray) -> np.ndarray:
    """``P(h_2 = i | x_given = x)`` for each row of ``points``: ``T phi``, ``phi``, ``T^T phi`` at positions 1, 2, 3."""
    phi = ghmm_posterior(means, points)
    return {1: phi @ transition.T, 2: phi, 3: phi @ transition}[given]


def ghmm_two_token_predictor(means: np.ndarray, transition: np.ndarray, given: int, targets: tuple[int, int],
                             points: np.ndarray) -> np.ndarray:
    """``E[x_t2 (x) x_t3 | x_given = x]`` for each row of ``points``: an ``n x d x d`` array (Theorem 8)."""
    _check_triple(given, targets)
    B, C = (_ghmm_given_middle(means, transition, t) for t in targets)
    return np.einsum("ni,ai,bi->nab", ghmm_middle_posterior(means, transition, given, points), B, C)


def ghmm_recover(values: np.ndarray, points: np.ndarray, given: int, targets: tuple[int, int], k: int,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
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


def ghmm_density_matrix(means: np.ndarray, transition: np.ndarray, targets: np.ndarray,
                        given: np.ndarray) -> np.ndarray:
    """``D[a, b] = psi(x_a)^T T phi(x_b) = (2 pi)^(d/2) p(x_2 = targets_a | x_1 = given_b)``, the mixture formula."""
    return ghmm_scaled_likelihood(means, targets) @ transition @ ghmm_posterior(means, given).T
