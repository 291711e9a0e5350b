"""Exact theory of attention dilution and flip-flops (Liu et al., "Exposing attention glitches with flip-flop language modeling").

* Proposition 4: with latents of norm at most 1 and ``sigma = ||W_K^T W_Q||_2`` no attention
  weight over ``T`` positions exceeds ``exp(2 sigma) / (T - 1 + exp(2 sigma))``; here as a
  function, with the extremal input that attains it and its inverse (the length at which a
  head of a given norm can no longer give one position a chosen weight).
* Proposition 3: a 2-layer 1-head transformer written into the book's :class:`GPT` that answers
  every read of the clean flip-flop task, with closed-form conditions under which it is exact.
* Proposition 5: 1-layer flip-flop simulators with linear positions, whose attention switches
  to a wrong position at a length given in closed form unless ``W_Qp^T W_Kp = 0``.

Nothing here trains. Scores in our GPT are ``q . k / sqrt(d_head)``, so the bilinear form of a
head is ``M = W_q^T W_k / sqrt(d_head)`` (score of query ``x_i`` on key ``x_j`` is
``x_i^T M x_j``); the paper's ``W_K^T W_Q`` is its transpose, with the same spectral norm.
"""  # noqa: E501

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..data.flipflop import NOOP, ONE, WRITE0, WRITE1, ZERO, I, R, W
from ..model import GPT, CausalSelfAttention, GPTConfig, zero_gpt


# ---------------------------------------------------------------- Proposition 4
def max_weight_bound(T: np.ndarray | float, sigma: np.ndarray | float) -> np.ndarray:
    """``1 - (T-1)/(T-1+exp(2 sigma)) = 1 / (1 + (T-1) exp(-2 sigma))``: the largest weight one of ``T`` keys can get."""  # noqa: E501
    T, sigma = np.asarray(T, dtype=float), np.asarray(sigma, dtype=float)
    return 1.0 / (1.0 + (T - 1.0) * np.exp(-2.0 * sigma))


def dilution_length(sigma: float, threshold: float) -> int:
    """Smallest ``T`` at which the bound is at most ``threshold``: beyond it no input gets a larger weight."""
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must lie strictly between 0 and 1, got {threshold}")
    return max(1, math.ceil(1.0 + math.exp(2.0 * sigma) * (1.0 - threshold) / threshold))


def bilinear_forms(attn: CausalSelfAttention) -> Tensor:
    """``(H, d, d)``: each head's ``M_h`` with score ``x_i^T M_h x_j`` (``1/sqrt(d_head)`` included)."""
    d = attn.qkv.in_features
    H = attn.n_head
    wq, wk, _ = attn.qkv.weight.detach().split(d, dim=0)
    dh = d // H
    wq, wk = wq.view(H, dh, d), wk.view(H, dh, d)
    return wq.transpose(1, 2) @ wk / math.sqrt(dh)


def spectral_norms(attn: CausalSelfAttention) -> Tensor:
    """``sigma_max`` of every head of a layer; NaN for a layer whose weights are not finite (a diverged run)."""
    forms = bilinear_forms(attn)
    if not torch.isfinite(forms).all():
        return torch.full(forms.shape[:-2], float("nan"), dtype=forms.dtype, device=forms.device)
    return torch.linalg.matrix_norm(forms, ord=2)


def attention_inputs(model: GPT, idx: Tensor) -> list[Tensor]:
    """The latents each attention layer reads (after its layer norm), ``(B, T, d)`` per layer."""
    x = model.embed(idx)
    inputs = []
    for block in model.blocks:
        inputs.append(block.ln_1(x))
        x, _ = block(x)
    return inputs


