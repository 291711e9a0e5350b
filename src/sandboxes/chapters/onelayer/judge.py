"""The one-layer chapter's rows: pure functions of a section's config and stored data, with their tolerances, so that
the tests can hand each a counterfactual in which it fails and a stored result can be judged again. Nothing here
trains or imports the trainer (``tests/test_layout.py``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ...claims import Claim
from ...curves import budget_ran_out
from ...theory import onelayer as theory

if TYPE_CHECKING:
    from .measure import (
        DisjointnessRun,
        KhopData,
        LearningData,
        Match3Check,
        Match3Data,
        MatchCheck,
        MatchData,
        NGramData,
        OneHeadCheck,
        OrderCheck,
        PairRun,
        ParityData,
        QSACheck,
        QSAData,
        QSATrainData,
    )

SOLVED_WORDS = (
    "solved: a tenth of a constant answer's 0.5 or less, our threshold (the theorems speak of exact computation), "
    "well above the held-out estimate's binomial noise"
)
HELD_OUT_WORDS = (
    "4096 held-out inputs (mean of the error rates on matched and unmatched positions: 0.5 for any constant)"
)
ROUND_OFF = 1e-12  # float64: a log-softmax of sums of a few dozen terms of size at most Lambda (measured ~1e-15)


# ---------------------------------------------------------------- Match2
def match2_rows(config: dict[str, Any], data: MatchData) -> tuple[list[Claim], tuple[str, ...]]:
    """The unit against Match2 on every small input and on random larger ones, and its weights against the proof's."""
    checks = [data["every"], *data["random"]]
    return [
        match2_claim(data["every"], exhaustive=True),
        *[match2_claim(check, exhaustive=False) for check in data["random"]],
        weights_claim(checks),
    ], ()


def match2_claim(check: MatchCheck, exhaustive: bool) -> Claim:
    """The theorem says f(X) = Match2(X) for every X, so one wrong position fails it: on every input of a small size,
    or on random inputs at a size too large to enumerate, where M = N^2 (the theorem's M = poly(N))."""
    if exhaustive:
        where = (
            f" (Sanford et al.): wrong outputs on every input of [{check['M']}]^{check['N']} ({check['inputs']} inputs)"
        )
        drawn = ""
    else:
        where = f": wrong outputs on {check['inputs']} random inputs at N = {check['N']}, M = {check['M']}"
        drawn = "half the odd positions given a partner, "
    return Claim.exact(
        f"Match2 in embedding dimension 3{where}",
        "0",
        str(check["wrong"]),
        f"the theorem: f(X) = Match2(X) for all X; c = M^2 ln(6N) = {check['c']:.4g}; {drawn}"
        f"{check['paired']:.2f} of the positions have a partner",
    )


def weights_claim(checks: list[MatchCheck]) -> Claim:
    """The proof's step, sharpened: a key that is neither a partner nor the blank weighs at most
    exp(-2 c sin^2(pi / M)), to float64 round-off of the scores."""
    worst = max(check["stray_excess"] / check["stray_allowance"] for check in checks)
    return Claim.at_most(
        "Match2 unit: largest log-weight on a key that is neither a partner nor the blank, above our bound "
        "-2 c sin^2(pi/M), in units of the scores' float64 round-off, every input checked",
        1.0,
        worst,
        "such a key scores at least c (1 - cos 2 pi/M) = 2 c sin^2(pi/M) below the blank (ours; the slides' gap "
        "c/M^2 is about 2 pi^2 times smaller and gives their 1/(6N) at c = M^2 ln 6N, which this implies); "
        "round-off 16 c 2^-53 in nats",
        digits=3,
    )


# ---------------------------------------------------------------- n-gram language models
def shape_words(order: OrderCheck) -> str:
    """How a row names the transformer of ``order``: its heads and layers."""
    n = order["n"]
    plural = "s" if n > 2 else ""
    if order["shape"] == "heads":
        return f"one layer of {n - 1} head{plural}"
    return f"{n - 1} layer{plural} of one head"


THEOREMS = {"heads": "Thm 3.1", "layers": "Thm 3.2"}


