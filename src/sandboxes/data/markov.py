"""First-order Markov chains: the binary ``(p, q)`` chain and the symmetric multi-state chain."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch
from torch import Tensor

from ..losses import next_token_loss


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


def inverse_cdf(uniform: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Draws by inverting a law: the number of its cumulative edges (all but the last) each uniform passes.

    ``uniform`` has shape ``S`` and ``edges`` shape ``S + (n_values - 1,)``: one law per draw.
    """
    return (uniform[..., None] >= edges).sum(axis=-1)


def chain_states(start: np.ndarray, edges: np.ndarray, uniform: np.ndarray) -> np.ndarray:
    """Chains ``(K, n, L)`` driven by ``uniform`` ``(K, n, L)``, member ``k`` with edges ``start[k]``, ``edges[k]``.

    The first state's law has the cumulative edges ``start`` ``(K, S - 1)``; each later state's is
    the row of ``edges`` ``(K, S, S - 1)`` of the state before. The one Markov-chain sampler of the
    package (HMMs draw their hidden chain with it). The state each uniform gives after each possible
    state before is tabulated in one vectorised pass, so the recursion over time is one flat
    ``take`` per step (a fifth to a half of the time of drawing at every step at T = 1024).
    """
    members, rows, length = uniform.shape
    n_states = edges.shape[1]
    # after[t - 1, r * S + s]: the state at t of row r (members' rows flattened) when its state at t - 1 is s
    later = np.ascontiguousarray(uniform[:, :, 1:].reshape(members * rows, length - 1).T)
    row_edges = np.repeat(edges, rows, axis=0)  # (K * n, S, S - 1)
    after = inverse_cdf(later[:, :, None], row_edges).reshape(length - 1, members * rows * n_states)
    offset = np.arange(members * rows) * n_states
    out = np.empty((length, members * rows), dtype=np.int64)
    out[0] = inverse_cdf(uniform[:, :, 0], start[:, None, :]).reshape(-1)
    for t in range(1, length):
        out[t] = after[t - 1].take(offset + out[t - 1])
    return out.T.reshape(members, rows, length)


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
    def binary(cls, p: float, q: float, length: int) -> MarkovChain:
        return cls(binary_kernel(p, q), length)

    @property
    def n_states(self) -> int:
        return self.kernel.shape[0]

    @cached_property
    def _edges(self) -> tuple[np.ndarray, np.ndarray]:
        """Upper edges of all but the last state: of the stationary law, and of each row of the kernel."""
        return np.cumsum(stationary_law(self.kernel))[:-1], np.cumsum(self.kernel, axis=1)[:, :-1]

    def _uniforms(self, n: int, generator: torch.Generator) -> np.ndarray:
        """The ``(n, length + 1)`` uniforms that drive ``n`` chains, in one draw from ``generator``."""
        return torch.rand(n, self.length + 1, generator=generator, dtype=torch.float64).numpy()

    def sequences(self, n: int, generator: torch.Generator) -> Tensor:
        """``n`` chains of ``length + 1`` symbols, shape ``(n, length + 1)``, dtype long."""
        start, edges = self._edges
        return torch.from_numpy(chain_states(start[None], edges[None], self._uniforms(n, generator)[None])[0])

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        seq = self.sequences(n, generator)
        return seq[:, :-1], seq[:, 1:]

    @staticmethod
    def sample_members(
        chains: Sequence[MarkovChain], n: int, generators: Sequence[torch.Generator]
    ) -> tuple[Tensor, Tensor]:
        """``sample`` of every chain with its own generator, stacked ``(K, n, length)``, in one recursion.

        Member ``k`` gets exactly ``chains[k].sample(n, generators[k])``; one recursion over all
        members' rows pays NumPy's per-step overhead once instead of K times (the trainer's hot path).
        """
        if len({(c.length, c.n_states) for c in chains}) != 1:
            raise ValueError("chains sampled together must share their length and number of states")
        uniform = np.stack([c._uniforms(n, g) for c, g in zip(chains, generators)])
        start, edges = (np.stack(part) for part in zip(*(c._edges for c in chains)))
        seq = torch.from_numpy(chain_states(start, edges, uniform))
        return seq[:, :, :-1].contiguous(), seq[:, :, 1:].contiguous()

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        return next_token_loss(outputs, targets)