def effective_sigmas(model: GPT, idx: Tensor) -> list[Tensor]:
    """Proposition 4's ``sigma`` at every query of every head, ``(B, H, T)`` per layer.

    Query ``i`` sees ``i + 1`` keys; its scores lie within ``+-sigma_h |x_i| max_{j<=i} |x_j|``,
    which is the proposition with unit latents and ``sigma = sigma_h |x_i| max_j |x_j|``.
    """
    out = []
    with torch.no_grad():
        for block, x in zip(model.blocks, attention_inputs(model, idx)):
            norms = x.norm(dim=-1)  # (B, T)
            reach = norms * norms.cummax(dim=1).values
            out.append(spectral_norms(block.attn)[None, :, None] * reach[:, None, :])
    return out


def extremal_attention(sigma: float, T: int) -> tuple[GPT, Tensor]:
    """A one-head GPT layer and an input of length ``T`` whose last query gives key 0 exactly the bound.

    ``M = -sigma I`` in two dimensions; the query and ``T - 2`` keys are ``e_1`` (score ``-sigma``),
    the target key is ``-e_1`` (score ``+sigma``): every score sits at an end of its range.
    """
    config = GPTConfig(
        vocab_size=2,
        block_size=T,
        n_layer=1,
        n_head=1,
        d_model=2,
        positional="none",
        mlp=False,
        tied=False,
        head_bias=False,
    )
    model = zero_gpt(config)
    a = math.sqrt(sigma * math.sqrt(2))
    with torch.no_grad():
        model.wte.weight[0] = torch.tensor([1.0, 0.0], dtype=torch.float64)
        model.wte.weight[1] = torch.tensor([-1.0, 0.0], dtype=torch.float64)
        qkv = model.blocks[0].attn.qkv.weight
        qkv[0:2] = a * torch.eye(2, dtype=torch.float64)
        qkv[2:4] = -a * torch.eye(2, dtype=torch.float64)
    idx = torch.zeros(1, T, dtype=torch.long)
    idx[0, 0] = 1
    return model, idx


def worst_case_max_weight(M: np.ndarray, T: int, n_angles: int = 3600, n_radii: int = 20) -> float:
    """Largest weight any input of unit-ball latents gets from a two-dimensional form ``M`` (grid over the query).

    For a query ``a`` the other keys' scores range over ``+-|M^T a|`` and its own score is
    ``a^T M a``; the best target is a key at ``+|M^T a|`` with all others at ``-|M^T a|``, or the
    query itself with all others at ``-|M^T a|``. Only the query needs a search.
    """
    theta = np.linspace(0.0, 2 * np.pi, n_angles, endpoint=False)
    radius = np.linspace(1.0 / n_radii, 1.0, n_radii)
    a = (radius[:, None, None] * np.stack([np.cos(theta), np.sin(theta)], axis=-1)[None]).reshape(-1, 2)
    m = np.linalg.norm(a @ M, axis=1)
    s = np.einsum("ni,ij,nj->n", a, M, a)
    other_key = 1.0 / (1.0 + np.exp(s - m) + (T - 2) * np.exp(-2 * m))
    own_key = 1.0 / (1.0 + (T - 1) * np.exp(-m - s))
    return float(np.max(np.maximum(other_key if T > 1 else 0.0, own_key)))


# ---------------------------------------------------------------- Proposition 3
# Residual-stream coordinates of the construction.
IS_W, BIT0, BIT1, CONST, POS, W_MASS, WROTE0, WROTE1, OUT = range(9)


@dataclass(frozen=True)
class FlipFlopWeights:
    """Scales of the 2-layer construction, in score units per position at ``block_size = base``.

    Layer 1 scores key ``j`` with ``kappa (j + 1.5 [x_j = w])``, so a bit right after a ``w``
    looks one step back and any other token looks at itself; its MLP rounds the mass on ``w``
    into exact flags "this bit was written, and it is 0 / 1". Layer 2 scores key ``j`` with
    ``big [j is a written bit] + lam j`` and averages ``+1`` for a written 1, ``-1`` for a
    written 0 and 0 for every other token, so only earlier writes can outvote the latest one.
    """

    base: int = 64
    kappa: float = 8.0
    lam: float = 1.0
    rounding: float = 10.0  # slope of the MLP ramp; flags are exact outside (1/2, 1/2 + 1/rounding)

    @property
    def big(self) -> float:
        """Layer-2 bonus of written bits: larger than any positional score at ``block_size = base``."""
        return self.lam * self.base


