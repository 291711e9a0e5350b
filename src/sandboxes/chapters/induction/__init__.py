"""Chapter 5: induction heads on in-context Markov chains (Nichani, Damian and Lee 2024; Edelman et al. 2024).

Every sequence draws its own transition kernel from a Dirichlet prior, so no fixed weights can
predict it: a model must count transitions in the sequence it reads. Sections: the loss levels a
model can sit at and the chi-square information that ranks each position's possible parents
(exact or fixed-seed Monte Carlo); an explicit two-layer induction head equal to the count
estimator, and an order-m one in three layers of one head each, in two, and in two with one head per
parent in layer 1 (exact); the first gradient on layer 1 (derived and by autograd) and Nichani et
al.'s two-stage training of their reduced model;
one- and two-layer transformers trained online (their final loss against the levels, layer 1's
attention on the causal graph, and kernels of another prior); three and two layers of one head trained
on a chain of order m (Rajaraman et al.; Ekbote et al.), and two layers with a relative-position head
per parent (Chen et al.); two layers trained on a prior of restricted support and tested outside it,
and the two stages on the same prior (the corollary);
Bietti et al.'s trigger task (and the width at which layer 1 stores positions), and their simplified model in
which only three associative memories train.

``measure`` computes each section (the exact checks, the Monte Carlo estimates and the training runs) into its data,
``judge`` makes the rows from a section's config and data alone, ``paper`` sets the papers' reports beside a run's;
``figures`` draws them.
"""

from __future__ import annotations

import math
from typing import Any

from ...data.trigger import TRIGGER_CHOICES
from ...model import check_heads
from ...profiles import (
    FLAG,
    Choice,
    Interval,
    Param,
    at_least,
    each,
    float_list,
    in_range,
    int_list,
    positive,
    with_reference,
)
from ...sections import Chapter, Section
from .judge import (
    GRADIENT_CHUNKS,
    construction_rows,
    corollary_rows,
    gradient_rows,
    higher_order_rows,
    levels_rows,
    memories_rows,
    multi_head_order_rows,
    order_training_rows,
    parent_heads_rows,
    separate_rows,
    staged_rows,
    stationary_rows,
    support_rows,
    three_steps_rows,
    training_rows,
    trigger_rows,
    trigger_width_rows,
    two_layer_order_rows,
)
from .measure import (
    STEP_CHUNK,
    construction,
    corollary,
    gradient,
    higher_order,
    levels,
    memories,
    multi_head_order,
    order_training,
    parent_heads,
    separate,
    staged,
    stationary,
    support,
    three_steps,
    training,
    trigger,
    trigger_width,
    two_layer_order,
)
from .paper import (
    corollary_vs_paper,
    memories_vs_paper,
    order_training_vs_paper,
    parent_heads_vs_paper,
    separate_vs_paper,
    staged_vs_paper,
    support_vs_paper,
    three_steps_vs_paper,
    training_vs_paper,
    trigger_vs_paper,
    trigger_width_vs_paper,
    update_seconds,
)
from .tasks import trigger_widths

__all__ = ["CHAPTER", "PARAMS", "update_seconds"]


GRAPHS = {"chain": "the parent is the token before", "tree": "a fixed random parent within the window"}
GRAPH = Choice(GRAPHS)
STAGE_GRAPH = Choice({**GRAPHS, "random": "Nichani et al.'s: a parent anywhere before, or none"})
TRIGGER_CHOICE = Choice(
    dict(zip(TRIGGER_CHOICES, ("uniform tokens", "the bigram's most frequent tokens, as Bietti et al. fix them")))
)
TRIGGER_SCORED = Choice(
    {
        "every": "every next token is scored, as Bietti et al.'s code trains its full model",
        "recall": "only the output after a trigger's second and later occurrences, as their code trains the "
        "simplified model (loss_head_only)",
    }
)
TRIGGER_DRAW = Choice(
    {
        "fixed": "every sequence has the same triggers (trigger_choice)",
        "per_sequence": "each sequence draws its own from the bigram's stationary law, without replacement "
        "(Bietti et al.'s code's default)",
    }
)
MAX_STEPS_T, MAX_STEPS_WIDTH = 512, 4096  # the three steps' largest length and random width (memory, not theory)
MAX_ENUMERATED = 50_000  # sequences the construction is checked on, at most (every one of k^(T+1))


