"""Hidden Markov models as data (Liu, Hsu, Ravikumar, Risteski: masked prediction and HMM identifiability).

Two families share a hidden chain ``h_1 -> h_2 -> ...`` on ``k`` states with transition
``T[i, j] = P(h_{t+1} = i | h_t = j)`` (doubly stochastic, started from its uniform stationary
law): the discrete HMM emits one of ``d`` symbols with ``O[x, h] = P(x_t = x | h_t = h)``; the
G-HMM emits ``x_t ~ N(mu_{h_t}, I_d)`` with unit-norm means, the columns of ``M``. The checks
name the paper's assumption that fails. :class:`MaskedPrediction` is the trainer's task of
predicting one-hot tokens (or their tensor product) from another token, with squared loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .markov import chain_states, inverse_cdf

ROUND_OFF = 1e-9  # a probability sum counts as 1, and an entry as non-negative, within this float64 round-off


def _check_doubly_stochastic(transition: np.ndarray) -> np.ndarray:
    """Assumption 5: ``T`` is square, non-negative, and its rows and columns sum to 1."""
    transition = np.asarray(transition, dtype=float)
    if transition.ndim != 2 or transition.shape[0] != transition.shape[1]:
        raise ValueError(f"the transition matrix T must be square, got shape {transition.shape}")
    if (transition < -ROUND_OFF).any():
        raise ValueError("Assumption 5 (doubly stochastic T) fails: T has a negative entry")
    for axis, name in ((0, "column"), (1, "row")):
        sums = transition.sum(axis=axis)
        if not np.allclose(sums, 1.0, rtol=0, atol=ROUND_OFF):
            raise ValueError(f"Assumption 5 (doubly stochastic T) fails: {name} sums of T are {sums}")
    return transition


def check_transition(transition: np.ndarray, assumption: str = "Assumption 7") -> np.ndarray:
    """Return ``T`` as a float array if it is doubly stochastic with full rank; otherwise say which fails."""
    transition = _check_doubly_stochastic(transition)
    _check_rank(transition, "T", transition.shape[0], assumption)
    return transition


def _check_rank(matrix: np.ndarray, name: str, k: int, assumption: str) -> None:
    rank = np.linalg.matrix_rank(matrix)
    if rank != k:
        raise ValueError(f"{assumption} (rank {name} = k = {k}) fails: rank {name} = {rank}")


def _check_shapes(observation: np.ndarray, transition: np.ndarray, name: str) -> None:
    if observation.ndim != 2 or observation.shape[1] != transition.shape[0]:
        raise ValueError(f"{name} must be d x k with k = {transition.shape[0]} hidden states, got {observation.shape}")
    d, k = observation.shape
    if d < k:
        raise ValueError(f"the assumptions need d >= k, got d = {d} symbols for k = {k} hidden states")


def check_hmm(emission: np.ndarray, transition: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(O, T)`` as float arrays if they meet Assumptions 5-7; otherwise name the one that fails."""
    transition = check_transition(transition)
    emission = np.asarray(emission, dtype=float)
    _check_shapes(emission, transition, "the emission matrix O")
    if (emission < -ROUND_OFF).any():
        raise ValueError("the emission matrix O has a negative entry")
    sums = emission.sum(axis=0)
    if not np.allclose(sums, 1.0, rtol=0, atol=ROUND_OFF):
        raise ValueError(f"each column of O is a distribution over the d symbols, got column sums {sums}")
    empty = np.flatnonzero(emission.sum(axis=1) == 0)
    if empty.size:
        raise ValueError(f"Assumption 6 (no zero row in O) fails: symbol(s) {empty.tolist()} are never emitted")
    _check_rank(emission, "O", transition.shape[0], "Assumption 7")
    return emission, transition