def ngram_rows(config: dict[str, Any], data: NGramData) -> tuple[list[Claim], tuple[str, ...]]:
    """Per order and shape: the hard transformer equals the n-gram, and the softmax one's error sits under our bound
    at every scale where the bound is finite (or why no such row is made)."""
    claims, silences = [], []
    for order in data["orders"]:
        claims.append(hard_claim(order, data))
        judged = [i for i, bound in enumerate(order["bound"]) if math.isfinite(bound)]
        if judged:
            claims.append(soft_claim(order, data, judged))
        else:
            silences.append(
                f"order {order['n']}, {shape_words(order)}: at no chosen scale does every slot miss less than half "
                "its token, where our bound starts; a larger scale makes the row"
            )
    claims += [one_head_claim(check, data) for check in data["one_head"]]
    return claims, tuple(silences)


def one_head_claim(check: OneHeadCheck, data: NGramData) -> Claim:
    """Svete and Cotterell's Thm 3.3 shape: one head in one layer, sparse attention and a richer positional encoding,
    gives the n-gram's law exactly."""
    return Claim.at_most(
        f"{check['n']}-gram LM as one layer of one sparse head, positions mod {check['n'] - 1} (Svete and Cotterell): "
        f"largest |log p_model - log p| over every string of length <= {data['length']}",
        ROUND_OFF,
        check["error"],
        "Thm 3.3: one head and one layer suffice with a richer positional encoding; sparsemax keeps exactly the "
        "last n - 1 positions at the construction's curvature; float64 round-off",
        digits=2,
    )


def hard_claim(order: OrderCheck, data: NGramData) -> Claim:
    """Svete and Cotterell's Thms 3.1 and 3.2: with hard attention the model's law is the n-gram's, exactly."""
    return Claim.at_most(
        f"{order['n']}-gram LM as {shape_words(order)}, hard attention (Svete and Cotterell): largest "
        f"|log p_model - log p| over every string of length <= {data['length']} ({data['strings']} strings)",
        ROUND_OFF,
        order["hard_error"],
        f"{THEOREMS[order['shape']]}: the model's next-symbol law is the n-gram's on every history (weakly "
        "equivalent); float64 round-off",
        digits=2,
    )


def soft_claim(order: OrderCheck, data: NGramData, judged: list[int]) -> Claim:
    """Softmax heads at scale beta: the measured error over our bound plus round-off, at its worst over the judged
    scales."""
    ratios = [order["soft_error"][i] / (order["bound"][i] + ROUND_OFF) for i in judged]
    scales = ", ".join(f"{data['scales'][i]:g}" for i in judged)
    bound = "4 (n - 1)" if order["shape"] == "heads" else "2 n (n - 1)"
    return Claim.at_most(
        f"{order['n']}-gram LM as {shape_words(order)}, softmax at scale beta = {scales}: largest error over our "
        f"bound {bound} Lambda delta(beta) plus float64 round-off",
        1.0,
        max(ratios),
        "our bound (the theorem says only that soft attention approximates hard attention as the scale grows): "
        "each head's stray weight delta(beta) <= 2 sum_d exp(-beta d^2), compounded through the copies of a "
        "deeper model; judged where every slot misses less than half its token",
        digits=3,
    )


# ---------------------------------------------------------------- PARITY
def parity_rows(config: dict[str, Any], data: ParityData) -> tuple[list[Claim], tuple[str, ...]]:
    """Hard attention decides PARITY on every string; softmax at scale b N^2 does too, with the margin our bound gives,
    where that bound is positive (or why no such row is made)."""
    lengths = ", ".join(str(n) for n in data["lengths"])
    claims = [
        Claim.exact(
            f"PARITY in two layers, hard attention in layer 2: wrong decisions on every bit string of length "
            f"{lengths} ({sum(data['strings'])} strings)",
            "0",
            str(sum(data["hard_wrong"])),
            "our construction with Chiang and Cholak's encodings i/N and (-1)^i (and (i/N)^2): layer 1 averages "
            "the bits to k/N, layer 2 reads (-1)^k at position k",
        )
    ]
    if not data["margin_bound"] > 0:
        return claims, (
            f"PARITY at scale {data['scaled']:g} N^2: a head may leave half its weight or more off position k there, "
            "so our bound says nothing; parity_scale above about 1.40 makes the rows",
        )
    claims += [
        Claim.exact(
            f"PARITY in two layers, softmax at scale {data['scaled']:g} N^2: wrong decisions on every bit string of "
            f"length {lengths}",
            "0",
            str(sum(data["scaled_wrong"])),
            "our bound: the output is within 2 delta(b) of (-1)^k, delta(b) = 2 sum_d exp(-b d^2) < 1/2",
        ),
        Claim.at_most(
            f"PARITY in two layers, softmax at scale {data['scaled']:g} N^2: largest |output - (-1)^k| over every "
            "string, every length",
            1 - data["margin_bound"] + ROUND_OFF,
            max(data["scaled_deviation"]),
            "our bound 2 delta(b), plus float64 round-off: each unit of weight off position k moves the output by at "
            "most 2; with the scale growing as N^2 it does not grow with the length",
            digits=4,
        ),
    ]
    return claims, ()


