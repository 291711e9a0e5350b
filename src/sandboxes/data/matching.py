"""Sanford, Hsu and Telgarsky's pair and triple detection as training tasks: ``N`` tokens uniform on ``[0, M)``,
then one blank token (id ``M``, as their Match2 construction appends); the target at each of the ``N`` positions is
1 where the token has a partner (Match2: ``x_i + x_j = 0 mod M``) or two (Match3: ``x_i + x_j1 + x_j2 = 0 mod M``),
``j``, ``j1``, ``j2`` ranging over every position, ``i`` included, and the blank is not scored."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ..losses import IGNORE_INDEX, next_token_loss

TASKS = ("match2", "match3")  # pairs, triples
ROWS_TIMES_PAIRS = 2**21  # Match3's truth holds rows x N x M candidate partners at once


def balanced_M(task: str, N: int) -> int:
    """The M at which about half the positions are positive: a token of a uniform input has one of ``N`` partners
    with chance near ``1 - exp(-N / M)`` (Match2) and one of ``N^2 / 2`` partner pairs with chance near
    ``1 - exp(-N^2 / 2M)`` (Match3), so M is ``N / ln 2`` or ``N^2 / (2 ln 2)``, and at least ``N + 1`` (the Match3
    theorem's hypothesis)."""
    pairs = N if task == "match2" else N * N / 2
    return max(N + 1, round(pairs / math.log(2)))


def matches(tokens: Tensor, M: int, task: str) -> Tensor:
    """The task's truth at each of the ``(B, N)`` tokens, ``(B, N)`` booleans; Match3 a chunk of rows at a time."""
    wanted = (-tokens) % M  # what the partners must sum to, mod M
    if task == "match2":
        return (tokens[:, None, :] == wanted[:, :, None]).any(dim=2)
    rows = max(1, ROWS_TIMES_PAIRS // (tokens.shape[1] * M))
    return torch.cat([_triples(tokens[i : i + rows], wanted[i : i + rows], M) for i in range(0, len(tokens), rows)])


def _triples(tokens: Tensor, wanted: Tensor, M: int) -> Tensor:
    """Match3 of a chunk: a pair (a, b) sums to ``wanted_i`` iff some present a has ``wanted_i - a`` present."""
    present = torch.zeros(len(tokens), M, dtype=torch.bool, device=tokens.device)
    present.scatter_(1, tokens, True)
    partner = (wanted[:, :, None] - torch.arange(M, device=tokens.device)) % M  # (B, N, a): b for each a
    expanded = present[:, None, :].expand(-1, tokens.shape[1], -1)
    return (expanded & torch.gather(expanded, 2, partner)).any(dim=2)


@dataclass(frozen=True)
class Matching:
    """Inputs of ``N`` tokens of ``[0, M)`` and a blank; targets 0 or 1 at the tokens, not scored at the blank."""

    task: str
    N: int
    M: int

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {self.task!r}")
        if self.N < 1 or self.M < 2:
            raise ValueError(f"need N >= 1 and M >= 2, got N={self.N}, M={self.M}")

    @property
    def vocabulary(self) -> int:
        """The tokens and the blank."""
        return self.M + 1

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """``n`` inputs with the blank appended, ``(n, N + 1)``, and their targets."""
        tokens = torch.randint(self.M, (n, self.N), generator=generator)
        targets = matches(tokens, self.M, self.task).long()
        blank = torch.full((n, 1), self.M)
        return torch.cat([tokens, blank], dim=1), torch.cat([targets, torch.full((n, 1), IGNORE_INDEX)], dim=1)

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        """Cross-entropy of the two-way logits at the scored positions."""
        return next_token_loss(outputs, targets)
