"""The thesis's reports (Liu et al.'s Figs. 3.15, 3.16, 3.20 and 3.21) beside a run's, for the page's comparison
table."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.stats

from ...theory import shortcuts as theory
from .judge import LENGTH_LABELS, REPORTED_ENCODINGS, STANDARD_ARM, compared_arm, length_gaps, training

if TYPE_CHECKING:
    from .measure import BalanceData, DyckData, EncodingsData, HardData, LengthsData, SupervisionData, SweepData


def _percent_pairs(best: list[float | None], median: list[float | None]) -> str:
    """``best/median`` in % per depth, ``-`` for a cell the thesis's text lost."""
    return ", ".join("/".join("-" if v is None else f"{v:.1f}" for v in pair) for pair in zip(best, median))


def _depths_vs_paper(data: SweepData | HardData, trained: str = "") -> list[tuple[str, str, str]]:
    """Each automaton's best / median accuracy per depth beside the thesis's Figs. 3.15 / 3.16 at the same depths;
    ``trained`` says how long, where that differs from the sweep."""
    acc = 100 * np.asarray(data["accuracy"])
    depths, seeds = data["depths"], acc.shape[2]
    rows = []
    for name, per_depth, solvable in zip(data["names"], acc, data["solvable"]):
        best, median = data["paper_best"].get(name), data["paper_median"].get(name)
        paper = (
            "no row for it"
            if best is None or median is None
            else _percent_pairs([best[d - 1] for d in depths], [median[d - 1] for d in depths])
            + " (Figs. 3.15 / 3.16, T = 100, 20 seeds)"
        )
        ours = _percent_pairs([float(a.max()) for a in per_depth], [float(np.median(a)) for a in per_depth])
        moving = np.asarray(data["still_descending"][data["names"].index(name)])
        ours += f"; {int(moving.sum())} of {moving.size} runs still descending at the end"
        rows.append(
            (
                f"{name} ({'solvable' if solvable else 'non-solvable'}){trained}: best / median accuracy (%) at "
                f"depths {', '.join(map(str, depths))}; ours at T = {data['T']}, {seeds} seeds",
                paper,
                ours,
            )
        )
    return rows