# ---------------------------------------------------------------- k-hop
def khop_rows(config: dict[str, Any], data: KhopData) -> tuple[list[Claim], tuple[str, ...]]:
    """Pointer doubling answers every k-hop query in the bits of k layers."""
    return [
        Claim.exact(
            f"k-hop in context, k = 1 to {data['ks'][-1]}, in bit_length(k) layers of one hard head (log k layers, "
            f"Liu et al.; Sanford et al.): wrong answers over every function [{data['V']}] -> [{data['V']}] and "
            f"every start ({data['inputs']} queries per k)",
            "0",
            str(sum(data["wrong"])),
            "the talk: k hops can be solved with only log k layers; our construction doubles every fact's pointer in "
            "each layer and lets the query hop by 2^l where bit l of k is set",
        )
    ], ()


# ---------------------------------------------------------------- Match3
def match3_rows(config: dict[str, Any], data: Match3Data) -> tuple[list[Claim], tuple[str, ...]]:
    """Our width-M layer against Match3 on every small input and on random larger ones."""
    return [
        match3_claim(data["every"], "every input of"),
        *[match3_claim(c, "random inputs at") for c in data["random"]],
    ], ()


def match3_claim(check: Match3Check, where: str) -> Claim:
    """One layer whose width grows with M computes Match3 exactly; Sanford et al. show none of width below about
    N / (p H log log N) does, so the width is not the point of the row, the exactness is."""
    size = f"[{check['M']}]^{check['N']}" if where == "every input of" else f"N = {check['N']}, M = {check['M']}"
    return Claim.exact(
        f"Match3 in one layer of one head and width M (ours): wrong outputs on {where} {size} "
        f"({check['inputs']} inputs)",
        "0",
        str(check["wrong"]),
        f"our construction: a uniform head reads the token shares, the MLP the presence of a pair summing to -x_i; "
        f"{check['positive']:.2f} of the positions are matched",
    )


# ---------------------------------------------------------------- Match2 and Match3 trained
MATCH2_WIDTH = 3  # Sanford et al.'s unit computes Match2 in embedding dimension 3
# Match2's held-out loss rests on a plateau before it drops to 0: the quick runs left it between steps 200 and 700
# (the section's loss curves), so a run of fewer steps may look settled on it, and its rows say "not yet"
PLATEAU_STEPS = 1000


def find_run(data: LearningData, depth: int, width: int, N: int) -> PairRun:
    """The run of ``data`` at one depth, width and N."""
    return next(r for r in data["runs"] if (r["depth"], r["width"], r["N"]) == (depth, width, N))


def smallest_solving_width(data: LearningData, N: int, solved: float) -> int | None:
    """The smallest width of one layer whose every seed solves Match3 at ``N`` (balanced error at most ``solved``)."""
    return next(
        (w for w in sorted(data["widths"]) if max(find_run(data, 1, w, N)["balanced_error"][1]) <= solved), None
    )


