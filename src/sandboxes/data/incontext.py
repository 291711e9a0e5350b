"""In-context Markov chains: every sequence draws its own kernel from a Dirichlet prior.

One class covers the three versions of the induction-heads chapter: the first-order chain (each
position's parent is the one before it), the causal graph (each position's parent is fixed by a
random tree) and the chain of order ``m`` (the ``m`` positions before). A position's *context* is
the joint state of its parents; each context has its own row of the sequence's kernel, drawn from
Dirichlet(alpha, ..., alpha). Positions without a full set of parents (the first ``m`` of an
order-``m`` chain, the tree's root) are uniform.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..losses import next_token_loss
from .markov import inverse_cdf


def chain_parents(length: int, order: int = 1) -> tuple[tuple[int, ...], ...]:
    """Parents of positions ``0..length`` in a chain of ``order``: the ``order`` positions before (none at the start)."""
    if order < 1:
        raise ValueError(f"a chain's order is at least 1, got {order}")
    return tuple(tuple(range(i - order, i)) if i >= order else () for i in range(length + 1))


def tree_parents(length: int, window: int, seed: int) -> tuple[tuple[int, ...], ...]:
    """A random tree on positions ``0..length``: position ``i >= 1`` has one parent drawn uniformly from the
    ``window`` positions before it (fewer near the start); position 0 is the root."""
    if window < 1:
        raise ValueError(f"a tree's parent window is at least 1, got {window}")
    rng = np.random.default_rng(seed)
    return ((),) + tuple((int(rng.integers(max(0, i - window), i)),) for i in range(1, length + 1))


@dataclass(frozen=True)
class InContextMarkov:
    """Sequences of ``len(parents)`` states over ``n_states`` symbols, each with its own Dirichlet(``alpha``) kernel.

    ``parents[i]`` are the positions whose joint state selects the row that draws position ``i``; a
    position with fewer parents than the others is uniform. As a training task the input is every
    symbol but the last and the target at each position is the next symbol.
    """

    n_states: int
    alpha: float
    parents: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        if self.n_states < 2:
            raise ValueError(f"a chain needs at least 2 states, got {self.n_states}")
        if not self.alpha > 0:
            raise ValueError(f"the Dirichlet concentration is positive, got {self.alpha}")
        if len(self.parents) < 2:
            raise ValueError("a sequence has at least two positions")
        for i, ps in enumerate(self.parents):
            if any(not 0 <= p < i for p in ps):
                raise ValueError(f"position {i}'s parents {ps} must come before it")

    @classmethod
    def chain(cls, n_states: int, alpha: float, length: int, order: int = 1) -> "InContextMarkov":
        """The order-``order`` chain of ``length + 1`` symbols."""
        return cls(n_states, alpha, chain_parents(length, order))

    @property
    def length(self) -> int:
        """Tokens a model reads (the last symbol is only a target)."""
        return len(self.parents) - 1

    @property
    def order(self) -> int:
        """Parents of a fully conditioned position."""
        return max(len(ps) for ps in self.parents)

    def kernels(self, n: int, generator: torch.Generator) -> np.ndarray:
        """``n`` kernels, shape ``(n, n_states ** order, n_states)``: each row a Dirichlet draw (normalised gammas)."""
        shape = (n, self.n_states ** self.order, self.n_states)
        gamma = torch._standard_gamma(torch.full(shape, float(self.alpha), dtype=torch.float64), generator=generator)
        return (gamma / gamma.sum(dim=-1, keepdim=True)).numpy()

    def contexts(self, seq: np.ndarray, position: int) -> np.ndarray:
        """The row index (base ``n_states`` over the parents' states) of ``position`` in each sequence of ``seq``."""
        index = np.zeros(seq.shape[0], dtype=np.int64)
        for p in self.parents[position]:
            index = index * self.n_states + seq[:, p]
        return index

    def sequences_and_kernels(self, n: int, generator: torch.Generator) -> tuple[Tensor, np.ndarray]:
        """``n`` sequences ``(n, length + 1)`` and the kernels that drew them."""
        kernels = self.kernels(n, generator)
        uniform = torch.rand(n, len(self.parents), generator=generator, dtype=torch.float64).numpy()
        full = self.order
        even = np.arange(1, self.n_states) / self.n_states
        seq = np.empty(uniform.shape, dtype=np.int64)
        rows = np.arange(n)
        for i, ps in enumerate(self.parents):
            if len(ps) < full:
                seq[:, i] = inverse_cdf(uniform[:, i], even)
            else:
                edges = np.cumsum(kernels[rows, self.contexts(seq, i)], axis=-1)[:, :-1]
                seq[:, i] = inverse_cdf(uniform[:, i], edges)
        return torch.from_numpy(seq), kernels

    def sequences(self, n: int, generator: torch.Generator) -> Tensor:
        """``n`` sequences of ``length + 1`` symbols, each from its own kernel."""
        return self.sequences_and_kernels(n, generator)[0]

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        seq = self.sequences(n, generator)
        return seq[:, :-1], seq[:, 1:]

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        return next_token_loss(outputs, targets)
