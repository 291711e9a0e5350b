"""Nichani, Lee and Bietti's synthetic factual recall task: a sequence of noise tokens holds one subject and one
relation at random places and ends with an end-of-sequence token; the target is the answer a*(s, r) that the facts
table stores for them.

Tokens: subjects ``0 .. S-1``, relations ``S .. S+R-1``, noise ``S+R .. S+R+noise-1``, then the end token. Answers
are a separate vocabulary of ``R * per_relation``; relation r's answers are ``r * per_relation ..``, so an answer
names its relation. The facts table is fixed by ``seed`` (each answer of a relation belongs to as many subjects as
the others, as the slides' "uniform over A_r" has it); subjects, relations, places and noise are uniform.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch
from torch import Tensor
from torch.nn import functional as F


def balanced_facts(subjects: int, relations: int, per_relation: int, rng: np.random.Generator) -> np.ndarray:
    """``facts[s, r]``: relation r's answer for subject s, drawn from r's own ``per_relation`` answers (ids
    ``r * per_relation ..``) so that each is the answer of as many subjects as the others (give or take one)."""
    cycle = np.arange(subjects) % per_relation
    return np.stack([r * per_relation + rng.permutation(cycle) for r in range(relations)], axis=1)


@dataclass(frozen=True)
class FactRecall:
    """Sequences of ``length`` tokens, one fact each; as a training task the input is the sequence and the target its
    answer."""

    subjects: int
    relations: int
    per_relation: int
    noise: int
    length: int
    seed: int

    def __post_init__(self) -> None:
        if self.length < 3:
            raise ValueError(
                f"a sequence holds a subject, a relation and the end token: length >= 3, got {self.length}"
            )
        if min(self.subjects, self.relations, self.per_relation, self.noise) < 1:
            raise ValueError("subjects, relations, answers per relation and noise tokens are each at least 1")

    @property
    def vocabulary(self) -> int:
        """Input tokens: subjects, relations, noise and the end token."""
        return self.subjects + self.relations + self.noise + 1

    @property
    def answers(self) -> int:
        """Output tokens: every relation's answers."""
        return self.relations * self.per_relation

    @cached_property
    def facts(self) -> np.ndarray:
        """``facts[s, r]``: the answer stored for subject s and relation r."""
        return balanced_facts(self.subjects, self.relations, self.per_relation, np.random.default_rng(self.seed))

    def sample_facts(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        """``n`` sequences with their subjects and relations: (tokens, subject, relation)."""
        subject = torch.randint(self.subjects, (n,), generator=generator)
        relation = torch.randint(self.relations, (n,), generator=generator)
        return self.sequences(subject, relation, generator), subject, relation

    def sequences(self, subject: Tensor, relation: Tensor, generator: torch.Generator) -> Tensor:
        """One sequence per (``subject``, ``relation``) pair, ``(n, length)`` tokens: noise, the subject and the
        relation at two uniform distinct places before the end token."""
        n, T = len(subject), self.length
        tokens = torch.randint(self.noise, (n, T), generator=generator) + self.subjects + self.relations
        place = torch.randint(T - 1, (n,), generator=generator)  # the subject's, before the end token
        other = torch.randint(T - 2, (n,), generator=generator)  # the relation's, uniform over the other places
        other += other >= place
        rows = torch.arange(n)
        tokens[rows, place] = subject
        tokens[rows, other] = self.subjects + relation
        tokens[:, -1] = self.vocabulary - 1
        return tokens

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """``n`` fresh (sequence, answer) pairs."""
        tokens, subject, relation = self.sample_facts(n, generator)
        return tokens, torch.from_numpy(self.facts)[subject, relation]

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        """Cross-entropy of the answer logits."""
        return F.cross_entropy(outputs, targets)
