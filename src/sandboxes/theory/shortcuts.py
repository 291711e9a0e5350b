"""Shortcuts to automata as explicit weights of the book's GPT (Liu et al., "Transformers learn
shortcuts to automata", Theorem 10, Lemmas 13, 15, 16 and Algorithm 1 of Theorem 12).

Every construction here is a :class:`~sandboxes.model.GPT` with layer norm off, biases on,
ReLU MLPs and learned (that is, freely set) positional embeddings, run in float64.

* :func:`prefix_composition_gpt` (Theorem 10): depth ``ceil(log2 T)``. Each layer composes the
  transition map at position ``t`` with the one ``2^(l-1)`` positions back (Hillis-Steele
  parallel prefix); a softmax head with a rotated circular positional code looks back, and a
  one-hidden-layer ReLU MLP composes the two maps. The paper's version has no residual
  connections and therefore a second head and a two-hidden-layer MLP; with the GPT's residual
  stream one head suffices, and a robust "plateau" gadget does the composition in one hidden
  layer of width ``4|Q|^2 + 2|Q|``. A beginning-of-sequence token carrying the identity map
  stands in for the paper's ``T`` padding positions. Embedding dimension ``2|Q| + 2``, as in
  the paper.
* :func:`counter_gpt` (Lemma 15): one layer; attention to a BOS token absorbs the ``1 - t/(2T)``
  mass so the head returns the prefix count over ``2T``, and the MLP interpolates ``count mod n``.
* :func:`memory_gpt` (Lemma 16): one layer; the head attends to the latest write.

Read-out: the state ``q`` is held as a number and the output layer scores class ``c`` by
``2 c v - c^2`` (linear in ``v``), whose argmax is the integer nearest to ``v``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from ..data.automata import Semiautomaton
from ..model import GPT, GPTConfig, zero_gpt

PLATEAU = 0.25  # every gadget returns exact values for input noise up to this size


def shortcut_depth(T: int) -> int:
    """``ceil(log2 T)`` layers (at least one): the depth of Theorem 10 at length ``T``."""
    if T < 1:
        raise ValueError(f"T must be at least 1, got {T}")
    return max(1, math.ceil(math.log2(T)))


def lemma13_bound(n_positions: int, gap: float) -> float:
    """Lemma 13: ``||softmax(z) - e_{t*}||_1 <= 2 N exp(-gap)`` when the top score leads by ``gap``."""
    return 2.0 * n_positions * math.exp(-gap)


def lookback_gap(T: int) -> float:
    """``1 - cos(pi/(T+1))``: how far the target's score leads the next best, per unit of ``gamma``."""
    return 1.0 - math.cos(math.pi / (T + 1))


def sufficient_gamma(T: int, n_states: int) -> float:
    """The smallest ``gamma`` for which Lemma 13 keeps every attention read within ``PLATEAU``.

    A read mixes values in ``1..|Q|``, so its error is at most ``(||alpha - e||_1 / 2)(|Q| - 1)``
    ``<= (T + 1)(|Q| - 1) exp(-gamma * gap)``; setting this to ``PLATEAU`` gives ``gamma``.
    """
    spread = max(n_states - 1, 1)
    return math.log((T + 1) * spread / PLATEAU) / lookback_gap(T)


def _nearest_integer_head(model: GPT, coordinate: int, offset: int) -> None:
    """Output layer scoring class ``c`` by ``2 (c + offset) v - (c + offset)^2`` with ``v = x[coordinate]``."""
    c = torch.arange(model.config.vocab_size, dtype=torch.float64) + offset
    model.head.weight[:, coordinate] = 2 * c
    model.head.bias[:] = -(c**2)


def read_out_value(logits: Tensor, offset: int) -> Tensor:
    """The number ``v`` behind the nearest-integer head, recovered as ``(z_1 - z_0 + 2 offset + 1) / 2``."""
    return (logits[..., 1] - logits[..., 0] + 2 * offset + 1) / 2


