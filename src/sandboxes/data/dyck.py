"""Bounded-depth Dyck prefixes (Wen et al. 2023, the thesis's Definition 12): k bracket types nested at most D deep,
drawn left to right with an open bracket at rate q, for next-token prediction."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass(frozen=True)
class Dyck:
    """Prefixes of ``length`` tokens of Dyck_{k,D}: at depth 0 an open bracket of a uniform type; at depth D the
    closing bracket of the innermost one; otherwise an open bracket of a uniform type with probability ``q``, else
    that closing bracket (Definition 12's distribution D_{q,k,D,N})."""

    k: int = 2
    depth: int = 4
    q: float = 0.5
    length: int = 28

    def __post_init__(self) -> None:
        if self.k < 1 or self.depth < 1 or self.length < 2 or not 0.0 < self.q < 1.0:
            raise ValueError(f"Dyck needs k >= 1, depth >= 1, length >= 2 and 0 < q < 1, got {self}")

    @property
    def vocab_size(self) -> int:
        """Open and closing brackets of every type."""
        return 2 * self.k

    def sequences(self, n: int, generator: torch.Generator) -> Tensor:
        """``n`` prefixes, ``(n, length)`` tokens, drawn from ``generator``: per position a coin and a type for every
        row; the stack is then kept in NumPy, whose small operations cost a fraction of PyTorch's."""
        coins = np.empty((self.length, n), dtype=bool)
        kinds = np.empty((self.length, n), dtype=np.int64)
        for t in range(self.length):
            coins[t] = (torch.rand(n, generator=generator) < self.q).numpy()
            kinds[t] = torch.randint(self.k, (n,), generator=generator).numpy()
        tokens = np.empty((n, self.length), dtype=np.int64)
        stack = np.zeros((n, self.depth + 1), dtype=np.int64)
        top = np.zeros(n, dtype=np.int64)
        rows = np.arange(n)
        for t in range(self.length):
            opening = (coins[t] | (top == 0)) & (top < self.depth)
            tokens[:, t] = np.where(opening, 2 * kinds[t], 2 * stack[rows, top] + 1)
            top = np.where(opening, top + 1, top - 1)
            stack[rows[opening], top[opening]] = kinds[t][opening]
        return torch.from_numpy(tokens)

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Next-token pairs: the prefix without its last token, and each position's next token."""
        tokens = self.sequences(n, generator)
        return tokens[:, :-1], tokens[:, 1:]

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        """Cross-entropy of every next token (the thesis's experiments; its theory takes the squared error)."""
        return F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1))


def depths(tokens: Tensor) -> Tensor:
    """The grammar depth after each token of Dyck prefixes ``(n, length)``: open brackets (even) add one, closing
    brackets (odd) take one away."""
    return (1 - 2 * (tokens % 2)).cumsum(dim=1)


@dataclass(frozen=True)
class TypedDyck:
    """Dyck prefixes as a transformer with a minimal first layer reads them (the thesis's Assumption 10 with the
    one-hot embedding of its Eq. 3.37): each input token is a bracket's type and the depth it leaves, id
    ``token * (D + 1) + depth``, after a starting token; the targets are the brackets, every next one scored."""

    dyck: Dyck

    @property
    def start(self) -> int:
        """The starting token's id, after every (type, depth) pair."""
        return 2 * self.dyck.k * (self.dyck.depth + 1)

    @property
    def vocab_size(self) -> int:
        return self.start + 1

    def typed(self, tokens: Tensor) -> Tensor:
        """The ids of ``tokens`` ``(n, L)`` behind the starting token, ``(n, L + 1)``: what the second layer reads."""
        ids = tokens * (self.dyck.depth + 1) + depths(tokens)
        return torch.cat([ids.new_full((ids.shape[0], 1), self.start), ids], dim=1)

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """The starting token and a prefix but its last bracket, and each position's next bracket."""
        tokens = self.dyck.sequences(n, generator)
        return self.typed(tokens)[:, :-1], tokens

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        return self.dyck.loss(outputs, targets)


@dataclass(frozen=True)
class ContrastiveDyck:
    """:class:`TypedDyck` with the thesis's contrastive term (Sec. 3.6.3.2, Eq. 3.40) added to the loss: ``weight``
    times the squared distance between the logits on a prefix ``s`` and on ``p_r + s``, where ``p_r`` is ``r``
    nested pairs of brackets of uniform types and ``r`` uniform in ``1..D``, one per batch. The inputs pair each
    plain prefix with its prefixed one, ``(n, 2, L)``, both padded at the end to one length (a causal model's logits
    before the padding do not see it), for a model that reads pairs (:class:`~sandboxes.model.Paired`); the targets
    carry ``r`` as a first column."""

    task: TypedDyck
    weight: float

    def __post_init__(self) -> None:
        if self.weight < 0:
            raise ValueError(f"the contrastive weight is at least 0, got {self.weight}")

    def nested_pairs(self, r: int, generator: torch.Generator) -> Tensor:
        """``r`` open brackets of uniform types, then their closing brackets innermost first: ``(2 r,)`` tokens."""
        kinds = torch.randint(self.task.dyck.k, (r,), generator=generator)
        return torch.cat([2 * kinds, 2 * kinds.flip(0) + 1])

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        plain, tokens = self.task.sample(n, generator)
        D = self.task.dyck.depth
        r = int(torch.randint(1, D + 1, (1,), generator=generator))
        pairs = self.task.typed(self.nested_pairs(r, generator)[None])[:, 1:].expand(n, -1)
        prefixed = torch.cat([plain[:, :1], pairs, plain[:, 1:]], dim=1)
        pad = lambda x: F.pad(x, (0, plain.shape[1] + 2 * D - x.shape[1]), value=self.task.start)  # noqa: E731
        return torch.stack([pad(plain), pad(prefixed)], dim=1), torch.cat([tokens.new_full((n, 1), r), tokens], dim=1)

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        length = targets.shape[1] - 1
        plain = outputs[:, 0, :length]
        at = 2 * targets[:, :1] + torch.arange(length, device=targets.device)  # s's positions behind p_r
        shifted = outputs[:, 1].gather(1, at[..., None].expand(-1, -1, outputs.shape[-1]))
        contrast = (shifted - plain).pow(2).sum(dim=(1, 2)).mean()  # ||.||_F^2 over positions and brackets
        return self.task.loss(plain, targets[:, 1:]) + self.weight * contrast
