"""Bounded-depth Dyck prefixes (Wen et al. 2023, the thesis's Definition 12): k bracket types nested at most D deep,
drawn left to right with an open bracket at rate q, for next-token prediction."""

from __future__ import annotations

from dataclasses import dataclass

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
        """``n`` prefixes, ``(n, length)`` tokens, drawn from ``generator``."""
        tokens = torch.empty(n, self.length, dtype=torch.long)
        stack = torch.zeros(n, self.depth + 1, dtype=torch.long)
        top = torch.zeros(n, dtype=torch.long)
        rows = torch.arange(n)
        for t in range(self.length):
            coin = torch.rand(n, generator=generator)
            kind = torch.randint(self.k, (n,), generator=generator)
            opening = ((coin < self.q) | (top == 0)) & (top < self.depth)
            innermost = stack[rows, top]
            tokens[:, t] = torch.where(opening, 2 * kind, 2 * innermost + 1)
            top = torch.where(opening, top + 1, top - 1)
            stack[rows, top] = torch.where(opening, kind, stack[rows, top])
        return tokens

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Next-token pairs: the prefix without its last token, and each position's next token."""
        tokens = self.sequences(n, generator)
        return tokens[:, :-1], tokens[:, 1:]

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        """Cross-entropy of every next token (the thesis's experiments; its theory takes the squared error)."""
        return F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1))
