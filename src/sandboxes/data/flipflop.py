"""Flip-flop languages ``FFL(T, p)`` (Liu et al., "Exposing attention glitches with flip-flop language modeling").

A flip-flop string of even length ``T`` alternates instructions (even positions) and data bits
(odd positions). The first instruction is ``w``, the last is ``r``, the others are i.i.d. with
probabilities ``(p_w, p_r, p_i)``; the bit after ``w`` or ``i`` is uniform and the bit after
``r`` repeats the bit of the latest ``w``. As a task, the input is the first ``T - 1`` tokens and
the target the next token; in ``clean`` mode only the bits after a read are scored.
:class:`Sharpened` is the same task with an attention-entropy penalty added to its loss; :class:`Mixture`
draws each string's ``p_i`` from a list (training on the rare strings, the thesis's R4).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from ..losses import IGNORE_INDEX, attention_entropy, next_token_loss

W, R, I, ZERO, ONE = 0, 1, 2, 3, 4
VOCAB = ("w", "r", "i", "0", "1")
WRITE0, WRITE1, NOOP = 0, 1, 2  # the flip-flop automaton's inputs (Definition 11): write 0, write 1, do nothing

Mode = Literal["clean", "generative"]


@dataclass(frozen=True)
class FlipFlop:
    """``FFL(length, (p_w, p_r, p_i))`` as a next-token task; ``mode`` picks the scored positions."""

    length: int
    p_w: float
    p_r: float
    mode: Mode = "clean"

    def __post_init__(self) -> None:
        if self.length < 4 or self.length % 2:
            raise ValueError(f"a flip-flop string has an even length of at least 4, got {self.length}")
        if self.p_w < 0 or self.p_r < 0 or self.p_w + self.p_r > 1:
            raise ValueError(f"need p_w, p_r >= 0 and p_w + p_r <= 1, got p_w={self.p_w}, p_r={self.p_r}")
        if self.mode not in ("clean", "generative"):
            raise ValueError(f"unknown mode {self.mode!r}; choose clean or generative")

    @classmethod
    def with_ignore(cls, length: int, p_i: float, mode: Mode = "clean") -> FlipFlop:
        """``FFL(length, p_i)``: writes and reads share the rest equally, ``p_w = p_r = (1 - p_i) / 2``."""
        if not 0.0 <= p_i <= 1.0:
            raise ValueError(f"p_i must lie in [0, 1], got {p_i}")
        return cls(length, (1 - p_i) / 2, (1 - p_i) / 2, mode)

    @property
    def p_i(self) -> float:
        return 1.0 - self.p_w - self.p_r

    def sequences(self, n: int, generator: torch.Generator) -> Tensor:
        """``n`` flip-flop strings, shape ``(n, length)``, dtype long."""
        return _strings(n, self.length, self.p_w, self.p_r, generator)

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        return _as_task(self.sequences(n, generator), self.mode)

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        return next_token_loss(outputs, targets)


@dataclass(frozen=True)
class Mixture:
    """A uniform mixture of ``FFL(length, p_i)`` over ``p_is``: each string draws its own ``p_i`` (the thesis's R4)."""

    length: int
    p_is: tuple[float, ...]
    mode: Mode = "clean"

    def __post_init__(self) -> None:
        if not self.p_is:
            raise ValueError("a mixture needs at least one p_i")
        for p_i in self.p_is:
            FlipFlop.with_ignore(self.length, p_i, self.mode)  # the same checks as each component

    def sequences(self, n: int, generator: torch.Generator) -> Tensor:
        """``n`` strings, each from a component drawn uniformly, shape ``(n, length)``."""
        which = torch.randint(len(self.p_is), (n, 1), generator=generator)
        p_w = (1 - torch.tensor(self.p_is, dtype=torch.float64)[which]) / 2
        return _strings(n, self.length, p_w, p_w, generator)

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        return _as_task(self.sequences(n, generator), self.mode)

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        return next_token_loss(outputs, targets)


def _strings(n: int, length: int, p_w: float | Tensor, p_r: float | Tensor, generator: torch.Generator) -> Tensor:
    """``n`` strings with write and read probabilities ``p_w``, ``p_r`` (scalars, or one per string as ``(n, 1)``)."""
    pairs = length // 2
    u = torch.rand(n, pairs, generator=generator, dtype=torch.float64)
    instr = torch.where(u < p_w, W, torch.where(u < p_w + p_r, R, I))
    instr[:, 0], instr[:, -1] = W, R
    bits = torch.randint(0, 2, (n, pairs), generator=generator)
    bits = torch.where(instr == R, latest_write_bits(instr, bits), bits)
    out = torch.empty(n, length, dtype=torch.long)
    out[:, 0::2], out[:, 1::2] = instr, bits + ZERO
    return out


def _as_task(seq: Tensor, mode: Mode) -> tuple[Tensor, Tensor]:
    """Inputs (all but the last token) and next-token targets; ``clean`` scores only the bits after a read."""
    inputs, targets = seq[:, :-1], seq[:, 1:].clone()
    if mode == "clean":
        targets[inputs != R] = IGNORE_INDEX
    return inputs, targets


@dataclass(frozen=True)
class Sharpened:
    """A flip-flop task (language or automaton) whose loss adds ``weight`` times the mean attention entropy (all
    layers, heads, queries).

    Its model returns ``(logits, attention)``, e.g. a GPT wrapped in :class:`sandboxes.model.WithAttention`. Its
    repr names the weight, which the member store's key reads (:func:`sandboxes.members.key`).
    """

    task: FlipFlop | FlipFlopAutomaton
    weight: float

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        return self.task.sample(n, generator)

    def loss(self, outputs: tuple[Tensor, list[Tensor]], targets: Tensor) -> Tensor:
        logits, attention = outputs
        return (
            self.task.loss(logits, targets)
            + self.weight * torch.stack([attention_entropy(a).mean() for a in attention]).mean()
        )


@dataclass(frozen=True)
class Annealed:
    """A :class:`Sharpened` task whose penalty's weight rises linearly from 0 at the first step to ``weight`` at the
    last (our reading of the thesis's linear annealing from step 0, Sec. 3.5.6.4).

    The trainer asks for each step's task with :meth:`at_step`; held-out losses score the reads alone (the task's own
    loss), so that a run's descent is judged on what it gets wrong, not on its attention still sharpening.
    """

    task: FlipFlop | FlipFlopAutomaton
    weight: float

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        return self.task.sample(n, generator)

    def loss(self, outputs: tuple[Tensor, list[Tensor]], targets: Tensor) -> Tensor:
        return self.task.loss(outputs[0], targets)

    def at_step(self, step: int, steps: int) -> Sharpened:
        """The task step ``step`` of ``steps`` trains on: the penalty at ``step / (steps - 1)`` of its weight."""
        return Sharpened(self.task, self.weight * step / max(steps - 1, 1))


def all_strings(length: int) -> Tensor:
    """Every valid flip-flop string of ``length`` tokens (``3^(T/2-2)`` instruction patterns times free bits)."""
    if length < 4 or length % 2:
        raise ValueError(f"a flip-flop string has an even length of at least 4, got {length}")
    pairs = length // 2
    patterns = list(itertools.product((W, R, I), repeat=pairs - 2))
    middle = torch.tensor(patterns, dtype=torch.long).reshape(len(patterns), pairs - 2)
    instr = torch.cat([torch.full((len(middle), 1), W), middle, torch.full((len(middle), 1), R)], dim=1)
    bits = torch.tensor(list(itertools.product((0, 1), repeat=pairs)), dtype=torch.long)
    instr = instr.repeat_interleave(len(bits), dim=0)
    bits = bits.repeat(len(middle), 1)
    free = ~((instr == R) & (bits == 1)).any(dim=1)  # a read's bit is not free: keep one copy
    instr, bits = instr[free], bits[free]
    bits = torch.where(instr == R, latest_write_bits(instr, bits), bits)
    out = torch.empty(len(instr), length, dtype=torch.long)
    out[:, 0::2], out[:, 1::2] = instr, bits + ZERO
    return out


def latest_write_bits(instr: Tensor, bits: Tensor) -> Tensor:
    """For each instruction slot, the bit written by the latest ``w`` at or before it."""
    slot = torch.arange(instr.shape[1]).expand_as(instr)
    last = torch.where(instr == W, slot, torch.full_like(slot, -1)).cummax(dim=1).values
    if (last < 0).any():
        raise ValueError("every flip-flop string starts with a write")
    return bits.gather(1, last)


def check_sequences(seq: Tensor) -> None:
    """Raise unless every row is a valid flip-flop string (the language's definition, checked)."""
    instr, data = seq[:, 0::2], seq[:, 1::2]
    if not ((instr >= W) & (instr <= I)).all() or not ((data == ZERO) | (data == ONE)).all():
        raise ValueError("instructions must sit at even positions and bits at odd ones")
    if not ((instr[:, 0] == W) & (instr[:, -1] == R)).all():
        raise ValueError("the first instruction must be w and the last r")
    bits = data - ZERO
    reads = instr == R
    if not (bits[reads] == latest_write_bits(instr, bits)[reads]).all():
        raise ValueError("a read does not return the bit of the latest write")


def read_targets(inputs: Tensor) -> tuple[Tensor, Tensor]:
    """The positions of ``inputs`` that hold a read, and the bit each must be answered with."""
    instr = inputs[:, 0::2]
    n_pairs = (inputs.shape[1] + 1) // 2
    bits = torch.zeros(inputs.shape[0], n_pairs, dtype=torch.long)
    bits[:, : inputs[:, 1::2].shape[1]] = inputs[:, 1::2] - ZERO
    answer = latest_write_bits(instr, bits)
    reads = torch.zeros_like(inputs, dtype=torch.bool)
    reads[:, 0::2] = instr == R
    full = torch.zeros_like(inputs)
    full[:, 0::2] = answer + ZERO
    return reads, full


def read_errors(logits: Tensor, inputs: Tensor) -> tuple[int, int]:
    """Wrong and total reads: a read is wrong when the argmax next token is not the latest written bit."""
    reads, answers = read_targets(inputs)
    wrong = (logits.argmax(dim=-1) != answers) & reads
    return int(wrong.sum()), int(reads.sum())


@dataclass(frozen=True)
class FlipFlopAutomaton:
    """The flip-flop automaton as a sequence task (the thesis's Definition 11): inputs write 0, write 1 or noop, the
    first a write and each later one a noop with probability ``p_noop``; the target at every position is the state,
    the latest write's bit (``WRITE0`` or ``WRITE1``), all positions scored."""

    length: int
    p_noop: float

    def __post_init__(self) -> None:
        if self.length < 1:
            raise ValueError(f"an automaton string has at least one input, got length {self.length}")
        if not 0.0 <= self.p_noop < 1.0:
            raise ValueError(f"p_noop must lie in [0, 1), got {self.p_noop}")

    def sequences(self, n: int, generator: torch.Generator) -> Tensor:
        """``n`` input strings, shape ``(n, length)``: writes of either bit with probability ``(1 - p_noop) / 2``."""
        u = torch.rand(n, self.length, generator=generator, dtype=torch.float64)
        write = (1 - self.p_noop) / 2
        seq = torch.where(u < write, WRITE0, torch.where(u < 2 * write, WRITE1, NOOP))
        seq[:, 0] = torch.randint(WRITE0, WRITE1 + 1, (n,), generator=generator)
        return seq

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        seq = self.sequences(n, generator)
        return seq, automaton_states(seq)

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        return next_token_loss(outputs, targets)


def latest_write_position(seq: Tensor) -> Tensor:
    """Position of the latest write at or before each input of automaton strings (-1 before the first)."""
    slot = torch.arange(seq.shape[1]).expand_as(seq)
    return torch.where(seq != NOOP, slot, torch.full_like(slot, -1)).cummax(dim=1).values


def automaton_states(seq: Tensor) -> Tensor:
    """The flip-flop automaton's state after each input: the latest write (the strings start with a write)."""
    last = latest_write_position(seq)
    if (last < 0).any():
        raise ValueError("automaton strings must start with a write")
    return seq.gather(1, last)
