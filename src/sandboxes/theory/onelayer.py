"""What one attention layer represents exactly: Sanford, Hsu and Telgarsky's Match2 unit of embedding dimension 3, and
an n-gram language model as one layer of n - 1 heads or n - 1 layers of one head (the shapes of Svete and Cotterell's
Thms 3.1 and 3.2; the weights are ours). Everything here is computed in float64 on every input it is given; nothing
trains."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from scipy.special import log_softmax, softmax


# ---------------------------------------------------------------- Match2 (Sanford, Hsu and Telgarsky 2023)
def match2(X: np.ndarray, M: int) -> np.ndarray:
    """``Match2(X)_i = 1{exists j: x_i + x_j = 0 mod M}`` for each row of ``X`` (``(B, N)`` tokens in ``[0, M)``);
    ``j`` ranges over every position, ``i`` included, as the definition reads."""
    total = X[:, :, None] + X[:, None, :]
    return (total % M == 0).any(axis=2)


def match2_share(N: int, M: int) -> float:
    """The chance that a position of a uniform input of ``[M]^N`` has a partner: its token is its own
    (``2x = 0 mod M``: one token, two where M is even), or one of the ``N - 1`` others is ``-x``."""
    own = (2 if M % 2 == 0 else 1) / M
    return own + (1 - own) * (1 - (1 - 1 / M) ** (N - 1))


def match2_scale(M: int, N: int) -> float:
    """The proof's inverse temperature ``c = M^2 ln(6N)``: a score short of ``c`` by ``c / M^2`` weighs at most
    ``1 / (6N)`` of the blank's weight."""
    return M**2 * math.log(6 * N)


def match2_embedding(M: int) -> np.ndarray:
    """The input map phi as a table, ``(M + 1, 3)``: token ``x`` to ``(cos 2 pi x / M, sin 2 pi x / M, 1)``, the blank
    (row ``M``) to the origin."""
    angle = 2 * np.pi * np.arange(M) / M
    table = np.zeros((M + 1, 3))
    table[:M] = np.stack([np.cos(angle), np.sin(angle), np.ones(M)], axis=1)
    return table


