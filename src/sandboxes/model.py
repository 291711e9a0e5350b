"""One GPT-style transformer for the whole book.

Every option a chapter needs is a plain field of :class:`GPTConfig` (tying, positional
encoding, layer norm, attention or MLP off, activation, biases), and the attention weights of
every head come back from ``forward(..., return_attention=True)`` instead of through hooks.
The model knows no chapter: a chapter picks a config.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from .attention import causal_attention

PositionalEncoding = Literal["learned", "sinusoidal", "linear", "none"]
Activation = Literal["relu", "gelu"]


def check_heads(d_model: int, n_head: int) -> None:
    """Heads split the width evenly: a chapter calls this before any work, the config again when built."""
    if d_model % n_head:
        raise ValueError(f"d_model={d_model} is not divisible by n_head={n_head}")


@dataclass(frozen=True)
class GPTConfig:
    """Shape and options of a decoder-only transformer."""

    vocab_size: int
    block_size: int  # longest sequence the positional encoding covers
    n_layer: int = 1
    n_head: int = 1
    d_model: int = 8
    d_mlp: int | None = None  # defaults to 4 * d_model
    tied: bool = True  # output matrix is the token embedding
    positional: PositionalEncoding = "learned"
    layer_norm: bool = False
    attention: bool = True
    mlp: bool = True
    activation: Activation = "relu"
    bias: bool = False  # biases inside attention and MLP layers
    head_bias: bool = True  # bias of the output layer (the ``b`` of the Markov paper)
    recency_slope: float = 0.0  # score penalty -slope * (i - j): Press et al.'s ALiBi with one slope
    n_outputs: int | None = None  # logits per position; defaults to vocab_size (a classifier's classes otherwise)
    causal: bool = True  # False: every position attends to every other (set tasks such as Match2 read the whole input)
    offset_input: bool = False  # True: the inputs' first column is an offset added to every position (random shifts)
    # True: Wen et al.'s layer (the thesis's Eq. 3.23), x + LN(attn(x)) then x + mlp(x): the attention reads the
    # unnormalised stream and its output is normalised (layer_norm, which normalises inputs, must then be off)
    norm_attention_output: bool = False
    init_std: float = 0.02
    # True: token embeddings, learned positions and the (untied) output matrix are drawn once, entries N(0, 1/d_model)
    # so that rows are near unit norm, and never train (Bietti et al.'s and Chen et al.'s models): what the model
    # learns must then live in its attention and MLPs
    frozen_embeddings: bool = False

    def __post_init__(self) -> None:
        check_heads(self.d_model, self.n_head)
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "d_model"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.n_outputs is not None and (self.n_outputs < 1 or (self.tied and self.n_outputs != self.vocab_size)):
            raise ValueError(f"n_outputs={self.n_outputs}: at least 1, and vocab_size where the head is tied")
        if self.positional not in ("learned", "sinusoidal", "linear", "none"):
            raise ValueError(f"unknown positional encoding {self.positional!r}")
        if self.activation not in ("relu", "gelu"):
            raise ValueError(f"unknown activation {self.activation!r}")
        if self.norm_attention_output and (self.layer_norm or not self.attention):
            raise ValueError("norm_attention_output normalises an attention's output: attention on, layer_norm off")
        if self.frozen_embeddings and (self.tied or self.head_bias):
            raise ValueError("frozen embeddings take an untied output matrix and no output bias (tied, head_bias off)")

    @property
    def mlp_width(self) -> int:
        return 4 * self.d_model if self.d_mlp is None else self.d_mlp


def _norm(config: GPTConfig) -> nn.Module:
    return nn.LayerNorm(config.d_model) if config.layer_norm else nn.Identity()


# From this length on, training attention uses the fused kernel: at T = 64 vmapped members were slower
# with it (3.1 against 2.3 ms per member-step, 8 members), at T = 256 twice as fast (9.5 against 21.1); measured
# while vmap still ran the kernel member by member (sandboxes.attention now folds the members into its batch).
FUSED_FROM = 128


def _distance(T: int, device: torch.device) -> Tensor:
    """Query position minus key position, ``(T, T)``; made on demand, since the fused causal kernels never read it."""
    position = torch.arange(T, device=device)
    return position[:, None] - position[None, :]


class CausalSelfAttention(nn.Module):
    """Multi-head softmax attention, causal unless the config says otherwise, that can hand back its weights."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.causal = config.causal
        self.recency_slope = config.recency_slope
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=config.bias)
        self.proj = nn.Linear(config.d_model, config.d_model, bias=config.bias)

    def forward(self, x: Tensor, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """The attention output and, if ``need_weights``, the ``(B, H, T, T)`` weights.

        Without the weights, from ``FUSED_FROM`` positions on, a fused kernel (``sandboxes.attention``) runs and
        never builds the ``T x T`` masks; below that the explicit softmax is as fast and vmaps without a loop.
        """
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if not need_weights and T >= FUSED_FROM and self.causal:
            bias = None if not self.recency_slope else self._recency(_distance(T, x.device), q.dtype)
            out = causal_attention(q, k, v, bias)
            return self.proj(out.transpose(1, 2).reshape(B, T, C)), None
        distance = _distance(T, x.device)
        scores = q @ k.transpose(-2, -1) / math.sqrt(C // self.n_head)
        if self.recency_slope:
            scores = scores - self.recency_slope * distance.to(scores.dtype)
        if self.causal:
            scores = scores.masked_fill(distance < 0, float("-inf"))
        weights = scores.softmax(dim=-1)
        out = (weights @ v).transpose(1, 2).reshape(B, T, C)
        return self.proj(out), weights

    def _recency(self, distance: Tensor, dtype: torch.dtype) -> Tensor:
        """The additive recency bias, ``-slope x distance`` on and below the diagonal, ``-inf`` above it."""
        return (-self.recency_slope * distance.to(dtype)).masked_fill(distance < 0, float("-inf"))


class MLP(nn.Module):
    """Position-wise feed-forward layer ``W_2 act(W_1 x)``."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(config.d_model, config.mlp_width, bias=config.bias)
        self.proj = nn.Linear(config.mlp_width, config.d_model, bias=config.bias)
        self.act = nn.ReLU() if config.activation == "relu" else nn.GELU()

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(self.act(self.fc(x)))


class Block(nn.Module):
    """Residual block: ``x + attn(norm(x))`` then ``x + mlp(norm(x))``; either part may be off. With
    ``norm_attention_output``, ``x + LN(attn(x))`` then ``x + mlp(x)``."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = _norm(config)
        self.attn = CausalSelfAttention(config) if config.attention else None
        # the thesis's normalising constant C_LN = 0 (Theorem 1's hypothesis): an epsilon far below any output's scale
        self.ln_out = nn.LayerNorm(config.d_model, eps=1e-12) if config.norm_attention_output else nn.Identity()
        self.ln_2 = _norm(config)
        self.mlp = MLP(config) if config.mlp else None

    def forward(self, x: Tensor, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        weights = None
        if self.attn is not None:
            out, weights = self.attn(self.ln_1(x), need_weights)
            x = x + self.ln_out(out)
        if self.mlp is not None:
            x = x + self.mlp(self.ln_2(x))
        return x, weights


def sinusoidal_table(length: int, d_model: int) -> Tensor:
    """The fixed sine/cosine position table of Vaswani et al. (2017)."""
    position = torch.arange(length, dtype=torch.float64)[:, None]
    freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    table = torch.zeros(length, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * freq)
    table[:, 1::2] = torch.cos(position * freq)[:, : d_model // 2]
    return table.float()


class GPT(nn.Module):
    """Decoder-only transformer mapping token ids ``(B, T)`` to next-token logits ``(B, T, V)``."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        if config.positional == "learned":
            self.wpe = nn.Parameter(torch.zeros(config.block_size, config.d_model))
        elif config.positional == "linear":
            # p_t = (t / block_size) * u, a learned direction scaled linearly in the position
            self.wpe = nn.Parameter(torch.zeros(config.d_model))
        elif config.positional == "sinusoidal":
            self.register_buffer("wpe", sinusoidal_table(config.block_size, config.d_model))
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = _norm(config)
        outputs = config.vocab_size if config.n_outputs is None else config.n_outputs
        self.head = nn.Linear(config.d_model, outputs, bias=config.head_bias)
        if config.tied:
            self.head.weight = self.wte.weight
        self.reset_parameters()
        if config.frozen_embeddings:
            self._freeze_embeddings()

    def _freeze_embeddings(self) -> None:
        """Token embeddings, learned positions and the output matrix redrawn with entries ``N(0, 1/d_model)`` and
        held as buffers, which no optimiser sees (each member of an ensemble keeps its own draw)."""
        scale = self.config.d_model**-0.5
        for module, name in ((self.wte, "weight"), (self.head, "weight"), (self, "wpe")):
            value = getattr(module, name, None)
            if isinstance(value, nn.Parameter):
                delattr(module, name)
                module.register_buffer(name, scale * torch.randn_like(value.detach()))

    def reset_parameters(self) -> None:
        """Gaussian ``N(0, init_std^2)`` weights, zero biases, unit layer norms."""
        for name, param in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(param)
            elif "ln_" in name:
                nn.init.ones_(param)
            else:
                nn.init.normal_(param, mean=0.0, std=self.config.init_std)

    def positions(self, T: int, offset: Tensor | None = None) -> Tensor | None:
        """The ``(T, d_model)`` positional encoding added to the token embeddings, if any; with ``offset`` (``(B, 1)``
        integers) that of positions ``offset .. offset + T - 1``, ``(B, T, d_model)``."""
        if T > self.config.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.config.block_size}")
        if self.config.positional == "none":
            return None
        if offset is None:
            index = torch.arange(T, device=self.wte.weight.device)
        else:  # a table's rows past block_size fail in its indexing (a data-dependent check cannot run under vmap)
            index = offset + torch.arange(T, device=offset.device)
        if self.config.positional in ("learned", "sinusoidal"):
            return self.wpe[:T] if offset is None else self.wpe[index]
        return (index.to(self.wpe.dtype) / self.config.block_size)[..., None] * self.wpe

    def embed(self, idx: Tensor) -> Tensor:
        """The residual stream entering the first block: token embeddings plus positions (shifted by the inputs' first
        column where the model has ``offset_input``)."""
        offset = None
        if self.config.offset_input:
            offset, idx = idx[:, :1], idx[:, 1:]
        x = self.wte(idx)
        pos = self.positions(idx.shape[1], offset)
        return x if pos is None else x + pos

    def forward(self, idx: Tensor, return_attention: bool = False) -> Tensor | tuple[Tensor, list[Tensor]]:
        """Logits for every position; with ``return_attention`` also one ``(B, H, T, T)`` per layer."""
        x = self.embed(idx)
        attention = []
        for block in self.blocks:
            x, weights = block(x, return_attention)
            if weights is not None:
                attention.append(weights)
        logits = self.head(self.ln_f(x))
        return (logits, attention) if return_attention else logits


class WithAttention(nn.Module):
    """A GPT whose forward returns ``(logits, attention)``, so a task's loss can read the attention."""

    def __init__(self, gpt: GPT) -> None:
        super().__init__()
        self.gpt = gpt

    def forward(self, idx: Tensor) -> tuple[Tensor, list[Tensor]]:
        return self.gpt(idx, return_attention=True)


class Paired(nn.Module):
    """A model read on inputs that come in pairs, ``(B, 2, T)`` to outputs ``(B, 2, T, ...)``, both in one forward
    pass: for a loss that compares a model's outputs on two versions of one sample (a contrastive term)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, idx: Tensor) -> Tensor:
        return self.model(idx.flatten(0, 1)).unflatten(0, idx.shape[:2])


def paired_gpt(config: GPTConfig) -> Paired:
    """A :class:`GPT` of ``config`` that reads pairs (a picklable factory, for worker processes)."""
    return Paired(GPT(config))


def zero_gpt(config: GPTConfig) -> GPT:
    """A float64 GPT with every parameter zero: the blank that weight constructions are written into."""
    model = GPT(config).double()
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
    return model


class Disentangled(nn.Module):
    """Nichani et al.'s two-layer attention-only transformer reduced to its two score matrices, one-hot throughout.

    Layer 1 attends from position ``t`` to ``j <= t`` with a free positional score ``first[t, j]`` and copies the
    token there; layer 2 attends from ``i`` to ``t <= i`` with score ``onehot(s_i)^T second copied_t`` (minus
    ``2 match_scale`` at ``t = 0``, which has no token before it) and averages the tokens ``s_t``; that average is
    the logits. With ``first`` one on the previous position and large, it is the induction head of
    :func:`sandboxes.theory.induction.induction_head`. ``second`` trains only with ``train_match``: Nichani et
    al.'s first stage trains ``first`` alone from zero, with ``second = match_scale I``; their second stage trains
    ``second`` with ``first`` held (``first`` given, ``train_first=False``).

    ``output="probability"`` reads the average as Nichani et al.'s reduced model does, as the predicted law itself,
    and returns its logarithm, mixed with ``floor`` of the uniform law so that a token absent from the sequence
    costs ``ln(k / floor)`` and not infinity: a cross-entropy of these logits is ``-ln`` of that law. Their model
    keeps no key out of layer 2's matches, so this one does not either.
    """

    def __init__(
        self,
        vocab_size: int,
        block_size: int,
        match_scale: float,
        train_match: bool = False,
        output: str = "logits",
        floor: float = 0.0,
        first: Tensor | None = None,
        train_first: bool = True,
    ) -> None:
        super().__init__()
        if output not in ("logits", "probability"):
            raise ValueError(f"the output is 'logits' or 'probability', got {output!r}")
        if output == "probability" and not 0.0 < floor < 1.0:
            raise ValueError(f"a probability output needs a floor in (0, 1), got {floor}")
        self.vocab_size, self.match_scale, self.output, self.floor = vocab_size, match_scale, output, floor
        scores = torch.zeros(block_size, block_size) if first is None else first.detach().clone().float()
        if train_first:
            self.first = nn.Parameter(scores)
        else:
            self.register_buffer("first", scores)
        match = match_scale * torch.eye(vocab_size)
        if train_match:
            self.second = nn.Parameter(match)
        else:
            self.register_buffer("second", match)

    def first_attention(self, length: int) -> Tensor:
        """Layer 1's weights ``(length, length)``: the same for every input, since its scores are positional."""
        causal = torch.ones(length, length, dtype=torch.bool, device=self.first.device).tril()
        return torch.softmax(self.first[:length, :length].masked_fill(~causal, -math.inf), dim=-1)

    def forward(self, idx: Tensor, return_attention: bool = False) -> Tensor | tuple[Tensor, list[Tensor]]:
        """Logits ``(B, T, vocab)``; with ``return_attention`` also both layers' weights, ``(B, 1, T, T)`` each."""
        length = idx.shape[-1]
        tokens = (idx[..., None] == torch.arange(self.vocab_size, device=idx.device)).to(self.first.dtype)
        causal = torch.ones(length, length, dtype=torch.bool, device=idx.device).tril()
        first = self.first_attention(length)
        copied = first @ tokens  # (B, T, vocab): each position's soft copy of the token it attends to
        scores = tokens @ self.second @ copied.transpose(-1, -2)
        if self.output == "logits":  # the hand-built head keeps key 0 (no token before it) out of its matches
            scores = scores - 2 * self.match_scale * (torch.arange(length, device=idx.device) == 0).to(scores.dtype)
        second = torch.softmax(scores.masked_fill(~causal, -math.inf), dim=-1)
        logits = second @ tokens
        if self.output == "probability":
            logits = torch.log((1 - self.floor) * logits + self.floor / self.vocab_size)
        if not return_attention:
            return logits
        return logits, [first.expand(idx.shape[0], 1, length, length), second[:, None]]


class AssociativeMemories(nn.Module):
    """Bietti et al.'s simplified two-layer transformer, in which only three associative memories train.

    Token embeddings ``e_k``, positional embeddings ``p_t``, output embeddings ``u_k`` and layer 1's value-output
    matrix ``W_OV1`` are random and held fixed (entries of variance ``1/d``, so that in high dimension they are
    nearly orthonormal); the residual stream is a sum of them. What trains, from zero (uniform attention, layer 2
    writing nothing), is layer 1's score matrix ``W_KQ1``, layer 2's score matrix ``W_KQ2`` and layer 2's
    value-output matrix ``W_OV2``; a score is ``x_t^T W_KQ x_s``. No MLP, no normalisation, one head per layer.
    To train the memories one at a time, ``trained`` names those that train and ``start`` gives any of the three
    its starting value; the others are held. ``orthonormal`` draws the fixed parts exactly orthonormal instead,
    the limit of infinite width that Bietti et al.'s three-step theorem takes: the embeddings, positions, outputs and
    ``W_OV1``'s images of tokens and positions are rows of one random orthogonal matrix, so ``d_model`` is at least
    ``3 vocab_size + 2 block_size``.
    """

    MEMORIES = ("kq1", "kq2", "ov2")

    def __init__(
        self,
        vocab_size: int,
        block_size: int,
        d_model: int,
        trained: tuple[str, ...] = MEMORIES,
        start: Mapping[str, Tensor] | None = None,
        orthonormal: bool = False,
    ) -> None:
        super().__init__()
        if not set(trained) <= set(self.MEMORIES) or not set(start or {}) <= set(self.MEMORIES):
            raise ValueError(f"the memories are {self.MEMORIES}, got trained={trained}, start={sorted(start or {})}")
        if orthonormal:
            for name, value in self.orthonormal_parts(vocab_size, block_size, d_model).items():
                self.register_buffer(name, value)
        else:
            scale = d_model**-0.5
            for name, rows in (
                ("tokens", vocab_size),
                ("positions", block_size),
                ("outputs", vocab_size),
                ("ov1", d_model),
            ):
                self.register_buffer(name, scale * torch.randn(rows, d_model))
        for name in self.MEMORIES:
            value = (start or {}).get(name, torch.zeros(d_model, d_model)).detach().clone()
            if name in trained:
                setattr(self, name, nn.Parameter(value))
            else:
                self.register_buffer(name, value)

    @staticmethod
    def orthonormal_parts(vocab_size: int, block_size: int, d_model: int) -> dict[str, Tensor]:
        """Tokens, positions, outputs and ``W_OV1`` (tokens and positions sent to fresh orthonormal rows) from one
        random orthogonal matrix, drawn from the current seed."""
        sizes = (vocab_size, block_size, vocab_size, vocab_size, block_size)
        if d_model < sum(sizes):
            raise ValueError(
                f"orthonormal parts need d_model >= 3 vocab_size + 2 block_size = {sum(sizes)}, got {d_model}"
            )
        basis = torch.linalg.qr(torch.randn(d_model, d_model))[0].T
        tokens, positions, outputs, copied_tokens, copied_positions = basis[: sum(sizes)].split(sizes)
        ov1 = copied_tokens.T @ tokens + copied_positions.T @ positions
        parts = {"tokens": tokens, "positions": positions, "outputs": outputs, "ov1": ov1}
        return {name: part.contiguous() for name, part in parts.items()}

    def forward(self, idx: Tensor, return_attention: bool = False) -> Tensor | tuple[Tensor, list[Tensor]]:
        """Logits ``(B, T, vocab)``; with ``return_attention`` also both layers' weights, ``(B, 1, T, T)`` each."""
        length = idx.shape[-1]
        causal = torch.ones(length, length, dtype=torch.bool, device=idx.device).tril()
        x = self.tokens[idx] + self.positions[:length]
        weights = []
        for kq, ov in ((self.kq1, self.ov1), (self.kq2, self.ov2)):
            scores = (x @ kq @ x.transpose(-1, -2)).masked_fill(~causal, -math.inf)
            weights.append(torch.softmax(scores, dim=-1))
            x = x + weights[-1] @ x @ ov.T
        logits = x @ self.outputs.T
        if not return_attention:
            return logits
        return logits, [w[:, None] for w in weights]


class WindowHeads(nn.Module):
    """A two-layer disentangled transformer whose first layer has ``n_head`` heads of relative positional scores.

    Head ``h`` attends from ``t`` to ``t - j`` for ``j < window`` with a score ``lags[h, j]`` that depends on the
    distance alone (Chen et al.'s relative positional embedding) and copies the one-hot token there; the residual
    stream at ``t`` is its own token beside every head's copy, concatenated (disentangled, ``(n_head + 1) k``
    wide). Layer 2 attends causally with the bilinear score ``x_i^T match x_t`` over those streams, averages the
    one-hot tokens it attends to, and ``scale`` times that average is the logits. ``lags`` starts at small random
    values (the heads must differ to part), ``match`` at zero (layer 2 uniform), ``scale`` at one.
    """

    def __init__(self, vocab_size: int, n_head: int, window: int, init: float = 0.1) -> None:
        super().__init__()
        if n_head < 1 or window < 1:
            raise ValueError(f"heads and window are at least 1, got {n_head} and {window}")
        self.vocab_size, self.window = vocab_size, window
        width = (n_head + 1) * vocab_size
        self.lags = nn.Parameter(init * torch.randn(n_head, window))
        self.match = nn.Parameter(torch.zeros(width, width))
        self.scale = nn.Parameter(torch.ones(()))

    def first_attention(self, length: int) -> Tensor:
        """Layer 1's weights ``(n_head, length, length)``: positional, so the same for every input."""
        back = torch.arange(length, device=self.lags.device)
        back = back[:, None] - back[None, :]
        scores = self.lags[:, back.clamp(0, self.window - 1)]
        return torch.softmax(scores.masked_fill((back < 0) | (back >= self.window), -math.inf), dim=-1)

    def forward(self, idx: Tensor, return_attention: bool = False) -> Tensor | tuple[Tensor, list[Tensor]]:
        """Logits ``(B, T, vocab)``; with ``return_attention`` also layer 1's ``(B, n_head, T, T)`` and layer 2's."""
        length = idx.shape[-1]
        tokens = (idx[..., None] == torch.arange(self.vocab_size, device=idx.device)).to(self.lags.dtype)
        first = self.first_attention(length)
        copies = torch.einsum("htj,...jk->...thk", first, tokens)  # (B, T, heads, vocab)
        stream = torch.cat([tokens[..., None, :], copies], dim=-2).flatten(-2)
        causal = torch.ones(length, length, dtype=torch.bool, device=idx.device).tril()
        scores = (stream @ self.match @ stream.transpose(-1, -2)).masked_fill(~causal, -math.inf)
        second = torch.softmax(scores, dim=-1)
        logits = self.scale * (second @ tokens)
        if not return_attention:
            return logits
        return logits, [first.expand(idx.shape[0], *first.shape), second[:, None]]


class LinearAttentionRecall(nn.Module):
    """Nichani, Lee and Bietti's one-layer model of factual recall: one-hot tokens, one linear-attention head read at
    the last position, no normalisation and no MLP.

    With one-hot embeddings the score of key ``z_j`` for the last token's query is the entry ``A[z_T, z_j]`` of the
    key-query matrix, and the value-output matrix ``V`` maps token ``z_j`` to answer logits, so the logits are
    ``sum_j A[z_T, z_j] V[z_j]`` (the attention is not normalised). Every entry of both starts at ``init``: the
    small positive initialisation of their gradient-flow theorem.
    """

    def __init__(self, vocab_size: int, n_outputs: int, init: float) -> None:
        super().__init__()
        self.key_query = nn.Parameter(torch.full((vocab_size, vocab_size), float(init)))
        self.value_output = nn.Parameter(torch.full((vocab_size, n_outputs), float(init)))

    def forward(self, idx: Tensor) -> Tensor:
        """Answer logits ``(B, n_outputs)`` of sequences ``idx`` ``(B, T)``."""
        scores = self.key_query[idx[:, -1]].gather(1, idx)
        per_token = torch.zeros(idx.shape[0], self.key_query.shape[0], dtype=scores.dtype, device=scores.device)
        per_token = per_token.scatter_add(1, idx, scores)
        return per_token @ self.value_output


class MLPMemory(nn.Module):
    """Nichani, Lee and Bietti's MLP associative memory ``F(z) = V^T relu(W z + b)``, scored against fixed output
    embeddings: input ``x`` is embedded as the fixed ``inputs[x]`` and output ``y`` gets the logit
    ``outputs[y]^T F(inputs[x])``. Only ``W``, ``b`` and ``V`` train; they start as the authors' dense layers do
    (normal with variance 1 / fan-in, bias zero; theirs is truncated at two standard deviations), from ``generator``.
    """

    def __init__(self, inputs: Tensor, outputs: Tensor, width: int, generator: torch.Generator) -> None:
        super().__init__()
        d = inputs.shape[1]
        self.register_buffer("inputs", inputs)
        self.register_buffer("outputs", outputs)
        self.hidden = nn.Parameter(torch.randn(width, d, generator=generator, dtype=inputs.dtype) / math.sqrt(d))
        self.bias = nn.Parameter(torch.zeros(width, dtype=inputs.dtype))
        self.readout = nn.Parameter(torch.randn(width, d, generator=generator, dtype=inputs.dtype) / math.sqrt(width))

    def forward(self, idx: Tensor) -> Tensor:
        """Logits ``(B, outputs)`` of input ids ``idx`` ``(B,)``."""
        hidden = torch.relu(self.inputs[idx] @ self.hidden.T + self.bias)
        return hidden @ self.readout @ self.outputs.T


class FactTransformer(nn.Module):
    """Nichani, Lee and Bietti's one-layer transformer for factual recall: fixed random token embeddings and answer
    unembeddings, ``heads`` heads of width ``head_dim`` read at the last position (its query against every
    position's key), an output map back to R^d, and an MLP of width ``width`` added to that output (none at width
    0); no residual from the tokens, no normalisation, no positions. Weights start as in the authors' code (normal,
    standard deviation 1 / sqrt(d_h) for the heads, 1 / sqrt(d) for the output map and the embeddings, 1 / sqrt(fan-in)
    for the MLP, bias zero; their MLP's normal is truncated, ours is not), from ``generator``.
    """

    def __init__(
        self, vocab_size: int, n_outputs: int, d: int, heads: int, head_dim: int, width: int, generator: torch.Generator
    ) -> None:
        super().__init__()

        def normal(*shape: int, std: float) -> Tensor:
            return torch.randn(*shape, generator=generator) * std

        self.register_buffer("embed", normal(vocab_size, d, std=d**-0.5))
        self.register_buffer("unembed", normal(n_outputs, d, std=d**-0.5))
        self.query, self.key, self.value = (nn.Parameter(normal(heads, d, head_dim, std=head_dim**-0.5)) for _ in "qkv")
        self.out = nn.Parameter(normal(heads * head_dim, d, std=d**-0.5))
        self.hidden = nn.Parameter(normal(width, d, std=d**-0.5))
        self.bias = nn.Parameter(torch.zeros(width))
        self.readout = nn.Parameter(normal(width, d, std=max(width, 1) ** -0.5))

    def forward(self, idx: Tensor) -> Tensor:
        """Answer logits ``(B, n_outputs)`` of sequences ``idx`` ``(B, T)``."""
        x = self.embed[idx]
        query = torch.einsum("bd,hde->bhe", x[:, -1], self.query)
        # q^T (W_K^T x_t) = (W_K q)^T x_t and sum_t a_t W_V^T x_t = W_V^T sum_t a_t x_t: the key and value maps act
        # once per sequence and head, not at every position (the same function, a fifth to a ninth of the time)
        folded_query = torch.einsum("bhe,hde->bhd", query, self.key)
        weights = torch.softmax(folded_query @ x.transpose(1, 2) / self.query.shape[-1] ** 0.5, dim=-1)
        out = torch.einsum("bhd,hde->bhe", weights @ x, self.value).flatten(1) @ self.out
        out = out + torch.relu(out @ self.hidden.T + self.bias) @ self.readout
        return out @ self.unembed.T

    def parameter_count(self) -> int:
        """The authors' count, 4 H d_h d + 2 m d: the attention's and the MLP's weight matrices."""
        heads, d, head_dim = self.query.shape
        return 4 * heads * head_dim * d + 2 * self.hidden.shape[0] * d


class SelfAttentionUnit(nn.Module):
    """Sanford et al.'s self-attention unit on features already embedded: ``f(X) = softmax(X Q (X K)^T) X V``, with
    query and key maps of width ``width`` and a value map to ``out_dim`` (no scaling, mask, residual or MLP)."""

    def __init__(self, in_dim: int, width: int, out_dim: int) -> None:
        super().__init__()
        self.query = nn.Linear(in_dim, width, bias=False)
        self.key = nn.Linear(in_dim, width, bias=False)
        self.value = nn.Linear(in_dim, out_dim, bias=False)

    def attention(self, x: Tensor) -> Tensor:
        """The unit's weights ``(..., N, N)``: each position's softmax over every position."""
        return torch.softmax(self.query(x) @ self.key(x).transpose(-2, -1), dim=-1)

    def forward(self, x: Tensor) -> Tensor:
        return self.attention(x) @ self.value(x)


class LSTM(nn.Module):
    """LSTM baseline with the same interface as :class:`GPT`: token ids in, logits out.

    ``torch.func.vmap`` has no batching rule for the fused ``nn.LSTM`` kernel, so LSTM seeds are
    trained one after another (``train(..., batched=False)``).
    """

    def __init__(self, vocab_size: int, hidden: int = 128, n_layer: int = 1) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, hidden)
        self.lstm = nn.LSTM(hidden, hidden, num_layers=n_layer, batch_first=True)
        self.head = nn.Linear(hidden, vocab_size)

    def forward(self, idx: Tensor) -> Tensor:
        out, _ = self.lstm(self.embed(idx))
        return self.head(out)


class MultiLayerPerceptron(nn.Module):
    """Fully connected network on vectors: ``widths[0]`` inputs, ReLU between layers, ``widths[-1]`` outputs."""

    def __init__(self, widths: tuple[int, ...]) -> None:
        super().__init__()
        if len(widths) < 2 or min(widths) < 1:
            raise ValueError(f"need an input and an output width, all at least 1, got {widths}")
        layers: list[nn.Module] = [nn.Linear(widths[0], widths[1])]
        for fan_in, fan_out in zip(widths[1:-1], widths[2:]):
            layers += [nn.ReLU(), nn.Linear(fan_in, fan_out)]
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


def count_parameters(model: nn.Module) -> int:
    """Number of distinct trainable scalars (a tied matrix counts once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
