"""Bietti et al.'s trigger task: a global bigram language in which each of a few fixed *trigger* tokens
is always followed, within one sequence, by that sequence's own *output* token.

Every sequence draws one output per trigger, uniformly among the tokens that are not triggers;
then ``z_1`` is uniform and ``z_{t+1}`` is the output of ``z_t`` when ``z_t`` is a trigger, else a draw
from the global bigram's row of ``z_t``. The bigram (Dirichlet rows, whose base measure may fall as a
power of the rank, so that a few tokens are frequent) and the triggers (uniform tokens, or the bigram's
most frequent ones, as Bietti et al. fix them) are fixed by ``seed``, the same for every sequence, as the
paper's character-level bigram is; or (``per_sequence``, their code's default) each sequence draws its own
triggers from the bigram's stationary law, without replacement, so that no token is a trigger in every sequence.
Where a trigger
comes back, its output has been seen before in the sequence: predicting it is in-context recall. Training may
score every target, or (``scored="recall"``, as Bietti et al. train their simplified model) only those recalls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch
from torch import Tensor

from ..losses import IGNORE_INDEX, next_token_loss, scored_token_loss
from .markov import inverse_cdf
from .together import sample_together

TRIGGER_CHOICES = ("uniform", "frequent")


def stationary(kernel: np.ndarray) -> np.ndarray:
    """The stationary law of a row-stochastic ``kernel``: its left eigenvector of eigenvalue 1, summing to 1."""
    values, vectors = np.linalg.eig(kernel.T)
    law = np.real(vectors[:, np.argmin(np.abs(values - 1))])
    return law / law.sum()


@dataclass(frozen=True)
class TriggerTask:
    """Sequences of ``length + 1`` tokens over ``n_tokens``, with ``n_triggers`` triggers; as a training
    task the input is every token but the last and the target at each position is the next token."""

    n_tokens: int
    n_triggers: int
    length: int
    concentration: float
    seed: int
    scored: str = "every"  # which targets training scores: "every" one, or "recall": a trigger's output where the
    # trigger came earlier in the sequence
    zipf: float = 0.0  # the bigram rows' Dirichlet base measure falls as rank^-zipf (0: flat), so that a few tokens
    # are frequent, as a language's characters are
    choice: str = "uniform"  # the triggers: "uniform" tokens, or the "frequent" ones of the bigram (Bietti et al.)
    per_sequence: bool = False  # each sequence draws its own triggers from the bigram's stationary law, without
    # replacement (Bietti et al.'s code's default); ``choice`` then plays no part
    noise: float = 0.0  # Chen, Bruna and Bietti's noisy recall: a trigger is followed by one fixed noise token (the
    # bigram's rarest token that is not a trigger, as their '!' is a rare character; never an output) with this
    # probability, else by its output

    def __post_init__(self) -> None:
        if self.choice not in TRIGGER_CHOICES:
            raise ValueError(f"the triggers are chosen {' or '.join(TRIGGER_CHOICES)}, got {self.choice!r}")
        if self.zipf < 0:
            raise ValueError(f"the Zipf exponent of the bigram is at least 0, got {self.zipf}")
        if self.scored not in ("every", "recall"):
            raise ValueError(f"the scored targets are 'every' or 'recall', got {self.scored!r}")
        if not 1 <= self.n_triggers <= self.n_tokens - 2:
            raise ValueError(
                f"the triggers leave at least two tokens for outputs: 1 <= n_triggers <= n_tokens - 2, "
                f"got {self.n_triggers} triggers of {self.n_tokens} tokens"
            )
        if self.length < 2:
            raise ValueError(f"a sequence reads at least 2 tokens, got length {self.length}")
        if not self.concentration > 0:
            raise ValueError(f"the bigram rows' Dirichlet concentration is positive, got {self.concentration}")
        if not 0 <= self.noise < 1:
            raise ValueError(f"the noise token's probability after a trigger is in [0, 1), got {self.noise}")
        if self.noise and (self.per_sequence or self.n_triggers > self.n_tokens - 3):
            raise ValueError(
                "a noise token needs the same triggers in every sequence and leaves two outputs beside it: "
                f"n_triggers <= n_tokens - 3, got {self.n_triggers} of {self.n_tokens}"
            )

    @cached_property
    def _fixed(self) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng([self.seed, 7])
        base = np.arange(1, self.n_tokens + 1, dtype=float) ** -self.zipf
        bigram = rng.dirichlet(self.concentration * self.n_tokens * base / base.sum(), size=self.n_tokens)
        uniform = rng.choice(self.n_tokens, self.n_triggers, replace=False)
        if self.choice == "frequent":
            return bigram, np.sort(np.argsort(-stationary(bigram), kind="stable")[: self.n_triggers])
        return bigram, np.sort(uniform)

    @property
    def bigram(self) -> np.ndarray:
        """The global bigram ``(n_tokens, n_tokens)``: row ``i`` is the law of the token after a non-trigger ``i``."""
        return self._fixed[0]

    @property
    def triggers(self) -> np.ndarray:
        """The trigger tokens, sorted, where every sequence has the same (read a sequence's own from
        :meth:`draw` where each draws its own)."""
        if self.per_sequence:
            raise ValueError("each sequence draws its own triggers: read them from draw()")
        return self._fixed[1]

    @property
    def candidates(self) -> np.ndarray:
        """The tokens that may be a trigger: the triggers, or every token the stationary law gives weight to."""
        return np.flatnonzero(stationary(self.bigram) > 0) if self.per_sequence else self.triggers

    @cached_property
    def noise_token(self) -> int | None:
        """The token that follows a trigger with probability ``noise``: the rarest under the bigram's stationary law
        that is not a trigger, the smallest such on a tie (none without noise)."""
        if not self.noise:
            return None
        others = np.setdiff1d(np.arange(self.n_tokens), self.triggers)
        return int(others[np.argmin(stationary(self.bigram)[others])])

    @property
    def outputs_possible(self) -> np.ndarray:
        """The tokens an output may be: every token that is not a trigger (in some sequence, where each draws its
        own) nor the noise token."""
        if self.per_sequence:
            return np.arange(self.n_tokens)
        return np.setdiff1d(np.arange(self.n_tokens), [*self.triggers, *([self.noise_token] if self.noise else [])])

    @property
    def chance(self) -> float:
        """The chance of guessing a sequence's output for a trigger without reading it: one of the tokens that are
        not that sequence's triggers (nor the noise token)."""
        return 1.0 / (self.n_tokens - self.n_triggers - (1 if self.noise else 0))

    def draw(self, n: int, generator: torch.Generator, noisy: bool = True) -> tuple[Tensor, np.ndarray, np.ndarray]:
        """``n`` sequences ``(n, length + 1)``, each one's triggers (sorted) and its output per trigger, both
        ``(n, n_triggers)``; ``noisy=False`` puts every trigger's output after it (Chen et al.'s clean test set)."""
        outputs, uniform, triggers = self._draws(n, generator)
        return torch.from_numpy(self._walk(outputs, uniform, triggers, noisy)), triggers, outputs

    def sequences_and_outputs(self, n: int, generator: torch.Generator) -> tuple[Tensor, np.ndarray]:
        """``n`` sequences ``(n, length + 1)`` and each one's output per trigger ``(n, n_triggers)``."""
        seq, _, outputs = self.draw(n, generator)
        return seq, outputs

    def _draws(self, n: int, generator: torch.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What ``n`` sequences draw from ``generator``: each one's outputs, its uniforms ``(n, length + 1)`` and
        its triggers; drawn per sequence by Gumbel keys on the stationary law's logarithm, whose top ``n_triggers``
        are a draw without replacement, weighted as one token after another."""
        outputs = self.n_tokens - self.n_triggers - (1 if self.noise else 0)
        choice = torch.randint(outputs, (n, self.n_triggers), generator=generator).numpy()
        uniform = torch.rand(n, self.length + 1, generator=generator, dtype=torch.float64).numpy()
        if not self.per_sequence:
            return self.outputs_possible[choice], uniform, np.broadcast_to(self.triggers, (n, self.n_triggers))
        noise = torch.rand(n, self.n_tokens, generator=generator, dtype=torch.float64).numpy()
        with np.errstate(divide="ignore"):
            keys = np.log(stationary(self.bigram))[None] - np.log(-np.log(noise))
        triggers = np.sort(np.argsort(-keys, axis=1, kind="stable")[:, : self.n_triggers], axis=1)
        others = np.ones((n, self.n_tokens), dtype=bool)
        np.put_along_axis(others, triggers, False, axis=1)
        order = np.argsort(~others, axis=1, kind="stable")  # each row's non-triggers first, in token order
        return np.take_along_axis(order, choice, axis=1), uniform, triggers

    def _walk(self, outputs: np.ndarray, uniform: np.ndarray, triggers: np.ndarray, noisy: bool = True) -> np.ndarray:
        """The sequences those draws make, row by row: a trigger's next token is its row's output (or, where
        ``noisy``, the noise token when that step's uniform falls below ``noise``), any other's a draw from the
        bigram."""
        edges = np.cumsum(self.bigram, axis=-1)[:, :-1]
        rows = np.arange(len(uniform))
        slot = np.full((len(uniform), self.n_tokens), -1)
        np.put_along_axis(slot, triggers, np.arange(self.n_triggers)[None], axis=1)
        seq = np.empty(uniform.shape, dtype=np.int64)
        seq[:, 0] = inverse_cdf(uniform[:, 0], np.arange(1, self.n_tokens) / self.n_tokens)
        for t in range(1, self.length + 1):
            here = slot[rows, seq[:, t - 1]]
            drawn = inverse_cdf(uniform[:, t], edges[seq[:, t - 1]])
            recalled = outputs[rows, np.maximum(here, 0)]
            if noisy and self.noise:
                recalled = np.where(uniform[:, t] < self.noise, self.noise_token, recalled)
            seq[:, t] = np.where(here >= 0, recalled, drawn)
        return seq

    def sequences(self, n: int, generator: torch.Generator) -> Tensor:
        """``n`` sequences of ``length + 1`` tokens."""
        return self.draw(n, generator)[0]

    def recall_positions(self, seq: np.ndarray, triggers: np.ndarray | None = None) -> np.ndarray:
        """``(n, length)`` mask over the inputs: a trigger (each row's own, ``(n, n_triggers)``, where sequences draw
        their own) seen earlier in its sequence, so that the target there (its output) has been read in context
        before."""
        inputs = seq[:, :-1]
        triggers = np.broadcast_to(self.triggers, (len(seq), self.n_triggers)) if triggers is None else triggers
        seen = np.zeros(inputs.shape, dtype=bool)
        for k in range(self.n_triggers):
            here = inputs == triggers[:, k, None]
            seen |= here & (np.cumsum(here, axis=1) >= 2)
        return seen

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        seq, triggers, _ = self.draw(n, generator)
        return self._pairs(seq, triggers)

    def _pairs(self, seq: Tensor, triggers: np.ndarray) -> tuple[Tensor, Tensor]:
        """The inputs and scored targets of sequences ``(n, length + 1)`` whose triggers are ``triggers``."""
        targets = seq[:, 1:]
        if self.scored == "recall":
            recall = torch.from_numpy(self.recall_positions(seq.numpy(), triggers))
            targets = targets.masked_fill(~recall, IGNORE_INDEX)
        return seq[:, :-1], targets

    @staticmethod
    def sample_members(
        tasks: Sequence[TriggerTask], n: int, generators: Sequence[torch.Generator]
    ) -> tuple[Tensor, Tensor]:
        """``sample`` of every task with its own generator, stacked ``(K, n, length)``, one walk over positions for
        all members of one task (:func:`~sandboxes.data.together.sample_together`)."""
        task = tasks[0]
        return sample_together(
            tasks,
            n,
            generators,
            lambda g: task._draws(n, g),
            lambda *d: task._pairs(torch.from_numpy(task._walk(*d)), d[2]),
        )

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        if self.scored == "recall":  # a batch may hold no recall
            return scored_token_loss(outputs, targets)
        return next_token_loss(outputs, targets)
