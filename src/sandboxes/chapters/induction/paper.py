"""The papers' reports (Nichani, Damian and Lee; Bietti et al.; Sanford et al.; Rajaraman et al.; Ekbote et al.;
Chen et al.) beside a run's, for the page's comparison table."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ...theory.induction import carried_weight, formed_apart, formed_together, previous_share
from .judge import first_nearest, formation_steps, gap_share, spread, stage_starts

if TYPE_CHECKING:
    from .measure import (
        CorollaryData,
        MemoriesData,
        OrderTrainingData,
        ParentHeadsData,
        SeparateData,
        StagedData,
        SupportData,
        ThreeStepsData,
        TrainingData,
        TriggerData,
        TriggerWidthData,
    )


def update_seconds(sections: Mapping[str, Mapping[str, Any]], data: Mapping[str, Any]) -> dict[str, float]:
    """Seconds of one update of every seed, trained together (the memories section) and one at a time (the separate
    section, whose time also holds the retraced updates, one seed at a time, so that each counts as a share of an
    update of every seed), from each section's wall time in a run's record."""
    run = data["separate"]
    seeds = len(run["stage_updates"])
    updates = len(run["stages"]) * (run["stage_steps"][-1] + 1)
    retraced = sum(max(n, 0) for seed in run["stage_updates"] for n in seed[:-1]) / seeds  # one seed at a time
    return {
        "together": sections["memories"]["wall_time_s"] / (data["memories"]["eval_steps"][-1] + 1),
        "one at a time": sections["separate"]["wall_time_s"] / (updates + retraced),
    }


Row = tuple[str, str, str]  # the quantity, what the paper reports, what the run measured


def _gap_to_graph(values: list[float]) -> str:
    """A range of distances from the graph's adjacency, in scientific notation, so that a small one is not rounded to
    0 (as a weight near 1 would be rounded to 1.00)."""
    return f"{min(values):.1e} to {max(values):.1e}" if len(values) > 1 else f"{values[0]:.1e}"


def _formed(run: TriggerData | MemoriesData) -> list[str]:
    """Per seed, the step at which each memory formed ("never" where it did not)."""
    return [", ".join("never" if np.isinf(x) else f"{x:.0f}" for x in seed) for seed in formation_steps(run)]


def staged_vs_paper(data: StagedData) -> list[Row]:
    """Nichani et al.'s two theorems beside the stages' runs."""
    worst = [
        f"{run['graph']}, {run['loss']}: " + _gap_to_graph([1 - float(np.nanmin(w)) for w in run["parent_weight"]])
        for run in data["runs"]
    ]
    length = len(data["runs"][0]["parents"])
    return [
        (
            "layer 1 after the first stage (Nichani et al., Thm (2): ‖A - G‖∞ ≲ 1/T; their k = 10 and "
            "alpha = 0.1, their experiment's T = 20 against T = 64 here)",
            "the causal graph's adjacency, at every position, for the last token's loss",
            f"1 - weight on the parent, worst of the positions that have one (1/T = {1 / length:.1e}): "
            + "; ".join(worst),
        ),
        second_stage_row(data["second"]),
    ]


def training_vs_paper(run: TrainingData) -> list[Row]:
    """Edelman et al.'s rest at the unigram level, Sanford et al.'s one-layer bound and the corollary beside the GPT's
    training runs."""
    inside, outside = run["in_distribution"], run["out_of_distribution"]
    levels = inside["levels"]
    rests = [
        "none" if steps == 0 else f"{steps:.0f} steps at {level:.3f}"
        for steps, level in unigram_rests(run["eval_steps"], run["eval_loss"]["two_layers"], levels)
    ]
    return [
        (
            "the two-layer GPT trained end to end (Edelman et al. train it so; Nichani et al.'s Thm (1), L - OPT "
            "≲ T^-cγ, covers only the disentangled model trained in stages)",
            "the loss rests near the unigram level, then falls to the Bayes level",
            f"gap closed {spread(inside['gap_closed']['two_layers'])}; longest rest within a quarter of the "
            f"unigram-to-Bayes gap of the unigram level ({levels['unigram']:.3f}; Bayes {levels['bayes']:.3f}), "
            f"per seed: {'; '.join(rests)}",
        ),
        (
            "the two-layer GPT's nearest strategy over training (Edelman et al., Fig. 1: a distance to each strategy)",
            "uniform, then the in-context unigram, then a rapid switch to the bigram (Bayes)",
            "first step nearest the unigram → first nearest Bayes, per seed: "
            + "; ".join(
                f"{'never' if s['unigram'] is None else s['unigram']} → {'never' if s['bayes'] is None else s['bayes']}"
                for s in stage_starts(run)
            )
            + "; nearest approach to the unigram before the Bayes stage (KL, nats), per seed: "
            + ", ".join(f"{d:.3f}" for d in unigram_approach(run)),
        ),
        (
            "one layer (Sanford et al.; slides)",
            "heads x width x precision = Ω(T), no constant stated: silent at these sizes",
            f"gap closed {spread(inside['gap_closed']['one_layer'])}",
        ),
        (
            "the GPT's layer 1, trained end to end (no row: Thm (2) is about the staged disentangled model)",
            "no report for a GPT (Thm (2)'s adjacency is the staged model's, set beside it in its own section)",
            "weight on the parent in the head that reads it, worst of the first half of the positions (scored at "
            "every position, the last keys are read by few queries and learn last): "
            + spread([float(carried_weight(w, run["parents"]).min()) for w in run["parent_weight"]["two_layers"]]),
        ),
        (
            "the GPT on another prior (no row: the corollary is about the staged disentangled model, judged in its "
            "own section)",
            "no report for a GPT (the corollary's tracking of the estimator is the staged model's)",
            f"gap closed {spread(outside['gap_closed']['two_layers'])}",
        ),
    ]


def support_vs_paper(run: SupportData) -> list[Row]:
    """The corollary beside the GPT trained on noisy permutations and tested on Dirichlet kernels."""
    outside = run["outside"]
    levels = outside["levels"]
    prior_share = (
        spread(
            [
                (levels["prior_bayes"] - loss) / (levels["prior_bayes"] - levels["bayes"])
                for loss in outside["loss"]["two_layers"]
            ]
        )
        if "prior_bayes" in levels
        else "not computed"
    )
    return [
        (
            "the GPT trained on noisy permutations, tested on Dirichlet kernels (the corollary's setting: π̃ need "
            "not be in the prior's support)",
            "no report for a GPT (the corollary's ‖f - π̃(·|s_T)‖∞ ≲ T^-cγ is the staged model's, set beside it "
            "in the next section)",
            f"the GPT, no row: gap closed {spread(outside['gap_closed']['two_layers'])}, of the gap "
            f"from the training prior's Bayes predictor to the count estimator {prior_share}; last-position "
            f"distance to π̃ {spread(run['distance']['models'])} (count estimator "
            f"{spread(run['distance']['count_estimator'])}, the training prior's Bayes predictor "
            f"{spread(run['distance'].get('prior_bayes', [float('nan')]))})",
        )
    ]


def corollary_vs_paper(run: CorollaryData) -> list[Row]:
    """The corollary beside the two stages trained on noisy permutations and tested on Dirichlet kernels."""
    levels, distance = run["levels"], run["distance"]
    if "prior_bayes" not in levels:
        return []  # the training prior's Bayes predictor is not computed for so many states
    gap = levels["prior_bayes"] - levels["smoothed"]
    shares = [(levels["prior_bayes"] - loss) / gap for loss in run["loss"]]
    return [
        (
            "the two stages trained on noisy permutations, tested on Dirichlet kernels (corollary: π̃ need not "
            "be in the prior's support)",
            "‖f - π̃(·|s_T)‖∞ ≲ T^-cγ",
            f"share of the gap from the training prior's Bayes predictor to the count estimator closed "
            f"{spread(shares)} (the graph at its training scale: "
            f"{(levels['prior_bayes'] - levels['graph']) / gap:.2f}); last-token distance ‖f - π̃‖∞ "
            f"{spread([mean for mean, _ in distance['models']])} (the graph {distance['graph'][0][0]:.3f}, the "
            f"count estimator {distance['smoothed'][0][0]:.3f}, the training prior's Bayes predictor "
            f"{distance['prior_bayes'][0][0]:.3f})",
        )
    ]


def trigger_vs_paper(run: TriggerData) -> list[Row]:
    """Bietti et al.'s trigger task: the order in which the memories form and the accuracies."""
    return [
        (
            "trigger task: the step at which each memory-recall probe first reaches 1/2 (two layers)",
            ", then ".join(run["memory_names"]) + " (the last by position: the token before)",
            "per seed: " + "; ".join(_formed(run)) + "; layer 1's weight on the token before: "
            f"{spread(run['previous_weight']['after_trigger'])} where it is a trigger, "
            f"{spread(run['previous_weight']['elsewhere'])} elsewhere",
        ),
        (
            "trigger task (Bietti et al., the 65 characters of a Shakespeare bigram): accuracy on a "
            "trigger's output seen earlier in the sequence",
            "one layer about 55 %, two layers about 99 %",
            f"one layer {spread(run['accuracy']['recall']['one_layer'])}, two layers "
            f"{spread(run['accuracy']['recall']['two_layers'])} (chance {run['chance']:.2f})",
        ),
    ]


