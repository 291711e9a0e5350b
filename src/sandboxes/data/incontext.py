"""In-context Markov chains: every sequence draws its own kernel from a prior.

One class covers the three versions of the induction-heads chapter: the first-order chain (each
position's parent is the one before it), the causal graph (each position's parent is fixed by a
random tree) and the chain of order ``m`` (the ``m`` positions before). A position's *context* is
the joint state of its parents; each context has its own row of the sequence's kernel, drawn from
Dirichlet(alpha, ..., alpha), or, for the restricted prior that tests the out-of-support corollary,
a noisy permutation ``lambda e_sigma(c) + (1 - lambda) / k`` with ``sigma`` and ``lambda ~ U[0, 1]``
drawn per sequence. A floor ``gamma`` mixes every row with the uniform one, so that each entry is at
least ``gamma / k`` (the hypothesis of Nichani et al.'s theorem). Positions without a full set of
parents (the first ``m`` of an order-``m`` chain, the tree's root) are uniform.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..losses import IGNORE_INDEX, next_token_loss
from .markov import inverse_cdf
from .together import sample_together


def chain_parents(length: int, order: int = 1) -> tuple[tuple[int, ...], ...]:
    """Parents of positions ``0..length`` in a chain of ``order``: the ``order`` positions before (none at the start)."""  # noqa: E501
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


def random_parents(length: int, seed: int) -> tuple[tuple[int, ...], ...]:
    """Nichani et al.'s random graph on positions ``0..length``: position ``i >= 1`` has no parent (a root) or one
    parent, drawn uniformly from the ``i + 1`` choices (none, or any position before it); position 0 is a root."""
    rng = np.random.default_rng(seed)
    drawn = (int(rng.integers(-1, i)) for i in range(1, length + 1))
    return ((),) + tuple((p,) if p >= 0 else () for p in drawn)


def with_test_token(body: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], ...]:
    """The graph ``body`` followed by Nichani et al.'s test token: a root drawn uniformly after the body, whose
    child is the one target their loss scores."""
    return body + ((), (len(body),))


ROWS = ("dirichlet", "permutation")
SCORED = ("every", "parent_query")


@dataclass(frozen=True)
class InContextMarkov:
    """Sequences of ``len(parents)`` states over ``n_states`` symbols, each with its own kernel from the prior.

    ``parents[i]`` are the positions whose joint state selects the row that draws position ``i``; a
    position with fewer parents than the others is uniform. ``rows`` names the prior of the kernel
    (Dirichlet(``alpha``) rows, or a noisy permutation for a first-order graph) and ``floor`` its mix
    with the uniform row. As a training task the input is every symbol but the last and the target at
    each position is the next symbol.
    """

    n_states: int
    alpha: float
    parents: tuple[tuple[int, ...], ...]
    rows: str = "dirichlet"
    floor: float = 0.0
    scored: str = "every"  # which targets training scores: "every" one, or "parent_query": those whose only
    # parent is the position that reads them (as Nichani et al. score the token after the last, a child of it)

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
        if self.rows not in ROWS:
            raise ValueError(f"the kernel rows are one of {', '.join(ROWS)}, got {self.rows!r}")
        if self.rows == "permutation" and self.order != 1:
            raise ValueError(f"noisy permutations are kernels of a first-order graph, got order {self.order}")
        if not 0.0 <= self.floor <= 1.0:
            raise ValueError(f"the uniform floor is in [0, 1], got {self.floor}")
        if self.scored not in SCORED:
            raise ValueError(f"the scored targets are one of {', '.join(SCORED)}, got {self.scored!r}")

    @classmethod
    def chain(cls, n_states: int, alpha: float, length: int, order: int = 1) -> InContextMarkov:
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
        """``n`` kernels, shape ``(n, n_states ** order, n_states)``, drawn from the prior and mixed with the floor."""
        k = self.n_states
        if self.rows == "dirichlet":
            shape = (n, k**self.order, k)
            gamma = torch._standard_gamma(
                torch.full(shape, float(self.alpha), dtype=torch.float64), generator=generator
            )
            rows = (gamma / gamma.sum(dim=-1, keepdim=True)).numpy()
        else:
            sigma = torch.argsort(torch.rand(n, k, generator=generator), dim=-1).numpy()
            strength = torch.rand(n, 1, 1, generator=generator, dtype=torch.float64).numpy()
            rows = strength * np.eye(k)[sigma] + (1 - strength) / k
        return (1 - self.floor) * rows + self.floor / k

    def contexts(self, seq: np.ndarray, position: int) -> np.ndarray:
        """The row index (base ``n_states`` over the parents' states) of ``position`` in each sequence of ``seq``."""
        index = np.zeros(seq.shape[0], dtype=np.int64)
        for p in self.parents[position]:
            index = index * self.n_states + seq[:, p]
        return index

    def sequences_and_kernels(self, n: int, generator: torch.Generator) -> tuple[Tensor, np.ndarray]:
        """``n`` sequences ``(n, length + 1)`` and the kernels that drew them."""
        kernels, uniform = self._draws(n, generator)
        return torch.from_numpy(self._states(kernels, uniform)), kernels

    def _draws(self, n: int, generator: torch.Generator) -> tuple[np.ndarray, np.ndarray]:
        """What ``n`` sequences draw from ``generator``: their kernels, then their uniforms ``(n, length + 1)``."""
        kernels = self.kernels(n, generator)
        return kernels, torch.rand(n, len(self.parents), generator=generator, dtype=torch.float64).numpy()

    def _states(self, kernels: np.ndarray, uniform: np.ndarray) -> np.ndarray:
        """The sequences that ``uniform`` ``(n, length + 1)`` draws, row by row, from each row's own kernel."""
        n = len(uniform)
        even = np.arange(1, self.n_states) / self.n_states
        # every row's cumulative edges at once (cumsum adds in order along a row, so the same numbers as row by row)
        edges = np.cumsum(kernels, axis=-1)[..., :-1].reshape(n * kernels.shape[1], -1)
        first = np.arange(n) * kernels.shape[1]  # the flat index of each sequence's first row
        seq, order = np.empty(uniform.shape, dtype=np.int64), self.order
        for i, ps in enumerate(self.parents):
            if len(ps) < order:
                seq[:, i] = inverse_cdf(uniform[:, i], even)
            else:
                seq[:, i] = inverse_cdf(uniform[:, i], edges[first + self.contexts(seq, i)])
        return seq

    def sequences(self, n: int, generator: torch.Generator) -> Tensor:
        """``n`` sequences of ``length + 1`` symbols, each from its own kernel."""
        return self.sequences_and_kernels(n, generator)[0]

    def parent_queries(self) -> Tensor:
        """The input positions ``t`` whose target's only parent is ``t`` itself (every one in a first-order chain)."""
        return torch.tensor([self.parents[t + 1] == (t,) for t in range(self.length)])

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        return self._pairs(self.sequences(n, generator))

    def _pairs(self, seq: Tensor) -> tuple[Tensor, Tensor]:
        """The inputs and scored targets of sequences ``(..., length + 1)``."""
        targets = seq[..., 1:]
        if self.scored == "parent_query":
            targets = targets.masked_fill(~self.parent_queries(), IGNORE_INDEX)
        return seq[..., :-1], targets

    @staticmethod
    def sample_members(
        tasks: Sequence[InContextMarkov], n: int, generators: Sequence[torch.Generator]
    ) -> tuple[Tensor, Tensor]:
        """``sample`` of every task with its own generator, stacked ``(K, n, length)``, one loop over positions for
        all members of one task (:func:`~sandboxes.data.together.sample_together`)."""
        task = tasks[0]
        return sample_together(
            tasks,
            n,
            generators,
            lambda g: task._draws(n, g),
            lambda *d: task._pairs(torch.from_numpy(task._states(*d))),
        )

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        return next_token_loss(outputs, targets)


@dataclass(frozen=True)
class LastTokenTask:
    """Nichani et al.'s training task: read a sequence of ``chain`` that ends in a test token (a uniform root), and
    predict the test token's child; the target is the law of that child, the kernel's row of the test token (a soft
    label, as their code scores it), and the loss is the cross-entropy of the last position's output against it."""

    chain: InContextMarkov

    def __post_init__(self) -> None:
        test = self.chain.length - 1  # the last position read; the symbol after it is the target
        if self.chain.parents[test] != () or self.chain.parents[test + 1] != (test,):
            raise ValueError("the chain must end in a test token: a root whose child is the last symbol")

    def sequences_and_laws(self, n: int, generator: torch.Generator) -> tuple[Tensor, np.ndarray]:
        """``n`` sequences ``(n, length + 1)`` and each one's law of the test token's child ``(n, k)``, in float64."""
        seq, kernels = self.chain.sequences_and_kernels(n, generator)
        return seq, kernels[np.arange(n), self.chain.contexts(seq.numpy(), self.chain.length)]

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        seq, law = self.sequences_and_laws(n, generator)
        return seq[:, :-1], torch.from_numpy(law).float()

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        return -(targets * torch.log_softmax(outputs[..., -1, :], dim=-1)).sum(dim=-1).mean()