def prefix_composition_gpt(automaton: Semiautomaton, T: int, gamma: float | None = None) -> GPT:
    """Theorem 10: a ``ceil(log2 T)``-layer GPT whose output at position ``t`` is ``q_t``.

    Inputs are ``[BOS, sigma_1, ..., sigma_T]`` (see :func:`with_bos`). The residual stream holds
    two transition maps as value vectors ``f(q) + 1`` (slots ``L`` and ``R``) and a circular
    position code ``(cos, sin)(pi t / (T + 1))``. Layer ``l`` looks back ``k = 2^(l-1)``; for
    ``t <= k`` the nearest position is the BOS, whose identity map leaves ``R`` unchanged.
    """
    n = automaton.n_states
    L, R, P = slice(0, n), slice(n, 2 * n), 2 * n
    d = 2 * n + 2
    gamma = sufficient_gamma(T, n) if gamma is None else gamma
    config = GPTConfig(
        vocab_size=max(automaton.n_symbols + 1, n),
        block_size=T + 1,
        n_layer=shortcut_depth(T),
        n_head=1,
        d_model=d,
        d_mlp=4 * n * n + 2 * n,
        tied=False,
        positional="learned",
        layer_norm=False,
        activation="relu",
        bias=True,
        head_bias=True,
    )
    model = zero_gpt(config)
    angles = math.pi * torch.arange(T + 1, dtype=torch.float64) / (T + 1)
    M = 4.0 * n  # ramp slope: the gadget's ramps end within 1/2 of each lattice point
    with torch.no_grad():
        model.wte.weight[: automaton.n_symbols, R] = torch.as_tensor(automaton.table, dtype=torch.float64) + 1
        model.wte.weight[automaton.n_symbols, R] = torch.arange(n, dtype=torch.float64) + 1  # BOS: identity
        model.wpe[:, P] = torch.cos(angles)
        model.wpe[:, P + 1] = torch.sin(angles)
        for layer, block in enumerate(model.blocks):
            shift = -math.pi * 2**layer / (T + 1)
            rotation = torch.tensor(
                [[math.cos(shift), -math.sin(shift)], [math.sin(shift), math.cos(shift)]], dtype=torch.float64
            )
            qkv = block.attn.qkv.weight  # rows: query 0..d-1, key d..2d-1, value 2d..3d-1
            qkv[0:2, P : P + 2] = gamma * math.sqrt(d) * rotation
            qkv[d : d + 2, P : P + 2] = torch.eye(2, dtype=torch.float64)
            qkv[2 * d : 2 * d + n, R] = torch.eye(n, dtype=torch.float64)
            block.attn.proj.weight[L, 0:n] = torch.eye(n, dtype=torch.float64)
            _composition_mlp(block.mlp, n, L, R, M)
        _nearest_integer_head(model, R.start + automaton.q0, offset=1)
    return model


def _composition_mlp(mlp: torch.nn.Module, n: int, L: slice, R: slice, M: float) -> None:
    """One hidden layer that replaces ``R`` by the map ``R o L`` and clears ``L``.

    For each ``(q, q')`` four ReLUs give ``A + B - b`` with ``b = R[q']`` and ``x = L[q] - (q'+1)``:
    ``A = relu(b + M(x + 1/4)) - relu(M(x + 1/4))`` and ``B = relu(b - M(x - 1/4)) - relu(M(1/4 - x))``;
    it equals ``b`` for ``|x| <= 1/4`` and ``0`` for ``|x| >= 1/2``, so summing over ``q'`` reads
    ``R`` at ``L[q]`` exactly despite attention noise up to ``1/4``. Pass-through units supply
    the linear terms ``-sum_q' R[q']``, ``-R[q]`` (replace) and ``-L[q]`` (clear).
    """
    W1, b1, W2 = mlp.fc.weight, mlp.fc.bias, mlp.proj.weight
    grid = torch.meshgrid(torch.arange(n), torch.arange(n), torch.arange(4), indexing="ij")
    q, qp, kind = (t.reshape(-1) for t in grid)
    unit = torch.arange(4 * n * n)
    sign = torch.tensor([1.0, 1.0, -1.0, -1.0], dtype=torch.float64)[kind]
    with_b = kind % 2 == 0
    W1[unit, L.start + q] = sign * M
    b1[unit] = M * PLATEAU - sign * M * (qp + 1).double()
    W1[unit[with_b], R.start + qp[with_b]] = 1.0
    W2[R.start + q, unit] = torch.where(with_b, 1.0, -1.0).double()
    through_R = 4 * n * n + torch.arange(n)  # relu(R[q']) = R[q'] since R >= 1
    W1[through_R, R] = torch.eye(n, dtype=torch.float64)
    W2[R, through_R] = -1.0 - torch.eye(n, dtype=torch.float64)
    through_L = through_R + n  # relu(L[q]) = L[q] since attention averages values >= 1
    W1[through_L, L] = torch.eye(n, dtype=torch.float64)
    W2[L, through_L] = -torch.eye(n, dtype=torch.float64)


def with_bos(sigma: Tensor, automaton: Semiautomaton) -> Tensor:
    """Prepend the BOS token (id ``|Sigma|``) that :func:`prefix_composition_gpt` and :func:`counter_gpt` expect."""
    bos = torch.full((sigma.shape[0], 1), automaton.n_symbols, dtype=sigma.dtype)
    return torch.cat([bos, sigma], dim=1)


def lookback_targets(T: int, layer: int) -> np.ndarray:
    """Where position ``t`` (0 = BOS) should attend in layer ``layer`` (0-based): ``max(t - 2^layer, 0)``."""
    return np.maximum(np.arange(T + 1) - 2**layer, 0)