def trigger_width_vs_paper(run: TriggerWidthData) -> list[Row]:
    """The widths against the length at which Bietti et al.'s code trains, beside the run's probe at each."""
    previous = run["memory_names"].index("W_KQ of layer 1")
    ends = [
        f"{width / run['T']:g} T: {spread([seed[-1][previous] for seed in probes])}"
        for width, probes in zip(run["widths"], run["memories"])
    ]
    return [
        (
            "trigger task: width against the sequence's length, and layer 1's positional probe at the end",
            "their code (albietz/transformer-birth): 256 tokens; the simplified model of its README at width 256 "
            "(1 T), the full model's default width 128 (0.5 T, 4 heads); the paper reads W_KQ1's positional "
            "memory as formed",
            f"at T = {run['T']}, two layers: " + "; ".join(ends),
        )
    ]


def memories_vs_paper(run: MemoriesData) -> list[Row]:
    """Bietti et al.'s simplified model: the order in which its three memories form."""
    return [
        (
            "simplified model (Bietti et al.: random embeddings fixed, three memories trained): the step "
            "at which each recall probe first reaches 1/2",
            ", then ".join(run["memory_names"]),
            "per seed: " + "; ".join(_formed(run)),
        )
    ]


def separate_vs_paper(run: SeparateData) -> list[Row]:
    """Bietti et al.'s joint against separate learning: updates until the three memories formed."""
    apart, censored = formed_apart(run["stage_updates"], int(run["stage_steps"][-1]) + 1)
    counts = [
        f"{together:.0f} against {'at least ' * bool(cut)}{alone:.0f}"
        for together, alone, cut in zip(formed_together(run["joint_steps"], run["joint"]), apart, censored)
    ]
    return [
        (
            "simplified model: updates until all three memories have formed, together against one at a time",
            "joint learning is faster (no size given)",
            "per seed: " + "; ".join(counts),
        )
    ]