PARAMS = (
    Param("k", int, 3, 3, "states of the in-context chains", in_range(2, 8)),
    Param("alpha", float, 1.0, 1.0, "Dirichlet concentration of each kernel row (the prior)", Interval(0.05, 20.0)),
    Param("graph", str, "chain", "tree", "causal graph: chain or tree", GRAPH),
    Param("window", int, 4, 8, "a tree position's parent is drawn among this many positions before it", at_least(1)),
    Param("seed", int, 0, 0, "seed of the tree, the Monte Carlo estimates and the held-out sequences", at_least(0)),
    Param("T", int, 32, 128, "tokens a model reads", in_range(4, 512)),
    Param("level_samples", int, 20000, 100000, "sequences of the Monte Carlo loss levels", at_least(2)),
    Param("chi2_kernels", int, 2000, 10000, "prior draws averaged in the chi-square information", at_least(2)),
    Param(
        "chi2_positions",
        int,
        32,
        64,
        "positions i (from the start) whose chi-square information is tabulated",
        at_least(2),
    ),
    Param("construct_k", int, 3, 3, "states of the induction-head construction's check", in_range(2, 4)),
    Param(
        "construct_T", int, 7, 8, "tokens of the construction's check (every sequence is enumerated)", in_range(2, 12)
    ),
    Param("beta", float, 30.0, 30.0, "attention score scale of the constructions", Interval(5.0, 60.0)),
    Param("order", int, 2, 2, "order m of the chain the order-m section builds its induction head for", in_range(1, 4)),
    Param("order_T", int, 32, 128, "tokens a model reads in the order-m training", in_range(4, 512)),
    Param("order_d", int, 16, 64, "width of the models trained on the order-m chain", at_least(1)),
    Param(
        "order_steps", int, 3000, 20000, "training steps on the order-m chain (fresh sequences each step)", at_least(1)
    ),
    Param("order_lr", float, 1e-2, 1e-2, "AdamW learning rate of that training", positive),
    Param("order_layer_norm", bool, False, False, "layer norm before each attention and MLP of those models", FLAG),
    Param("heads", int, 2, 4, "relative-position heads in layer 1 of the parent-heads models", in_range(1, 8)),
    Param("heads_window", int, 5, 8, "lags a parent head reads: 0 to heads_window - 1", in_range(2, 32)),
    Param("heads_steps", int, 1000, 3000, "training steps of the parent-heads models", at_least(1)),
    Param("heads_lr", float, 5e-2, 5e-2, "AdamW learning rate of that training", positive),
    Param(
        "grad_samples", int, 16000, 64000, "sequences of the first gradient where the first stage starts", at_least(2)
    ),
    Param("stage_k", int, 10, 10, "states of the stages' chains (Nichani et al.: 10)", in_range(2, 16)),
    Param(
        "stage_alpha",
        float,
        0.1,
        0.1,
        "Dirichlet concentration of the stages' kernels (Nichani et al.: 0.1)",
        Interval(0.05, 20.0),
    ),
    Param(
        "stage_T",
        int,
        64,
        64,
        "tokens the stages read, the test token last (Nichani et al.'s experiment: 20)",
        in_range(4, 256),
    ),
    Param("stage_graph", str, "random", "random", "causal graph of the stages: chain, tree or random", STAGE_GRAPH),
    Param(
        "stage_beta",
        float,
        1.0,
        1.0,
        "layer 2's score scale, held during the first stage (its beta_0)",
        Interval(0.1, 30.0),
    ),
    Param(
        "opt_samples",
        int,
        512,
        4096,
        "held-out sequences at each length of Thm (1)'s rate (no training: the graph at its best scale against OPT)",
        at_least(2),
    ),
    Param("stage_steps", int, 300, 6000, "gradient steps of layer 1 alone (Nichani et al.'s first stage)", at_least(1)),
    Param("stage_lr", float, 200.0, 200.0, "step size of those plain gradient steps", positive),
    Param("stage2_steps", int, 300, 3000, "gradient steps of layer 2 alone after it (the second stage)", at_least(1)),
    Param("stage2_lr", float, 1.0, 1.0, "step size of those plain gradient steps", positive),
    Param("d_model", int, 32, 64, "width of the trained transformers", at_least(1)),
    Param("n_head", int, 1, 2, "attention heads per layer (a tree needs two)", at_least(1)),
    Param("steps", int, 1500, 20000, "training steps (fresh sequences each step)", at_least(1)),
    Param("batch_size", int, 64, 64, "sequences per step", at_least(1)),
    Param("lr", float, 2e-2, 3e-3, "AdamW learning rate (cosine schedule after warm-up)", positive),
    Param("warmup", int, 50, 200, "linear warm-up steps", at_least(0)),
    Param(
        "evaluations",
        int,
        40,
        40,
        "held-out evaluations along each GPT run (loss and probes; the stages row resolves the switch between two)",
        at_least(2),
    ),
    Param(
        "ood_alpha",
        float,
        0.3,
        0.3,
        "Dirichlet concentration of a second prior whose kernels test the models",
        Interval(0.05, 20.0),
    ),
    Param(
        "eval_size",
        int,
        2048,
        8192,
        "held-out sequences for the final losses, the attention and the OOD test",
        at_least(2),
    ),
    Param(
        "gamma",
        float,
        0.2,
        0.2,
        "floor of the kernels of the support section and the stages: every entry at least gamma / k",
        Interval(0.01, 0.99),
    ),
    Param("trigger_tokens", int, 16, 64, "tokens of the trigger task (Bietti et al.: 65 characters)", in_range(4, 256)),
    Param("triggers", int, 3, 5, "trigger tokens, each followed by its sequence's own output", at_least(1)),
    Param(
        "trigger_zipf",
        float,
        1.0,
        1.0,
        "the trigger task's bigram: its rows' base measure falls as rank^-zipf (0: flat)",
        Interval(0.0, 3.0),
    ),
    Param(
        "trigger_choice",
        str,
        "frequent",
        "frequent",
        "the triggers: the bigram's most frequent tokens (Bietti et al.) or uniform ones",
        TRIGGER_CHOICE,
    ),
    Param(
        "trigger_draw",
        str,
        "fixed",
        "fixed",
        "the GPTs' trigger task: the same triggers in every sequence, or each sequence its own",
        TRIGGER_DRAW,
    ),
    Param(
        "trigger_scored",
        str,
        "every",
        "every",
        "the GPTs' trigger loss: every next token (Bietti et al.'s full model), or only a trigger's output from its "
        "second occurrence (their simplified model's loss_head_only, a departure for the GPTs)",
        TRIGGER_SCORED,
    ),
    Param("trigger_T", int, 64, 256, "tokens a model reads in the trigger task", in_range(4, 512)),
    Param("trigger_steps", int, 1000, 20000, "training steps on the trigger task", at_least(1)),
    Param("width_T", int, 32, 64, "tokens the trigger task's width section reads", in_range(4, 512)),
    Param(
        "width_ratios",
        str,
        "0.5,1,2",
        "0.5,1,2,4",
        "widths of the width section's two-layer GPTs, as multiples of width_T",
        each(positive),
    ),
    Param(
        "memory_T",
        int,
        64,
        256,
        "tokens Bietti et al.'s simplified model reads (of the trigger task)",
        in_range(4, 512),
    ),
    Param("memory_d", int, 64, 256, "width of the simplified model (its random embeddings)", at_least(1)),
    Param(
        "memory_steps", int, 400, 10000, "gradient steps of the simplified model's three memories together", at_least(1)
    ),
    Param("memory_lr", float, 10.0, 30.0, "step size of those plain gradient steps", positive),
    Param("steps_T", int, 32, 256, "tokens the simplified model reads in the three gradient steps", at_least(4)),
    Param(
        "steps_samples",
        int,
        32768,
        262144,
        "sequences averaged in each population gradient of the three steps",
        at_least(2 * STEP_CHUNK),
    ),
    Param("step_first", float, 1.0, 1.0, "Frobenius length of the first step (on W_OV2)", positive),
    Param(
        "step_second",
        str,
        "1,10",
        "1,3,10,30,100",
        "Frobenius lengths of the second step (on W_KQ2) tried",
        each(positive),
    ),
    Param("step_third", float, 10.0, 10.0, "Frobenius length of the third step (on W_KQ1)", positive),
    Param(
        "steps_widths",
        str,
        "64",
        "256,1024",
        "widths of random (not orthonormal) parts, stepped as well at the best second length",
        each(at_least(1)),
    ),
    Param(
        "separate_steps",
        int,
        250,
        10000,
        "gradient steps of each memory trained alone, one after another (top down)",
        at_least(1),
    ),
)
# Reference sizes: one-seed pilots and step times (results/README.md, "Sizing notes").
PARAMS = with_reference(
    PARAMS,
    {
        "graph": "tree",
        "T": 64,
        "n_head": 2,
        "d_model": 64,
        "steps": 10000,
        "lr": 1e-2,
        "stage_steps": 3000,
        "stage2_steps": 3000,
        "eval_size": 8192,
        "trigger_tokens": 65,
        "triggers": 5,
        "trigger_T": 256,
        "trigger_steps": 2400,
        "width_T": 64,
        "width_ratios": "0.5,1,2,4",
        "memory_T": 128,
        "memory_d": 128,
        "memory_steps": 3000,
        "memory_lr": 30.0,
        "separate_steps": 1500,
        "steps_T": 64,
        "steps_samples": 65536,
        "step_second": "1,3,10,30",
        "steps_widths": "128",
        "order_T": 64,
        "order_d": 32,
        "order_steps": 8000,
        "heads_steps": 3000,
    },
)