def flipflop_construction(weights: FlipFlopWeights, block_size: int | None = None) -> GPT:
    """The Proposition 3 transformer (float64) with ``positional = "linear"``: ``p_t = (t / block_size) e_POS``.

    The weights depend on ``weights`` only; ``block_size`` (``weights.base`` by default) sets how
    finely the fixed positional direction resolves positions, so a larger block size is the same
    head with the same norms on a longer sequence.
    """
    d = 9
    config = GPTConfig(
        vocab_size=5,
        block_size=block_size or weights.base,
        n_layer=2,
        n_head=1,
        d_model=d,
        d_mlp=4,
        tied=False,
        positional="linear",
        layer_norm=False,
        mlp=True,
        bias=False,
        head_bias=True,
    )
    model = zero_gpt(config)
    root, C, k = math.sqrt(d), weights.base, weights.rounding
    with torch.no_grad():
        emb = model.wte.weight
        emb[:, CONST] = 1.0
        emb[W, IS_W] = 1.0
        emb[ZERO, BIT0] = 1.0
        emb[ONE, BIT1] = 1.0
        model.wpe[POS] = 1.0
        first, second = model.blocks
        wq, wk, wv = first.attn.qkv.weight.split(d, dim=0)
        wq[0, CONST] = 1.0
        wk[0, POS] = weights.kappa * C * root
        wk[0, IS_W] = 1.5 * weights.kappa * root
        wv[W_MASS, IS_W] = 1.0
        first.attn.proj.weight[W_MASS, W_MASS] = 1.0
        fc, proj = first.mlp.fc.weight, first.mlp.proj.weight
        for unit, (bit, flag) in enumerate(((BIT0, WROTE0), (BIT1, WROTE1))):
            for shift, sign in ((0.0, 1.0), (1.0, -1.0)):  # clamp(z, 0, 1) = relu(z) - relu(z - 1)
                row = 2 * unit + int(shift)
                fc[row, W_MASS], fc[row, bit], fc[row, CONST] = k, k, -k * 1.5 - shift
                proj[flag, row] = sign
        wq, wk, wv = second.attn.qkv.weight.split(d, dim=0)
        wq[0, CONST] = 1.0
        wk[0, WROTE0] = wk[0, WROTE1] = weights.big * root
        wk[0, POS] = weights.lam * C * root
        wv[OUT, WROTE1], wv[OUT, WROTE0] = 1.0, -1.0
        second.attn.proj.weight[OUT, OUT] = 1.0
        model.head.weight[ONE, OUT], model.head.weight[ZERO, OUT] = 1.0, -1.0
        model.head.bias[ONE] = model.head.bias[ZERO] = 1.0
    return model


def construction_conditions(weights: FlipFlopWeights, block_size: int) -> dict[str, float]:
    """Slack of the sufficient conditions for exactness at ``block_size`` (all positive: exact on every string).

    With ``s = kappa base / block_size`` the per-position slope of layer 1, ``b = 1.5 kappa`` its
    bonus on ``w`` and ``l = lam base / block_size`` that of layer 2:

    * ``written``: a bit after ``w`` puts mass at least ``1/(1 + e^(s-b) + (e^(-2s) + e^(-s-b))/(1-e^(-2s)))``
      on the ``w`` before it; it must reach ``1/2 + 1/rounding`` for the flag to be exactly 1;
    * ``not_written``: any other bit puts mass at most ``X/(1+X)``, ``X = e^(b-3s)/(1-e^(-2s))``,
      on ``w`` tokens; it must stay at or below ``1/2`` for the flag to be exactly 0;
    * ``latest_wins``: earlier written bits sit at least 2, 4, ... positions back, so they weigh
      at most ``sum_k e^(-2lk) = 1/(e^(2l) - 1)`` of the latest; below 1 the sign is the latest bit.
    """
    s = weights.kappa * weights.base / block_size
    b = 1.5 * weights.kappa
    lam = weights.lam * weights.base / block_size
    tail = 1.0 - math.exp(-2 * s)
    written = 1.0 / (1.0 + math.exp(s - b) + (math.exp(-2 * s) + math.exp(-s - b)) / tail)
    x = math.exp(b - 3 * s) / tail
    return {
        "written": written - (0.5 + 1.0 / weights.rounding),
        "not_written": 0.5 - x / (1.0 + x),
        "latest_wins": 1.0 - 1.0 / math.expm1(2 * lam),
    }


