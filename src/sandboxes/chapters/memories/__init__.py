"""Chapter: weight matrices as associative memories (Bietti et al. 2023; Cabannes, Dohmatob, Bietti 2024; Nichani,
Lee, Bietti 2025).

``measure`` computes each section into its data (a ``TypedDict`` per section, which ``figures`` draws), ``judge``
makes every section's rows from its config and data alone and holds the tolerances, ``paper`` sets what the papers
report of the factual recall training beside a run's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...profiles import (
    Choice,
    Custom,
    Interval,
    Param,
    at_least,
    each,
    in_range,
    int_list,
    positive,
    with_reference,
)
from ...sections import Chapter, Section
from .judge import (
    MLP_SMALLEST_DIM,
    capacity_rows,
    capacity_summary,
    distributional_rows,
    fact_build_rows,
    fact_capacity_rows,
    fact_capacity_summary,
    gradient_rows,
    hallucination_rows,
    mlp_capacity_rows,
    mlp_capacity_summary,
)
from .measure import (
    MOST_FACT_SEQUENCES,
    capacity,
    distributional,
    fact_build,
    fact_capacity,
    gradient,
    hallucination,
    mlp_capacity,
    noisy_task,
    recalls_per_sequence,
    search_start,
)
from .paper import distributional_vs_paper, fact_capacity_vs_paper, hallucination_vs_paper, mlp_capacity_vs_paper

__all__ = ["CHAPTER", "PARAMS", "capacity_summary", "fact_capacity_summary", "mlp_capacity_summary"]

SMALL_INIT = Interval(0.0, 1e-2, open_low=True)  # the theorem's small positive initialisation
DIM_RANGE = in_range(8, 4096)


def _draw_dims(rng: np.random.Generator, near: str) -> str:
    """One to three dimensions from half to all of those a chapter uses (the work grows as d^5 / ln d)."""
    scale = int_list(near)
    picks = {int(scale[int(rng.integers(len(scale)))] * 2 ** rng.uniform(-1, 0)) for _ in range(1 + rng.integers(3))}
    return ",".join(str(d) for d in sorted({max(8, d) for d in picks}))


DIMS = Custom(each(DIM_RANGE).check, "comma-separated dimensions from 8 to 4096", _draw_dims)


def _draw_near(rng: np.random.Generator, near: str, low: int) -> str:
    """Two or three values from half to all of a scale's, each at least ``low`` (a reader's sweep near ours)."""
    scale = int_list(near)
    picks = {max(low, int(scale[int(rng.integers(len(scale)))] * 2 ** rng.uniform(-1, 0))) for _ in range(3)}
    while len(picks) < 2:  # two values at least: a law is fitted across them
        picks.add(max(picks) + 1)
    return ",".join(str(v) for v in sorted(picks))


FACT_DIMS = Custom(
    each(in_range(2, 256)).check,
    "comma-separated dimensions from 2 to 256",
    lambda rng, near: _draw_near(rng, near, 16),  # where the shapes' runs store more than 64 facts
)
MLP_DIMS = Custom(
    each(in_range(2, 512)).check,
    "comma-separated dimensions from 2 to 512",
    lambda rng, near: _draw_near(rng, near, MLP_SMALLEST_DIM),
)
RATIOS = Custom(
    each(in_range(1, 64)).check,
    "comma-separated widths m / d from 1 to 64",
    lambda rng, near: _draw_near(rng, near, 1),
)


def _check_shapes(text: str) -> None:
    """Comma-separated ``alpha:beta`` pairs, each in (0, 8]: H d_h = alpha d and m = beta d."""
    for pair in str(text).split(","):
        values = pair.split(":")
        if len(values) != 2:
            raise ValueError(f"a shape is alpha:beta (H d_h = alpha d, m = beta d), got {pair!r}")
        for value in values:
            Interval(0.0, 8.0, open_low=True).check(float(value))


def _draw_shapes(rng: np.random.Generator, near: str) -> str:
    """One or two shapes with alpha and beta among the authors' 1/4 to 4."""
    picks = {f"{rng.choice([0.25, 0.5, 1, 2, 4]):g}:{rng.choice([0.25, 0.5, 1, 2, 4]):g}" for _ in range(2)}
    return ",".join(sorted(picks))