def check(config: dict[str, Any], n_seeds: int) -> None:
    """d_model divisible by n_head, two heads for a tree, a construction check small enough to enumerate, and
    enough gradient samples for its error; before any section runs."""
    check_heads(config["d_model"], config["n_head"])
    if config["graph"] == "tree" and config["n_head"] < 2:
        raise ValueError(
            "a tree needs n_head >= 2: layer 1 copies the parent of each token (for the keys) and the "
            "parent of the next one (for the query), which differ in a tree"
        )
    if config["triggers"] > config["trigger_tokens"] - 2:
        raise ValueError(
            f"the triggers leave at least two tokens for outputs: triggers <= trigger_tokens - 2, got "
            f"{config['triggers']} of {config['trigger_tokens']}"
        )
    if config["grad_samples"] < 2 * GRADIENT_CHUNKS:
        raise ValueError(
            f"the gradient's error needs grad_samples >= {2 * GRADIENT_CHUNKS}, got {config['grad_samples']}"
        )
    if config["order"] >= config["construct_T"]:
        raise ValueError(
            f"an order-{config['order']} context is seen twice only in sequences longer than the "
            f"order: construct_T > order, got construct_T = {config['construct_T']}"
        )
    if config["heads_window"] <= config["order"]:
        raise ValueError(
            f"a parent head reaches the order-{config['order']} chain's parents only with heads_window > order, got "
            f"heads_window = {config['heads_window']}"
        )
    if config["order"] >= config["order_T"]:
        raise ValueError(
            f"an order-{config['order']} chain conditions on {config['order']} tokens: order_T > order, got "
            f"order_T = {config['order_T']}"
        )
    if config["steps_T"] > MAX_STEPS_T or max(int_list(config["steps_widths"])) > MAX_STEPS_WIDTH:
        raise ValueError(
            f"the three steps hold activations of steps_T x width per sequence: steps_T <= {MAX_STEPS_T} and "
            f"steps_widths <= {MAX_STEPS_WIDTH}, got {config['steps_T']} and {config['steps_widths']}"
        )
    for ratio, width in zip(float_list(config["width_ratios"]), trigger_widths(config)):
        if not math.isclose(ratio * config["width_T"], width) or width < config["n_head"] or width % config["n_head"]:
            raise ValueError(
                f"each of width_ratios times width_T is a width that n_head = {config['n_head']} divides, got "
                f"{ratio:g} x {config['width_T']}"
            )
    count = config["construct_k"] ** (config["construct_T"] + 1)
    if count > MAX_ENUMERATED:
        raise ValueError(
            f"the construction is checked on all construct_k^(construct_T+1) = {count} sequences; "
            f"choose sizes with at most {MAX_ENUMERATED}"
        )


