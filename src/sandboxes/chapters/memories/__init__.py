"""Chapter: weight matrices as associative memories (Bietti et al. 2023; Cabannes, Dohmatob, Bietti 2024; Nichani,
Lee, Bietti 2025).

``measure`` computes each section into its data (a ``TypedDict`` per section, which ``figures`` draws), ``judge``
makes every section's rows from its config and data alone and holds the tolerances, ``paper`` sets what the papers
report of the factual recall training beside a run's.
"""

from __future__ import annotations

import numpy as np

from ...profiles import Custom, Interval, Param, at_least, each, in_range, int_list, with_reference
from ...sections import Chapter, Section
from .judge import capacity_rows, capacity_summary, gradient_rows, hallucination_rows
from .measure import capacity, gradient, hallucination
from .paper import hallucination_vs_paper

__all__ = ["CHAPTER", "PARAMS", "capacity_summary"]

SMALL_INIT = Interval(0.0, 1e-2, open_low=True)  # the theorem's small positive initialisation
DIM_RANGE = in_range(8, 4096)


def _draw_dims(rng: np.random.Generator, near: str) -> str:
    """One to three dimensions from half to all of those a chapter uses (the work grows as d^5 / ln d)."""
    scale = int_list(near)
    picks = {int(scale[int(rng.integers(len(scale)))] * 2 ** rng.uniform(-1, 0)) for _ in range(1 + rng.integers(3))}
    return ",".join(str(d) for d in sorted({max(8, d) for d in picks}))


DIMS = Custom(each(DIM_RANGE).check, "comma-separated dimensions from 8 to 4096", _draw_dims)

PARAMS = (
    Param("seed", int, 0, 0, "seed of the embeddings of the lemma's example and of the facts table", at_least(0)),
    Param("grad_inputs", int, 24, 24, "inputs N of the lemma's example", at_least(2)),
    Param("grad_outputs", int, 16, 16, "outputs K of the lemma's example", at_least(2)),
    Param("grad_d", int, 32, 32, "embedding dimension of the lemma's example", at_least(2)),
    Param(
        "capacity_dims",
        str,
        "32,64,128,256",
        "32,64,128,256,512,1024,2048",
        "embedding dimensions d at which each memory's capacity is measured",
        DIMS,
    ),
    Param("capacity_seeds", int, 10, 20, "draws of the embeddings per dimension", at_least(1)),
    Param("subjects", int, 16, 16, "subjects S of the factual recall task", at_least(1)),
    Param("relations", int, 4, 4, "relations R", at_least(1)),
    Param("per_relation", int, 8, 8, "answers per relation |A_r|", at_least(1)),
    Param("noise", int, 20, 20, "noise tokens", at_least(1)),
    Param("fact_T", int, 32, 32, "tokens per sequence (the end token last)", at_least(3)),
    Param("fact_init", float, 1e-5, 1e-5, "every weight's starting value (small and positive)", SMALL_INIT),
    Param(
        "fact_lr",
        float,
        0.1,
        0.1,
        "size of the plain gradient steps (small: the theorem is about gradient flow)",
        Interval(0.0, 1.0, open_low=True),
    ),
    Param("fact_batch", int, 1024, 1024, "sequences per step", at_least(1)),
    Param("fact_steps", int, 8192, 8192, "gradient steps", at_least(1)),
)
# Reference: dimensions up to 512 and 20 draws each (at d = 1024 one recall check of N* associations takes about 10 s,
# and a bisection for 20 seeds of both memories about 600 of them); the training as quick, with more seeds.
PARAMS = with_reference(PARAMS, {"capacity_dims": "32,64,128,256,512", "capacity_seeds": 20})


UNIT_SCALE = {"capacity_dims": "16,128,180", "capacity_seeds": 3, "fact_steps": 64, "fact_batch": 64}
FULL_SHRUNK = {"capacity_dims": "16,32", "capacity_seeds": 2, "fact_steps": 4, "fact_batch": 16}

CHAPTER = Chapter(
    "memories",
    "Associative memories and factual recall",
    PARAMS,
    seeds={"quick": 3, "reference": 10, "full": 10},
    sections=(
        Section("gradient", "Gradients are memories", gradient, rows=gradient_rows, figures=("one_step",)),
        Section(
            "capacity",
            "How many associations a d x d memory stores",
            capacity,
            rows=capacity_rows,
            figures=("capacity",),
            sampled_rows="capacity of",
        ),
        Section(
            "hallucination",
            "The relation first, then the subject",
            hallucination,
            trains=True,
            rows=hallucination_rows,
            figures=("hallucination",),
            reference=True,
            paper=hallucination_vs_paper,
        ),
    ),
    unit_scale=UNIT_SCALE,
    full_shrunk=FULL_SHRUNK,
)
