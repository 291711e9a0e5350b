"""First-order Markov chains: the binary ``(p, q)`` chain and the symmetric multi-state chain."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..trainer import next_token_loss


def check_probability(name: str, value: float) -> float:
    """Return ``value`` if it lies strictly inside (0, 1); otherwise raise a clear error."""
    if not 0.0 < float(value) < 1.0:
        raise ValueError(f"{name} must lie strictly between 0 and 1, got {value}")
    return float(value)


def check_kernel(kernel: np.ndarray) -> np.ndarray:
    """Return ``kernel`` as a float array if it is square and row-stochastic; otherwise raise."""
    kernel = np.asarray(kernel, dtype=float)
    if kernel.ndim != 2 or kernel.shape[0] != kernel.shape[1]:
        raise ValueError(f"a transition kernel must be a square matrix, got shape {kernel.shape}")
    if (kernel < 0).any():
        raise ValueError("a transition kernel has no negative entries")
    if not np.allclose(kernel.sum(axis=1), 1.0, atol=1e-9):
        raise ValueError(f"each row of a transition kernel must sum to 1, got {kernel.sum(axis=1)}")
    return kernel


def stationary_law(kernel: np.ndarray) -> np.ndarray:
    """The stationary distribution ``pi = pi P`` (left eigenvector for eigenvalue 1)."""
    kernel = check_kernel(kernel)
    values, vectors = np.linalg.eig(kernel.T)
    pi = np.real(vectors[:, np.argmin(np.abs(values - 1.0))])
    return pi / pi.sum()


def binary_kernel(p: float, q: float) -> np.ndarray:
    """``[[1-p, p], [q, 1-q]]``: ``p`` is the chance to leave 0, ``q`` the chance to leave 1."""
    p, q = check_probability("p", p), check_probability("q", q)
    return np.array([[1 - p, p], [q, 1 - q]])


def symmetric_kernel(n_states: int, p: float) -> np.ndarray:
    """Stay with probability ``1-p``, else jump uniformly to one of the other states."""
    if n_states < 2:
        raise ValueError(f"a chain needs at least 2 states, got {n_states}")
    p = check_probability("p", p)
    kernel = np.full((n_states, n_states), p / (n_states - 1))
    np.fill_diagonal(kernel, 1 - p)
    return kernel


@dataclass(frozen=True)
class MarkovChain:
    """Sequences of length ``length + 1`` from ``kernel``, started from its stationary law.

    As a training task, the input is the first ``length`` symbols and the target at each
    position is the next symbol.
    """

    kernel: np.ndarray
    length: int

    def __post_init__(self) -> None:
        check_kernel(self.kernel)
        if self.length < 1:
            raise ValueError(f"sequence length must be at least 1, got {self.length}")

    @classmethod
    def binary(cls, p: float, q: float, length: int) -> "MarkovChain":
        return cls(binary_kernel(p, q), length)

    @property
    def n_states(self) -> int:
        return self.kernel.shape[0]

    def sequences(self, n: int, generator: torch.Generator) -> Tensor:
        """``n`` chains of ``length + 1`` symbols, shape ``(n, length + 1)``, dtype long.

        The uniforms come from ``generator`` in one draw; the recursion runs in NumPy, whose
        per-step overhead on small arrays is a fraction of torch's.
        """
        uniform = torch.rand(n, self.length + 1, generator=generator, dtype=torch.float64).numpy()
        cumulative = np.cumsum(self.kernel, axis=1)[:, :-1]  # upper edges of all but the last state
        start = np.cumsum(stationary_law(self.kernel))[:-1]
        out = np.empty((n, self.length + 1), dtype=np.int64)
        out[:, 0] = (uniform[:, 0:1] >= start[None, :]).sum(axis=1)
        for t in range(1, self.length + 1):
            out[:, t] = (uniform[:, t : t + 1] >= cumulative[out[:, t - 1]]).sum(axis=1)
        return torch.from_numpy(out)

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        seq = self.sequences(n, generator)
        return seq[:, :-1], seq[:, 1:]

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        return next_token_loss(outputs, targets)