def unigram_approach(run: TrainingData) -> list[float]:
    """Per two-layer seed, its smallest distance to the in-context unigram at the evaluations before it is first
    nearest the Bayes predictor (all of them if it never is): how deep its rest at the unigram goes."""
    names = run["strategies"]
    unigram, bayes = names.index("unigram"), names.index("bayes")
    depths = []
    for distances in np.asarray(run["strategy_distance"]["two_layers"], dtype=float):
        stop = first_nearest(distances, bayes)
        stop = len(distances) if stop is None else stop
        depths.append(float(distances[:stop, unigram].min()) if stop else float("nan"))
    return depths


def unigram_rests(steps: list[int], curves: list[list[float]], levels: dict[str, float]) -> list[tuple[float, float]]:
    """Per curve, Edelman et al.'s rest at the in-context unigram level: the longest run of evaluations after the
    first whose loss is within a quarter of the unigram-to-Bayes gap of the unigram level, as (steps it spans, one
    evaluation counting its interval; its median loss), (0, nan) where there is none."""
    band = (levels["unigram"] - levels["bayes"]) / 4
    interval = steps[1] - steps[0] if len(steps) > 1 else 1
    rests = []
    for curve in curves:
        near = np.abs(np.asarray(curve[1:]) - levels["unigram"]) <= band
        runs = [list(group) for key, group in itertools.groupby(range(len(near)), key=lambda i: near[i]) if key]
        longest = max(runs, key=len, default=[])
        level = float(np.median([curve[1 + i] for i in longest])) if longest else float("nan")
        rests.append((len(longest) * interval, level))
    return rests