@dataclass(frozen=True)
class AttentionUnit:
    """One self-attention unit over every position (no mask): input table phi, query, key and value maps, and the
    softmax of ``phi Q (phi K)^T`` averaging ``phi V``."""

    phi: np.ndarray  # (vocab, m)
    query: np.ndarray  # (m, m)
    key: np.ndarray  # (m, m)
    value: np.ndarray  # (m, 1)

    def log_weights(self, tokens: np.ndarray) -> np.ndarray:
        """The logarithms of the attention weights ``(B, T, T)``, exact where the weights underflow."""
        x = self.phi[tokens]
        return log_softmax((x @ self.query) @ (x @ self.key).transpose(0, 2, 1), axis=-1)

    def weights(self, tokens: np.ndarray) -> np.ndarray:
        """The attention weights ``(B, T, T)`` of each query position over every key position."""
        return np.exp(self.log_weights(tokens))

    def __call__(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The unit's outputs ``(B, T)`` (before the output map) and its weights."""
        weights = self.weights(tokens)
        return (weights @ (self.phi[tokens] @ self.value))[..., 0], weights


def match2_unit(M: int, c: float) -> AttentionUnit:
    """The unit of the proof at inverse temperature ``c``, in embedding dimension 3.

    The slides' vectors (query ``c (cos, sin, 1)``, key ``(cos, -sin, 0)``, blank key ``e_3``) cannot all be linear maps
    of one embedding in R^3 once M >= 3 (the three functions cos, sin and 1 of a token are independent, so the key map
    is fixed by the tokens and sends nothing to e_3). Taking ``c`` off every score of a row, which the softmax ignores,
    gives query ``c (cos, sin, -1)``, key ``(cos, -sin, 1)`` and the blank at the origin: the same weights, and linear
    maps of the table of :func:`match2_embedding`. The value is 1 on tokens and 0 on the blank.
    """
    return AttentionUnit(
        phi=match2_embedding(M),
        query=c * np.diag([1.0, 1.0, -1.0]),
        key=np.diag([1.0, -1.0, 1.0]),
        value=np.array([[0.0], [0.0], [1.0]]),
    )


def log_stray_bound(M: int, c: float) -> float:
    """The log of the most a stray key (neither a partner nor the blank) can weigh: it scores at least
    ``c (1 - cos 2 pi / M) = 2 c sin^2(pi / M)`` below the blank. The slides' gap ``c / M^2`` is smaller by about
    ``2 pi^2``; with ``c = M^2 ln(6N)`` either gives the proof's ``1 / (6N)`` (this one is ours)."""
    return -2 * c * math.sin(math.pi / M) ** 2


MATCH2_LOW, MATCH2_HIGH = 1 / 6, 1 / 3  # the output map psi: 0 at or below 1/6, 1 at or above 1/3


def match2_output(z: np.ndarray) -> np.ndarray:
    """psi, the output MLP: ``0`` where ``z <= 1/6``, ``1`` where ``z >= 1/3``, linear between (a difference of two
    ReLUs, written as the clip it equals so that its ends are exactly 0 and 1)."""
    return np.clip((z - MATCH2_LOW) / (MATCH2_HIGH - MATCH2_LOW), 0.0, 1.0)


def with_blank(X: np.ndarray, M: int) -> np.ndarray:
    """``X`` with the blank token (id ``M``) appended to every row."""
    return np.concatenate([X, np.full((len(X), 1), M, dtype=X.dtype)], axis=1)


def every_input(M: int, N: int) -> np.ndarray:
    """Every ``X`` in ``[0, M)^N``, ``(M^N, N)``."""
    return np.asarray(list(itertools.product(range(M), repeat=N)), dtype=np.int64).reshape(-1, N)


# ---------------------------------------------------------------- n-gram language models (Svete and Cotterell 2024)
@dataclass(frozen=True)
class NGram:
    """An n-gram language model over ``symbols`` symbols: ``laws[h]`` is the next-symbol law (over the symbols and
    EOS, last) after the history ``histories[h]`` of ``n - 1`` symbols, where BOS (id ``symbols``) pads the start."""

    n: int
    symbols: int
    histories: tuple[tuple[int, ...], ...]
    laws: np.ndarray  # (histories, symbols + 1)

    @property
    def bos(self) -> int:
        return self.symbols

    def law(self, history: tuple[int, ...]) -> np.ndarray:
        return self.laws[self.histories.index(history)]


def valid_histories(n: int, symbols: int) -> tuple[tuple[int, ...], ...]:
    """Every history of ``n - 1`` tokens a padded string can show: some BOS, then symbols."""
    return tuple(
        (symbols,) * pads + rest
        for pads in range(n - 1, -1, -1)
        for rest in itertools.product(range(symbols), repeat=n - 1 - pads)
    )


def random_ngram(n: int, symbols: int, rng: np.random.Generator, concentration: float = 1.0) -> NGram:
    """An n-gram LM whose next-symbol laws (EOS included) are drawn from a symmetric Dirichlet."""
    histories = valid_histories(n, symbols)
    laws = rng.dirichlet(np.full(symbols + 1, concentration), size=len(histories))
    return NGram(n, symbols, histories, laws)


def padded(strings: np.ndarray, model: NGram) -> np.ndarray:
    """The transformer's input for each row of ``strings`` (``(B, L)`` symbols): ``n - 1`` BOS tokens, then the
    string."""
    return np.concatenate([np.full((len(strings), model.n - 1), model.bos, dtype=np.int64), strings], axis=1)


def ngram_targets(model: NGram, strings: np.ndarray) -> np.ndarray:
    """The n-gram's next-symbol laws after each prefix of each string (the empty one first),
    ``(B, L + 1, symbols + 1)``: the law of the ``n - 1`` tokens before, BOS padding the start."""
    tokens, base = padded(strings, model), model.symbols + 1
    powers = base ** np.arange(model.n - 2, -1, -1)  # a history's code: its tokens as digits, the oldest first
    index = np.full(base ** (model.n - 1), -1)
    index[np.asarray(model.histories) @ powers] = np.arange(len(model.histories))
    starts = np.arange(tokens.shape[1] - model.n + 2)
    windows = tokens[:, starts[:, None] + np.arange(model.n - 1)]  # (B, L + 1, n - 1): the history at each prefix
    codes = windows @ powers
    if (index[codes] < 0).any():
        raise ValueError("a string shows a history the model has no law for: BOS only at the start")
    return model.laws[index[codes]]


def strings_of_length(symbols: int, length: int) -> np.ndarray:
    """Every string over ``symbols`` symbols of length ``length``, ``(symbols^length, length)``."""
    if length == 0:
        return np.zeros((1, 0), dtype=np.int64)
    return every_input(symbols, length)


def position_features(T: int) -> np.ndarray:
    """``(1, j, j^2)`` for each position ``j``: a query linear in its own features scores key ``j`` by
    ``-(j - target)^2``, whose largest value, 0, is at the target alone."""
    j = np.arange(T, dtype=float)
    return np.stack([np.ones(T), j, j**2], axis=1)


def head_query(back: int) -> np.ndarray:
    """The query map of the head that reads ``back`` positions before its own: ``p_t`` to
    ``(-(t - back)^2, 2 (t - back), -1)``, so that the score of key ``j`` is ``-(j - t + back)^2``."""
    b = float(back)
    return np.array([[-(b**2), -2 * b, -1.0], [2 * b, 2.0, 0.0], [-1.0, 0.0, 0.0]])


SHAPES = ("heads", "layers")  # Thm 3.1: n - 1 heads in one layer; Thm 3.2: one head in each of n - 1 layers


def hard_attention(scores: np.ndarray) -> np.ndarray:
    """Average-hard attention over the last axis: equal weight on the largest scores (one key where it is unique),
    0 elsewhere."""
    peak = (scores == scores.max(axis=-1, keepdims=True)).astype(float)
    return peak / peak.sum(axis=-1, keepdims=True)


def sparsemax(scores: np.ndarray) -> np.ndarray:
    """Martins and Astudillo's sparsemax of each row: the Euclidean projection onto the simplex, exactly 0 on every
    entry more than the threshold below the largest (``-inf`` entries are 0)."""
    z = np.where(np.isfinite(scores), scores, np.nan)
    ranked = -np.sort(-np.nan_to_num(z, nan=-np.inf), axis=-1)
    k = np.arange(1, scores.shape[-1] + 1)
    cumulative = np.cumsum(np.where(np.isfinite(ranked), ranked, 0.0), axis=-1)
    support = (1 + k * ranked > cumulative) & np.isfinite(ranked)
    size = support.sum(axis=-1, keepdims=True)
    tau = (np.take_along_axis(cumulative, size - 1, axis=-1) - 1) / size
    return np.maximum(np.nan_to_num(z, nan=-np.inf) - tau, 0.0)


def head_weights(T: int, back: int, beta: float | None, gap: float = 1.0) -> np.ndarray:
    """The ``(T, T)`` causal weights of a head that scores key ``j`` from query ``t`` by ``-gap (j - t + back)^2``
    (position features only): hard (the argmax) with ``beta=None``, else a softmax at scale ``beta``."""
    features = position_features(T)
    scores = gap * (features @ head_query(back)) @ features.T
    scores = np.where(np.tril(np.ones((T, T), dtype=bool)), scores, -np.inf)
    return hard_attention(scores) if beta is None else softmax(beta * scores, axis=1)


def read_history(model: NGram, tokens: np.ndarray, beta: float | None, gap: float, shape: str) -> np.ndarray:
    """What the attention leaves at each position of each row of ``tokens`` (``(..., T)``): ``n - 1`` slots of token
    weights, slot ``h`` for the token ``h`` places back, ``(..., T, n - 1, symbols + 1)``.

    ``"heads"``: head ``h`` of one layer reads the token ``h`` places back. ``"layers"``: the head of layer 1 reads
    the token at its own position into slot 0, and the head of layer ``l`` (``l = 2 .. n - 1``) copies slot ``l - 2``
    of the position before into slot ``l - 1``, so the token ``h`` places back arrives through ``h`` copies.
    """
    onehot = np.eye(model.symbols + 1)[tokens]
    T, slots = tokens.shape[-1], model.n - 1
    if shape == "heads":
        return np.stack([head_weights(T, back, beta, gap) @ onehot for back in range(slots)], axis=-2)
    read = [head_weights(T, 0, beta, gap) @ onehot]
    previous = head_weights(T, 1, beta, gap)
    for _ in range(slots - 1):
        read.append(previous @ read[-1])
    return np.stack(read, axis=-2)


def ngram_transformer(
    model: NGram, tokens: np.ndarray, beta: float | None, gap: float = 1.0, shape: str = "heads"
) -> np.ndarray:
    """The log next-symbol laws ``(..., T - n + 2, symbols + 1)`` of the transformer of ``shape`` on the padded
    ``tokens`` (``(..., T)``), at each position from the last BOS on.

    The attention (:func:`read_history`) leaves slots ``v_h``; the MLP has one ReLU unit per history ``g``,
    ``relu(sum_h v_h[g_h] - (n - 2))``, which is 1 on the history read and 0 on the others under hard attention; the
    output layer writes ``log p(. | g)`` from unit ``g``.
    """
    heads = model.n - 1
    values = read_history(model, tokens, beta, gap, shape)[..., heads - 1 :, :, :]  # from the last BOS on
    members = np.asarray(model.histories)[:, ::-1]  # unit g's token for slot h: g's entry h places back
    total = sum(values[..., h, members[:, h]] for h in range(heads))  # (..., positions, histories), slot by slot
    units = np.maximum(total - (heads - 1), 0.0)
    return log_softmax(units @ np.log(model.laws), axis=-1)


def leakage_bound(beta: float, gap: float = 1.0) -> float:
    """The most weight a softmax head at scale ``beta`` can leave off its target: every other key scores at most
    ``-gap d^2`` at distance ``d`` (twice, before and after), against 0 at the target; 1 (no bound) below
    ``beta gap = 1``."""
    if beta * gap < 1:  # the nearest strays alone carry 2 e^-1 > 1/2 of the target's weight: say only "at most 1"
        return 1.0
    d = np.arange(1, 2 + int(np.ceil(np.sqrt(800 / (beta * gap)))))  # the terms beyond are below e^-800: 0.0
    return float(2 * np.exp(-beta * gap * d**2).sum())


def ngram_error_bound(model: NGram, beta: float, shape: str = "heads") -> float:
    """Our bound on ``max |log p_soft - log p|`` over every next symbol: ``2 Lambda sum_h delta_h``, with ``Lambda``
    the largest ``|log p|`` of the model's laws and ``delta_h`` what slot ``h`` may miss of its token, while every
    ``delta_h`` is below 1/2; ``inf`` elsewhere.

    One softmax head leaves at most ``delta`` (:func:`leakage_bound`) off its target. In one layer every slot misses
    at most ``delta``; through ``h`` copies slot ``h`` keeps at least ``(1 - delta)^(h + 1)``, so it misses at most
    ``(h + 1) delta``. The unit of the history read is at least ``1 - sum_h delta_h``; a unit whose history differs in
    one place is at most the weight that place's slot puts on the wrong token, and these sum to ``sum_h delta_h``;
    a unit that differs in two places is 0 while every ``delta_h < 1/2``. So the units are within
    ``2 sum_h delta_h`` of the one-hot in l1, the logits within ``Lambda`` times that of ``log p`` in max norm, and
    the log-softmax, which shifts every logit by one log-sum-exp, within twice that. One layer:
    ``4 (n - 1) Lambda delta``; n - 1 layers: ``2 n (n - 1) Lambda delta``.
    """
    delta = leakage_bound(beta)
    missed = [delta if shape == "heads" else (h + 1) * delta for h in range(model.n - 1)]
    if not max(missed) < 0.5:
        return math.inf
    return 4 * float(np.abs(np.log(model.laws)).max()) * sum(missed)


def ngram_scale_needed(model: NGram, error: float, shape: str = "heads") -> float:
    """The smallest ``beta`` at which :func:`ngram_error_bound` is at most ``error`` (bisection; the bound falls with
    ``beta``)."""
    low, high = 0.0, 1.0
    while ngram_error_bound(model, high, shape) > error:
        low, high = high, 2 * high
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if ngram_error_bound(model, mid, shape) > error else (low, mid)
    return high


# ---------------------------------------------------------------- PARITY with softmax attention (Chiang and Cholak)
def every_string(n: int) -> np.ndarray:
    """Every bit string of length ``n``, ``(2^n, n)``."""
    return every_input(2, n)


def parity_output(bits: np.ndarray, beta: float | None) -> np.ndarray:
    """The two-layer construction's output at the last position, ``(B,)``: ``(-1)^k`` for ``k`` ones with hard
    attention (``beta=None``), near it with softmax at scale ``beta``; its sign is the decision (odd below 0).

    A BOS at position 0 makes ``N = n + 1`` positions with encodings ``p_j = j / N``, ``p_j^2`` and ``(-1)^j``. Layer 1
    attends uniformly (every score 0) and averages the bits: ``k / N``. Layer 2 scores key ``j`` from the last
    position by ``beta (2 (k / N) p_j - p_j^2)``, which is ``-beta (j - k)^2 / N^2`` up to a constant the softmax
    ignores, and averages ``(-1)^j``.
    """
    N = bits.shape[1] + 1
    k = bits.sum(axis=1)
    position = np.arange(N) / N
    scores = 2 * (k / N)[:, None] * position[None, :] - position[None, :] ** 2
    weights = hard_attention(scores) if beta is None else softmax(beta * scores, axis=1)
    return weights @ (-1.0) ** np.arange(N)


def parity_margin_bound(scale: float) -> float:
    """Our lower bound on ``|output|`` at ``beta = scale N^2``: ``1 - 2 delta`` with ``delta`` the most weight layer 2
    leaves off position ``k``, whose neighbours score ``scale d^2`` lower at distance ``d`` (:func:`leakage_bound`);
    each stray unit of weight moves the output by at most 2. The same at every length."""
    return 1 - 2 * leakage_bound(scale)


# ---------------------------------------------------------------- one sparse head (Svete and Cotterell's 3.3 shape)
def window_curvature(m: int) -> float:
    """A curvature ``a`` at which sparsemax of ``-a (j - c)^2``, centred on a window of ``m`` consecutive keys, keeps
    exactly those keys: ``a >= 6 / (m (m + 1) (m + 2))`` drops the next key, ``a < 6 / (m (m - 1) (m - 2))`` keeps the
    window's ends; the geometric mean of the two (twice the first where the second is infinite, m <= 2)."""
    low = 6 / (m * (m + 1) * (m + 2))
    high = 6 / (m * (m - 1) * (m - 2)) if m > 2 else math.inf
    return math.sqrt(low * high) if math.isfinite(high) else 2 * low


def window_weights(T: int, m: int, curvature: float) -> np.ndarray:
    """The ``(T, T)`` causal sparsemax weights of one head that scores key ``j`` from query ``t`` by
    ``-a (j - t + (m - 1) / 2)^2``: a linear map of the positions' features ``(1, j, j^2)`` (the query's part of the
    square is one constant per row, which sparsemax ignores)."""
    j = np.arange(T, dtype=float)
    centre = j - (m - 1) / 2
    scores = -curvature * (j[None, :] - centre[:, None]) ** 2
    return sparsemax(np.where(np.tril(np.ones((T, T), dtype=bool)), scores, -np.inf))


def ngram_one_head(model: NGram, tokens: np.ndarray, curvature: float | None = None) -> np.ndarray:
    """The log next-symbol laws ``(..., T - n + 2, symbols + 1)`` of one layer of one sparse head on the padded
    ``tokens``, with the richer positional encoding ``j mod (n - 1)``.

    The head spreads its weight over the last ``m = n - 1`` positions, ``p_h`` on the token ``h`` back (the same at
    every query). Each token's value is the one-hot of (its symbol, its position mod m), so the m tokens land in m
    different places. The MLP has a unit per history ``g`` and residue ``r``,
    ``relu(sum_h v[g_h, (r - h) mod m] / p_h + L 1{t mod m = r} - (m - 1) - L)``, with ``L`` at least m times the
    largest ``p`` over the smallest: 1 on the history read at the query's own residue and 0 everywhere else.
    """
    m, vocab = model.n - 1, model.symbols + 1
    a = window_curvature(m) if curvature is None else curvature
    T = tokens.shape[-1]
    weights = window_weights(T, m, a)
    lag_weight = window_weights(4 * m, m, window_curvature(m))[-1, ::-1][:m]  # p_h for h = 0 .. m - 1
    onehot = np.eye(vocab)[tokens][..., :, :, None] * np.eye(m)[np.arange(T) % m][:, None, :]  # (..., T, vocab, m)
    values = np.einsum("tj,...jvr->...tvr", weights, onehot)[..., m - 1 :, :, :]  # from the last BOS on
    gate = m * lag_weight.max() / lag_weight.min()
    members = np.asarray(model.histories)[:, ::-1]  # g's token h places back
    residue = np.arange(m - 1, T) % m
    units = []
    for r in range(m):
        total = sum(values[..., members[:, h], (r - h) % m] / lag_weight[h] for h in range(m))
        units.append(np.maximum(total + gate * (residue == r)[:, None] - (m - 1) - gate, 0.0))
    return log_softmax(sum(units) @ np.log(model.laws), axis=-1)


# ---------------------------------------------------------------- k-hop composition in context (pointer doubling)
def every_function(V: int) -> np.ndarray:
    """Every function ``[V] -> [V]`` as its table of values, ``(V^V, V)``."""
    return every_input(V, V)


def hop_layers(k: int) -> int:
    """The layers our construction uses for k hops: the bits of k."""
    return k.bit_length()


def khop_answer(tables: np.ndarray, starts: np.ndarray, k: int, layers: int | None = None) -> np.ndarray:
    """The query position's pointer after ``layers`` layers (default :func:`hop_layers`) of one hard head each, for
    the facts ``a -> tables[a]`` given in context and the query ``starts``: ``f^k(start)`` when the layers suffice.

    Fact position ``a`` holds its source ``a`` and a pointer, first ``f(a)``; the query position holds no source and
    the pointer ``start``. In layer ``l`` every position attends to the fact whose source equals its pointer (a
    one-hot match, the largest score) and reads that fact's pointer: a fact's pointer becomes ``f^(2^(l+1))`` of its
    source, and the query's takes the hop when bit ``l`` of ``k`` is set (its MLP gates the update by its flag and
    the bit), so the query composes the powers of two that sum to ``k``.
    """
    V = tables.shape[1]
    sources = np.eye(V)  # fact a's source, one-hot
    facts = np.eye(V)[tables]  # (B, V, V): fact a's pointer, one-hot
    query = np.eye(V)[starts]  # (B, V)
    for layer in range(hop_layers(k) if layers is None else layers):
        read = np.einsum("bj,bjv->bv", hard_attention(query @ sources.T), facts)  # the fact matching the pointer
        if k >> layer & 1:
            query = read
        facts = np.einsum("baj,bjv->bav", hard_attention(facts @ sources.T), facts)
    return query.argmax(axis=1)


def khop_truth(tables: np.ndarray, starts: np.ndarray, k: int) -> np.ndarray:
    """``f^k(start)`` by following the table k times."""
    at = starts.copy()
    for _ in range(k):
        at = tables[np.arange(len(tables)), at]
    return at


# ---------------------------------------------------------------- Match3 in one layer of width M
def match3(X: np.ndarray, M: int) -> np.ndarray:
    """``Match3(X)_i = 1{exists j1, j2: x_i + x_j1 + x_j2 = 0 mod M}``, every position allowed for ``j1`` and ``j2``
    (a chunk of rows at a time: every sum of two tokens against every ``-x_i``)."""
    N = X.shape[1]
    rows = max(1, 2**24 // N**3)
    out = []
    for start in range(0, len(X), rows):
        x = X[start : start + rows]
        sums = ((x[:, :, None] + x[:, None, :]) % M).reshape(len(x), 1, N * N)
        out.append((sums == ((-x) % M)[:, :, None]).any(axis=2))
    return np.concatenate(out)


def token_shares(X: np.ndarray, M: int) -> np.ndarray:
    """The share of each token in each row, ``(B, M)``: what a head that attends uniformly reads."""
    counts = np.zeros((len(X), M))
    np.add.at(counts, (np.arange(len(X))[:, None], X), 1.0)
    return counts / X.shape[1]


def match3_layer(X: np.ndarray, M: int, clip: bool = True) -> np.ndarray:
    """One layer of one head and width M that computes Match3 (our construction): the head attends uniformly and
    averages the one-hot tokens, so each position reads the share ``h_a`` of every token ``a``; the MLP turns the
    shares into presence ``I_a = relu(N h_a) - relu(N h_a - 1)`` (``clip=False`` keeps the counts ``N h_a``, the
    tests' counterfactual), has a unit ``relu(I_a + I_b + 1{x_i = c} - 2)`` for each ``c`` and ``a`` with
    ``b = -c - a mod M``, and outputs ``1 - relu(1 - sum of the units)``. Only the units of ``c = x_i`` can be
    positive, so only they are computed."""
    N = X.shape[1]
    shares = token_shares(X, M)  # the uniform head's read, the same at every position
    present = np.maximum(N * shares, 0) - (np.maximum(N * shares - 1, 0) if clip else 0)
    partners = (-X[:, :, None] - np.arange(M)[None, None, :]) % M  # (B, N, a): b for c = x_i
    units = np.maximum(present[:, None, :] + np.take_along_axis(present[:, None, :], partners, axis=2) - 1, 0.0)
    return 1 - np.maximum(1 - units.sum(axis=2), 0.0)


# ---------------------------------------------------------------- q-sparse averaging (Sanford, Hsu and Telgarsky 2023)
def qsa(Z: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """``qSA(X)_i``: the mean of the values ``z_j`` at the q positions ``y_i`` names; ``Z`` is ``(N, d')``, ``Y`` is
    ``(N, q)``."""
    return Z[Y].mean(axis=1)


def rademacher_keys(width: int, N: int, rng: np.random.Generator) -> np.ndarray:
    """The keys ``u_1 .. u_N`` as columns of a ``(width, N)`` matrix of independent signs scaled by ``1/sqrt(width)``:
    Candes and Tao's random matrix with the restricted isometry property once width >~ q log N."""
    return rng.choice([-1.0, 1.0], size=(width, N)) / math.sqrt(width)


def support_queries(U: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """For each row of ``Y`` the least-norm ``w`` with ``<u_j, w> = 1`` for every ``j`` it names, ``(len(Y), width)``:
    our candidate for the vector Candes and Tao's lemma says exists, accepted where it shows the lemma's margin."""
    keys = U.T[Y]  # (B, q, width)
    gram = keys @ keys.transpose(0, 2, 1)
    return (keys.transpose(0, 2, 1) @ np.linalg.solve(gram, np.ones((*Y.shape, 1))))[..., 0]


def qsa_scale(N: int, eps: float) -> float:
    """The proof's inverse temperature ``alpha = ceil(2 ln(4N / eps))``: a key scored at most 1/2 below the support's
    then weighs at most ``eps / (4N)`` of a support key."""
    return float(math.ceil(2 * math.log(4 * N / eps)))


def qsa_unit(Z: np.ndarray, Y: np.ndarray, U: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """The unit of Sanford et al.'s proof on one input, at the positions whose supports are the rows of ``Y``: queries
    ``alpha w_{y_i}``, keys ``u_j``, values ``z_j``; their outputs ``(len(Y), d')`` and each query's largest
    ``|<u_j, w_{y_i}>|`` off its support ``(len(Y),)``."""
    scores = support_queries(U, Y) @ U  # (N, N): <w_{y_i}, u_j>
    outputs = softmax(alpha * scores, axis=1) @ Z
    off = np.ones_like(scores, dtype=bool)
    np.put_along_axis(off, Y, False, axis=1)
    return outputs, np.where(off, np.abs(scores), 0.0).max(axis=1)


def qsa_error_bound(N: int, q: int, alpha: float, off_score: float, shift: float = 0.0) -> float:
    """Our bound on ``||f(X)_i - qSA(X)_i||`` where the support scores 1 and every other key at most ``off_score < 1``,
    each score of the unit (times alpha) then moved by at most ``shift`` (say by rounding the query): the weight off
    the support is at most ``B = (N - q) e^{-alpha (1 - s) + 2 shift} / q`` and each unit of it moves the output by at
    most 2 (values in the unit ball); the support's weights differ by a factor ``e^{2 shift}`` at most, which moves it
    by ``e^{2 shift} - 1`` more. At ``s = 1/2``, no shift and the proof's alpha this is under ``eps / (2q)``."""
    return math.expm1(2 * shift) + 2 * (N - q) * math.exp(-alpha * (1 - off_score) + 2 * shift) / q


def bit_pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every pair ``(a, b)`` of ``n``-bit vectors, ``(4^n, n)`` each; ``a`` is the slower index: pair ``k`` has as
    ``a`` the bits of ``k // 2^n``."""
    bits = (np.arange(2**n)[:, None] >> np.arange(n)) & 1
    return np.repeat(bits, 2**n, axis=0), np.tile(bits, (2**n, 1))


def intersect(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``DISJ(a, b) = max_i a_i b_i`` per pair: whether the sets the two bit vectors name meet."""
    return (a & b).any(axis=-1)


def disjointness_inputs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sanford et al.'s reduction of set disjointness to qSA at ``q = n`` on ``N = 2n + 1`` positions, per pair: the
    values' first coordinate ``(P, 2n + 1)`` (Bob's: ``z_j = e_1`` at odd ``j`` with ``b_{(j+1)/2} = 1``, else
    ``-e_1``, ``z_{2n+1}`` included) and Alice's set ``y_{2n+1}`` ``(P, n)`` (``2i - 1`` where ``a_i = 1``, else
    ``2i``), 0-based."""
    pairs, n = a.shape
    Z = -np.ones((pairs, 2 * n + 1))
    Z[:, 0 : 2 * n : 2] = np.where(b == 1, 1.0, -1.0)
    return Z, 2 * np.arange(n) + (1 - a)


def round_to_bits(x: np.ndarray, bits: int) -> np.ndarray:
    """``x`` with each entry's mantissa rounded to ``bits`` bits (its exponent kept): a number sent with ``bits``
    bits of precision."""
    mantissa, exponent = np.frexp(x)
    return np.ldexp(np.round(mantissa * 2.0**bits) / 2.0**bits, exponent)


def protocol_scores(U: np.ndarray, Y: np.ndarray, alpha: float, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """The proof's protocol, Alice's side: for each of her sets (rows of ``Y``) the unit's scores ``<alpha w_y, u_j>``
    at full precision, and as Bob gets them from her query rounded to ``bits`` bits, ``(sets, N)`` each."""
    query = alpha * support_queries(U, Y)
    return query @ U, round_to_bits(query, bits) @ U


def protocol_answers(scores: np.ndarray, Z: np.ndarray, q: int) -> tuple[np.ndarray, np.ndarray]:
    """Bob's side, on every pair (pair ``k`` has Alice's set number ``k // 2^q``): he attends with the scores she sent
    over his values and says the sets meet where the first coordinate of ``f(X)_{2q+1}`` is above ``-1 + 1/q``. His
    answers and that coordinate."""
    weights = softmax(scores, axis=1)
    out = np.einsum("pj,pj->p", weights[np.arange(len(Z)) // 2**q], Z)
    return out > -1 + 1 / q, out