def safe_length(weights: FlipFlopWeights, limit: int = 1 << 16) -> int:
    """Largest even block size from ``base`` up at which every sufficient condition holds (weights held fixed)."""
    if min(construction_conditions(weights, weights.base).values()) <= 0:
        raise ValueError(f"the construction is not certified even at its base length: {weights}")
    length = weights.base
    while length + 2 <= limit and min(construction_conditions(weights, length + 2).values()) > 0:
        length += 2
    return length


WITNESS = (W, ONE, I, ZERO, R)  # "w 1 i 0 r": the read must answer 1


def witness_answer_wrong(weights: FlipFlopWeights, block_size: int) -> bool:
    """Whether the construction answers the read of ``w 1 i 0 r`` with 0, in closed form.

    Layer 1 at the ``0`` weighs the ``w`` three tokens back against itself and its two
    neighbours: mass ``a = e^b / (e^b + e^s + e^2s + e^3s)`` on ``w``, rounded to the flag
    ``f = clamp(rounding (a - 1/2), 0, 1)``; layer 2 at the read then compares the written 1
    (flag 1, position 1) with the ``0`` (flag ``f``, position 3):
    wrong when ``f e^(big f + 3 l) >= e^(big + l)`` (a tie reads as 0, the lower token id).
    """
    s = weights.kappa * weights.base / block_size
    b = 1.5 * weights.kappa
    lam = weights.lam * weights.base / block_size
    a = 1.0 / (1.0 + math.exp(s - b) + math.exp(2 * s - b) + math.exp(3 * s - b))
    first = 1.0 / (1.0 + math.exp(s - b))
    flag = min(max(weights.rounding * (a - 0.5), 0.0), 1.0)
    written = min(max(weights.rounding * (first - 0.5), 0.0), 1.0)
    return flag * math.exp(weights.big * flag + 3 * lam) >= written * math.exp(weights.big * written + lam)


def witness_onset(weights: FlipFlopWeights, limit: int = 1 << 16) -> int:
    """Smallest even block size from ``base`` up at which the witness read goes wrong."""
    length = weights.base
    while not witness_answer_wrong(weights, length):
        length += 2
        if length > limit:
            raise ValueError(f"the witness never fails below block size {limit}")
    return length


# ---------------------------------------------------------------- Proposition 5


@dataclass(frozen=True)
class SimulatorWeights:
    """Scores ``s(i -> j) = big [j writes] + beta p_j + gamma [j writes] p_i + delta p_i p_j`` with ``p_t = t / scale``.

    ``delta`` is ``W_Qp^T W_Kp``, the position-position term of Proposition 5. With ``delta = 0``,
    ``big > 0`` and ``gamma >= beta > 0`` the latest write has the top score at every query of
    every string of every length; ``beta / scale > ln 2`` makes the soft average follow it too.
    """

    scale: float = 8.0
    big: float = 4.0
    beta: float = 8.0
    gamma: float = 8.0
    delta: float = 0.0