def learning_rows(config: dict[str, Any], data: LearningData) -> tuple[list[Claim], tuple[str, ...]]:
    """Of one trained layer of the smallest width: Match2 solved at every N, and Match3 not at the smallest N (where a
    small layer is likeliest to solve it: the hardest test of the contrast), where Match2's row there holds (the
    control: a layer that learned nothing would leave Match3 unsolved too) and the width is below M (where the chapter
    has no construction of Match3). Observations about training, set beside the theorems, which speak of what a layer
    represents. No row for Match3 at larger N, nor for the trend in N or width: the lower bound holds for N large,
    with a constant it does not give, so at these N it says nothing; the figure shows the trend."""
    if 1 not in data["depths"]:
        return [], ("Match2 and Match3 trained: the rows speak of one layer, and learn_depths has no 1",)
    width = min(data["widths"])
    if width < MATCH2_WIDTH:
        return [], (f"Match2 and Match3 trained at width {width}: below the Match2 theorem's width 3, no row",)
    runs = [find_run(data, 1, width, N) for N in data["N"]]
    claims = [solved_claim(config, run) for run in runs]
    smallest, control = runs[0], claims[0]
    if width >= smallest["M"]:
        return claims, (f"Match3 trained at width {width}: our layer of width M = {smallest['M']} fits there",)
    if control.holds is not True:
        return claims, (
            f"Match3 trained at N = {smallest['N']}, width {width}: Match2's row there does not hold, so a layer that "
            "learned nothing would pass",
        )
    return [*claims, unsolved_claim(config, smallest)], ()


def task_errors(run: PairRun, task: int) -> tuple[np.ndarray, np.ndarray]:
    """One task's balanced error per seed and which seeds were still descending (every seed, in a run too short to
    have left the plateau)."""
    moving = np.asarray(run["still_descending"][task], dtype=bool)
    return np.asarray(run["balanced_error"][task]), moving | (run["eval_steps"][-1] < PLATEAU_STEPS - 1)


def solved_claim(config: dict[str, Any], run: PairRun) -> Claim:
    """Every seed's layer solves Match2 (balanced error at most ``solved``), held to the seeds' spread; undecided
    where a seed that did not was still descending."""
    errors, moving = task_errors(run, 0)
    return (
        Claim.at_most(
            f"Match2 trained, N = {run['N']}, M = {run['M']}: balanced error of one layer of width {run['width']} "
            "(worst seed)",
            config["solved"],
            float(errors.max()),
            f"an observation about training: Sanford et al.'s unit of width 3 computes Match2 at every N, and "
            f"training finds a layer that does, on {HELD_OUT_WORDS}; {SOLVED_WORDS}",
        )
        .held_to_spread(config["solved"], errors)
        .eventually(
            *budget_ran_out(
                int(moving[errors > config["solved"]].sum()),
                "unsolved Match2 runs were still descending",
                "learn_steps",
            )
        )
    )


def unsolved_claim(config: dict[str, Any], run: PairRun) -> Claim:
    """No seed's layer solves Match3 at the smallest N (the best seed stays above ``solved``) where the same layer
    solves Match2; undecided where a run was still descending (it says only "not yet")."""
    errors, moving = task_errors(run, 1)
    return Claim.at_least(
        f"Match3 trained, N = {run['N']}, M = {run['M']}: balanced error of the same layer (best seed)",
        config["solved"],
        float(errors.min()),
        "an observation about training, not the theorem (which holds for N large, with a constant it does not "
        "give): the layer that solves Match2 on inputs of this law does not solve Match3, at the list's smallest N "
        f"(where a small layer is likeliest to) and below our construction's width M; {SOLVED_WORDS}",
        digits=3,
    ).so_far(*budget_ran_out(int(moving.sum()), "Match3 runs were still descending", "learn_steps"))


# ---------------------------------------------------------------- q-sparse averaging
# the lemma's margin, which the proof needs: every key off the support scores at most half the support's
OFF_SCORE = 0.5