NOISY_OPTIMIZER = Choice(
    {
        "adamw": "AdamW, no weight decay (ours)",
        "sgd": "SGD with momentum 0.9, no weight decay (Chen et al.'s, whose decay is 1e-4)",
    }
)
NOISY_LR_CAP = {"adamw": 0.02, "sgd": 0.1}  # the largest constant step of each optimiser the check accepts
NOISY_TOKENS = Custom(
    each(in_range(8, 512)).check,
    "comma-separated vocabulary sizes from 8 to 512",
    lambda rng, near: _draw_near(rng, near, 8),
)
SHAPES = Custom(_check_shapes, "comma-separated alpha:beta pairs, each in (0, 8]", _draw_shapes)
AUTHORS_SHAPES = ",".join(f"{a:g}:{b:g}" for a in (4, 2, 1, 0.5, 0.25) for b in (4, 2, 1, 0.5, 0.25))
ACCURACY = Interval(0.5, 1.0)  # a share of associations right; below one half a search could grow without end
NOISY_RECALLS = 2  # scored recalls (the trigger's second and later occurrences) a noisy sequence holds on average
MOST_ASSOCIATIONS = 40000  # the widest search's first bracket end (full profile: about 32000); its logits are N^2

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
    Param("mlp_dims", str, "8,12", "8,16,32,64,90", "embedding dimensions d of the trained MLP memories", MLP_DIMS),
    Param("mlp_ratios", str, "1,2", "1,2,4,8", "widths m of the MLP memories, as multiples of d", RATIOS),
    Param("mlp_seeds", int, 2, 5, "draws of embeddings and starting weights per (d, m)", at_least(1)),
    Param("mlp_steps", int, 2048, 32768, "full-batch Adam steps of each MLP memory", at_least(1)),
    Param("mlp_lr", float, 3e-2, 3e-2, "Adam's step size for the MLP memories (the authors')", positive),
    Param(
        "mlp_accuracy",
        float,
        0.99,
        0.99,
        "share of associations an MLP memory must get right to count as storing them (the authors')",
        ACCURACY,
    ),
    Param(
        "facts_dims",
        str,
        "16,24",
        "8,11,16,22,32,45,64,90,128,181",
        "embedding dimensions d of the one-layer transformers whose facts are counted",
        FACT_DIMS,
    ),
    Param(
        "facts_shapes", str, "1:1", AUTHORS_SHAPES, "model shapes alpha:beta, H d_h = alpha d and m = beta d", SHAPES
    ),
    Param("facts_heads", int, 8, 8, "attention heads H (the authors')", in_range(1, 64)),
    Param("facts_per_relation", int, 8, 8, "answers per relation (the authors')", in_range(1, 64)),
    Param("facts_T", int, 32, 32, "tokens per sequence (the end token last)", in_range(3, 256)),
    Param("facts_batch", int, 256, 1024, "fresh sequences per step", at_least(1)),
    Param("facts_steps", int, 2048, 16384, "Adam steps of each run at most", at_least(1)),
    Param(
        "facts_lrs",
        str,
        "1e-2",
        "1e-3,3e-3,1e-2",
        "Adam step sizes, tried in turn until one recalls the facts (the authors try three)",
        each(Interval(0.0, 1.0, open_low=True)),
    ),
    Param(
        "facts_accuracy", float, 0.99, 0.99, "share of held-out sequences a model must answer (the authors')", ACCURACY
    ),
    Param("facts_seeds", int, 1, 1, "draws of facts, sequences and starting weights per (shape, d)", at_least(1)),
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
    Param("build_draws", int, 16, 256, "sequences per fact read by the layer set by hand", at_least(1)),
    Param(
        "noisy_tokens",
        str,
        "8,16,32",
        "16,32,64,128,256",
        "vocabulary sizes N of the noisy recall task (Chen et al.: 65 characters)",
        NOISY_TOKENS,
    ),
    Param(
        "noisy_p",
        float,
        0.5,
        0.5,
        "probability that the noise token follows the trigger instead of its answer (Chen et al.: 0.5)",
        Interval(0.2, 0.8),
    ),
    Param("noisy_T", int, 32, 256, "tokens per sequence of the noisy recall task (Chen et al.: 256)", at_least(8)),
    Param("noisy_d", int, 32, 256, "width of the two-layer transformers (Chen et al.: 256)", at_least(8)),
    Param("noisy_batch", int, 32, 512, "sequences per step (Chen et al.: 512)", at_least(1)),
    Param("noisy_steps", int, 900, 5000, "steps of each run (Chen et al.: 5000)", at_least(1)),
    Param("noisy_optimizer", str, "adamw", "adamw", "optimiser of the noisy recall runs", NOISY_OPTIMIZER),
    Param(
        "noisy_lr",
        float,
        1e-2,
        3e-3,
        f"constant step size (AdamW at most {NOISY_LR_CAP['adamw']:g}: pilots learned at 3e-3 and 1e-2; SGD with "
        f"momentum at most {NOISY_LR_CAP['sgd']:g}: Chen et al.'s 0.03)",
        Interval(0.0, max(NOISY_LR_CAP.values()), open_low=True),
    ),
    Param("noisy_every", int, 12, 5, "steps between evaluations (Chen et al.: 5)", at_least(1)),
    Param("noisy_seeds", int, 2, 5, "seeds (initialisation and data) per vocabulary size", at_least(1)),
)
# Reference: dimensions up to 512 and 20 draws each (at d = 1024 one recall check of N* associations takes about 10 s,
# and a bisection for 20 seeds of both memories about 600 of them); the factual recall training as quick, with more
# seeds; MLP memories up to d = 32 and m = 4d (about 45 minutes: a seed's d = 32, m = 4d search about 7 of them);
# one-layer transformers at d = 24 and 32 in four shapes, three on the diagonal whose P spans a factor 4 at each d and
# 0.5:2 (the 1:1 shape's P with the load on the MLP), in the authors' batch of 1024, 8192 steps (half the authors';
# a pilot search at d = 32, shape 2:2 stored S = 28, its run at S = 27 stopping at about half of them), two seeds
# (16 runs: the pooled fit's 14 degrees of freedom, 13 across shapes at a fixed d; a d = 32, 2:2 search took 5.5 min).
# Noisy recall: N = 16 to 128 (a factor 8 for the two growth laws) at T = 64, d = 64, batch 64, 2000 AdamW steps at
# 3e-3 (pilots: the answer learned after about 105, 200 and 340 steps at N = 16, 32, 64), an evaluation after each
# of the first 32 updates and every 5 steps after, 5 seeds.
# Two earlier references are kept in results/attempts/: shapes 0.5:0.5, 1:1, 2:2 at d = 16, 24, 4096 steps (no row),
# and 1:1, 2:2 at d = 16, 24, 32 (the pooled row held, carried by d).
PARAMS = with_reference(
    PARAMS,
    {
        "capacity_dims": "32,64,128,256,512",
        "capacity_seeds": 20,
        "mlp_dims": "8,11,16,22,32",
        "mlp_ratios": "1,2,4",
        "mlp_seeds": 3,
        "mlp_steps": 4096,
        "facts_dims": "24,32",
        "facts_shapes": "0.5:0.5,1:1,2:2,0.5:2",
        "facts_batch": 1024,
        "facts_steps": 8192,
        "facts_seeds": 2,
        "build_draws": 64,
        "noisy_tokens": "8,16,32,64",  # N <= d, as the authors' 65 characters at d = 256 (the attempt at 128 is kept)
        "noisy_T": 64,
        "noisy_d": 64,
        "noisy_batch": 64,
        "noisy_steps": 2000,
        "noisy_lr": 3e-3,
        "noisy_every": 5,
        "noisy_seeds": 5,
    },
)