# quick sizes: three seeds, 1500 steps (results/README.md, "Sizing notes").

# the unit tests' scale: every section end to end in seconds
UNIT_SCALE = {
    "T": 8,
    "level_samples": 64,
    "chi2_kernels": 16,
    "chi2_positions": 8,
    "construct_T": 4,
    "construct_k": 2,
    "grad_samples": 64,
    "d_model": 8,
    "steps": 3,
    "batch_size": 8,
    "eval_size": 16,
    "trigger_T": 8,
    "trigger_steps": 3,
    "width_T": 8,
    "stage_steps": 3,
    "stage_T": 32,
    "stage2_steps": 3,
    "opt_samples": 16,
    "memory_T": 16,
    "memory_d": 16,
    "memory_steps": 3,
    "separate_steps": 3,
    "steps_T": 8,
    "steps_samples": 512,
    "steps_widths": "16",
    "order_T": 8,
    "order_d": 8,
    "order_steps": 3,
    "heads_steps": 3,
}
# the full profile with only its scale shrunk (steps, widths, sample counts): every full-only structure stays
FULL_SHRUNK = {
    "T": 16,
    "level_samples": 64,
    "chi2_kernels": 16,
    "chi2_positions": 16,
    "grad_samples": 64,
    "steps": 2,
    "batch_size": 8,
    "eval_size": 16,
    "d_model": 16,
    "trigger_T": 16,
    "trigger_steps": 2,
    "width_T": 16,
    "stage_steps": 2,
    "stage_T": 8,
    "stage2_steps": 2,
    "opt_samples": 16,
    "memory_T": 16,
    "memory_d": 64,
    "memory_steps": 2,
    "separate_steps": 2,
    "steps_T": 16,
    "steps_samples": 512,
    "steps_widths": "32",
    "order_T": 16,
    "order_d": 16,
    "order_steps": 2,
    "heads_steps": 2,
}

