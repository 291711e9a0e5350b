"""Chapter 2: transformers simulate automata in far fewer than T layers (Liu et al., "Transformers
learn shortcuts to automata").

Each section function computes one section of the chapter page and returns its data (a
``TypedDict`` per section, which the section's figures in ``figures`` read and its rows judge):
the algebra of the automata (solvability), the exact constructions of Theorem 10 with the
Lemma 13 bound, Lemmas 15/16 and Algorithm 1 of Theorem 12, depth sweeps of trained GPTs next
to the paper's reported accuracies, and the brittleness of the learned shortcuts.

``measure`` computes each section (the exact constructions, the training runs) into its data, ``judge`` makes
every section's rows from its config and data alone, ``paper`` sets the thesis's reports beside a run's;
``figures`` draws them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...data.automata import EXAMPLES, MAX_STATES, check_automaton_name
from ...model import check_heads
from ...profiles import (
    Custom,
    Interval,
    Param,
    at_least,
    each,
    float_list,
    in_open_unit_interval,
    in_range,
    positive,
    positive_ints,
    with_reference,
)
from ...sections import Chapter, Section
from .judge import (
    abab_rows,
    algebra_section_rows,
    automaton_names,
    balance_rows,
    brittleness_rows,
    construction_section_rows,
    dyck_rows,
    encodings_rows,
    hard_rows,
    lemmas_section_rows,
    lengths_rows,
    supervision_rows,
    sweep_rows,
)
from .measure import (
    DYCK_PREFIX,
    abab,
    algebra,
    balance,
    brittleness,
    construction,
    dyck,
    encodings,
    hard,
    lemmas,
    lengths,
    supervision,
    sweep,
)
from .paper import (
    abab_vs_paper,
    balance_vs_paper,
    brittleness_vs_paper,
    dyck_vs_paper,
    encodings_vs_paper,
    hard_vs_paper,
    lengths_vs_paper,
    supervision_vs_paper,
    sweep_vs_paper,
)

__all__ = ["CHAPTER", "PARAMS"]


def _check_names(text: str) -> None:
    if not automaton_names(text):
        raise ValueError("expected at least one automaton name")
    for name in automaton_names(text):
        check_automaton_name(name)


DRAWN = ("C2", "C3", "C2xC2", "D6", "D8", "Q8", "A4", "S4", "A5", "Grid4", "Grid9", "Dyck", "flipflop", "memory3")


def _draw_names(rng: np.random.Generator, near: str) -> str:
    """One to three automata a reader might name."""
    return ",".join(rng.choice(DRAWN, size=int(rng.integers(1, 4)), replace=False))


AUTOMATON = Custom(
    check_automaton_name,
    f"an automaton name such as {', '.join(EXAMPLES)} (at most {MAX_STATES} states)",
    lambda rng, near: str(rng.choice(DRAWN)),
)
AUTOMATA = Custom(_check_names, "comma-separated automaton names", _draw_names)
POSITIONAL = ("linear", "none", "learned", "sinusoidal")


def _check_positions(text: str) -> None:
    names = [p.strip() for p in text.split(",")]
    unknown = [p for p in names if p not in POSITIONAL]
    if unknown or len(set(names)) != len(names):
        raise ValueError(f"expected distinct positional encodings among {', '.join(POSITIONAL)}, got {text!r}")


POSITIONS = Custom(
    _check_positions,
    f"comma-separated positional encodings among {', '.join(POSITIONAL)}",
    lambda rng, near: ",".join(rng.choice(POSITIONAL, size=int(rng.integers(1, 3)), replace=False)),
)


PARAMS = (
    Param(
        "automaton",
        str,
        "D8",
        "D8",
        "featured automaton (C3, D8, Q8, A5, S5, Grid9, Dyck, flipflop, "
        "C2xC2xC2, ...): built by Theorem 10 at length T and trained at depth `depth`",
        AUTOMATON,
    ),
    Param("T", int, 8, 32, "sequence length of the featured construction and of all training", at_least(1)),
    Param("depth", int, 2, 4, "depth of the featured trained GPT (added to the sweep)", at_least(1)),
    Param("sweep", str, "C2,C3,Grid4,D8,Q8,A5", "C2,C3,Grid9,D8,Q8,A4,A5,S5", "automata of the depth sweep", AUTOMATA),
    Param("depths", str, "1,2", "1,2,3,4,6,8", "depths of the sweep", positive_ints),
    Param(
        "easy",
        str,
        "Grid4",
        "C2,Grid9,D8",
        "automata claimed to reach `threshold` by `shallow_depth`, where the "
        "paper's Fig. 3.15 reports them there (else no row)",
        AUTOMATA,
    ),
    Param(
        "hard",
        str,
        "A5",
        "A5,S5",
        "automata claimed to stay `gap` below it there, where the paper's Fig. 3.15 "
        "reports them there and no construction of the chapter is that shallow at length T (else no row)",
        AUTOMATA,
    ),
    Param(
        "threshold",
        float,
        0.95,
        0.98,
        "accuracy that counts as solved: of the best seed in the sweep, of each model in distribution in the "
        "positional-encoding runs",
        Interval(0.5, 1.0, open_low=True, open_high=True),
    ),
    Param("shallow_depth", int, 2, 3, "depth at which the easy/hard contrast is claimed", at_least(1)),
    Param("d_model", int, 32, 128, "GPT width", at_least(1)),
    Param("n_head", int, 4, 8, "GPT heads", at_least(1)),
    Param("steps", int, 300, 10000, "training steps of the sweep", at_least(1)),
    # the hard runs must settle for their row: quick 1200, full 6x the sweep (results/README.md, "Sizing notes")
    Param(
        "hard_steps",
        int,
        1200,
        60000,
        "training steps of the `hard` automata at depths up to `shallow_depth` (a "
        "row that they stay below holds only for runs that stopped moving)",
        at_least(1),
    ),
    Param("batch_size", int, 32, 64, "sequences per step", at_least(1)),
    Param("lr", float, 3e-3, 5e-4, "AdamW learning rate (warm-up, cosine decay)", positive),
    Param("eval_size", int, 256, 2048, "held-out sequences per accuracy", at_least(1)),
    Param(
        "construct",
        str,
        "C2,C3,Grid4,D8,Q8,flipflop,A4",
        "C2,C3,Grid9,D8,Q8,flipflop,A4,Dyck,A5",
        "automata built by Theorem 10 and checked exactly",
        AUTOMATA,
    ),
    Param("construct_lengths", str, "3,8,16", "3,8,16,33,64", "lengths of those checks", positive_ints),
    Param("construct_samples", int, 64, 256, "random input sequences per check", at_least(1)),
    Param("parity_length", int, 16, 40, "training length of the parity brittleness runs", at_least(2)),
    Param("parity_depth", int, 2, 8, "depth of the parity GPT", at_least(1)),
    Param("parity_steps", int, 3000, 10000, "training steps of the parity GPT", at_least(1)),
    Param(
        "parity_solved",
        float,
        0.95,
        0.99,
        "accuracy at the training law that counts as having learnt parity (the "
        "precondition of the brittleness rows; from 0.9, far from chance's 1/2)",
        Interval(0.9, 1.0, open_high=True),
    ),
    Param("scratchpad_steps", int, 300, 2000, "training steps of the scratchpad GPT", at_least(1)),
    Param(
        "lg_automata",
        str,
        "Dyck",
        "C2,Dyck",
        "automata of the length-generalisation runs (the thesis: Dyck_4,2 and C2; C2 needs parity_steps-sized "
        "budgets, results/README.md)",
        AUTOMATA,
    ),
    Param("lg_T", int, 16, 40, "their training length (the thesis: 40)", at_least(2)),
    Param(
        "lg_lengths",
        str,
        "8,16",  # quick: no length beyond lg_T, so nothing trained (no quick size decides every row: results/README.md)
        ",".join(str(8 * k) for k in range(1, 17)),
        "lengths they are scored at, besides lg_T (the thesis: 8, 16, ..., 128)",
        positive_ints,
    ),
    Param("lg_depth", int, 2, 8, "depth of their GPTs (the thesis's parity GPTs: 8)", at_least(1)),
    Param(
        "lg_steps",
        int,
        300,
        10000,
        "training steps of those GPTs (the LSTM and scratchpad take their own)",
        at_least(1),
    ),
    Param(
        "lg_shift",
        int,
        400,
        400,
        "largest random offset added to a training batch's positions in the shifted arm (the thesis: 400)",
        at_least(0),
    ),
    Param("reveal_automata", str, "C2,D8", "C2,S5", "automata of the incomplete-supervision runs", AUTOMATA),
    Param(
        "reveals",
        str,
        "1,0.1",
        "1,0.5,0.2,0.1,0.05",
        "shares p_reveal of the target states the loss sees in those runs",
        each(Interval(0.0, 1.0, open_low=True)),
    ),
    Param("reveal_depth", int, 2, 6, "depth of the GPTs of those runs", at_least(1)),
    Param("reveal_steps", int, 300, 10000, "training steps of those GPTs (the LSTMs take lstm_steps)", at_least(1)),
    Param("lstm_steps", int, 300, 2000, "training steps of the LSTM", at_least(1)),
    # the special prefix holds both bracket types to depth 4 over 16 tokens, so smaller languages cannot read it
    Param("dyck_k", int, 2, 2, "bracket types of the Dyck language", in_range(2, 8)),
    Param("dyck_depth", int, 4, 4, "largest depth of the Dyck language", at_least(4)),
    Param("dyck_q", float, 0.5, 0.5, "probability of an open bracket where both may come", in_open_unit_interval),
    Param("dyck_T", int, 28, 28, "tokens per training prefix of Dyck", at_least(len(DYCK_PREFIX) + 1)),
    Param("dyck_d", int, 50, 50, "width and MLP width of the two-layer GPTs on Dyck", at_least(1)),
    Param("dyck_steps", int, 700, 10000, "Adam steps of those GPTs", at_least(1)),
    Param("dyck_lr", float, 3e-3, 3e-3, "their learning rate (warm-up, cosine decay)", positive),
    Param("dyck_seeds", int, 3, 40, "random initialisations per positional encoding", at_least(1)),
    Param("dyck_positions", str, "linear,none", "linear,none", "positional encodings trained on Dyck", POSITIONS),
    Param("bal_seeds", int, 2, 40, "random initialisations per training of the balance section", at_least(1)),
    Param("bal_steps", int, 700, 6000, "Adam steps of the minimal-first-layer models (balance section)", at_least(1)),
    Param(
        "bal_weights",
        str,
        "0.03",
        "0.03,0.1,0.3,1",
        "weights of the contrastive term (the thesis's Eq. 3.40) in their loss, one training each beside the standard "
        "one (the thesis does not state its own)",
        each(positive, distinct=True),
    ),
    Param("bal_from", int, 400, 400, "shortest prefix of their length test (the thesis: 400)", at_least(2)),
    Param("bal_to", int, 500, 500, "longest prefix of their length test (the thesis: 500)", at_least(2)),
    Param(
        "pe_automaton",
        str,
        "Grid9",
        "Grid9",
        "automaton of the positional-encoding runs (the thesis: Grid9)",
        AUTOMATON,
    ),
    Param("pe_T", int, 16, 40, "training length of those runs; each is scored at 2T (the thesis: 40)", at_least(2)),
    Param("pe_depth", int, 2, 2, "depth of their GPTs", at_least(1)),
    Param("pe_steps", int, 800, 4000, "training steps of each of them", at_least(1)),
    Param("pe_batch", int, 32, 32, "sequences per step of those runs", at_least(1)),
    Param("pe_lr", float, 3e-3, 3e-3, "their AdamW learning rate (warm-up, cosine decay)", positive),
    Param(
        "pe_seeds",
        int,
        4,
        25,
        "random initialisations per positional encoding (the thesis: 25; a paired spread needs 2)",
        at_least(2),
    ),
    Param(
        "abab_steps",
        int,
        800,
        10_000,
        "training steps of the (abab)* runs (the encodings runs' other values; the thesis's steps not stated)",
        at_least(1),
    ),
    Param(
        "shift_probs",
        str,
        "0.1,0.3,0.5,0.7,0.9",
        "0.05,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,0.95",
        "test laws Pr[sigma = 1] of the distribution-shift test",
        each(in_open_unit_interval),
    ),
    Param("recency", float, 1.0, 1.0, "slope of the recency bias -slope*(i-j) on attention scores", positive),
    Param(
        "gap",
        float,
        0.05,
        0.05,
        "accuracy drop that counts as a failure to generalise (below 1/2: parity's chance accuracy is 1/2)",
        Interval(0.0, 0.5, open_low=True, open_high=True),
    ),
)

# Reference sizes: pilots and step times (results/README.md, "Sizing notes").
REFERENCE_WORKERS = 2  # the sweep's processes, above
PARAMS = with_reference(
    PARAMS,
    {
        "T": 20,
        "sweep": "C2,Grid9,D8,Q8,A4,A5",
        "depths": "1,2,3,4,5",
        "depth": 3,
        "shallow_depth": 3,
        "easy": "Grid9,D8",
        "hard": "A5",
        "d_model": 64,
        "batch_size": 64,
        "steps": 2000,
        "hard_steps": 12000,
        "eval_size": 1024,
        "parity_length": 40,
        "parity_steps": 10000,
        "scratchpad_steps": 2000,
        "lstm_steps": 6000,
        "shift_probs": "0.05,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,0.95",
        "parity_solved": 0.99,
        "reveals": "1,0.3,0.1",
        "reveal_depth": 3,
        "reveal_steps": 2000,
        "dyck_steps": 3000,
        "dyck_seeds": 10,
        "pe_T": 40,
        "pe_steps": 4000,
        "abab_steps": 8000,
        "pe_seeds": 12,
        "lg_T": 40,
        "lg_lengths": ",".join(str(8 * k) for k in range(1, 17)),
        "lg_steps": 6000,
        "bal_seeds": 16,
        "bal_steps": 6000,
        "bal_weights": "0.03,0.1,0.3",
    },
)


HIDDEN_BATCH_ODDS = 1e-6  # the most batches with no state revealed a run may expect (each one's loss is NaN)


def check(config: dict[str, Any], n_seeds: int) -> None:
    """d_model divisible by n_head (the heads split the width), and enough states revealed per batch that no batch of
    the incomplete-supervision runs hides them all (its mean loss would be NaN); checked before any section runs."""
    check_heads(config["d_model"], config["n_head"])
    if not config["dyck_T"] < config["bal_from"] <= config["bal_to"]:
        raise ValueError(
            f"the balance section's length test needs dyck_T < bal_from <= bal_to, got {config['dyck_T']}, "
            f"{config['bal_from']}, {config['bal_to']}"
        )
    targets, steps = config["batch_size"] * config["T"], max(config["reveal_steps"], config["lstm_steps"])
    for p in float_list(config["reveals"]):
        odds = steps * math.exp(targets * math.log1p(-p)) if p < 1 else 0.0  # expected hidden batches
        if odds > HIDDEN_BATCH_ODDS:
            raise ValueError(
                f"p_reveal = {p:g} leaves {odds:.1e} batches of {config['batch_size']} x {config['T']} targets "
                f"expected over {steps} steps with no state revealed (a NaN loss); choose reveals, batch_size or T "
                f"for fewer than {HIDDEN_BATCH_ODDS:g}"
            )


# the unit tests' scale: every section end to end in seconds
UNIT_SCALE = {
    "sweep": "C2,A5",
    "easy": "C2",
    "hard": "A5",
    "depths": "1",
    "depth": 1,
    "shallow_depth": 1,
    "T": 4,
    "steps": 2,
    "hard_steps": 2,
    "parity_steps": 2,
    "scratchpad_steps": 2,
    "lstm_steps": 2,
    "parity_length": 4,
    "eval_size": 8,
    "construct": "C2",
    "construct_lengths": "3",
    "construct_samples": 4,
    "d_model": 8,
    "n_head": 2,
    "shift_probs": "0.3,0.5",
    "reveal_automata": "C2",
    "reveals": "1,0.5",
    "reveal_depth": 1,
    "reveal_steps": 2,
    "dyck_steps": 2,
    "dyck_seeds": 2,
    "dyck_d": 8,
    "pe_T": 3,
    "pe_steps": 2,
    "abab_steps": 2,
    "pe_seeds": 2,
    "lg_T": 3,
    "lg_lengths": "2,5",
    "lg_depth": 1,
    "lg_steps": 2,
    "lg_shift": 4,
    "bal_steps": 2,
    "bal_seeds": 2,
    "bal_from": 40,
    "bal_to": 48,
}
# the full profile with only its scale shrunk (steps, widths, sample counts): every full-only structure stays
FULL_SHRUNK = {
    "steps": 2,
    "hard_steps": 2,
    "parity_steps": 2,
    "scratchpad_steps": 2,
    "lstm_steps": 2,
    "eval_size": 8,
    "construct_samples": 2,
    "d_model": 16,
    "batch_size": 4,
    "reveal_steps": 2,
    "reveals": "1,0.5",
    "dyck_steps": 2,
    "dyck_seeds": 2,
    "pe_steps": 2,
    "abab_steps": 2,
    "pe_seeds": 2,
    "lg_steps": 2,
    "lg_lengths": "8,48",  # one length beyond lg_T: the full list's 128 took 40 s of the 45 s this profile took
    "lg_depth": 2,
    "bal_steps": 2,
    "bal_seeds": 2,
}

CHAPTER = Chapter(
    "shortcuts",
    "Shortcuts: transformers simulate automata in far fewer than T layers",
    PARAMS,
    seeds={"quick": 2, "reference": 3, "full": 10},
    sections=(
        Section("algebra", "Solvability of the automata", algebra, rows=algebra_section_rows),
        Section(
            "construction",
            "Theorem 10: logarithmic depth, built and run",
            construction,
            rows=construction_section_rows,
            figures=("depth_vs_length", "temperature"),
        ),
        Section("lemmas", "Lemmas 15, 16 and Algorithm 1: one and two layers", lemmas, rows=lemmas_section_rows),
        Section(
            "sweep",
            "Trained GPTs: accuracy against depth",
            sweep,
            trains=True,
            rows=sweep_rows,
            figures=("depth_sweep", "instability", "boundary_attention"),
            reference=True,
            paper=sweep_vs_paper,
        ),
        Section(
            "hard",
            "Trained to a standstill: the hard automata at shallow depth",
            hard,
            trains=True,
            rows=hard_rows,
            figures=("hard_runs",),
            reference=True,
            paper=hard_vs_paper,
        ),
        Section(
            "brittleness",
            "Shortcuts are brittle",
            brittleness,
            trains=True,
            rows=brittleness_rows,
            figures=("brittleness",),
            reference=True,
            paper=brittleness_vs_paper,
        ),
        Section(
            "lengths",
            "Length generalisation: positions, shifts and recurrence",
            lengths,
            trains=True,
            rows=lengths_rows,
            figures=("lengths",),
            reference=True,
            paper=lengths_vs_paper,
        ),
        Section(
            "supervision",
            "Incomplete supervision: the states revealed to the loss",
            supervision,
            trains=True,
            rows=supervision_rows,
            figures=("supervision",),
            reference=True,
            paper=supervision_vs_paper,
        ),
        Section(
            "encodings",
            "Positional encodings: sinusoidal against linear at twice the length",
            encodings,
            trains=True,
            by_seed=False,  # its seeds are its own parameter, pe_seeds, not the run's
            rows=encodings_rows,
            figures=("length_generalisation",),
            reference=True,
            paper=encodings_vs_paper,
        ),
        Section(
            "abab",
            "(abab)*: the positional encoding decides whether it is learnt",
            abab,
            trains=True,
            by_seed=False,  # its seeds are pe_seeds, as the encodings section's
            rows=abab_rows,
            figures=("length_generalisation",),
            reference=True,
            paper=abab_vs_paper,
        ),
        Section(
            "dyck",
            "Dyck: many attention patterns solve it",
            dyck,
            trains=True,
            by_seed=False,  # its seeds are its own parameter, dyck_seeds, not the run's
            rows=dyck_rows,
            figures=("dyck_attention",),
            reference=True,
            paper=dyck_vs_paper,
        ),
        Section(
            "balance",
            "Dyck: regularising for balance",
            balance,
            trains=True,
            by_seed=False,  # its seeds are its own parameter, bal_seeds
            rows=balance_rows,
            figures=("balance",),
            reference=True,
            paper=balance_vs_paper,
        ),
    ),
    check=check,
    reference_workers=REFERENCE_WORKERS,
    unit_scale=UNIT_SCALE,
    full_shrunk=FULL_SHRUNK,
    # every trained section with a reference result: most of the quick page's 272 s under nbval (ATen's default path,
    # one thread), and at T = 8 the sweep can say little of the thesis's automata; dyck has an attempt only
    quick_page_from_reference=("sweep", "hard", "brittleness", "supervision", "encodings", "abab"),
    # its reference run's 2T row is undecided (linear runs still descending), so it is an attempt
    quick_page_attempts={"abab": "shortcuts-reference-abab-gap-undecided.json"},
)