def check(config: dict[str, Any], n_seeds: int) -> None:
    """Refuse, before any work, sizes or shapes listed twice (two runs of one name) and searches whose first bracket
    would hold more associations than :data:`MOST_ASSOCIATIONS` (their N^2 logits would not fit in memory) or a layer
    set by hand that would read more than :data:`MOST_FACT_SEQUENCES` sequences, and a noisy recall step above its
    optimiser's :data:`NOISY_LR_CAP`; the transformers' domains keep their searches within about 1400 subjects."""
    for name in ("mlp_dims", "mlp_ratios", "facts_dims", "noisy_tokens"):
        values = int_list(config[name])
        if len(set(values)) < len(values):
            raise ValueError(f"{name} repeats a value: {config[name]}")
    shapes = [tuple(float(v) for v in pair.split(":")) for pair in str(config["facts_shapes"]).split(",")]
    if len(set(shapes)) < len(shapes):
        raise ValueError(f"facts_shapes repeats a shape: {config['facts_shapes']}")
    sequences = config["subjects"] * config["relations"] * config["build_draws"]
    if sequences > MOST_FACT_SEQUENCES:
        raise ValueError(
            f"the layer set by hand would read {sequences} sequences (subjects x relations x build_draws), more than "
            f"{MOST_FACT_SEQUENCES}"
        )
    cap = NOISY_LR_CAP[config["noisy_optimizer"]]
    if config["noisy_lr"] > cap:
        raise ValueError(
            f"noisy_lr = {config['noisy_lr']:g} is above {cap:g}, the largest {config['noisy_optimizer']} step"
        )
    for tokens in int_list(config["noisy_tokens"]):
        recalls = recalls_per_sequence(noisy_task(config, tokens))
        if recalls < NOISY_RECALLS:
            raise ValueError(
                f"at N = {tokens} the trigger comes back {recalls:.1f} times in noisy_T = {config['noisy_T']} tokens "
                f"on average, fewer than {NOISY_RECALLS}: too few recalls to learn from; a longer noisy_T"
            )
    largest = max(int_list(config["mlp_dims"])) ** 2 * max(int_list(config["mlp_ratios"]))
    if 2 * search_start(largest) > MOST_ASSOCIATIONS:
        raise ValueError(
            f"the largest MLP memory (m d = {largest}) starts its search at {2 * search_start(largest):.0f} "
            f"associations, more than {MOST_ASSOCIATIONS}"
        )