def qsa_rows(config: dict[str, Any], data: QSAData) -> tuple[list[Claim], tuple[str, ...]]:
    """The unit eps-approximates qSA at each N and q where its keys give every checked query the proof's margin (the
    lemma's premise: the theorem's constant is not given, so at keys too narrow for the margin it says nothing); the
    lower bound's reduction, and its protocol where the keys give Alice a query."""
    narrow = [c for c in data["checks"] if c["off_score"] > OFF_SCORE]
    claims = [qsa_claim(c, data["eps"]) for c in data["checks"] if c["off_score"] <= OFF_SCORE]
    silent = tuple(
        f"qSA at N = {c['N']}, q = {c['q']}: keys of width {c['width']} ({config['qsa_factor']:g} q ln N) leave an "
        f"off-support score of {c['off_score']:.3f} > 1/2 with least-norm queries, short of the lemma's margin; the "
        "theorem's constant is not given, so it says nothing at this width: a larger qsa_factor makes the row"
        for c in narrow
    )
    for run in data["disjointness"]:
        claims.append(reduction_claim(run))
        bound = protocol_bound(run)
        if bound < 1 / run["q"]:
            claims.append(protocol_claim(run, bound))
        elif math.isnan(run["off_score"]):
            silent += (
                f"the protocol at q = {run['q']}: keys of width {run['width']} leave q of them linearly dependent, so "
                "no query scores each of Alice's keys 1; wider keys (qsa_factor) make the row",
            )
        else:
            silent += (
                f"the protocol at q = {run['q']}: with keys of width {run['width']} and {run['bits']} bits our bound "
                f"on the unit's error is {bound:.3g} (largest off-set score {run['off_score']:.3g}, scores moved by "
                f"{run['shift']:.3g} in the rounding), not below the 1/q Bob's threshold allows; the theorem's width "
                "and precision have no constants, so it says nothing here: more bits (qsa_bits) or wider keys "
                "(qsa_factor) make the row",
            )
    return claims, silent


def protocol_bound(run: DisjointnessRun) -> float:
    """Our bound on the protocol's error, from Alice's side alone (the keys' margin and her rounding); infinite where
    the keys give no margin."""
    if not run["off_score"] < 1:  # also nan: no query
        return math.inf
    return theory.qsa_error_bound(2 * run["q"] + 1, run["q"], run["alpha"], run["off_score"], run["shift"])


def reduction_claim(run: DisjointnessRun) -> Claim:
    """The lower bound's reduction: qSA at position 2q + 1 of the encoded input is -e_1 exactly where Alice's and Bob's
    sets are disjoint, on every pair."""
    return Claim.exact(
        f"qSA lower bound (Sanford et al.), q = {run['q']}: pairs (a, b) of {run['q']}-bit vectors where "
        f"qSA(X)_2q+1 = -e_1 disagrees with DISJ(a, b) = 0, of all {run['pairs']}",
        "0",
        str(run["qsa_wrong"]),
        "the proof's encoding: Alice's set names z_2i-1 where a_i = 1, else z_2i; Bob's z_j is e_1 at odd j with "
        "b_(j+1)/2 = 1, else -e_1 (z_2q+1 too); so the average is -e_1 exactly where no i has a_i = b_i = 1, and "
        "otherwise at "
        f"least 2/q above it (measured: {run['gap']:.4g}), which a 1/(2q)-approximation tells apart",
    )


def protocol_claim(run: DisjointnessRun, bound: float) -> Claim:
    """The protocol of the proof through our unit, where our bound puts its error under 1/q: Alice's rounded query and
    Bob's keys and values answer DISJ on every pair."""
    return Claim.exact(
        f"the protocol, q = {run['q']}: Alice sends the unit's query, {run['width']} numbers with {run['bits']}-bit "
        f"mantissas (exponents not counted); pairs Bob answers wrongly, of all {run['pairs']}",
        "0",
        str(run["protocol_wrong"]),
        "the proof: Alice computes the query from her set alone and Bob the rest of f(X)_2q+1, so a unit that "
        "1/(2q)-approximates qSA answers DISJ with O(m p) bits, which Yao's bound puts at q or more; our bound on "
        f"our unit's error with her rounding, {bound:.2g}, is under the 1/q Bob's threshold allows (largest error "
        f"measured: {run['protocol_error']:.2g})",
    )


def qsa_claim(check: QSACheck, eps: float) -> Claim:
    """The theorem: a unit of width of order d' + q log N eps-approximates qSA on every input; checked on random
    inputs at our constant, where the keys give the proof's margin."""
    return Claim.at_most(
        f"qSA in one unit, N = {check['N']}, q = {check['q']}, keys of width {check['width']} (Sanford et al.): "
        f"largest ||f(X)_i - qSA(X)_i|| at {check['queries']} positions of {check['inputs']} random inputs",
        eps,
        check["error"],
        f"the theorem: f eps-approximates qSA for all X once m >= Omega(d' + q log N); random sign keys (Candes and "
        f"Tao) whose largest off-support score here is {check['off_score']:.3f} <= 1/2, least-norm queries, "
        f"alpha = ceil(2 ln(4N/eps)) = {check['alpha']:g}; our bound at that score: {check['bound']:.2g}",
        digits=3,
    )