def simulator(weights: SimulatorWeights, max_length: int = 1 << 20) -> GPT:
    """A 1-layer 1-head GPT (float64) that outputs the flip-flop state; ``positional = "linear"``.

    The GPT's linear encoding is ``(t / block_size) u``; ``u = (block_size / scale) e_POS`` makes it
    ``p_t = t / scale`` while ``block_size = max_length`` only caps the length.
    """
    d = 5
    is_write, sign, const, pos, out = range(d)
    config = GPTConfig(
        vocab_size=3,
        block_size=max_length,
        n_layer=1,
        n_head=1,
        d_model=d,
        positional="linear",
        mlp=False,
        tied=False,
        head_bias=True,
    )
    model = zero_gpt(config)
    root = math.sqrt(d)
    with torch.no_grad():
        emb = model.wte.weight
        emb[:, const] = 1.0
        emb[WRITE0, is_write] = emb[WRITE1, is_write] = 1.0
        emb[WRITE0, sign], emb[WRITE1, sign] = -1.0, 1.0
        model.wpe[pos] = max_length / weights.scale
        wq, wk, wv = model.blocks[0].attn.qkv.weight.split(d, dim=0)
        wq[0, const], wq[1, pos] = 1.0, 1.0
        wk[0, is_write], wk[0, pos] = weights.big * root, weights.beta * root
        wk[1, is_write], wk[1, pos] = weights.gamma * root, weights.delta * root
        wv[out, sign] = 1.0
        model.blocks[0].attn.proj.weight[out, out] = 1.0
        model.head.weight[WRITE1, out], model.head.weight[WRITE0, out] = 1.0, -1.0
        model.head.bias[NOOP] = -1.0
    return model


def position_product(model: GPT, scale: float) -> float:
    """``W_Qp^T W_Kp`` of a 1-layer simulator: the coefficient of ``p_i p_j`` (``p_t = t / scale``) in its scores."""
    u = model.wpe.detach()
    M = bilinear_forms(model.blocks[0].attn)[0]
    return float(u @ M @ u) * (scale / model.config.block_size) ** 2


@dataclass(frozen=True)
class NoopQueryScores:
    """Proposition 5's decomposition of a 1-layer linear-position head's scores at a noop query ``i`` on key ``j``:
    ``token[x_j] + query_position[x_j] p_i + (key_position + delta p_i) p_j`` with ``p_t = t / block_size``
    (embeddings ``e``, position direction ``u``, bilinear form ``M``: ``token = e_noop M e^T``, ``query_position =
    u M e^T``, ``key_position = e_noop M u``, ``delta = u M u``, the paper's ``W_Qp^T W_Kp``)."""

    token: np.ndarray  # (3,): one per input, WRITE0, WRITE1, NOOP
    query_position: np.ndarray  # (3,)
    key_position: float
    delta: float
    block_size: int


def noop_query_scores(model: GPT) -> NoopQueryScores:
    """The decomposition of a 1-layer 1-head GPT with ``positional = "linear"``, no bias and no norm before its
    attention (what the scores are then exactly), read off its weights in float64."""
    config = model.config
    if config.positional != "linear" or config.n_head != 1 or config.layer_norm or config.bias or config.recency_slope:
        raise ValueError("the decomposition holds for 1-head linear-position heads without norm, bias or recency term")
    M = bilinear_forms(model.blocks[0].attn)[0].double()
    E, u = model.wte.weight.detach().double(), model.wpe.detach().double()
    noop = E[NOOP]
    return NoopQueryScores(
        token=(noop @ M @ E.T).numpy(),
        query_position=(u @ M @ E.T).numpy(),
        key_position=float(noop @ M @ u),
        delta=float(u @ M @ u),
        block_size=config.block_size,
    )