def second_stage_row(second: dict[str, Any]) -> Row:
    """The paper's Thm (1) beside the loss after both stages."""
    levels, rate = second["levels"], second["rate"]
    shares = [gap_share(loss, levels) for loss in second["loss"]["both"]]
    over = [mean for mean, _ in second["over_opt"]]
    at_lengths = "; ".join(
        f"T = {length}: {graph:.3f} (uniform layer 1: {uniform:.3f})"
        for length, (graph, _), (uniform, _) in zip(rate["lengths"], rate["excess"]["graph"], rate["excess"]["uniform"])
    )
    return (
        "after both stages (Nichani et al., Thm (1): L - OPT ≲ T^-cγ)",
        "L - OPT vanishes as T grows (no constant stated)",
        f"L - OPT {min(over):.3f} to {max(over):.3f} nats per seed (OPT {levels['opt']:.3f}, the floored prior's "
        f"Bayes predictor, on the same sequences; the graph with its best scale "
        f"{second['best_over_opt'][0]:.3f}); share of the gap from the in-context unigram to the smoothed count "
        f"estimator closed {min(shares):.3f} to {max(shares):.3f} (the graph with its best scale: "
        f"{gap_share(min(second['scale_loss']), levels):.3f}); the reduced model at its best scale, L - OPT against "
        f"T with layer 1 the graph and, for contrast, uniform: {at_lengths or 'no length of at least 8 tokens'}",
    )


def order_training_vs_paper(run: OrderTrainingData) -> list[Row]:
    """Rajaraman et al.'s and Ekbote et al.'s depths beside the runs on a chain of order m."""
    if not run["loss"]:
        return []
    levels, lesser = run["levels"], run["lesser"]
    where = (
        f"of the gap from the best lesser estimator ({lesser}, {levels[lesser]:.3f}) to the order-m Bayes level "
        f"{levels['bayes']:.3f}"
    )
    return [
        (
            f"three layers of one head, order {run['order']} (Rajaraman et al.)",
            "represent the order-k count estimator for any k; trained long enough, one head per layer reaches low "
            "loss as k grows (no number in the seed's slides)",
            f"gap closed {spread(run['gap_closed']['three_layers'])} ({where})",
        ),
        (
            f"two layers of one head, order {run['order']} (Ekbote et al.)",
            "two layers suffice to represent it (a construction; no training number in the seed's slides)",
            f"gap closed {spread(run['gap_closed']['two_layers'])}",
        ),
    ]


def parent_heads_vs_paper(run: ParentHeadsData) -> list[Row]:
    """Chen et al.'s heads, one per parent, beside the trained relative-position heads."""
    order = run["order"]
    held = [
        ", ".join(f"{max(head[lag] for head in seed):.2f}" for lag in range(1, order + 1)) for seed in run["lag_weight"]
    ]
    lesser = run["lesser"]
    return [
        (
            f"{run['heads']} heads in layer 1, order-{order} chain (Chen et al.)",
            "each head attends to a different parent; in the limit it copies that parent (a figure, no number)",
            f"largest weight on 1 to {order} tokens back, by seed: {'; '.join(held)}",
        ),
        (
            "the same models' held-out loss",
            "the generalised induction head's estimator (no number in the slides)",
            f"gap closed {spread(run['gap_closed'])} (from the best lesser estimator, {lesser}, "
            f"{run['levels'][lesser]:.3f}, to the order-m Bayes level {run['levels']['bayes']:.3f})",
        ),
    ]


def three_steps_vs_paper(run: ThreeStepsData) -> list[Row]:
    """Bietti et al.'s three gradient steps: what each step recovered, and the recall accuracy they leave."""
    shares = [previous_share(lags) for lags in run["lags"]]
    best = int(np.argmax(shares))
    return [
        (
            "simplified model, one population gradient step per memory, top down (W_OV2, W_KQ2, W_KQ1): the share "
            "of each memory's associations recalled",
            "all three memories recovered (informal; the slides give no sizes)",
            f"W_OV2 {run['first_probes'][0]:.3f}, W_KQ2 {run['probes'][best][1]:.3f}, W_KQ1 {shares[best]:.3f} "
            f"(positions 2 to T - 3, second step of length {run['second_sizes'][best]:g}; orthonormal parts of "
            f"width {run['width']})",
        ),
        (
            "recall accuracy after the three steps",
            "not reported",
            f"{run['accuracy'][best]:.3f} (after the first step {run['first_accuracy']:.3f}; chance "
            f"{run['chance']:.3f})",
        ),
    ]
