"""Sanford, Hsu and Telgarsky's q-sparse averaging as a training task: ``N`` positions, each with a value ``z_i``
uniform in the unit ball of ``R^dim`` and a set ``y_i`` of ``q`` distinct positions drawn uniformly; the target at
position ``i`` is ``qSA(X)_i``, the mean of the values ``y_i`` names. Each position reads ``(z_i; y_i as a 0/1
vector of length N; i one-hot)``, the input their self-attention unit embeds, and the loss is the squared error
summed over the ``dim`` coordinates, averaged over positions."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class SparseAveraging:
    """qSA on ``N`` positions, ``q`` named per position, values in ``R^dim``."""

    N: int
    q: int
    dim: int

    def __post_init__(self) -> None:
        if not 1 <= self.q <= self.N:
            raise ValueError(f"a position names q distinct positions of N: 1 <= q <= N, got q = {self.q}, N = {self.N}")
        if self.dim < 1:
            raise ValueError(f"the values have at least one coordinate, got dim = {self.dim}")

    @property
    def in_dim(self) -> int:
        """Features a position reads: its value, its set and its position."""
        return self.dim + 2 * self.N

    def draw(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """``n`` inputs' values ``(n, N, dim)`` and sets ``(n, N, q)``."""
        z = torch.randn(n, self.N, self.dim, generator=generator, dtype=torch.float64)
        radius = torch.rand(n, self.N, 1, generator=generator, dtype=torch.float64) ** (1 / self.dim)
        sets = torch.rand(n, self.N, self.N, generator=generator).argsort(dim=-1)[..., : self.q]
        return z * radius / z.norm(dim=-1, keepdim=True), sets

    def encode(self, z: Tensor, sets: Tensor) -> tuple[Tensor, Tensor]:
        """The positions' features ``(n, N, in_dim)`` and the targets ``qSA(X)`` ``(n, N, dim)``, float32."""
        named = torch.zeros(*sets.shape[:2], self.N, dtype=z.dtype).scatter_(-1, sets, 1.0)
        position = torch.eye(self.N, dtype=z.dtype).expand(len(z), -1, -1)
        return torch.cat([z, named, position], dim=-1).float(), (named @ z / self.q).float()

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        return self.encode(*self.draw(n, generator))

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        return ((outputs - targets) ** 2).sum(dim=-1).mean()