CHAPTER = Chapter(
    "induction",
    "Induction heads on in-context Markov chains",
    PARAMS,
    seeds={"quick": 3, "reference": 5, "full": 10},
    sections=(
        Section(
            "levels",
            "The loss levels and the chi-square information",
            levels,
            rows=levels_rows,
            figures=("information",),
        ),
        Section(
            "construction",
            "An induction head written by hand",
            construction,
            rows=construction_rows,
            figures=("construction",),
        ),
        Section(
            "higher_order",
            "Order m in three layers of one head",
            higher_order,
            rows=higher_order_rows,
            figures=("higher_order",),
        ),
        Section(
            "two_layer_order",
            "Order m in two layers of one head",
            two_layer_order,
            rows=two_layer_order_rows,
            figures=("two_layer_order",),
        ),
        Section(
            "multi_head_order",
            "Order m in two layers, one head per parent",
            multi_head_order,
            rows=multi_head_order_rows,
            figures=("multi_head_order",),
        ),
        Section(
            "gradient",
            "The first gradient points layer 1 at the parents",
            gradient,
            rows=gradient_rows,
            figures=("gradient",),
            sampled_rows=r"key lemma",
        ),
        Section(
            "stationary",
            "Why training rests at the unigram level",
            stationary,
            rows=stationary_rows,
            figures=("stationary",),
            sampled_rows=r"plateaus \(Varre",
        ),
        Section(
            "staged",
            "The two stages trained: layer 1 finds the graph, layer 2 its scale",
            staged,
            trains=True,
            rows=staged_rows,
            figures=("staged",),
            reference=True,
            paper=staged_vs_paper,
        ),
        Section(
            "training",
            "Training one and two layers",
            training,
            trains=True,
            rows=training_rows,
            figures=("training", "stages", "attention", "parent_weight", "out_of_distribution"),
            reference=True,
            paper=training_vs_paper,
        ),
        Section(
            "order_training",
            "Trained on a chain of order m: three layers, and two, of one head",
            order_training,
            trains=True,
            rows=order_training_rows,
            figures=("order_training", "order_attention"),
            reference=True,
            paper=order_training_vs_paper,
        ),
        Section(
            "parent_heads",
            "Several parents, one head each, trained",
            parent_heads,
            trains=True,
            # kept whole on a cluster: a member trained in a vmapped ensemble of another size differs in the last
            # bits (float32 round-off; found by the seed-group test, cause not yet found), and a split must merge
            # into exactly what one process computes
            by_seed=False,
            rows=parent_heads_rows,
            figures=("parent_heads",),
            reference=True,
            paper=parent_heads_vs_paper,
        ),
        Section(
            "support",
            "Trained on a restricted prior, tested outside it",
            support,
            trains=True,
            rows=support_rows,
            figures=("support",),
            reference=True,
            paper=support_vs_paper,
        ),
        Section(
            "corollary",
            "The two stages on a restricted prior, tested outside it",
            corollary,
            trains=True,
            rows=corollary_rows,
            figures=("corollary",),
            reference=True,
            paper=corollary_vs_paper,
        ),
        Section(
            "trigger",
            "The trigger task: recall from context",
            trigger,
            trains=True,
            rows=trigger_rows,
            figures=("trigger", "memories"),
            reference=True,
            paper=trigger_vs_paper,
        ),
        Section(
            "trigger_width",
            "Where layer 1 stores positions: width against length",
            trigger_width,
            trains=True,
            rows=trigger_width_rows,
            figures=("trigger_width",),
            reference=True,
            paper=trigger_width_vs_paper,
        ),
        Section(
            "memories",
            "Three associative memories, in order",
            memories,
            trains=True,
            rows=memories_rows,
            figures=("simplified_memories",),
            reference=True,
            paper=memories_vs_paper,
        ),
        Section(
            "separate",
            "Together or one at a time, timed",
            separate,
            trains=True,
            rows=separate_rows,
            figures=("separate",),
            reference=True,
            paper=separate_vs_paper,
        ),
        Section(
            "three_steps",
            "Three gradient steps, one memory each",
            three_steps,
            trains=True,
            by_seed=False,  # one computation for the run, fixed by the chapter's seed: no member per seed to split
            rows=three_steps_rows,
            figures=("three_steps",),
            reference=True,
            paper=three_steps_vs_paper,
        ),
    ),
    check=check,
    unit_scale=UNIT_SCALE,
    full_shrunk=FULL_SHRUNK,
    # the quick page's longest trainings but the GPTs' on the chain (together about 575 of its 700 s on ATen's default
    # path at one thread, nbval's setting; results/README.md, sizing notes); the stages' reference run reads the quick
    # sizes with more steps and seeds
    quick_page_from_reference=(
        "staged",
        "order_training",
        "support",
        "trigger",
        "trigger_width",
        "memories",
        "separate",
        "three_steps",
    ),
)
