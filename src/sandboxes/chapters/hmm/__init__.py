"""Chapter: which masked-prediction tasks identify an HMM (Liu, Hsu, Ravikumar, Risteski).

Each section function computes one section of the chapter page and returns its data (a ``TypedDict`` per section,
which the section's figures in ``figures`` read); its rows judge that data. The rows themselves come from small
pure functions (``*_claims``) of the section's data or of a few arrays, so that the tests can hand each of them a
counterfactual in which it fails.

``measure`` computes each section (the exact checks, the learning runs) into its data, ``judge`` makes every
section's rows from its config and data alone and holds the tolerances, ``paper`` sets what the paper says of the
learning experiment beside a run's; ``figures`` draws them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...profiles import (
    Custom,
    Param,
    at_least,
    each,
    in_range,
    positive,
    with_reference,
)
from ...sections import Chapter, Section
from .judge import (
    counterexample_rows,
    ghmm_rows,
    ghmm_tensor_rows,
    ideal_recovery,
    ideal_recovery_summary,
    learning_rows,
    paper_example_rows,
    powers_rows,
    recovery_rows,
)
from .measure import (
    TASK_ORDERS,
    counterexample,
    ghmm,
    ghmm_tensor,
    learning,
    paper_example,
    parse_shapes,
    powers,
    recovery,
)
from .paper import learning_vs_paper

__all__ = ["CHAPTER", "PARAMS", "TASK_ORDERS", "ideal_recovery", "ideal_recovery_summary"]


def _draw_shapes(rng: np.random.Generator, near: str) -> str:
    """One to three (d x k) sizes a reader might choose."""
    ks = rng.integers(2, 7, size=int(rng.integers(1, 4)))
    return ",".join(f"{k + int(rng.integers(0, 4))}x{k}" for k in ks)


SHAPES = Custom(parse_shapes, "comma-separated sizes d x k with d >= k and 2 <= k <= 8", _draw_shapes)
SAMPLES = each(at_least(1), min_length=2)  # two sizes at least, to measure a rate


PARAMS = (
    Param(
        "k",
        int,
        3,
        3,
        "hidden states of the generated HMMs and G-HMM (a rotation about 1 needs k >= 3)",
        in_range(3, 8),
    ),
    Param("d", int, 4, 4, "observed symbols (HMM) or dimension (G-HMM), at least k", at_least(3)),
    Param("seed", int, 0, 0, "seed of the random HMMs, counterexamples and G-HMM", at_least(0)),
    Param(
        "candidates", int, 300, 1000, "random HMMs searched for the most distinguishable counterexample", at_least(1)
    ),
    Param("max_power", int, 10, 30, "Claim 1 is checked for t = 2 .. max_power", at_least(2)),
    Param("shapes", str, "3x2,4x3,6x4,8x6", "3x2,4x3,6x4,8x5,8x6,10x8", "(d x k) sizes for exact recovery", SHAPES),
    Param("random_hmms", int, 5, 50, "random HMMs per size for exact recovery", at_least(1)),
    Param(
        "samples",
        str,
        "1000,3000,10000,30000",
        "1000,3000,10000,30000,100000,300000,1000000",
        "sample sizes N of the learning experiment",
        SAMPLES,
    ),
    Param("steps", int, 400, 3000, "training steps per predictor", at_least(1)),
    Param("batch_size", int, 1024, 8192, "minibatch drawn (with replacement) from the N samples", at_least(1)),
    Param("lr", float, 1e-2, 1e-2, "Adam learning rate (cosine schedule down to 1/1000 of it)", positive),
    Param("hidden", int, 16, 64, "hidden width of the one-hidden-layer ReLU predictor", at_least(1)),
    Param("ghmm_starts", int, 6, 40, "random starts of each G-HMM fit", at_least(1)),
    Param("ghmm_points", int, 100, 400, "points x at which the G-HMM predictor is matched", at_least(1)),
)
# Reference: sample sizes up to 10^6, the full optimiser budget (results/README.md, "Sizing notes").
PARAMS = with_reference(
    PARAMS, {"samples": "1000,3000,10000,30000,100000,300000,1000000", "steps": 3000, "batch_size": 8192, "hidden": 64}
)


def check(config: dict[str, Any], n_seeds: int) -> None:
    """d >= k (an HMM has at least as many symbols as hidden states) and ghmm_points >= 2k (the G-HMM fits have
    more equations than unknowns); checked before any section runs."""
    if config["d"] < config["k"]:
        raise ValueError(f"the HMMs need d >= k, got d={config['d']}, k={config['k']}")
    if config["ghmm_points"] < 2 * config["k"]:
        raise ValueError(f"the G-HMM fits need ghmm_points >= 2k = {2 * config['k']}, got {config['ghmm_points']}")


# the unit tests' scale: every section end to end in seconds
UNIT_SCALE = {
    "candidates": 60,
    "shapes": "3x2",
    "random_hmms": 1,
    "samples": "1000,3000",  # where an ideal learner's recovery is linear, so that the slope row is made
    "steps": 2,
    "batch_size": 16,
    "ghmm_starts": 1,
    "ghmm_points": 20,
}
# the full profile with only its scale shrunk (steps, widths, sample counts): every full-only structure stays
FULL_SHRUNK = {
    "candidates": 60,
    "random_hmms": 1,
    "samples": "200,400",
    "steps": 2,
    "batch_size": 16,
    "ghmm_starts": 1,
    "ghmm_points": 20,
}

CHAPTER = Chapter(
    "hmm",
    "HMM identifiability from masked prediction",
    PARAMS,
    seeds={"quick": 3, "reference": 10, "full": 10},
    sections=(
        Section(
            "paper_example",
            "Theorems 4 and 6: the paper's example",
            paper_example,
            rows=paper_example_rows,
            figures=("rotation_sweep",),
        ),
        Section(
            "counterexample",
            "A counterexample that a learner can tell apart",
            counterexample,
            rows=counterexample_rows,
        ),
        Section("powers", "Claim 1: powers of T do not identify T", powers, rows=powers_rows, figures=("powers",)),
        Section(
            "recovery",
            "Theorem 7: parameters from exact two-token predictors",
            recovery,
            rows=recovery_rows,
            figures=("exact_recovery",),
        ),
        Section(
            "learning",
            "Learning from samples",
            learning,
            min_seeds=2,
            trains=True,
            rows=learning_rows,
            figures=("learned_distance", "predictor_error", "learned_recovery"),
            reference=True,
            paper=learning_vs_paper,
        ),
        Section("ghmm", "Theorem 5: Gaussian emissions", ghmm, rows=ghmm_rows, figures=("ghmm_fits",)),
        Section(
            "ghmm_tensor",
            "Theorems 8 and 9: two tokens, and the conditional law",
            ghmm_tensor,
            rows=ghmm_tensor_rows,
            figures=("ghmm_tensor",),
        ),
    ),
    check=check,
    reference_variants={"k4": {"k": 4, "d": 5}},  # issue 15 asks for the learning curves at k = 3 and 4
    unit_scale=UNIT_SCALE,
    full_shrunk=FULL_SHRUNK,
)
