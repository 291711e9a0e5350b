"""Memory-recall probes (Bietti et al. 2023): how far a weight matrix stores a given set of associations.

A matrix ``W`` stores the association ``i -> target(i)`` when, scored against every candidate, the
target scores highest. The probe ``R`` is the share of associations recalled: 1 for a matrix that
holds them all, about 1 / (candidates) for a random one.
"""

from __future__ import annotations

import torch
from torch import Tensor


def recall_share(scores: Tensor, targets: Tensor) -> float:
    """Share of the rows of ``scores`` (one per association, one column per candidate) whose target scores above
    every other candidate (a tie recalls nothing); ``-inf`` rules a candidate out."""
    rows = torch.arange(len(targets))
    target = scores[rows, targets]
    others = scores.clone()
    others[rows, targets] = -float("inf")
    return float((target > others.max(dim=-1).values).double().mean())


def bilinear_scores(left: Tensor, matrix: Tensor, right: Tensor) -> Tensor:
    """``left_i^T W right_j`` for every row ``i`` of ``left`` and row ``j`` of ``right``: the scores of a memory."""
    return left @ matrix @ right.T


def causal(scores: Tensor) -> Tensor:
    """``scores`` of query position ``t`` (row) against key position ``s`` (column) with the keys after ``t`` ruled
    out, as a causal attention rules them out."""
    future = torch.triu(torch.ones_like(scores, dtype=torch.bool), diagonal=1)
    return scores.masked_fill(future, -float("inf"))