UNIT_SCALE = {
    "capacity_dims": "16,128,180",
    "capacity_seeds": 3,
    "fact_steps": 64,
    "fact_batch": 64,
    "mlp_dims": "8,10",
    "mlp_seeds": 1,
    "mlp_steps": 256,
    "facts_dims": "8,16",
    "facts_seeds": 2,
    "facts_batch": 32,
    "facts_steps": 32,
    "build_draws": 4,
    "noisy_tokens": "8,16,32",
    "noisy_steps": 40,
    "noisy_batch": 8,
    "noisy_d": 16,
    "noisy_every": 4,
}
FULL_SHRUNK = {
    "capacity_dims": "16,32",
    "capacity_seeds": 2,
    "fact_steps": 4,
    "fact_batch": 16,
    "mlp_dims": "8,10",
    "mlp_ratios": "1,2",
    "mlp_seeds": 2,
    "mlp_steps": 16,
    "facts_dims": "8,16",
    "facts_shapes": "1:1,0.5:2",
    "facts_batch": 16,
    "facts_steps": 8,
    "facts_lrs": "1e-2",
    "build_draws": 4,
    "noisy_tokens": "16,32",
    "noisy_T": 64,
    "noisy_d": 16,
    "noisy_batch": 8,
    "noisy_steps": 8,
    "noisy_every": 4,
}

CHAPTER = Chapter(
    "memories",
    "Associative memories and factual recall",
    PARAMS,
    seeds={"quick": 2, "reference": 10, "full": 10},
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
            "mlp_capacity",
            "How many associations a trained MLP of width m stores",
            mlp_capacity,
            trains=True,
            by_seed=False,
            rows=mlp_capacity_rows,
            figures=("mlp_capacity",),
            reference=True,
            paper=mlp_capacity_vs_paper,
        ),
        Section(
            "fact_capacity",
            "How many facts one layer stores",
            fact_capacity,
            trains=True,
            by_seed=False,
            rows=fact_capacity_rows,
            figures=("fact_capacity",),
            reference=True,
            paper=fact_capacity_vs_paper,
        ),
        Section(
            "fact_build",
            "A layer set by hand that recalls every fact",
            fact_build,
            rows=fact_build_rows,
            figures=("fact_build",),
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
        Section(
            "distributional",
            "The bigram in the MLP, the recall in attention",
            distributional,
            trains=True,
            by_seed=False,
            rows=distributional_rows,
            figures=("distributional",),
            reference=True,
            paper=distributional_vs_paper,
        ),
    ),
    unit_scale=UNIT_SCALE,
    full_shrunk=FULL_SHRUNK,
    check=check,
    # the searches: their quick runs take minutes, and their quick sizes leave the fits too few degrees of freedom for
    # a row; the noisy recall: its training was 77 s of the quick page's 160 s under nbval (ATen's default path, one
    # thread), and the reference's N reach d, as the authors' do
    quick_page_from_reference=("mlp_capacity", "fact_capacity", "distributional"),
)
