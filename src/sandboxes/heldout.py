"""Named seeds of the held-out draws, so that no evaluation set shares a stream with its chapter's training.

Training streams use the member seeds (0..K-1, or ``i * 1000 + k`` in the shortcuts sweep);
every held-out draw takes one of the seeds below, far above them, named after what it feeds. A
name may share its value with another when both draw held-out data (``AUTOMATON_EVAL`` is the
trainer's own held-out stream). The HMM chapter's finite training samples derive their seeds from
the member seed, the sample size and the HMM (``chapters.hmm``); they never meet these draws
within that chapter.
"""

from __future__ import annotations

import torch

TRAINER_EVAL = 10_000_019  # the trainer's held-out loss curve
AUTOMATON_EVAL = TRAINER_EVAL  # automaton inputs for constructions and trained accuracies
LEMMA_INPUTS = TRAINER_EVAL + 1  # inputs of the one-layer lemma constructions (shortcuts)
ATTENTION_MAPS = TRAINER_EVAL + 2  # sequences whose attention maps a figure draws (shortcuts)
FLIPFLOP_TEST_SETS = TRAINER_EVAL + 1  # flip-flop test sets: in-distribution, sparse, dense at +0, +1, +2
FLIPFLOP_CONSTRUCTION = TRAINER_EVAL + 7  # random strings for the Proposition 3 construction
SIMULATOR_STRINGS = TRAINER_EVAL + 11  # random strings fed to the flip-flop simulator
AUTOMATON_STRINGS = TRAINER_EVAL + 13  # held-out flip-flop automaton strings read by trained simulators
LENGTH_SWEEP = TRAINER_EVAL  # plus the block size: strings of each length in the construction sweep
DYCK_EVAL = TRAINER_EVAL + 3  # held-out Dyck prefixes: accuracy and stack-likeness of trained models (shortcuts)
MARKOV_EXCESS = 20_000_003  # sequences on which a Markov model's exact excess loss is measured
MARKOV_PREDICTION = 20_000_011  # the one sequence whose predictions the Markov chapter draws
MARKOV_DIRECTIONS = 20_000_019  # random directions of the direct local-minimum test (Markov chapter)


def generator(seed: int) -> torch.Generator:
    """A fresh CPU generator for the held-out draw named by ``seed``."""
    return torch.Generator().manual_seed(seed)