def attention_errors(attention: Tensor, targets: np.ndarray) -> Tensor:
    """``||alpha_t - e_{target(t)}||_1`` for every sequence and position, from ``(B, 1, T, T)`` weights."""
    alpha = attention[:, 0]
    hard = torch.zeros_like(alpha)
    hard[:, torch.arange(alpha.shape[1]), torch.as_tensor(targets)] = 1.0
    return (alpha - hard).abs().sum(dim=-1)


def counter_gpt(n: int, T: int, q0: int = 0) -> GPT:
    """Lemma 15: one layer simulating the mod-``n`` counter ``C_n`` (inputs ``0..n-1``) at length ``T``.

    Dimensions: 0 the input value, 1 the BOS flag, 2 the position code ``log(2T - t)``, 3 the
    work slot. The BOS scores ``log(2T - t)`` and every input 0, so each input gets weight
    ``1/(2T)`` and the head returns ``count/(2T)``. The MLP holds Lemma 10's four-ReLU
    indicator for each possible count ``0..(n-1)T`` and writes ``(q0 + count) mod n``.
    Inputs are ``[BOS, sigma_1..T]`` with BOS id ``n``.
    """
    counts = np.arange((n - 1) * T + 1)
    d = 4
    config = GPTConfig(
        vocab_size=n + 1,
        block_size=T + 1,
        n_layer=1,
        n_head=1,
        d_model=d,
        d_mlp=4 * len(counts) + 1,
        tied=False,
        positional="learned",
        layer_norm=False,
        activation="relu",
        bias=True,
        head_bias=True,
    )
    model = zero_gpt(config)
    with torch.no_grad():
        model.wte.weight[:n, 0] = torch.arange(n, dtype=torch.float64)
        model.wte.weight[n, 1] = 1.0
        model.wpe[1:, 2] = torch.log(2.0 * T - torch.arange(1, T + 1, dtype=torch.float64))
        attn = model.blocks[0].attn
        attn.qkv.weight[0, 2] = math.sqrt(d)
        attn.qkv.weight[d, 1] = 1.0
        attn.qkv.weight[2 * d, 0] = 1.0
        attn.proj.weight[3, 0] = 1.0
        _indicator_mlp(model.blocks[0].mlp, 3, counts / (2.0 * T), (q0 + counts) % n, spacing=1.0 / (2 * T))
        _nearest_integer_head(model, 3, offset=0)
    return model


def memory_gpt(m: int, T: int, q0: int = 0) -> GPT:
    """Lemma 16: one layer simulating the memory unit with ``m`` states (inputs: writes ``0..m-1``, ``⊥ = m``).

    Dimensions: 0 the value (the write, or ``q0`` for ``⊥``), 1 the ``⊥`` flag, 2 the position
    ``t/T``, 3 a constant 1, 4 the work slot. The score of ``j`` is ``c (j/T - 2 [sigma_j = ⊥])``:
    largest at the latest write, or, with no write yet, at the latest ``⊥`` (whose value is
    ``q0``); it leads by ``c/T``. The MLP rounds the read to the nearest state.
    """
    d = 5
    c = T * memory_gap(T, m)  # Lemma 13 keeps the read within PLATEAU
    config = GPTConfig(
        vocab_size=m + 1,
        block_size=T,
        n_layer=1,
        n_head=1,
        d_model=d,
        d_mlp=4 * m + 1,
        tied=False,
        positional="learned",
        layer_norm=False,
        activation="relu",
        bias=True,
        head_bias=True,
    )
    model = zero_gpt(config)
    with torch.no_grad():
        model.wte.weight[:m, 0] = torch.arange(m, dtype=torch.float64)
        model.wte.weight[m, 0] = float(q0)
        model.wte.weight[m, 1] = 1.0
        model.wte.weight[:, 3] = 1.0
        model.wpe[:, 2] = torch.arange(1, T + 1, dtype=torch.float64) / T
        attn = model.blocks[0].attn
        attn.qkv.weight[0, 3] = -2.0 * c * math.sqrt(d)
        attn.qkv.weight[1, 3] = c * math.sqrt(d)
        attn.qkv.weight[d, 1] = 1.0
        attn.qkv.weight[d + 1, 2] = 1.0
        attn.qkv.weight[2 * d, 0] = 1.0
        attn.proj.weight[4, 0] = 1.0
        states = np.arange(m)
        _indicator_mlp(model.blocks[0].mlp, 4, states.astype(float), states, spacing=1.0)
        _nearest_integer_head(model, 4, offset=0)
    return model


def memory_gap(T: int, m: int) -> float:
    """The lead ``c/T`` of the latest write's score in :func:`memory_gpt`."""
    return math.log(T * max(m - 1, 1) / PLATEAU)