def check_ghmm(means: np.ndarray, transition: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(M, T)`` as float arrays if they meet Assumptions 5, 8 and 9; otherwise name the one that fails."""
    transition = check_transition(transition, "Assumption 8")
    means = np.asarray(means, dtype=float)
    _check_shapes(means, transition, "the mean matrix M")
    norms = np.linalg.norm(means, axis=0)
    if not np.allclose(norms, 1.0, rtol=0, atol=ROUND_OFF):
        raise ValueError(f"Assumption 9 (unit-norm means) fails: column norms of M are {norms}")
    _check_rank(means, "M", transition.shape[0], "Assumption 8")
    return means, transition


def _hidden_chain(transition: np.ndarray, uniform: np.ndarray) -> np.ndarray:
    """States ``(n, length)`` from one uniform per step: ``h_1`` uniform, then ``h_{t+1} ~ T[:, h_t]``."""
    k = transition.shape[0]
    start = np.cumsum(np.full(k, 1.0 / k))[:-1]
    edges = np.cumsum(transition.T, axis=1)[:, :-1]  # row j: upper edges of the law T[:, j]
    return chain_states(start[None], edges[None], uniform[None])[0]


@dataclass(frozen=True, eq=False)
class HMM:
    """A discrete HMM ``(O, T)`` meeting Assumptions 5-7, with a sequence sampler."""

    emission: np.ndarray  # O, d x k
    transition: np.ndarray  # T, k x k

    def __post_init__(self) -> None:
        emission, transition = check_hmm(self.emission, self.transition)
        object.__setattr__(self, "emission", emission)
        object.__setattr__(self, "transition", transition)

    @property
    def d(self) -> int:
        return self.emission.shape[0]

    @property
    def k(self) -> int:
        return self.emission.shape[1]

    def sequences(self, n: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """``n`` token sequences and their hidden states, both ``(n, length)`` long tensors."""
        uniform = torch.rand(n, 2 * length, generator=generator, dtype=torch.float64).numpy()
        states = _hidden_chain(self.transition, uniform[:, :length])
        edges = np.cumsum(self.emission.T, axis=1)[:, :-1]  # row h: upper edges of the law O[:, h]
        tokens = inverse_cdf(uniform[:, length:], edges[states])
        return torch.from_numpy(tokens), torch.from_numpy(states)


@dataclass(frozen=True, eq=False)
class GaussianHMM:
    """A G-HMM ``(M, T)``: ``x_t ~ N(mu_{h_t}, I_d)``, meeting Assumptions 5, 8 and 9."""

    means: np.ndarray  # M, d x k, unit columns
    transition: np.ndarray  # T, k x k

    def __post_init__(self) -> None:
        means, transition = check_ghmm(self.means, self.transition)
        object.__setattr__(self, "means", means)
        object.__setattr__(self, "transition", transition)

    def sequences(self, n: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """``n`` sequences ``(n, length, d)`` of float64 observations and their ``(n, length)`` states."""
        uniform = torch.rand(n, length, generator=generator, dtype=torch.float64).numpy()
        states = torch.from_numpy(_hidden_chain(self.transition, uniform))
        noise = torch.randn(n, length, self.means.shape[0], generator=generator, dtype=torch.float64)
        return torch.from_numpy(self.means.T)[states] + noise, states


def _positions(given: int, targets: tuple[int, ...]) -> None:
    if len(targets) not in (1, 2):
        raise ValueError(f"predict one token or the tensor product of two, got targets {targets}")
    positions = (given, *targets)
    if min(positions) < 1 or len(set(positions)) != len(positions):
        raise ValueError(f"positions start at 1 and must be distinct, got given={given}, targets={targets}")


@dataclass(frozen=True, eq=False)
class MaskedPrediction:
    """The task ``x_t2 (x) ... | x_t1``: one-hot ``x_given`` in, one-hot of the targets' tensor product out.

    The optimal predictor under squared loss is the conditional expectation that
    ``sandboxes.theory.hmm`` writes in closed form; its output index is ``x_{t2} * d + x_{t3}``.
    """

    hmm: HMM
    given: int
    targets: tuple[int, ...]

    def __post_init__(self) -> None:
        _positions(self.given, self.targets)

    @property
    def output_size(self) -> int:
        return self.hmm.d ** len(self.targets)

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        tokens, _ = self.hmm.sequences(n, max(self.given, *self.targets), generator)
        index = torch.zeros(n, dtype=torch.long)
        for t in self.targets:
            index = index * self.hmm.d + tokens[:, t - 1]
        inputs = torch.nn.functional.one_hot(tokens[:, self.given - 1], self.hmm.d).float()
        return inputs, torch.nn.functional.one_hot(index, self.output_size).float()

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        """Squared error summed over the output coordinates, averaged over the batch."""
        return ((outputs - targets) ** 2).sum(dim=-1).mean()


@dataclass(frozen=True, eq=False)
class FiniteSample:
    """``size`` pairs of a task drawn once from ``seed``; training draws minibatches from them with replacement.

    The trainer samples fresh data at every step; wrapping a task in a finite sample makes the
    number of samples a learner sees exactly ``size``, whatever the number of steps.
    """

    task: MaskedPrediction
    size: int
    seed: int

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"a finite sample needs at least one pair, got size {self.size}")
        inputs, targets = self.task.sample(self.size, torch.Generator().manual_seed(self.seed))
        object.__setattr__(self, "inputs", inputs)
        object.__setattr__(self, "targets", targets)

    def draw(self, n: int, generator: torch.Generator) -> Tensor:
        """Which of the stored pairs ``n`` draws with replacement pick."""
        return torch.randint(self.size, (n,), generator=generator)

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        index = self.draw(n, generator)
        return self.inputs[index], self.targets[index]

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        return self.task.loss(outputs, targets)


@dataclass(frozen=True, eq=False)
class PerSymbol:
    """A finite sample's batches summarised per input symbol, for the squared loss.

    A model maps each input on its own, so a batch's mean squared loss depends on it only through its ``d``
    outputs at the one-hot inputs: sum_i w_i |f(e_i) - ybar_i|^2 + r_i, with w_i the share of the batch whose
    input is symbol i, ybar_i their mean (one-hot) target and r_i their targets' spread about it. The same draws
    give the same loss and gradient as the sample itself (to float rounding), at the cost of d inputs instead of n.
    """

    pairs: FiniteSample

    def __post_init__(self) -> None:
        inputs, targets = self.pairs.inputs, self.pairs.targets
        if not (inputs.sum(dim=1).eq(1).all() and targets.sum(dim=1).eq(1).all()):
            raise ValueError("a per-symbol summary needs one-hot inputs and targets")
        object.__setattr__(self, "codes", inputs.argmax(dim=1) * targets.shape[1] + targets.argmax(dim=1))

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """The d one-hot inputs, and per symbol (w_i, ybar_i, r_i) of the ``n`` pairs the sample draws."""
        d, outputs = self.pairs.inputs.shape[1], self.pairs.targets.shape[1]
        drawn = self.codes[self.pairs.draw(n, generator)]
        joint = torch.bincount(drawn, minlength=d * outputs).view(d, outputs).double()
        counts = joint.sum(dim=1)
        mean = joint / counts.clamp(min=1)[:, None]
        spread = counts * (1 - (mean**2).sum(dim=1)) / n
        return torch.eye(d), torch.cat([(counts / n)[:, None], mean, spread[:, None]], dim=1).float()

    def batch_rows(self, n: int) -> int:
        """Rows a batch of ``n`` pairs reaches the model as: one per input symbol, whatever ``n``."""
        return self.pairs.inputs.shape[1]

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        """The batch's mean squared error, summed over the output coordinates, from its summary (a sum over its
        rows, so it cannot be read in chunks of rows)."""
        share, mean, spread = targets[:, 0], targets[:, 1:-1], targets[:, -1]
        return (share * ((outputs - mean) ** 2).sum(dim=-1) + spread).sum()