def brittleness_vs_paper(out: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The parity runs beside what the thesis reports of them: each kind's accuracy at the training law and length,
    its worst under a shifted law and at the longest length (median seed; for the GPT also the best seed)."""
    probs, lengths, T = out["probs"], out["lengths"], out["T"]
    centre = probs.index(min(probs, key=lambda p: abs(p - 0.5)))

    def views(kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        by_prob, by_length = np.array(out[kind]["by_prob"]), np.array(out[kind]["by_length"])
        return by_prob[:, centre], by_prob.min(axis=1), by_length[:, lengths.index(max(lengths))]

    def percent(values: np.ndarray) -> str:
        return f"{100 * float(np.median(values)):.1f}%"

    reports = {
        "gpt": "fits the training law, fails under a shifted Pr[sigma=1] (Fig. 3.20, left) and at longer "
        "lengths (Fig. 3.21): a shortcut; figures only, 8 layers of width 512",
        "lstm": "generalises: no drop under shift (Fig. 3.20, left)",
        "scratchpad": "with a scratchpad and recency bias, generalises like the recurrent net (Figs. 3.20, "
        "left, and 3.21)",
    }
    rows = []
    for kind, report in reports.items():
        at_train, shifted, longest = views(kind)
        rows.append(
            (
                f"parity {kind} (T = {T}): accuracy at Pr[sigma=1] = {probs[centre]:g}; worst shifted law; "
                f"length {max(lengths)} (median seed)",
                report,
                f"{percent(at_train)}; {percent(shifted)}; {percent(longest)}",
            )
        )
    at_train, shifted, longest = views("gpt")
    best = int(at_train.argmax())
    rows.append(
        (
            "parity gpt, the best seed at the training law: the same three",
            reports["gpt"],
            f"{100 * at_train[best]:.1f}%; {100 * shifted[best]:.1f}%; {100 * longest[best]:.1f}%",
        )
    )
    by_count, counts = np.median(np.array(out["gpt"]["by_count"]), axis=0), np.array(out["counts"])
    low, high = by_count[counts < T / 4], by_count[counts > 3 * T / 4]
    rows.append(
        (
            f"parity gpt at the training length by the number of ones (median seed): at T/2 = {T // 2}; worst "
            f"below T/4; worst above 3T/4",
            "accuracy degrades as the count moves away from the expected one, "
            "more at low counts than at high ones (Fig. 3.20, right; 25 replicates)",
            f"{100 * by_count[counts == T // 2][0]:.1f}%; {100 * low.min():.1f}%; {100 * high.min():.1f}%",
        )
    )
    return rows


def boundary_vs_paper(data: SweepData) -> list[tuple[str, str, str]]:
    """The thesis's boundary detector (Fig. 3.6) beside the trained depth-2 gridworld's last attention layer: the mass
    each head puts on positions at a wall against what uniform attention puts there (none without that GPT)."""
    att = data["grid_attention"]
    if att is None:
        return []
    mass, rate = att["boundary_mass"], att["boundary_rate"]
    above = [h for h, m in enumerate(mass) if m > rate]
    return [
        (
            "the gridworld's boundary detector: a trained depth-2 GPT's last layer, attention on times at a wall, "
            "averaged over held-out sequences",
            "heads attend to the last time the walk stood at a wall (Fig. 3.6; Algorithm 1 of Thm 12)",
            f"per head {', '.join(f'{m:.2f}' for m in mass)} against {rate:.2f} under uniform attention: "
            + (
                f"head {', '.join(map(str, above))} above uniform"
                if above
                else "no head attends to walls more than uniform attention does, so no detector shows here"
            ),
        )
    ]


def sweep_vs_paper(data: SweepData) -> list[tuple[str, str, str]]:
    """The thesis's depths beside the sweep's, and its boundary detector beside the trained gridworld's heads."""
    return [*_depths_vs_paper(data), *boundary_vs_paper(data)]


def hard_vs_paper(data: HardData) -> list[tuple[str, str, str]]:
    """The thesis's depths beside those of the hard automata, trained longer."""
    return _depths_vs_paper(data, f" trained {data['steps']} steps")


def supervision_vs_paper(data: SupervisionData) -> list[tuple[str, str, str]]:
    """The thesis's incomplete supervision (Figs. 3.7b, 3.19) beside the runs: accuracy at the largest and smallest
    p_reveal, GPT and LSTM, worst and best seed, and how many runs were still descending."""
    first, last = data["reveals"][0], data["reveals"][-1]

    def spread(kind: str, i: int, r: int) -> str:
        runs, moving = data["accuracy"][kind][i][r], sum(data["still_descending"][kind][i][r])
        return f"{100 * min(runs):.1f} to {100 * max(runs):.1f}% ({moving} of {len(runs)} still descending)"

    gpt_reported = {
        "C2": "kept across p_reveal (T = 100, mean of 25 runs)",
        "S5": "falls markedly as p_reveal falls (T = 100, mean of 25 runs)",
    }
    absent = "not in the thesis (its runs are C2 and S5)"
    rows = []
    for i, name in enumerate(data["names"]):
        for kind, reported in (
            ("gpt", gpt_reported.get(name, absent)),
            ("lstm", "100% at every p_reveal" if name in gpt_reported else absent),
        ):
            rows.append(
                (
                    f"{name}, {kind.upper()}, p_reveal {first:g} and {last:g} (T = {data['T']})",
                    reported,
                    f"{spread(kind, i, 0)}; {spread(kind, i, len(data['reveals']) - 1)}",
                )
            )
    return rows


DYCK_REPORTED = {"linear": 2.20, "none": 2.27}  # Sec. 3.6.3.1: average attention variation, 40 initialisations


def dyck_vs_paper(data: DyckData) -> list[tuple[str, str, str]]:
    """Wen et al.'s Dyck runs (thesis Sec. 3.6.3.1) beside ours: accuracy, stack-like heads, and the attention
    variation between initialisations on the special prefix against the random baseline."""
    n = len(data["prefix"])
    rows = [
        (
            "attention variation of random patterns on the prefix",
            "2.85 (rows uniform on the simplex; their sampling is not given exactly)",
            f"{data['random_variation']:.2f} (computed: rows uniform on their simplices, causal; over all "
            f"{n} positions {theory.random_attention_variation(n, causal=False):.2f})",
        )
    ]
    for positional in data["positions"]:
        accuracy, weights = data["accuracy"][positional], data["stack_weight"][positional]
        reported = DYCK_REPORTED.get(positional)
        rows += [
            (
                f"{positional} positions: accuracy on closing brackets",
                ">= 97% for every model",
                f"{100 * min(accuracy):.2f} to {100 * max(accuracy):.2f}% ({len(accuracy)} seeds, "
                f"{sum(data['still_descending'][positional])} still descending)",
            ),
            (
                f"{positional} positions: weight on the innermost unmatched open bracket",
                "most patterns not stack-like (Figs. 3.3, 3.39)",
                f"{min(weights):.2f} to {max(weights):.2f} per seed (untrained "
                f"{np.mean(data['untrained_stack_weight'][positional]):.2f})",
            ),
            (
                f"{positional} positions: attention variation between seeds",
                f"{reported:.2f} (40 initialisations)" if reported is not None else "not reported",
                f"{data['variation'][positional]:.2f} (untrained {data['untrained_variation'][positional]:.3f})",
            ),
        ]
    return rows


def encodings_vs_paper(data: EncodingsData) -> list[tuple[str, str, str]]:
    """The thesis's Fig. 3.22 (Grid_9 at T = 40, 25 replicates) beside our runs: accuracy in distribution and at
    twice the length, per positional encoding (mean over seeds, their range in brackets)."""
    gaps, T, rows = length_gaps(data), data["T"], []
    reported = {
        "in distribution": "comparable for the two encodings (read off a plot; no number in the text)",
        "at 2T": "sinusoidal 'significantly worse' than linear (a plot; no number)",
    }
    if data["automaton"] != REPORTED_ENCODINGS:
        reported = dict.fromkeys(reported, f"not reported (the thesis's figure is of {REPORTED_ENCODINGS})")
    for label, index, length in (("in distribution", 0, T), ("at 2T", 1, 2 * T)):
        for positional in data["encodings"]:
            values = 100 * gaps[positional][index]
            rows.append(
                (
                    f"{data['automaton']}, {positional} positions: accuracy {label} (length {length})",
                    reported[label],
                    f"{values.mean():.1f}% ({values.min():.1f} to {values.max():.1f}; {len(values)} seeds, "
                    f"{sum(data['still_descending'][positional])} still descending)",
                )
            )
    return rows


def abab_vs_paper(data: EncodingsData) -> list[tuple[str, str, str]]:
    """The thesis's (abab)* reports (Sec. 3.4.5.2.1, Figs. 3.18 and 3.22) beside our runs: accuracy in distribution and
    at twice the length, per positional encoding (mean over seeds, their range in brackets)."""
    gaps, T, rows = length_gaps(data), data["T"], []
    reported = {
        "in distribution": {
            "sinusoidal": "100.0 on both distributions (Fig. 3.18, best of 25 runs, T = 40); easy to learn "
            "(Sec. 3.4.5.2.1); a clear advantage over linear (Fig. 3.22, a plot of means)",
            "linear": "learning is challenging (Sec. 3.4.5.2.1)",
        },
        "at 2T": {
            "sinusoidal": "the gap between the encodings shrinks significantly (Fig. 3.22, a plot; no number)",
            "linear": "as above",
        },
    }
    for label, index, length in (("in distribution", 0, T), ("at 2T", 1, 2 * T)):
        for positional in data["encodings"]:
            values = 100 * gaps[positional][index]
            rows.append(
                (
                    f"(abab)*, {positional} positions: accuracy {label} (length {length})",
                    reported[label][positional],
                    f"{values.mean():.1f}% ({values.min():.1f} to {values.max():.1f}; {len(values)} seeds, "
                    f"{sum(data['still_descending'][positional])} still descending); the majority guess "
                    f"{100 * data['chance']:.1f}% at 2T",
                )
            )
    rows.append(
        (
            "model",
            "Fig. 3.18's runs: GPT-2-like, 8 layers, width 512, 8 heads, trained at T = 40, best of 25; Fig. 3.22's "
            "model not stated (means of 25 replicates)",
            f"the encodings section's GPT (depth, width and heads as set), trained at T = {T}",
        )
    )
    return rows


LENGTH_REPORTS = {
    "absolute": "drops sharply at lengths unseen in training (Figs. 3.9/3.21; 25 replicates, figures only)",
    "shifted": "offsets in 0..400 per batch: 'a significant boost', not perfect",
    "none": "no positional encoding: 'similar results' (a boost, not perfect); helps parity and Dyck",
    "lstm": "perfect at every length",
    "scratchpad": "perfect at every length (Fig. 3.21, yellow)",
    "scratchpad_plain": "'without [the recency bias], scratchpad training shows no improvement' (said, not drawn)",
}


def lengths_vs_paper(data: LengthsData) -> list[tuple[str, str, str]]:
    """Each learner's accuracy on the positions below T and on those beyond (median seed), beside what the thesis
    reports of its curve."""
    T, longest = data["T"], max(data["lengths"])
    rows = []
    for name in data["automata"]:
        for arm in data["arms"]:
            inside, beyond = theory.inside_and_beyond(data["by_position"][name][arm], T)
            rows.append(
                (
                    f"{name}, {LENGTH_LABELS[arm]} (T = {T}): accuracy on positions below {T}; on positions {T} to "
                    f"{longest - 1} (median seed)",
                    LENGTH_REPORTS[arm],
                    f"{100 * float(np.median(inside)):.1f}%; {100 * float(np.median(beyond)):.1f}%",
                )
            )
    return rows


def _balance_report(data: BalanceData, arm: str) -> str:
    """What the thesis's Fig. 3.40 shows of ``arm``: the standard training, the one contrastive training (at a weight
    the thesis does not state; here the one the comparisons read), or nothing (a further weight of the sweep)."""
    if arm == STANDARD_ARM:
        return "high violations, which correlate negatively with accuracy at 400 to 500 (Fig. 3.40)"
    if arm == compared_arm(data):
        return "lower violations and better accuracy at 400 to 500 (Fig. 3.40, at a weight it does not state)"
    return "not shown (Fig. 3.40 has one contrastive training)"


def balance_vs_paper(data: BalanceData) -> list[tuple[str, str, str]]:
    """Per training: the balance violation and the accuracy in distribution and on long prefixes (median seed, the
    range over seeds), and the rank correlation of the two over the standard seeds, beside the thesis's Fig. 3.40."""
    lo, hi = data["long"]

    def spread(values: list[float], digits: str) -> str:
        return f"{np.median(values):{digits}} ({min(values):{digits}} to {max(values):{digits}})"

    rows = [
        (
            f"{training(arm)}: balance violation beta; closing brackets right at length {data['T']}; at {lo} to {hi} "
            f"(median seed, range)",
            _balance_report(data, arm),
            f"{spread(data['violation'][arm], '.3g')}; {spread(data['accuracy'][arm], '.3f')}; "
            f"{spread(data['long_accuracy'][arm], '.3f')}",
        )
        for arm in data["arms"]
    ]
    standard = data["violation"][STANDARD_ARM]
    if len(standard) > 2:
        rho = float(scipy.stats.spearmanr(standard, data["long_accuracy"][STANDARD_ARM]).statistic)
        rows.append(
            ("standard training: rank correlation of beta and accuracy at the long lengths", "negative", f"{rho:.2f}")
        )
    rows.append(
        ("untrained models: beta (median seed, range)", "not reported", spread(data["untrained_violation"], ".3g"))
    )
    return rows
