"""Chapter 2: transformers simulate automata in far fewer than T layers (Liu et al., "Transformers
learn shortcuts to automata").

Each section function computes one section of the chapter page and returns its claims and its
data (a ``TypedDict`` per section, which the section's figures in ``figures.shortcuts`` read):
the algebra of the automata (solvability), the exact constructions of Theorem 10 with the
Lemma 13 bound, Lemmas 15/16 and Algorithm 1 of Theorem 12, depth sweeps of trained GPTs next
to the paper's reported accuracies, and the brittleness of the learned shortcuts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from typing import Any, TypedDict

import numpy as np
import torch
from torch import Tensor, nn

from .. import heldout
from ..calibration import calibrated_map
from ..claims import Claim
from ..curves import budget_ran_out, still_descending
from ..data.automata import (
    EXAMPLES,
    MAX_STATES,
    AutomatonTask,
    ScratchpadParity,
    Semiautomaton,
    bernoulli_probs,
    binary_with_count,
    check_automaton_name,
    cyclic,
    derived_series_from_generators,
    derived_series_orders,
    gridworld,
    groups_of,
    is_solvable,
    make_automaton,
    memory,
    transformation_semigroup,
    transition_group,
)
from ..model import GPT, LSTM, GPTConfig, check_heads
from ..profiles import (
    Custom,
    Interval,
    Param,
    at_least,
    each,
    float_list,
    in_open_unit_interval,
    int_list,
    positive,
    positive_ints,
    with_reference,
)
from ..runtime import member_seed
from ..sections import Chapter, Outcome, RunContext, Section
from ..theory import shortcuts as theory
from ..trainer import TrainConfig, TrainResult, train
from ..workers import TrainRequest, train_each

EXACT_REASON = "the construction is exact: any error is a wrong state"
LOSS_NOISE = 0.005  # held-out sampling noise of an evaluated loss (nats): a smaller descent has hardly started
ROUND_OFF = 1e-9
ROUND_OFF_REASON = "float64 round-off, summed over |Q| gadget terms and the layers"
BOUND_REASON = "Lemma 13 is a bound: measured / bound must not exceed 1"

# The paper's Figures 3.15 (best of 20 seeds) and 3.16 (median), accuracy in % at depths 1..16,
# T = 100; None where a cell was lost in the text extraction of the thesis.
_ = None
PAPER_BEST: dict[str, list[float | None]] = {
    "Dyck": [99.3] + [100.0] * 15,
    "Grid4": [99.9] + [100.0] * 15,
    "Grid9": [92.2] + [100.0] * 15,
    "C2": [_, 99.8, 99.9, 100, 100, 99.5, 100, 99.7, 100, 100, 100, 100, 100, 100, 100, 100],
    "C3": [54.6, 94.6, 96.7, 99.4, 100, 100, 99.8, 100, 99.9, 100, 100, 100, 100, 100, 99.8, 100],
    "C2xC2xC2": [_, _, 99.9, 97.9, 100, 99.8, 98.2, 99.9, 100, 100, 91.9, 95.9, 91.7, 90.6, 87.5, 80.6],
    "D6": [25.4, 27.2, 47.4, _, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100],
    "D8": [45.6, 98.0, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100],
    "Q8": [31.6, 49.2, 59.6, _, _, 99.3, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100],
    "A4": [25.0, 35.4, 49.1, _, 62.6, 82.3, 90.9, 98.0, 98.0, 99.1, 99.8, 100, 99.7, 100, 100, 100],
    "A5": [12.5, 23.1, 32.5, 46.7, _, 98.8, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100],
    "S4": [11.3, 17.6, 22.0, 27.1, 37.7, 44.8, 50.8, _, 91.3, 97.1, 97.9, 98.7, 99.9, 100, 99.8, 99.9],
    "S5": [7.9, 11.8, 14.6, 19.7, 26.0, 28.4, 32.8, 51.8, 86.3, 94.8, 90.2, 97.2, 99.3, 99.1, 99.9, 99.9],
}
PAPER_MEDIAN: dict[str, list[float | None]] = {
    "Dyck": [98.8] + [100.0] * 15,
    "Grid4": [99.8] + [100.0] * 15,
    "Grid9": [91.4] + [100.0] * 15,
    "C2": [56.4, 83.0, _, 80.9, 89.1, 85.2, 84.8, 84.9, 88.8, 94.5, 98.3, 86.4, 90.4, 88.7, 94.6, 99.3],
    "C3": [40.3, _, _, 85.0, 84.0, 84.9, 87.9, 96.2, 99.4, 89.2, 82.5, 99.3, 87.4, 98.0, 89.6, 92.0],
    "C2xC2xC2": [50.0, 61.4, 60.6, _, _, _, _, _, _, 59.0, _, 54.6, 59.5, 53.0, 44.7, 48.4],
    "D6": [24.8, 26.8, 40.8, 57.2, 81.3, 91.6, 100, 99.6, 100, 100, 93.0, 96.2, 100, 97.7, 99.6, 99.3],
    "D8": [38.1, _, 99.7, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100],
    "Q8": [29.0, 45.8, 38.5, 42.7, 57.4, 79.5, 84.7, 89.2, 95.9, 98.1, 98.8, 97.8, 99.8, 98.3, 98.8, 99.4],
    "A4": [19.7, 30.4, 41.0, 45.4, 44.7, 52.8, 60.0, _, _, _, 91.4, 82.6, 88.2, 97.9, 99.0, 98.5],
    "A5": [10.5, 18.7, 26.6, 30.5, 40.6, _, _, 99.4, 99.3, 100, 100, 100, 100, 100, 99.9, 100],
    "S4": [10.7, 15.1, 18.8, 22.9, 25.0, 31.1, 36.6, 43.6, 56.2, _, _, 88.1, 91.0, 97.6, 95.6, 97.8],
    "S5": [7.1, 11.0, 13.1, 16.5, 20.9, 24.3, 29.4, 37.6, 40.1, 59.0, _, 91.3, 91.2, 94.6, 98.0, 99.1],
}
del _


def _names(text: str) -> list[str]:
    return [n.strip() for n in str(text).split(",") if n.strip()]


def _check_names(text: str) -> None:
    if not _names(text):
        raise ValueError("expected at least one automaton name")
    for name in _names(text):
        check_automaton_name(name)


DRAWN = ("C2", "C3", "C2xC2", "D6", "D8", "Q8", "A4", "S4", "A5", "Grid4", "Grid9", "Dyck", "flipflop", "memory3")


def _draw_names(rng: np.random.Generator, near: str) -> str:
    """One to three automata a reader might name."""
    return ",".join(rng.choice(DRAWN, size=int(rng.integers(1, 4)), replace=False))


AUTOMATON = Custom(check_automaton_name, f"an automaton name such as {', '.join(EXAMPLES)} "
                   f"(at most {MAX_STATES} states)", lambda rng, near: str(rng.choice(DRAWN)))
AUTOMATA = Custom(_check_names, "comma-separated automaton names", _draw_names)


PARAMS = (
    Param("automaton", str, "D8", "D8", "featured automaton (C3, D8, Q8, A5, S5, Grid9, Dyck, flipflop, "
          "C2xC2xC2, ...): built by Theorem 10 at length T and trained at depth `depth`", AUTOMATON),
    Param("T", int, 8, 32, "sequence length of the featured construction and of all training", at_least(1)),
    Param("depth", int, 2, 4, "depth of the featured trained GPT (added to the sweep)", at_least(1)),
    Param("sweep", str, "C2,C3,Grid4,D8,Q8,A5", "C2,C3,Grid9,D8,Q8,A4,A5,S5",
          "automata of the depth sweep", AUTOMATA),
    Param("depths", str, "1,2", "1,2,3,4,6,8", "depths of the sweep", positive_ints),
    Param("easy", str, "Grid4", "C2,Grid9,D8", "automata claimed to reach `threshold` by `shallow_depth`, where the "
          "paper's Fig. 3.15 reports them there (else no row)", AUTOMATA),
    Param("hard", str, "A5", "A5,S5", "automata claimed to stay `gap` below it there, where the paper's Fig. 3.15 "
          "reports them there and no construction of the chapter is that shallow at length T (else no row)",
          AUTOMATA),
    Param("threshold", float, 0.95, 0.98, "best-seed accuracy that counts as solved in the sweep",
          Interval(0.5, 1.0, open_low=True, open_high=True)),
    Param("shallow_depth", int, 2, 3, "depth at which the easy/hard contrast is claimed", at_least(1)),
    Param("d_model", int, 32, 128, "GPT width", at_least(1)),
    Param("n_head", int, 4, 8, "GPT heads", at_least(1)),
    Param("steps", int, 300, 10000, "training steps of the sweep", at_least(1)),
    # quick: a row that A5 stays below needs its runs at depths 1 and 2 settled; at T = 8 they still descended
    # after 300 and 600 steps, one of four after 1000, none after 1200 (2 seeds, at one and two threads). full: six
    # times the sweep's steps, the ratio at which the reference's A5 runs settled (12000 against 2000)
    Param("hard_steps", int, 1200, 60000, "training steps of the `hard` automata at depths up to `shallow_depth` (a "
          "row that they stay below holds only for runs that stopped moving)", at_least(1)),
    Param("batch_size", int, 32, 64, "sequences per step", at_least(1)),
    Param("lr", float, 3e-3, 5e-4, "AdamW learning rate (warm-up, cosine decay)", positive),
    Param("eval_size", int, 256, 2048, "held-out sequences per accuracy", at_least(1)),
    Param("construct", str, "C2,C3,Grid4,D8,Q8,flipflop,A4", "C2,C3,Grid9,D8,Q8,flipflop,A4,Dyck,A5",
          "automata built by Theorem 10 and checked exactly", AUTOMATA),
    Param("construct_lengths", str, "3,8,16", "3,8,16,33,64", "lengths of those checks", positive_ints),
    Param("construct_samples", int, 64, 256, "random input sequences per check", at_least(1)),
    Param("parity_length", int, 16, 40, "training length of the parity brittleness runs", at_least(2)),
    Param("parity_depth", int, 2, 8, "depth of the parity GPT", at_least(1)),
    Param("parity_steps", int, 3000, 10000, "training steps of the parity GPT", at_least(1)),
    Param("parity_solved", float, 0.95, 0.99, "accuracy at the training law that counts as having learnt parity (the "
          "precondition of the brittleness rows; from 0.9, far from chance's 1/2)", Interval(0.9, 1.0, open_high=True)),
    Param("scratchpad_steps", int, 300, 2000, "training steps of the scratchpad GPT", at_least(1)),
    Param("lstm_steps", int, 300, 2000, "training steps of the LSTM", at_least(1)),
    Param("shift_probs", str, "0.1,0.3,0.5,0.7,0.9", "0.05,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,0.95",
          "test laws Pr[sigma = 1] of the distribution-shift test", each(in_open_unit_interval)),
    Param("recency", float, 1.0, 1.0, "slope of the recency bias -slope*(i-j) on attention scores", positive),
    Param("gap", float, 0.05, 0.05, "accuracy drop that counts as a failure to generalise (below 1/2: parity's "
          "chance accuracy is 1/2)", Interval(0.0, 0.5, open_low=True, open_high=True)),
)

# Reference (2-core CPU): the sweep at T = 20, where ceil(log2 T) = 5 (so from T = 17 on), so that depths 1 to 5 reach
# Theorem 10's depth; six of the thesis's automata (S5 left out for time), 3 seeds, width 64. It trains 25 ensembles
# (5 depths x 5 vocabularies; D8 and Q8 share one), 3 or 6 members each: in one process at two threads a step of all
# of them took 1.3 to 1.9 s on that CPU (2000 steps: 46 to 66 minutes over the runs made), so they train in two
# processes of one thread each, side by side, about 1.2 times faster (the matrix products scale with threads, the
# many small elementwise operations do not; 60 steps of depths 1, 3 and 5: 86 s against 99 and 109). `easy` names the
# automata whose *median* of 20 seeds in the thesis is solved
# by depth 3 (Grid9, D8): with 3 seeds a best-of-20 result (C2's) is not what one should expect to see.
# A5's runs at depths up to 3 were still descending after 2000 steps (and at depth 2 after 4000); a pilot of
# 12000 steps (about 29 minutes for depths 1 to 3, 3 seeds) found every one settled, at 0.41 to 0.81.
# The brittleness reference trains parity at the thesis's T = 40 with the sweep's widths (d_model 64, batch 64):
# a pilot of 3 seeds reached 77%, 56% and 69% in distribution after 1500 steps, losses still falling, at about
# 0.1 s per step alone, so 10000 steps (about 17 minutes), then the scratchpad GPT at the full profile's budget,
# tested on the thesis's eleven laws 0.05 .. 0.95. The LSTM gets 6000 steps: at 2000 (the full profile's) the
# reference run's median LSTM was right on only 98.5% of the strings at Pr[sigma=1] = 0.05 (results/attempts/), and a
# 6000-step pilot (5 minutes for 3 seeds) gave worst accuracies of 98.8%, 100% and 100%.
REFERENCE_WORKERS = 2  # the sweep's processes, above
PARAMS = with_reference(PARAMS, {
    "T": 20, "sweep": "C2,Grid9,D8,Q8,A4,A5", "depths": "1,2,3,4,5", "depth": 3, "shallow_depth": 3,
    "easy": "Grid9,D8", "hard": "A5", "d_model": 64, "batch_size": 64, "steps": 2000, "hard_steps": 12000,
    "eval_size": 1024,
    "parity_length": 40, "parity_steps": 10000, "scratchpad_steps": 2000, "lstm_steps": 6000,
    "shift_probs": "0.05,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,0.95", "parity_solved": 0.99,
})


# ---------------------------------------------------------------- algebra
ALGEBRA_EXAMPLES = ("C2", "C3", "C2xC2xC2", "D6", "D8", "Q8", "A4", "S4", "A5", "S5", "A5xC2", "Grid9", "Dyck",
                    "flipflop")  # A5xC2: non-solvable, though its name is no A_n or S_n


class AlgebraRow(TypedDict):
    name: str
    states: int  # |Q|
    symbols: int  # |Sigma|
    group: bool  # every input permutes the states
    size: int  # order of the transition group, or size of the transformation semigroup
    derived_series: list[int]  # orders along G > [G, G] > ...; empty for a semigroup
    solvable: bool  # is_solvable: all-pairs commutators, for every group of T(A)
    solvable_by_generators: bool  # the same groups, derived series from generators only (a second route)


class AlgebraData(TypedDict):
    rows: list[AlgebraRow]  # one per automaton of the chapter


def algebra_rows(names: list[str], second_route: Callable[[list[tuple[int, ...]]], list[int]] =
                 derived_series_from_generators) -> list[AlgebraRow]:
    """Size, derived series and solvability of each automaton, solvability computed two ways."""
    rows: list[AlgebraRow] = []
    for name in names:
        a = make_automaton(name)
        group = a.is_permutation_automaton()
        size = len(transition_group(a)) if group else len(transformation_semigroup(a))
        series = derived_series_orders(transition_group(a)) if group else []
        rows.append({"name": name, "states": a.n_states, "symbols": a.n_symbols, "group": group, "size": size,
                     "derived_series": series, "solvable": is_solvable(a),
                     "solvable_by_generators": all(second_route(g)[-1] == 1 for g in groups_of(a))})
    return rows


def algebra_claims(rows: list[AlgebraRow], predicted: list[str]) -> list[Claim]:
    """The non-solvable automata found by ``is_solvable`` against ``predicted``, a list computed another way."""
    measured = [r["name"] for r in rows if not r["solvable"]]
    return [Claim.exact("non-solvable automata: is_solvable (all-pairs commutators) against the derived series "
                        "from generators (normal closure of their commutators)", ", ".join(predicted),
                        ", ".join(measured), "two independent computations of every group of T(A) must name the "
                        "same automata; no name pattern (A5xC2 is non-solvable)")]


def algebra(config: dict[str, Any], ctx: RunContext) -> Outcome[AlgebraData]:
    """Solvability of every automaton of the chapter, from derived series of its groups, computed two ways."""
    names = list(dict.fromkeys(_names(config["sweep"]) + _names(config["construct"]) + list(ALGEBRA_EXAMPLES)))
    rows = algebra_rows(names)
    predicted = [r["name"] for r in rows if not r["solvable_by_generators"]]
    return Outcome(algebra_claims(rows, predicted), {"rows": rows})


# ---------------------------------------------------------------- Theorem 10
class ConstructionCheck(TypedDict):
    name: str
    T: int
    depth: int  # layers of the build: ceil(log2 T)
    errors: int  # wrong states over all inputs and positions
    deviation: float  # max |read-out value - (q_t + 1)|
    lemma13_ratio: float  # max over layers and positions of the attention error / Lemma 13 bound
    d_model: int
    d_mlp: int


class TemperatureSweep(TypedDict):
    automaton: str  # the featured automaton
    T: int
    scales: list[float]  # gamma / Lemma 13's sufficient gamma
    accuracy: list[float]  # per scale
    errors: list[int]  # wrong states per scale, over `samples` inputs x T positions
    samples: int


class DepthCurve(TypedDict):
    T: list[int]  # sequence lengths
    transformer: list[int]  # Theorem 10's depth ceil(log2 T) at each


class ConstructionData(TypedDict):
    checks: list[ConstructionCheck]  # one per (automaton, T) case, the featured one last
    temperature: TemperatureSweep
    depth_vs_T: DepthCurve


Builder = Callable[[Semiautomaton, int, float], GPT]


def _check_construction(automaton: Semiautomaton, T: int, n: int, generator: torch.Generator,
                        gamma_scale: float = 1.0, build: Builder = theory.prefix_composition_gpt) -> ConstructionCheck:
    """Run the Theorem 10 GPT on ``n`` random inputs; errors, read-out deviation, Lemma 13 ratio.

    ``build(automaton, T, gamma)`` makes the network; the tests pass broken ones.
    """
    gamma = gamma_scale * theory.sufficient_gamma(T, automaton.n_states)
    model = build(automaton, T, gamma)
    sigma, states = AutomatonTask(automaton, T).sample(n, generator)
    with torch.no_grad():
        logits, attention = model(theory.with_bos(sigma, automaton), return_attention=True)
    logits = logits[:, 1:]
    value = theory.read_out_value(logits, offset=1)
    bound = np.array([theory.lemma13_bound(t + 1, gamma * theory.lookback_gap(T)) for t in range(T + 1)])
    ratio = max(float((theory.attention_errors(a, theory.lookback_targets(T, layer)).max(dim=0).values.numpy()
                       / bound).max()) for layer, a in enumerate(attention))
    return {
        "name": automaton.name, "T": T, "depth": model.config.n_layer,
        "errors": int((logits.argmax(-1) != states).sum()),
        "deviation": float((value - (states + 1)).abs().max()), "lemma13_ratio": ratio,
        "d_model": model.config.d_model,
        "d_mlp": model.config.mlp_width,
    }


def construction_claims(checks: list[ConstructionCheck], temperature: TemperatureSweep, n: int) -> list[Claim]:
    """Theorem 10 exact, read-out at round-off, Lemma 13 respected; too soft an attention breaks the build."""
    soft = int(np.argmin(temperature["scales"]))
    return [
        Claim.exact(f"Thm 10: wrong states over {len(checks)} (automaton, T) cases x {n} inputs", "0",
                    str(sum(c["errors"] for c in checks)), EXACT_REASON),
        Claim.at_most("Thm 10: max |read-out value - (q_t + 1)|", ROUND_OFF, max(c["deviation"] for c in checks),
                      ROUND_OFF_REASON),
        Claim.at_most("Lemma 13: max over layers and positions of ||alpha - e_target||_1 / 2N e^-gap", 1.0,
                      max(c["lemma13_ratio"] for c in checks), BOUND_REASON),
        Claim.at_least(f"softened Thm 10 ({temperature['automaton']}, T = {temperature['T']}): wrong states at "
                       f"gamma = {temperature['scales'][soft]:g} x Lemma 13's sufficient gamma", 1,
                       temperature["errors"][soft],
                       f"Lemma 13 only suffices; this says its gamma is not vacuous: a read error beyond the MLP's "
                       f"plateau {theory.PLATEAU} must show as a wrong state over {temperature['samples']} inputs"),
    ]


def construction(config: dict[str, Any], ctx: RunContext) -> Outcome[ConstructionData]:
    """Theorem 10 built and run on several automata and lengths, a temperature sweep, and depth vs T."""
    generator = heldout.generator(heldout.AUTOMATON_EVAL)
    n = config["construct_samples"]
    cases = [(name, T) for name in _names(config["construct"]) for T in int_list(config["construct_lengths"])]
    cases.append((config["automaton"], config["T"]))
    checks = [_check_construction(make_automaton(name), T, n, generator) for name, T in cases]
    featured = make_automaton(config["automaton"])
    scales = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.5]
    n_sweep = min(n, 32)  # the sweep rebuilds the featured automaton 11 times; S5 is large
    softened = [_check_construction(featured, config["T"], n_sweep, generator, s) for s in scales]
    temperature: TemperatureSweep = {
        "scales": scales, "accuracy": [1 - c["errors"] / (n_sweep * config["T"]) for c in softened],
        "errors": [c["errors"] for c in softened], "samples": n_sweep, "automaton": featured.name, "T": config["T"]}
    lengths = np.unique(np.round(np.logspace(0, 4, 60)).astype(int))
    return Outcome(construction_claims(checks, temperature, n), {
        "checks": checks, "temperature": temperature,
        "depth_vs_T": {"T": lengths.tolist(), "transformer": [theory.shortcut_depth(int(t)) for t in lengths]},
    })


# ---------------------------------------------------------------- Lemmas 15, 16 and Algorithm 1
class LemmaRow(TypedDict):
    lemma: str  # "15", "16" or "Alg. 1"
    automaton: str
    T: int
    layers: int | None  # None for Algorithm 1, run as an algorithm, not built as weights
    errors: int  # wrong states over all inputs and positions


class LemmasData(TypedDict):
    rows: list[LemmaRow]


def lemma_rows(T: int, n: int, generator: torch.Generator, counter: Callable[[int, int], GPT] = theory.counter_gpt,
               memory_unit: Callable[[int, int], GPT] = theory.memory_gpt,
               grid: Callable[[np.ndarray, int], np.ndarray] = theory.gridworld_by_boundaries) -> list[LemmaRow]:
    """Wrong states of the one-layer counters (C_2, C_3, C_5), memory units (2, 4 states) and Algorithm 1
    (Grid_4, Grid_9 at length 4T) on ``n`` random inputs; the tests pass broken constructions."""
    rows: list[LemmaRow] = []
    for modulus in (2, 3, 5):
        a = cyclic(modulus)
        sigma, states = AutomatonTask(a, T).sample(n, generator)
        with torch.no_grad():
            pred = counter(modulus, T)(theory.with_bos(sigma, a))[:, 1:].argmax(-1)
        rows.append({"lemma": "15", "automaton": a.name, "T": T, "layers": 1, "errors": int((pred != states).sum())})
    for m in (2, 4):
        a = memory(m)
        sigma, states = AutomatonTask(a, T).sample(n, generator)
        with torch.no_grad():
            pred = memory_unit(m, T)(sigma).argmax(-1)
        rows.append({"lemma": "16", "automaton": a.name, "T": T, "layers": 1, "errors": int((pred != states).sum())})
    for size in (4, 9):
        a = gridworld(size)
        sigma, states = AutomatonTask(a, 4 * T).sample(n, generator)
        errors = int((grid(sigma.numpy(), size) != states.numpy()).sum())
        rows.append({"lemma": "Alg. 1", "automaton": a.name, "T": 4 * T, "layers": None, "errors": errors})
    return rows


def lemma_claims(rows: list[LemmaRow]) -> list[Claim]:
    """One exact row per construction: no wrong state."""
    claims = []
    for lemma, what in (("15", "one layer simulates C_2, C_3, C_5"), ("16", "one layer simulates memory units"),
                        ("Alg. 1", "boundary detection reproduces Grid_4, Grid_9")):
        wrong = sum(r["errors"] for r in rows if r["lemma"] == lemma)
        claims.append(Claim.exact(f"{'Lemma ' if lemma != 'Alg. 1' else 'Thm 12, '}{lemma}: {what} (wrong states)",
                                  "0", str(wrong), EXACT_REASON))
    return claims


def lemmas(config: dict[str, Any], ctx: RunContext) -> Outcome[LemmasData]:
    """One-layer counter and memory constructions, and Algorithm 1 of Theorem 12, checked exactly."""
    rows = lemma_rows(max(config["T"], 16), config["construct_samples"], heldout.generator(heldout.LEMMA_INPUTS))
    return Outcome(lemma_claims(rows), {"rows": rows})


# ---------------------------------------------------------------- training
def _gpt_factory(vocab: int, T: int, depth: int, config: dict[str, Any]) -> Callable[[], GPT]:
    """GPT-2-like: layer norm, biases, sinusoidal positions, untied output over the states."""
    gpt_config = GPTConfig(vocab_size=vocab, block_size=T, n_layer=depth, n_head=config["n_head"],
                           d_model=config["d_model"], positional="sinusoidal", layer_norm=True, bias=True, tied=False)
    return partial(GPT, gpt_config)  # a partial, not a lambda: it pickles, so a worker process can build it


def _accuracy(model: nn.Module, task: AutomatonTask, n: int) -> float:
    """Per-position accuracy on ``n`` held-out sequences (the paper's token-level accuracy)."""
    sigma, states = task.sample(n, heldout.generator(heldout.AUTOMATON_EVAL))
    with torch.no_grad():
        return float((model(sigma).argmax(-1) == states).float().mean())


class BoundaryAttention(TypedDict):
    weights: list[list[list[float]]]  # last layer, heads x query x key, on one held-out sequence
    states: list[int]  # the states of that sequence
    walls: list[int]  # the two wall states, 0 and |Q| - 1
    boundary_mass: list[float]  # per head: attention on positions at a wall, averaged over held-out sequences
    boundary_rate: float  # the same under uniform causal attention


class SweepData(TypedDict):
    names: list[str]  # automata of the sweep
    depths: list[int]
    accuracy: list[list[list[float]]]  # automaton x depth x seed: held-out per-position accuracy
    still_descending: list[list[list[bool]]]  # automaton x depth x seed: the loss had not settled at the end
    T: int
    chance: list[float]  # 1 / |Q| per automaton
    solvable: list[bool]
    paper_best: dict[str, list[float | None] | None]  # the paper's accuracy (%) at depths 1..16, None if absent
    paper_median: dict[str, list[float | None] | None]
    grid_attention: BoundaryAttention | None  # seed 0's depth-2 GPT on the first gridworld; None without one


def construction_depth(name: str, T: int) -> tuple[int, str]:
    """The fewest layers of a construction of this chapter that simulates ``name`` at length ``T``, and which.

    Counters take one layer (Lemma 15), memory units one (Lemma 16), gridworlds two (Thm 12), any
    automaton ``ceil(log2 T)`` (Thm 10); a direct product runs its factors side by side in
    block-diagonal weights, so it takes as many layers as its deepest factor.
    """
    parts = name.split("x") if "x" in name and not name.startswith("Dyck") else [name]
    if len(parts) > 1:
        return max((construction_depth(p, T) for p in parts), key=lambda d: d[0])
    candidates = [(theory.shortcut_depth(T), "Thm 10")]
    if re.fullmatch(r"C\d+", name):
        candidates.append((1, "Lemma 15"))
    if name == "flipflop" or re.fullmatch(r"memory\d+", name):
        candidates.append((1, "Lemma 16"))
    if re.fullmatch(r"Grid\d+", name):
        candidates.append((2, "Thm 12"))
    return min(candidates, key=lambda d: d[0])


def _paper(name: str, depth: int) -> list[float | None]:
    """The paper's best accuracy (%) at depths ``1..depth`` (Fig. 3.15, T = 100); empty if it has no row."""
    row = PAPER_BEST.get(name)
    return [] if row is None else row[:depth]


def easy_claims(names: list[str], depths: list[int], acc: np.ndarray, solvable: list[bool],
                config: dict[str, Any], moving: np.ndarray) -> list[Claim]:
    """A row for each `easy` automaton whose best seed in the paper's Fig. 3.15 (T = 100) reaches `threshold` by
    depth `shallow_depth`: so does ours. Undecided while it fails with a run at those depths still descending
    (``moving``, like ``acc``: automaton x depth x seed). The labels are computed (``solvable``)."""
    acc, moving = np.asarray(acc), np.asarray(moving)
    d, T, threshold = config["shallow_depth"], config["T"], config["threshold"]
    shallow = [j for j, depth in enumerate(depths) if depth <= d]
    claims = []
    for name in _names(config["easy"]):
        reported = [v for v in _paper(name, d) if v is not None]
        if not reported or max(reported) < 100 * threshold:
            continue  # the paper reports no run of this automaton solved by depth d
        i = names.index(name)
        claims.append(Claim.at_least(
            f"{name} ({'solvable' if solvable[i] else 'non-solvable'}): best accuracy at depth <= {d}, T = {T}",
            threshold, float(acc[i, shallow].max()),
            f"the paper's best of 20 reaches {max(reported):g}% by depth {d} (Fig. 3.15, T = 100); "
            f"threshold: the chapter's 'solved'").eventually(
            *budget_ran_out(int(moving[i, shallow].sum()), "runs were still descending", "steps")))
    return claims


def hard_claims(names: list[str], depths: list[int], acc: np.ndarray, solvable: list[bool],
                config: dict[str, Any], moving: np.ndarray) -> list[Claim]:
    """A row for each `hard` automaton that the paper's best seed leaves `gap` below `threshold` at every depth up
    to `shallow_depth`, where no construction of this chapter is that shallow at length T (at T = 8, Theorem 10
    builds every automaton, A5 included, in 3 layers): neither does ours. No row cites Theorem 11 or 13, which
    speak of T -> infinity. A row that holds while a run at those depths was still descending (``moving``) says
    only "not yet": undecided."""
    acc, moving = np.asarray(acc), np.asarray(moving)
    d, T, threshold = config["shallow_depth"], config["T"], config["threshold"]
    shallow = [j for j, depth in enumerate(depths) if depth <= d]
    claims = []
    for name in _names(config["hard"]):
        reported = _paper(name, d)
        known, which = construction_depth(name, T)
        if len(reported) < d or None in reported or max(reported) >= 100 * (threshold - config["gap"]) or known <= d:
            continue  # the paper does not report it below by depth d, or a construction that shallow exists
        i = names.index(name)
        claims.append(Claim.at_most(
            f"{name} ({'solvable' if solvable[i] else 'non-solvable'}): best accuracy at depth <= {d}, T = {T}",
            threshold - config["gap"], float(acc[i, shallow].max()),
            f"the paper's best of 20 stays at or below {max(reported):g}% up to depth {d} (Fig. 3.15, T = 100); "
            f"the shallowest construction here ({which}) needs {known} layers at T = {T}; an observation about "
            f"training, not Thm 13; margin `gap` below solved").so_far(
            *budget_ran_out(int(moving[i, shallow].sum()), "runs at those depths were still descending",
                            "hard_steps")))
    return claims


def _unjudged(config: dict[str, Any], kind: str, claims: list[Claim]) -> tuple[str, ...]:
    """Why the automata named in ``config[kind]`` (easy or hard) that got no row got none."""
    judged = {claim.name.split(" (")[0] for claim in claims}
    return tuple(f"{name} at depth <= {config['shallow_depth']}, T = {config['T']}: the paper's Fig. 3.15 reports "
                 "no such outcome there, or a construction of the chapter is that shallow"
                 for name in _names(config[kind]) if name not in judged)


def sweep_rows(config: dict[str, Any], data: SweepData) -> tuple[list[Claim], tuple[str, ...]]:
    """The sweep's rows (its `easy` automata) and the reasons for the rows it does not make, from its data alone
    (as run, or as read back from a result file, where the reference check recomputes them)."""
    claims = easy_claims(list(data["names"]), list(data["depths"]), np.asarray(data["accuracy"], dtype=float),
                         list(data["solvable"]), config, np.asarray(data["still_descending"], dtype=bool))
    return claims, _unjudged(config, "easy", claims)


def _train_automata(names: list[str], depths: list[int], steps: int, config: dict[str, Any],
                    ctx: RunContext) -> list[tuple[int, list[int], TrainResult, list[AutomatonTask]]]:
    """Every seed of the automata ``names`` trained at each of ``depths`` for ``steps`` steps (a tenth of them
    warm-up, twenty evaluations), spread over ``ctx.workers`` processes: per depth and vocabulary size, the depth's
    index, the indices of its automata, their vmapped ensemble (automaton-major) and its tasks. A member's vocabulary
    and seed come from its own automaton, so the others change none of its numbers."""
    automata = [make_automaton(n) for n in names]
    vocabs = [max(a.n_states, a.n_symbols) for a in automata]
    train_config = TrainConfig(steps=steps, batch_size=config["batch_size"], lr=config["lr"], warmup=steps // 10,
                               eval_every=max(1, steps // 20))
    planned, requests = [], []
    for j, depth in enumerate(depths):
        for vocab in sorted(set(vocabs)):
            group = [i for i, v in enumerate(vocabs) if v == vocab]
            tasks = [AutomatonTask(automata[i], config["T"]) for i in group for _ in ctx.seeds]
            seeds = [member_seed(names[i], s) for i in group for s in ctx.seeds]
            planned.append((j, group, tasks))
            requests.append(TrainRequest(_gpt_factory(vocab, config["T"], depth, config), tasks, train_config, seeds,
                                         ctx.device))
    trained = train_each(requests, ctx.workers, ctx.progress)
    return [(j, group, result, tasks) for (j, group, tasks), result in zip(planned, trained)]


def _scores(trained: TrainResult, tasks: list[AutomatonTask], config: dict[str, Any],
            n_automata: int) -> tuple[np.ndarray, np.ndarray]:
    """Held-out accuracy and whether the loss had not settled, automaton x seed, of one ensemble."""
    scores = calibrated_map(lambda member: _accuracy(*member, config["eval_size"]), list(zip(trained.models, tasks)))
    return (np.reshape(scores, (n_automata, -1)),
            still_descending(trained, LOSS_NOISE).reshape(n_automata, -1))


def sweep(config: dict[str, Any], ctx: RunContext) -> Outcome[SweepData]:
    """Accuracy against depth for every automaton of the sweep (the paper's Figs. 3.15 and 3.16)."""
    names = list(dict.fromkeys(_names(config["sweep"]) + [config["automaton"]] + _names(config["easy"])
                               + _names(config["hard"])))
    depths = sorted(set(int_list(config["depths"]) + [config["depth"], config["shallow_depth"]]))
    automata = [make_automaton(n) for n in names]
    acc = np.zeros((len(names), len(depths), len(ctx.seeds)))
    moving = np.zeros_like(acc, dtype=bool)
    grid = next((i for i, a in enumerate(automata) if a.name.startswith("Grid")), None)
    attention = None
    for j, group, trained, tasks in _train_automata(names, depths, config["steps"], config, ctx):
        acc[group, j], moving[group, j] = _scores(trained, tasks, config, len(group))
        if grid in group and depths[j] == 2:
            attention = _boundary_attention(trained.models[group.index(grid) * len(ctx.seeds)], automata[grid],
                                            config["T"])
    data: SweepData = {
        "names": names, "depths": depths, "accuracy": acc, "still_descending": moving, "T": config["T"],
        "chance": [1.0 / a.n_states for a in automata], "solvable": [is_solvable(a) for a in automata],
        "paper_best": {n: PAPER_BEST.get(n) for n in names}, "paper_median": {n: PAPER_MEDIAN.get(n) for n in names},
        "grid_attention": attention,
    }
    claims, silent = sweep_rows(config, data)
    return Outcome(claims, data, silent)


class HardData(TypedDict):
    names: list[str]  # the `hard` automata
    depths: list[int]  # 1 .. shallow_depth
    steps: int  # hard_steps
    T: int
    accuracy: list[list[list[float]]]  # automaton x depth x seed: held-out per-position accuracy
    still_descending: list[list[list[bool]]]  # automaton x depth x seed
    eval_steps: list[int]  # where the held-out loss was evaluated
    eval_loss: list[list[list[list[float]]]]  # automaton x depth x seed x evaluation
    chance: list[float]
    solvable: list[bool]
    paper_best: dict[str, list[float | None] | None]  # the paper's best accuracy (%) at depths 1..16
    paper_median: dict[str, list[float | None] | None]


def hard(config: dict[str, Any], ctx: RunContext) -> Outcome[HardData]:
    """The `hard` automata at every depth up to `shallow_depth`, trained until their loss stops moving: a row that
    they stay below solved there needs runs that settled, and the sweep's budget leaves them descending."""
    names, depths, steps = _names(config["hard"]), list(range(1, config["shallow_depth"] + 1)), config["hard_steps"]
    automata = [make_automaton(n) for n in names]
    acc = np.zeros((len(names), len(depths), len(ctx.seeds)))
    moving = np.zeros_like(acc, dtype=bool)
    loss, eval_steps = np.zeros((*acc.shape, 0)), []
    for j, group, trained, tasks in _train_automata(names, depths, steps, config, ctx):
        acc[group, j], moving[group, j] = _scores(trained, tasks, config, len(group))
        eval_steps = [int(step) for step in trained.eval_steps]
        if loss.shape[-1] != len(eval_steps):
            loss = np.zeros((*acc.shape, len(eval_steps)))
        loss[group, j] = np.reshape(trained.eval_loss, (len(group), len(ctx.seeds), -1))
    data: HardData = {
        "names": names, "depths": depths, "steps": steps, "T": config["T"], "accuracy": acc,
        "still_descending": moving, "eval_steps": eval_steps, "eval_loss": loss,
        "chance": [1.0 / a.n_states for a in automata], "solvable": [is_solvable(a) for a in automata],
        "paper_best": {n: PAPER_BEST.get(n) for n in names}, "paper_median": {n: PAPER_MEDIAN.get(n) for n in names},
    }
    claims, silent = hard_rows(config, data)
    return Outcome(claims, data, silent)


def hard_rows(config: dict[str, Any], data: HardData) -> tuple[list[Claim], tuple[str, ...]]:
    """The hard section's rows and the reasons for the rows it does not make, from its data alone."""
    claims = hard_claims(list(data["names"]), list(data["depths"]), np.asarray(data["accuracy"], dtype=float),
                         list(data["solvable"]), config, np.asarray(data["still_descending"], dtype=bool))
    return claims, _unjudged(config, "hard", claims)


def _boundary_attention(model: GPT, automaton: Semiautomaton, T: int) -> BoundaryAttention:
    """Last-layer attention of a trained gridworld GPT on one sequence, with the wall times marked.

    ``boundary_mass`` is the attention each head puts on positions where the walk is at a wall,
    averaged over held-out sequences and query positions; ``boundary_rate`` is the share of such
    positions among those attended to under uniform attention, the baseline it should beat.
    """
    sigma, states = AutomatonTask(automaton, T).sample(256, heldout.generator(heldout.ATTENTION_MAPS))
    with torch.no_grad():
        _, attention = model(sigma, return_attention=True)
    last = attention[-1]  # (B, H, T, T)
    wall = ((states == 0) | (states == automaton.n_states - 1)).double()
    mass = torch.einsum("bhij,bj->bhi", last.double(), wall).mean(dim=(0, 2))
    causal = torch.ones(T, T, dtype=torch.float64).tril()
    rate = (torch.einsum("ij,bj->bi", causal / causal.sum(1, keepdim=True), wall)).mean()
    return {"weights": last[0].numpy(), "states": states[0].numpy(), "walls": [0, automaton.n_states - 1],
            "boundary_mass": mass.numpy(), "boundary_rate": float(rate)}


# ---------------------------------------------------------------- brittleness
def _scratchpad_factory(config: dict[str, Any], block_size: int) -> Callable[[], GPT]:
    """A one-layer GPT without positions whose attention is recency-biased, for scratchpad parity."""
    gpt_config = GPTConfig(vocab_size=4, block_size=block_size, n_layer=1, n_head=config["n_head"],
                           d_model=config["d_model"], positional="none", layer_norm=True, bias=True, tied=False,
                           recency_slope=config["recency"])
    return lambda: GPT(gpt_config)


def _scratchpad_accuracy(model: GPT, sigma: Tensor) -> float:
    """Accuracy of autoregressive scratchpad decoding: each predicted state is fed back in."""
    n, T = sigma.shape
    tokens = torch.empty(n, 0, dtype=torch.long)
    predicted = torch.empty(n, T, dtype=torch.long)
    with torch.no_grad():
        for t in range(T):
            tokens = torch.cat([tokens, sigma[:, t : t + 1]], dim=1)
            predicted[:, t] = model(tokens)[:, -1, :2].argmax(-1)
            tokens = torch.cat([tokens, predicted[:, t : t + 1] + 2], dim=1)
    states = torch.from_numpy(cyclic(2).run(sigma.numpy()))
    return float((predicted == states).float().mean())


class ParityScores(TypedDict):
    by_prob: list[list[float]]  # seed x test law Pr[sigma = 1], at the training length
    by_length: list[list[float]]  # seed x test length, at Pr[sigma = 1] = 1/2


class CountedParityScores(ParityScores):
    by_count: list[list[float]]  # seed x number of ones (0..T) at the training length


class BrittlenessData(TypedDict):
    T: int  # training length
    probs: list[float]  # test laws
    lengths: list[int]  # test lengths
    counts: list[int]  # 0..T ones
    gpt: CountedParityScores
    lstm: CountedParityScores
    scratchpad: ParityScores  # no counts: the recurrent solutions are flat in every view; one suffices
    still_descending: dict[str, int]  # gpt / lstm / scratchpad -> runs whose loss had not settled at the end


def brittleness(config: dict[str, Any], ctx: RunContext) -> Outcome[BrittlenessData]:
    """Parity: a GPT trained at Pr[sigma=1]=1/2 against an LSTM and a recency-biased scratchpad GPT,
    under a shifted input law, at fixed counts of ones, and at other lengths (Figs. 3.8, 3.9)."""
    T, steps = config["parity_length"], config["parity_steps"]
    parity = cyclic(2)
    task = AutomatonTask(parity, T)
    lengths = sorted({max(2, T // 2), T, (3 * T) // 2, 2 * T})
    cfg = TrainConfig(steps=steps, batch_size=config["batch_size"], lr=config["lr"], warmup=steps // 10,
                      eval_every=max(1, steps // 20))
    gpt_config = GPTConfig(vocab_size=2, block_size=max(lengths), n_layer=config["parity_depth"],
                           n_head=config["n_head"], d_model=config["d_model"], positional="sinusoidal",
                           layer_norm=True, bias=True, tied=False)
    runs = {"gpt": train(lambda: GPT(gpt_config), task, cfg, ctx.seeds, ctx.device, progress=ctx.progress)}
    lstm_cfg = TrainConfig(steps=config["lstm_steps"], batch_size=config["batch_size"], lr=1e-2,
                           eval_every=max(1, config["lstm_steps"] // 20))
    runs["lstm"] = train(lambda: LSTM(2, hidden=32), task, lstm_cfg, ctx.seeds, ctx.device, batched=False,
                         progress=ctx.progress)
    pad_cfg = TrainConfig(steps=config["scratchpad_steps"], batch_size=config["batch_size"], lr=config["lr"],
                          warmup=config["scratchpad_steps"] // 10, eval_every=max(1, config["scratchpad_steps"] // 20))
    runs["scratchpad"] = train(_scratchpad_factory(config, 2 * max(lengths)), ScratchpadParity(T), pad_cfg, ctx.seeds,
                               ctx.device, progress=ctx.progress)
    gpt, lstm, pad = (runs[kind].models for kind in ("gpt", "lstm", "scratchpad"))
    n = config["eval_size"]
    probs = float_list(config["shift_probs"])
    out: dict[str, Any] = {"T": T, "probs": probs, "lengths": lengths, "counts": list(range(T + 1)),
                           "still_descending": {kind: int(still_descending(run, LOSS_NOISE).sum())
                                                for kind, run in runs.items()}}
    for name, models in (("gpt", gpt), ("lstm", lstm), ("scratchpad", pad)):
        def score(sigma: Tensor, model: nn.Module, name: str = name) -> float:
            if name == "scratchpad":
                return _scratchpad_accuracy(model, sigma)
            with torch.no_grad():
                return float((model(sigma).argmax(-1) == torch.from_numpy(parity.run(sigma.numpy()))).float().mean())

        def draw(p: float, length: int) -> Tensor:
            generator = heldout.generator(heldout.AUTOMATON_EVAL)
            return AutomatonTask(parity, length, bernoulli_probs(p)).sample(n, generator)[0]

        def views(m: nn.Module, name: str = name) -> dict[str, list[float]]:
            scores = {"by_prob": [score(draw(p, T), m) for p in probs],
                      "by_length": [score(draw(0.5, L), m) for L in lengths]}
            if name != "scratchpad":  # the recurrent solutions are flat in every view; one suffices for it
                scores["by_count"] = [score(binary_with_count(n // 4, T, c, heldout.generator(
                    heldout.AUTOMATON_EVAL)), m) for c in range(T + 1)]
            return scores

        per_model = calibrated_map(views, models)  # a plan times the first model and the last, scaled to all
        out[name] = {view: [scores[view] for scores in per_model] for view in per_model[0]}
    claims, silent = brittleness_rows(config, out)
    return Outcome(claims, out, silent)


def brittleness_rows(config: dict[str, Any], out: BrittlenessData) -> tuple[list[Claim], tuple[str, ...]]:
    """The brittleness rows and the reasons for the rows it does not make, from its data alone (as run, or as read
    back from a result file, where the reference check recomputes them)."""
    claims = brittleness_claims(out, config)
    silent = ("parity GPT drops under shift and at 2T: the GPT had settled without solving its training law, and the "
              "paper's drops are those of a GPT that does",) if claims[0].holds is False else () if resolves_gap(
        config) else (f"parity GPT drops under shift and at 2T: a drop of gap = {config['gap']:g} is fewer than "
                      f"{MIN_STRINGS_PER_GAP} of the eval_size = {config['eval_size']} strings per accuracy, too few "
                      f"to measure it",)
    return claims, silent


MIN_STRINGS_PER_GAP = 10  # a drop of `gap` must be at least this many of the `eval_size` strings per accuracy


def resolves_gap(config: dict[str, Any]) -> bool:
    """Whether ``eval_size`` strings per accuracy can show a drop of ``gap``: one string moves an accuracy by
    ``1 / eval_size``, so a drop of ``gap`` must be ``MIN_STRINGS_PER_GAP`` strings or more."""
    return config["eval_size"] * config["gap"] >= MIN_STRINGS_PER_GAP


def brittleness_claims(out: dict[str, Any], config: dict[str, Any]) -> list[Claim]:
    """The best in-distribution parity GPT solves the training law, and every seed that solves it drops under shift
    and at twice the length (their mean clear of `gap` by more than their spread); the LSTM and the scratchpad +
    recency GPT do not drop."""
    probs, lengths, T = out["probs"], out["lengths"], out["T"]
    centre = probs.index(min(probs, key=lambda p: abs(p - 0.5)))
    gpt_p = np.array(out["gpt"]["by_prob"])
    best = int(gpt_p[:, centre].argmax())  # the precondition: some GPT solves the training law
    # the drops are judged on every seed that solves it (at least the best one), so that no seed's spread decides
    solving = [i for i in range(len(gpt_p)) if gpt_p[i, centre] >= config["parity_solved"]] or [best]
    gpt_l = np.array(out["gpt"]["by_length"])[solving]
    long = lengths.index(2 * T)
    moving = out["still_descending"]

    def settled(kind: str, steps: str) -> tuple[bool, str]:
        return budget_ran_out(moving[kind], f"{kind} runs were still descending", steps)

    solves = Claim.at_least(f"parity GPT (best seed): accuracy at the training law Pr[sigma=1] = {probs[centre]:g}, "
                            f"length {T}", config["parity_solved"], float(gpt_p[best, centre]),
                            "precondition of the two rows below: the paper's drops are those of models that solve the "
                            "training distribution; `parity_solved`"
                            ).eventually(*settled("gpt", "parity_steps"))
    who = "every seed that solves it, the least"
    under_shift = gpt_p[solving, centre] - gpt_p[solving].min(axis=1)
    at_length = gpt_l[:, lengths.index(T)] - gpt_l[:, long]
    drops = [
        Claim.at_least(f"parity GPT ({who}): in-distribution minus worst shifted accuracy", config["gap"],
                       float(np.min(under_shift)),
                       "`gap`: the shortcut counts ones, and shifted laws bring counts unseen at training"
                       ).held_to_spread(config["gap"], under_shift, "--seeds", upper=False),
        Claim.at_least(f"parity GPT ({who}): accuracy at length {T} minus at {2 * T}", config["gap"],
                       float(np.min(at_length)), "`gap`: positions and counts beyond T were never trained"
                       ).held_to_spread(config["gap"], at_length, "--seeds", upper=False),
    ]
    if not solves.holds or not resolves_gap(config):  # the drops speak of a GPT that solves T, measured finely
        # enough to see a drop of `gap`: undecided while it may still solve it (a drop of one that does not yet
        # says nothing of the theorem, whatever its size), else no row
        drops = [row.undecided("the GPT had not yet solved the training law") for row in drops
                 ] if solves.holds is None and resolves_gap(config) else []
    return [
        solves, *drops,
        Claim.at_least("parity LSTM: worst accuracy over shifted laws and lengths (median seed)", 0.99,
                       float(np.median(np.minimum(np.array(out["lstm"]["by_prob"]).min(axis=1),
                                                  np.array(out["lstm"]["by_length"]).min(axis=1)))),
                       "a recurrent net runs the T-step recursion, which no shift affects; 1% for unconverged seeds"
                       ).eventually(*settled("lstm", "lstm_steps")),
        Claim.at_least("scratchpad + recency GPT: worst accuracy over shifted laws and lengths (median seed)", 0.99,
                       float(np.median(np.minimum(np.array(out["scratchpad"]["by_prob"]).min(axis=1),
                                                  np.array(out["scratchpad"]["by_length"]).min(axis=1)))),
                       "recency-biased attention to the last state and input learns the recurrent step; 1% slack"
                       ).eventually(*settled("scratchpad", "scratchpad_steps")),
    ]


def _percent_pairs(best: list[float | None], median: list[float | None]) -> str:
    """``best/median`` in % per depth, ``-`` for a cell the thesis's text lost."""
    return ", ".join("/".join("-" if v is None else f"{v:.1f}" for v in pair) for pair in zip(best, median))


def _depths_vs_seed(data: SweepData | HardData, trained: str = "") -> list[tuple[str, str, str]]:
    """Each automaton's best / median accuracy per depth beside the thesis's Figs. 3.15 / 3.16 at the same depths;
    ``trained`` says how long, where that differs from the sweep."""
    acc = 100 * np.asarray(data["accuracy"])
    depths, seeds = data["depths"], acc.shape[2]
    rows = []
    for name, per_depth, solvable in zip(data["names"], acc, data["solvable"]):
        best, median = data["paper_best"].get(name), data["paper_median"].get(name)
        paper = ("no row for it" if best is None or median is None else
                 _percent_pairs([best[d - 1] for d in depths], [median[d - 1] for d in depths])
                 + " (Figs. 3.15 / 3.16, T = 100, 20 seeds)")
        ours = _percent_pairs([float(a.max()) for a in per_depth], [float(np.median(a)) for a in per_depth])
        moving = np.asarray(data["still_descending"][data["names"].index(name)])
        ours += f"; {int(moving.sum())} of {moving.size} runs still descending at the end"
        rows.append((f"{name} ({'solvable' if solvable else 'non-solvable'}){trained}: best / median accuracy (%) at "
                     f"depths {', '.join(map(str, depths))}; ours at T = {data['T']}, {seeds} seeds", paper, ours))
    return rows


def _brittleness_vs_seed(out: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The parity runs beside what the thesis reports of them: each kind's accuracy at the training law and length,
    its worst under a shifted law and at the longest length (median seed; for the GPT also the best seed)."""
    probs, lengths, T = out["probs"], out["lengths"], out["T"]
    centre = probs.index(min(probs, key=lambda p: abs(p - 0.5)))

    def views(kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        by_prob, by_length = np.array(out[kind]["by_prob"]), np.array(out[kind]["by_length"])
        return by_prob[:, centre], by_prob.min(axis=1), by_length[:, lengths.index(max(lengths))]

    def percent(values: np.ndarray) -> str:
        return f"{100 * float(np.median(values)):.1f}%"

    reports = {"gpt": "fits the training law, fails under a shifted Pr[sigma=1] (Fig. 3.20, left) and at longer "
                      "lengths (Fig. 3.21): a shortcut; figures only, 8 layers of width 512",
               "lstm": "generalises: no drop under shift (Fig. 3.20, left)",
               "scratchpad": "with a scratchpad and recency bias, generalises like the recurrent net (Figs. 3.20, "
                              "left, and 3.21)"}
    rows = []
    for kind, report in reports.items():
        at_train, shifted, longest = views(kind)
        rows.append((f"parity {kind} (T = {T}): accuracy at Pr[sigma=1] = {probs[centre]:g}; worst shifted law; "
                     f"length {max(lengths)} (median seed)", report,
                     f"{percent(at_train)}; {percent(shifted)}; {percent(longest)}"))
    at_train, shifted, longest = views("gpt")
    best = int(at_train.argmax())
    rows.append(("parity gpt, the best seed at the training law: the same three", reports["gpt"],
                 f"{100 * at_train[best]:.1f}%; {100 * shifted[best]:.1f}%; {100 * longest[best]:.1f}%"))
    by_count, counts = np.median(np.array(out["gpt"]["by_count"]), axis=0), np.array(out["counts"])
    low, high = by_count[counts < T / 4], by_count[counts > 3 * T / 4]
    rows.append((f"parity gpt at the training length by the number of ones (median seed): at T/2 = {T // 2}; worst "
                 f"below T/4; worst above 3T/4", "accuracy degrades as the count moves away from the expected one, "
                 "more at low counts than at high ones (Fig. 3.20, right; 25 replicates)",
                 f"{100 * by_count[counts == T // 2][0]:.1f}%; {100 * low.min():.1f}%; {100 * high.min():.1f}%"))
    return rows


def against_seed(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Rows for the page's seed-versus-reference table, one group per section the run made."""
    return ((_depths_vs_seed(data["sweep"]) if "sweep" in data else [])
            + (_depths_vs_seed(data["hard"], f" trained {data['hard']['steps']} steps") if "hard" in data else [])
            + (_brittleness_vs_seed(data["brittleness"]) if "brittleness" in data else []))


def check(config: dict[str, Any], n_seeds: int) -> None:
    """d_model divisible by n_head (the heads split the width); checked before any section runs."""
    check_heads(config["d_model"], config["n_head"])


CHAPTER = Chapter("shortcuts", "Shortcuts: transformers simulate automata in far fewer than T layers", PARAMS,
                  seeds={"quick": 2, "reference": 3, "full": 10},
                  sections=(
                      Section("algebra", "Solvability of the automata", algebra),
                      Section("construction", "Theorem 10: logarithmic depth, built and run", construction),
                      Section("lemmas", "Lemmas 15, 16 and Algorithm 1: one and two layers", lemmas),
                      Section("sweep", "Trained GPTs: accuracy against depth", sweep, trains=True, rows=sweep_rows),
                      Section("hard", "Trained to a standstill: the hard automata at shallow depth", hard,
                              trains=True, rows=hard_rows),
                      Section("brittleness", "Shortcuts are brittle", brittleness, trains=True,
                              rows=brittleness_rows),
                  ), check=check, reference_sections=("sweep", "hard", "brittleness"),
                  reference_workers=REFERENCE_WORKERS)