# ---------------------------------------------------------------- q-sparse averaging trained
# a unit at least N - 1 wide left its plateau by step 300 of 1500 and by step 200 of 600 in every pilot (N = 20, q = 3,
# lr 1e-2, batch 128; not calibrated elsewhere): shorter runs, whose schedule anneals before that, leave the rows
# undecided
QSA_PLATEAU_STEPS = 300


def named_mass_bound(data: QSATrainData) -> float:
    """Half way from uniform attention's weight on the named positions, q/N, to all of it."""
    return (1 + data["q"] / data["N"]) / 2


def qsa_trained_rows(config: dict[str, Any], data: QSATrainData) -> tuple[list[Claim], tuple[str, ...]]:
    """Of the widest trained unit, where it is at least N - 1 wide: every seed averages to within 1/(2q) (the level
    the lower bound speaks of) where uniform attention does not, and puts most of its attention on the named
    positions, as the slide's trained map does. Observations about training: our unit's query is linear in the set's
    0/1 vector, so its scores are sums over the set of rows of one N x N matrix of rank at most m; the matrix
    beta (I - 11^T/N), of rank N - 1, gives every named position the same score, beta above the rest, so a unit that
    computes qSA to any eps exists from width N - 1 (and, for 3 <= q < N, no narrower one gives every set equal
    scores). Narrower units are drawn, not judged: the theorem's unit embeds each set by any function first."""
    k = len(data["widths"]) - 1
    if data["widths"][k] < data["N"] - 1:
        return [], (
            f"qSA trained: the widest unit ({data['widths'][k]}) is narrower than N - 1 = {data['N'] - 1}, below which "
            "our unit (its query linear in the set's 0/1 vector) is not known to compute qSA; a width of at least "
            "N - 1 in qsa_train_widths makes the rows",
        )
    errors, mass = np.asarray(data["error"][k]), np.asarray(data["support_mass"][k])
    moving = np.asarray(data["still_descending"][k], dtype=bool) | (data["eval_steps"][-1] < QSA_PLATEAU_STEPS - 1)
    bound, width, share = 1 / (2 * data["q"]), data["widths"][k], named_mass_bound(data)
    where = f"N = {data['N']}, q = {data['q']}, width {width}"
    claims, silent = [], ()
    if data["uniform_error"] > bound:
        claims.append(
            Claim.at_most(
                f"qSA trained, {where}: over held-out inputs, the mean of the largest ||f(X)_i - qSA(X)_i|| (worst "
                "seed)",
                bound,
                float(errors.max()),
                "an observation about training: from width N - 1 our unit (its query linear in the set's 0/1 "
                "vector) computes qSA to any eps, and gradient descent finds one to within 1/(2q), the level of the "
                "lower bound's reduction, on typical inputs (uniform attention, every value averaged: "
                f"{data['uniform_error']:.3g})",
                digits=3,
            )
            .held_to_spread(bound, errors)
            .eventually(
                *budget_ran_out(int(moving[errors > bound].sum()), "units were still descending", "qsa_train_steps")
            )
        )
    else:
        silent = (
            f"qSA trained, {where}: uniform attention already averages to within 1/(2q) here "
            f"({data['uniform_error']:.3g}), so the error row would hold for a unit that learned nothing",
        )
    claims.append(
        Claim.at_least(
            f"qSA trained, {where}: attention on the q positions each one names, mean weight (worst seed)",
            share,
            float(mass.min()),
            "an observation about training, as the slide's trained attention map shows it: the construction puts "
            "all but eps/2 of each row on the named positions, uniform attention q/N; the row asks half way from "
            "q/N to all",
            digits=3,
        )
        .held_to_spread(share, mass, upper=False)
        .eventually(*budget_ran_out(int(moving[mass < share].sum()), "units were still descending", "qsa_train_steps"))
    )
    return claims, silent