def _indicator_mlp(mlp: torch.nn.Module, slot: int, points: np.ndarray, values: np.ndarray, spacing: float) -> None:
    """Lemma 10 on coordinate ``slot``: replace ``x`` near ``points[i]`` by ``values[i]``.

    Each point gets ``psi(u) = relu(u+2) - relu(u+1) - relu(u-1) + relu(u-2)`` with
    ``u = (x - point) / (spacing/4)``: 1 for ``|x - point| <= spacing/4``, 0 beyond ``spacing/2``.
    One more unit passes ``x >= 0`` through so the slot's old value is subtracted.
    """
    W1, b1, W2 = mlp.fc.weight, mlp.fc.bias, mlp.proj.weight
    scale = 4.0 / spacing
    unit = 0
    for point, value in zip(points, values):
        for shift, sign in ((2, 1), (1, -1), (-1, -1), (-2, 1)):
            W1[unit, slot] = scale
            b1[unit] = shift - scale * point
            W2[slot, unit] = sign * float(value)
            unit += 1
    W1[unit, slot] = 1.0
    W2[slot, unit] = -1.0


def gridworld_by_boundaries(sigma: np.ndarray, n: int) -> np.ndarray:
    """Algorithm 1 of Theorem 12 at every position: ``Grid_n`` states without a recurrence.

    With moves ``s = -1/+1`` (``L``/``R``), ``S = n - 1`` and ``S + 1`` leading ``L`` pads (the
    walk starts at the left wall, so the pads keep it there), let ``z`` be the prefix sums. At
    time ``t`` take the shortest suffix ``z[u..t]`` holding ``S + 1`` distinct values; the later
    of its last minimum and last maximum is the latest time at a wall (the left wall if the
    minimum is later), and the state is that wall plus the sum of moves since.
    """
    S = n - 1
    sigma = np.asarray(sigma)
    moves = np.concatenate([np.full((sigma.shape[0], S + 1), -1), 2 * sigma - 1], axis=1)
    z = np.cumsum(moves, axis=1)
    out = np.empty(sigma.shape, dtype=np.int64)
    for b in range(sigma.shape[0]):
        for t in range(S + 1, z.shape[1]):
            u = t
            while len(set(z[b, u : t + 1].tolist())) < S + 1:
                u -= 1
            window = z[b, u : t + 1]
            t_min = u + len(window) - 1 - int(np.argmin(window[::-1]))
            t_max = u + len(window) - 1 - int(np.argmax(window[::-1]))
            wall, t_final = (0, t_min) if t_min > t_max else (S, t_max)
            out[b, t - S - 1] = wall + z[b, t] - z[b, t_final]
    return out


def random_attention_variation(n: int, causal: bool = True) -> float:
    """Expected attention variation ||A1 - A2||_F^2 (Wen et al.'s measure) between two independent attention
    patterns over ``n`` positions whose rows are uniform on their simplices (row i on the first i positions where
    ``causal``, on all n otherwise), the thesis's random baseline: a row of i uniform weights is Dirichlet(1, ..., 1),
    so E||a||^2 = 2 / (i + 1) and E a.b = 1 / i, and two rows differ by 2 (i - 1) / (i (i + 1)) in expectation."""
    widths = range(1, n + 1) if causal else [n] * n
    return float(sum(2.0 * (i - 1) / (i * (i + 1)) for i in widths))


def last_unmatched_open(tokens: list[int]) -> list[int]:
    """For each position of a Dyck prefix (open brackets even tokens, closing odd), the position of the innermost
    open bracket still unmatched after it, or -1 where every bracket is matched: where a stack-like head looks."""
    stack: list[int] = []
    out = []
    for t, token in enumerate(tokens):
        if token % 2 == 0:
            stack.append(t)
        else:
            stack.pop()
        out.append(stack[-1] if stack else -1)
    return out


def length_accuracy(by_position: Sequence[Sequence[float]], lengths: Sequence[int]) -> np.ndarray:
    """Seed x length: the accuracy over whole strings of each length, the mean of the first L positions of the longest
    strings (every learner is causal, and a string's prefix has the law of a shorter string)."""
    cumulative = np.cumsum(np.asarray(by_position, dtype=float), axis=1)
    return np.stack([cumulative[:, length - 1] / length for length in lengths], axis=1)


def inside_and_beyond(by_position: Sequence[Sequence[float]], T: int) -> tuple[np.ndarray, np.ndarray]:
    """Per seed: the accuracy on positions below T (those training saw) and on positions T and beyond (unseen)."""
    acc = np.asarray(by_position, dtype=float)
    return acc[:, :T].mean(axis=1), acc[:, T:].mean(axis=1)