def predicted_top_keys(scores: NoopQueryScores, seq: Tensor, queries: Tensor) -> Tensor:
    """``(B,)``: the top-scored key at noop query ``queries[b]`` of string ``seq[b]`` (keys at or before it), from
    the decomposition alone (no forward pass)."""
    length = seq.shape[1]
    p = torch.arange(length, dtype=torch.float64) / scores.block_size
    p_i = p[queries][:, None]
    token, query_position = torch.from_numpy(scores.token), torch.from_numpy(scores.query_position)
    s = token[seq] + query_position[seq] * p_i + (scores.key_position + scores.delta * p_i) * p[None, :]
    s = s.masked_fill(torch.arange(length)[None, :] > queries[:, None], -math.inf)
    return s.argmax(dim=1)


def drift_inputs(length: int, gap: int = 32) -> dict[str, tuple[Tensor, Tensor]]:
    """Proposition 5's two inputs and Fig. 3.33b's, read at every noop query up to ``length``, as (strings, queries):
    case 1's ``[write 1, noop, ...]`` at queries ``1 .. length-1``, case 2's rows (writes at 0 and ``t - 1``) at
    query ``t``, and :func:`two_writes_sequence` at the queries after its second write (none where ``length`` is too
    short for it)."""
    queries1, queries2 = torch.arange(1, length), torch.arange(2, length)
    out = {
        "case 1": (case1_sequence(length).expand(len(queries1), length), queries1),
        "case 2": (case2_sequences(length)[queries2], queries2),
    }
    if gap <= length - 3:
        queries3 = torch.arange(gap + 2, length)
        out["Fig. 3.33b"] = (two_writes_sequence(length, gap).expand(len(queries3), length), queries3)
    return out


def case1_switch(weights: SimulatorWeights) -> int:
    """``delta > 0``: first query of ``[write, noop, noop, ...]`` whose top score is a noop, not the write.

    The query at ``t`` scores the write ``big + gamma p`` and itself ``beta p + delta p^2``
    (``p = t/scale``); the second wins once ``delta p^2 + (beta - gamma) p - big > 0``.
    """
    if weights.delta <= 0:
        raise ValueError("case 1 needs delta > 0")
    b = weights.beta - weights.gamma
    root = (-b + math.sqrt(b * b + 4 * weights.delta * weights.big)) / (2 * weights.delta)
    return _first_integer_above(weights.scale * root)


def case2_switch(weights: SimulatorWeights) -> int:
    """``delta < 0``: first ``t`` at which ``[write 1, noop, ..., write 0 at t-1, noop at t]`` prefers the first write.

    The two writes differ by ``beta p_(t-1) + delta p_t p_(t-1)``, negative once ``p_t > beta / |delta|``.
    """
    if weights.delta >= 0:
        raise ValueError("case 2 needs delta < 0")
    return _first_integer_above(weights.scale * weights.beta / -weights.delta)


def _first_integer_above(x: float) -> int:
    if abs(x - round(x)) < 1e-6:
        raise ValueError(f"the switch falls on an integer position ({x}); the tie makes it ill-defined")
    return math.floor(x) + 1


def case1_sequence(length: int) -> Tensor:
    """``[write 1, noop, ..., noop]``: the proof's long-range input for ``delta > 0``."""
    seq = torch.full((1, length), NOOP, dtype=torch.long)
    seq[0, 0] = WRITE1
    return seq


def two_writes_sequence(length: int, gap: int = 32) -> Tensor:
    """``[write 1, noop x gap, write 0, noop, ...]``: Fig. 3.33b's string (there ``gap`` = 32, 800 noops after)."""
    if not 0 <= gap <= length - 3:
        raise ValueError(f"the gap between the writes is in 0..{length - 3}, got {gap}")
    seq = case1_sequence(length)
    seq[0, gap + 1] = WRITE0
    return seq


def case2_sequences(length: int) -> Tensor:
    """Row ``t``: ``[write 1, noop, ..., write 0 at t-1, noop, ...]``, read at query ``t`` (causal: later tokens are inert)."""  # noqa: E501
    seq = torch.full((length, length), NOOP, dtype=torch.long)
    seq[:, 0] = WRITE1
    rows = torch.arange(2, length)
    seq[rows, rows - 1] = WRITE0
    return seq
