"""The Markov chapter's rows: pure functions of a section's config and its data, as run or as read back from a
result file (the reference check judges committed results again with them), and the curve analysis they read.
Nothing here trains or imports the trainer (``tests/test_layout.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ...claims import Claim
from ...curves import budget_ran_out
from ...data.markov import binary_kernel
from ...profiles import int_list
from ...theory import markov as theory

if TYPE_CHECKING:
    from .measure import (
        BasinData,
        DepthData,
        DepthRun,
        FlowData,
        GlobalData,
        MultistateData,
        PhaseData,
        SweepData,
        TrainingData,
        TrainingRun,
        UnigramData,
    )


EXACT = 1e-10


EXACT_REASON = "float64 round-off: the construction is exact"


GAP_FRACTION = 0.1


GAP_REASON = (
    "a tenth of the unigram-bigram gap I(x_n; x_n+1): separates the two minima, leaves room for finite training"
)


MIN_GAP = 0.01  # below this mutual information the two minima are too close to tell apart


GPT2_INIT_STD = 0.02  # the initialisation the paper trains from; its reported outcomes are for scales up to it


NOISE = 0.005  # held-out sampling noise of an evaluated loss (nats)


AXIS_START, AXIS_OFFSET = 0.05, 0.1  # flows started this close to the axis e = 0, this far above/below the switch


def global_minimum_rows(config: dict[str, Any], data: GlobalData) -> tuple[list[Claim], tuple[str, ...]]:
    """Theorem 1: theta_*'s loss is the entropy rate and its gradient vanishes, tied and untied."""
    claims = []
    for label in ("tied", "untied"):
        claims.append(
            Claim.close(
                f"Thm 1 ({label}): loss of theta_* = entropy rate",
                data["entropy_rate"],
                data["loss"][label],
                EXACT,
                EXACT_REASON,
                10,
            )
        )
        claims.append(
            Claim.close(
                f"Thm 1 ({label}): gradient at theta_* vanishes", 0.0, data["gradient"][label], EXACT, EXACT_REASON
            )
        )
    return claims, ()


def unigram_rows(config: dict[str, Any], data: UnigramData) -> tuple[list[Claim], tuple[str, ...]]:
    """Theorems 2 and 3: theta_pi is stationary with the closed-form Hessian block; tied it is a local minimum when
    p+q > 1 and the other weights are zero (and no minimum beside an MLP off that hypothesis), untied a saddle."""
    p, q, c = config["p"], config["q"], data["curvature"]
    claims: list[Claim] = []
    for label in ("tied", "untied"):
        thm = "Thm 2" if label == "tied" else "Thm 3"
        claims += [
            Claim.close(
                f"{thm} ({label}): loss of theta_pi = H(pi)",
                data["unigram_entropy"],
                data["loss"][label],
                EXACT,
                EXACT_REASON,
                10,
            ),
            Claim.close(
                f"{thm} ({label}): gradient at theta_pi vanishes", 0.0, data["gradient"][label], EXACT, EXACT_REASON
            ),
            Claim.close(
                f"{thm} ({label}): Hessian (e, a, b) block at theta_pi = closed form",
                0.0,
                data["block_error"][label],
                EXACT,
                EXACT_REASON,
            ),
        ]
        if abs(p + q - 1) < MIN_GAP:
            continue  # c = 0: the theorems are silent
        radii, w = tuple(data["radii"]), data["off_hypothesis_w"]
        if label == "tied" and p + q > 1:
            lowering, tried = data["lowering"]
            claims += [
                Claim.exact(
                    f"Thm 2 (tied, p+q>1): random directions that lower the loss at theta_pi, radii {radii} "
                    f"(count of {tried})",
                    "0",
                    str(lowering),
                    "a local minimum: no small step in any of the sampled directions of all parameters lowers the loss",
                ),
                Claim.at_most(
                    f"Thm 2 needs its hypothesis (other weights 0): e = 0 beside an MLP of w = {w} "
                    f"< -1/sqrt2 is no minimum (change along e at radius {radii[1]})",
                    -EXACT,
                    data["drop_along"][label],
                    "the MLP turns the curvature in e, c(1 + 2w|w|), negative: a drop of about "
                    f"{abs(1 + 2 * w * abs(w)):.2f} c r^2, far above round-off",
                ),
            ]
        elif label == "untied":
            claims.append(
                Claim.at_most(
                    f"Thm 3 (untied): theta_pi is a saddle: e = u, a = {'-' if c > 0 else '+'}u "
                    f"lowers the loss (change at radius {radii[1]})",
                    -EXACT,
                    data["drop_along"][label],
                    "the bilinear term c <a, e> x_n is negative along it",
                )
            )
    silent = (
        ()
        if abs(p + q - 1) >= MIN_GAP
        else (
            f"Theorems 2 and 3 beyond the closed forms at (p, q) = ({p:g}, {q:g}): the curvature c vanishes with "
            "p + q - 1, and with it what the theorems say about the loss near theta_pi",
        )
    )
    return claims, silent


def hessian_sweep_rows(config: dict[str, Any], data: SweepData) -> tuple[list[Claim], tuple[str, ...]]:
    """Along p = q, the tied block's smallest eigenvalue is min(2c, pi0 pi1) and changes sign at p + q = 1."""
    sweep, tied_eig = np.asarray(data["sweep"]), np.asarray(data["tied_min_eig"])
    predicted_tied = np.array([min(2 * theory.curvature(s / 2, s / 2), 0.25) for s in sweep])  # pi0 pi1 = 1/4 at p = q
    signs = "".join("+" if v > EXACT else ("-" if v < -EXACT else "0") for v in tied_eig)
    expected = "".join("+" if s > 1 + 1e-9 else ("-" if s < 1 - 1e-9 else "0") for s in sweep)
    claims = [
        Claim.close(
            "Hessian sweep over p+q (p=q): tied block eigenvalue = min(2c, pi0 pi1)",
            0.0,
            float(np.abs(tied_eig - predicted_tied).max()),
            EXACT,
            EXACT_REASON,
        ),
        Claim.exact(
            "tied Hessian sign along the sweep follows sign(p+q-1)",
            expected,
            signs,
            "Theorem 2 (positive for p+q>1); for p+q<1 the closed form is negative, so "
            "theta_pi is no minimum there (the paper leaves that case open)",
        ),
    ]
    return claims, ()


def reduced_flow_rows(config: dict[str, Any], data: FlowData) -> tuple[list[Claim], tuple[str, ...]]:
    """The reduced model's loss is the GPT's, its flow keeps E, and flows go where the sign of c says."""
    claims: list[Claim] = []
    silent: tuple[str, ...] = ()
    for chain in (data["featured"], data["contrast"]):
        p, q = chain["p"], chain["q"]
        claims += [
            Claim.close(
                f"reduced model ({p}, {q}): two-scalar loss = population loss of its GPT weights",
                chain["gpt_loss"],
                chain["reduced_loss"],
                EXACT,
                EXACT_REASON,
                10,
            ),
            Claim.close(
                f"reduced model ({p}, {q}): E = e^2 - w^2 - sign(w) ln|w| conserved by its flow",
                0.0,
                chain["energy_drift"],
                1e-6,
                "ODE solved at rtol 1e-10 over t = 400",
            ),
        ]
        if information_gap(p, q) < MIN_GAP:
            silent += (
                f"where flows of ({p}, {q}) go: p+q is so close to 1 that the curvature c and the gap between "
                "the two minima vanish, and the slides' portraits say nothing there",
            )
            continue
        predicted = "above: toward, below: away" if theory.curvature(p, q) > 0 else "above: away, below: toward"
        reached = float(np.mean(chain["reached_global"]))
        claims += [
            Claim.exact(
                f"reduced model ({p}, {q}): flows from e = {AXIS_START} at w = -1/sqrt2 +- "
                f"{AXIS_OFFSET} move (above, below)",
                predicted,
                chain["axis_moves"],
                "the axis e = 0 attracts where c(1 + 2w|w|) > 0: the sign of c and the switch at "
                "w = -1/sqrt2, against the integrated flow",
            ),
            Claim.exact(
                f"reduced model ({p}, {q}): most Gaussian starts (std {config['flow_init_std']}) end at",
                "global minimum" if p + q < 1 else "unigram (e = 0)",
                "global minimum" if reached > 0.5 else "unigram (e = 0)",
                f"the slides' phase portraits; measured fraction reaching the global minimum: {reached:.2f}",
            ),
        ]
    return claims, silent


def plateau_band(gap: float) -> float:
    """How close to H(pi) a held-out loss counts as on the unigram plateau: a tenth of the gap plus the sampling noise."""  # noqa: E501
    return GAP_FRACTION * gap + NOISE


def on_plateau(eval_loss: np.ndarray, unigram_entropy: float, gap: float) -> np.ndarray:
    """Per seed: the last evaluated loss is on the unigram plateau (within :func:`plateau_band` of H(pi))."""
    return np.abs(np.asarray(eval_loss, dtype=float)[..., -1] - unigram_entropy) < plateau_band(gap)


def escape_steps(eval_steps: np.ndarray, eval_loss: np.ndarray, unigram_entropy: float, gap: float) -> np.ndarray:
    """Per run: the first evaluated step whose held-out loss is below the unigram plateau; ``inf`` if it came down to
    the plateau and never left it, ``nan`` if it never came down to it (a model that learned nothing)."""
    loss = np.asarray(eval_loss, dtype=float)
    below = loss < unigram_entropy - plateau_band(gap)
    reached = (loss < unigram_entropy + plateau_band(gap)).any(axis=-1)
    left = np.where(below.any(axis=-1), np.asarray(eval_steps, dtype=float)[np.argmax(below, axis=-1)], np.inf)
    return np.where(reached, left, np.nan)


def leaves_later(tied: np.ndarray, untied: np.ndarray) -> bool | None:
    """Whether every tied run left the plateau after every untied one; ``None`` while neither group had left it.

    A tied run that left while an untied one had not is a definite no: the untied run leaves later still. A run that
    never came down to the plateau (``nan``) keeps it open: the row is about runs that reach it, so it cannot hold.
    """
    if np.isnan(tied).any() or np.isnan(untied).any():
        return None
    first_tied, last_untied = float(np.min(tied)), float(np.max(untied))
    if np.isinf(first_tied) and np.isinf(last_untied):
        return None
    return first_tied > last_untied


def _step(step: float) -> str:
    return "never came down to it" if np.isnan(step) else "not by the end" if np.isinf(step) else f"step {step:g}"


ORDER_REASON = (
    "reported (the paper's Figs. 3a, 4 and 5: at its budget the tied runs are still at the unigram "
    "loss, the untied ones are not); Thms 2 and 3 are why one expects it: at theta_pi the tied loss curves "
    "upward in the embedding (a local minimum; for n states the embedding block above p*), the untied one "
    "has a descent direction (a saddle). They are statements about the landscape, not about training. A "
    "run has left when its held-out loss is below H(pi) by a tenth of the gap plus 0.005 of sampling "
    "noise; while a run had not come down to H(pi) the row is undecided"
)


NO_ORDER_ROW = (
    "which of tied and untied runs leaves the unigram plateau first at init std {std:g}: the paper "
    "reports it from small Gaussian initialisations (std up to 0.02, GPT-2's), and Thms 2 and 3 are local "
    "to theta_pi"
)


def later_escape_row(
    name: str, tied: list[np.ndarray], untied: list[np.ndarray], steps_param: str, count: bool = True
) -> Claim:
    """The groups (cells, scales, switching probabilities) in which a tied run left the plateau no later than an untied
    one, predicted 0; with ``count=False`` (one group) the measured column gives the two steps instead.

    A group in which neither had left makes the row undecided, unless another group fails it.
    """
    verdicts = [leaves_later(t, u) for t, u in zip(tied, untied)]
    holds, failed = all(v is True for v in verdicts), any(v is False for v in verdicts)
    if not count:
        first, last = float(np.min(tied[0])), float(np.max(untied[0]))  # nan if any run never came down
        claim = Claim(
            name,
            "first tied after last untied",
            f"first tied {_step(first)}, last untied {_step(last)}",
            "order",
            ORDER_REASON,
            holds,
        )
    else:
        claim = Claim(name, "0", str(sum(v is False for v in verdicts)), "exact", ORDER_REASON, holds)
    return claim.eventually(
        failed or None not in verdicts,
        f"{sum(v is None for v in verdicts)} of {len(verdicts)} "
        f"groups had a run not yet down to the plateau, or neither tied nor untied runs off it, "
        f"when the budget ran out; more steps (--set {steps_param}=...) decide it",
    )


def too_close(chains: list[tuple[float, float]], rows: str) -> tuple[str, ...]:
    """Why ``rows`` are missing for the chains whose unigram-bigram gap is below ``MIN_GAP``."""
    return tuple(
        f"{rows} at (p, q) = ({p:g}, {q:g}): the gap I(x_n; x_n+1) = {abs(information_gap(p, q)):.2g} is "
        f"below {MIN_GAP}, so the two minima cannot be told apart (p + q = 1 makes it 0)"
        for p, q in chains
        if information_gap(p, q) < MIN_GAP
    )


def information_gap(p: float, q: float) -> float:
    """The unigram-bigram gap H(pi) - H = I(x_n; x_n+1) of the binary chain (p, q): what separates the two minima."""
    kernel = binary_kernel(p, q)
    return theory.unigram_entropy(kernel) - theory.entropy_rate(kernel)


def training_section_rows(config: dict[str, Any], data: TrainingData) -> tuple[list[Claim], tuple[str, ...]]:
    """The training section's rows and the reasons for the rows it does not make, from its data alone (as run, or as
    read back from a result file, where the reference check recomputes them)."""
    chains = [(config["p"], config["q"]), (config["p2"], config["q2"])]
    silent = too_close(chains, "where the runs end") + tuple(
        f"where tied runs at (p, q) = ({p:g}, {q:g}) end: Thm 2 makes theta_pi a local minimum, and says nothing of "
        "whether training converges to it; the steps at which the runs left the plateau are in the data"
        for p, q in chains
        if p + q > 1 and information_gap(p, q) >= MIN_GAP
    )
    if config["init_std"] > GPT2_INIT_STD:
        silent += (NO_ORDER_ROW.format(std=config["init_std"]),)
    weights, quiet = weight_rows(data["runs"])
    return training_rows(data["runs"], config["init_std"]) + weights, silent + quiet


def reaches_entropy_rate_row(
    name: str, excess: np.ndarray, gap: float, waiting: np.ndarray, reason: str, steps_param: str, seeds_param: str
) -> Claim:
    """Every run ends within a tenth of the gap of the entropy rate; undecided while a run that is not there
    ``waiting`` (on the unigram plateau, where no budget says it stays, or still descending), or while the seeds'
    spread leaves their mean within noise of the bound."""
    bound = GAP_FRACTION * gap
    claim = Claim.at_most(name, bound, float(np.max(excess)), f"{reason}; {GAP_REASON}")
    off = np.asarray(excess) > bound
    return claim.eventually(
        *budget_ran_out(
            int((off & waiting).sum()),
            f"of {off.size} runs were on the unigram plateau or still descending",
            steps_param,
        )
    ).held_to_spread(bound, excess, seeds_param)


def training_rows(runs: list[TrainingRun], init_std: float) -> list[Claim]:
    """Untied runs and tied runs with p+q<1 reach the entropy rate; with p+q>1, tied runs leave the unigram plateau
    after the untied ones (made only from the paper's small initialisation)."""
    claims = []
    for run in runs:
        p, q, tied, excess = run["p"], run["q"], run["tied"], np.asarray(run["excess"])
        gap, label = information_gap(p, q), f"({p}, {q}) {'tied' if tied else 'untied'}"
        if gap < MIN_GAP:
            continue
        if tied and p + q > 1:
            untied = [r for r in runs if (r["p"], r["q"]) == (p, q) and not r["tied"]]
            if untied and init_std <= GPT2_INIT_STD:
                claims.append(
                    later_escape_row(
                        f"({p}, {q}): tied runs leave the unigram plateau after every untied run (evaluated steps)",
                        [np.asarray(run["escape_step"])],
                        [np.asarray(untied[0]["escape_step"])],
                        "steps",
                        count=False,
                    )
                )
            continue
        H_pi = theory.unigram_entropy(binary_kernel(p, q))
        waiting = np.asarray(run["still_descending"]) | on_plateau(run["eval_loss"], H_pi, gap)
        claims.append(
            reaches_entropy_rate_row(
                f"{label}: every seed reaches the entropy rate (max excess loss)",
                excess,
                gap,
                waiting,
                "reported (the paper's Fig. 3a/b) for untied models or p+q<1",
                "steps",
                "",
            )
        )
    return claims


RANK_ONE = ("blocks.0.mlp.fc.weight", "blocks.0.mlp.proj.weight")  # W_1 and W_2, the MLP of Eq. (19)
MOSTLY = 0.5  # "approximately" read as: more than half of the squared norm in the one direction the paper names


WEIGHT_SHAPES = {
    "rank one": (
        "MLP weights W_1 and W_2 approximately rank one (every seed, the smaller of the two: share of the squared "
        "norm in the top singular direction)",
        "the MLP's W_1 and W_2 are rank one (their Eq. 19)",
        "in the top singular direction; an untrained matrix's share is about (1 + 1/2)^2 / d_model",
    ),
    "constant": (
        "positional embeddings approximately constant over positions (every seed: share of their squared norm in "
        "their mean over positions)",
        "the positional embedding is the same vector at every position (their Eq. 16)",
        "in the mean over positions; an untrained table's share is about 1 / T",
    ),
}


def _shape_values(shapes: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Per seed, the two shares the rows read: the MLP's smaller top share, and the positions' constant share."""
    return {
        "rank one": np.min([theory.top_share(shapes["spectra"][name]) for name in RANK_ONE], axis=0),
        "constant": np.asarray(shapes["positions_constant"], dtype=float),
    }


def weight_rows(runs: list[TrainingRun]) -> tuple[list[Claim], tuple[str, ...]]:
    """Appendix D's two observations on the weights of its trained runs (weight-tied, p+q<1), every seed: the MLP's
    matrices approximately rank one and the positional embeddings approximately constant; undecided while a seed short
    of the mark was still descending or on the plateau, and not made where a seed's weights already reached the mark
    before training (at a small width or length, where an untrained model passes)."""
    claims: list[Claim] = []
    silent: list[str] = []
    for run in runs:
        p, q = run["p"], run["q"]
        if not run["tied"] or p + q >= 1 or "spectra" not in run:  # results made before the weights were kept
            continue
        H_pi = theory.unigram_entropy(binary_kernel(p, q))
        gap = information_gap(p, q)
        waiting = np.asarray(run["still_descending"]) | on_plateau(run["eval_loss"], H_pi, gap)
        trained, initial = _shape_values(run), _shape_values(run["initial"])
        for key, (name, what, how) in WEIGHT_SHAPES.items():
            label = f"({p}, {q}) tied: {name}"
            if np.any(initial[key] >= MOSTLY):
                silent.append(
                    f"{label}: a seed's untrained weights already reach {MOSTLY:g} here (d_model or T too small), "
                    f"so the row could not tell trained from untrained"
                )
                continue
            short = trained[key] < MOSTLY
            claims.append(
                Claim.at_least(
                    label,
                    MOSTLY,
                    float(trained[key].min()),
                    f"Makkuva et al., App. D, on their weight-tied runs with p+q<1: {what}; 'approximately' with no "
                    f"number, read here as more than half of the squared norm ({how}; these seeds before training: "
                    f"at most {initial[key].max():.2g})",
                    digits=3,
                )
                .eventually(
                    *budget_ran_out(int((short & waiting).sum()), "runs short of it were still moving", "steps")
                )
                .held_to_spread(MOSTLY, trained[key], upper=False)
            )
    return claims, tuple(silent)


def by_kind(stored: Mapping[str, Any], dtype: type) -> dict[str, np.ndarray]:
    """The tied and untied arrays of a section's data, as arrays of ``dtype`` (JSON gives lists back)."""
    return {kind: np.asarray(stored[kind], dtype=dtype) for kind in ("tied", "untied")}


def phase_section_rows(config: dict[str, Any], data: PhaseData) -> tuple[list[Claim], tuple[str, ...]]:
    """The phase diagram's rows and the reasons for the rows it does not make, from its data alone (as run, or as
    read back from a result file, where the reference check recomputes them)."""
    cells = [(p, q) for p in data["values"] for q in data["values"]]
    gaps = np.array([information_gap(p, q) for p, q in cells])
    excess, waiting, escape = (
        by_kind(data[key], dtype) for key, dtype in (("excess", float), ("waiting", bool), ("escape_step", float))
    )
    claims = phase_rows([p + q for p, q in cells], excess, gaps, waiting, escape, config["init_std"])
    silent = () if config["init_std"] <= GPT2_INIT_STD else (NO_ORDER_ROW.format(std=config["init_std"]),)
    return claims, silent


def phase_rows(
    switching: list[float],
    excess: dict[str, np.ndarray],
    gaps: np.ndarray,
    waiting: dict[str, np.ndarray],
    escape: dict[str, np.ndarray],
    init_std: float,
) -> list[Claim]:
    """Tied and untied runs below p+q = 1, and untied runs above it, reach the entropy rate; above it tied runs leave
    the unigram plateau after the untied ones of their cell. Arrays are cells x seeds, per ``tied`` / ``untied``.

    A row about reaching the entropy rate is undecided while a run that contradicts it was ``waiting`` (on the
    plateau or still descending).
    """
    switching, resolvable = np.asarray(switching), gaps >= MIN_GAP
    below, above = (switching < 1) & resolvable, (switching > 1) & resolvable

    def trapped_row(kind: str, where: np.ndarray, side: str, reason: str) -> list[Claim]:
        if not where.any():
            return []
        trapped = (excess[kind] >= gaps[:, None] / 2) & where[:, None]
        claim = Claim.exact(
            f"phase diagram: {kind} runs trapped where p+q{side}1 (count)", "0", str(int(trapped.sum())), reason
        )
        return [
            claim.eventually(
                *budget_ran_out(
                    int((trapped & waiting[kind]).sum()),
                    f"of {trapped.size} runs contradicted the row and were on the plateau or still descending",
                    "steps",
                )
            )
        ]

    reported = (
        "reported (the paper, Sec. 4.1): from the GPT-2 initialisation the models reach the global minimum "
        "there; a run counts as trapped when it ended nearer the unigram loss than the entropy rate (excess >= "
        "gap/2)"
    )
    claims = (
        trapped_row("tied", below, "<", reported)
        + trapped_row("untied", below, "<", reported)
        + trapped_row(
            "untied",
            above,
            ">",
            "Thm 3: without tying the unigram point is a saddle; "
            "reported (the paper's Fig. 4): untied models reach the global minimum; trapped: ended "
            "nearer the unigram loss than the entropy rate (excess >= gap/2)",
        )
    )
    if above.any() and init_std <= GPT2_INIT_STD:
        cells = np.flatnonzero(above)
        claims.append(
            later_escape_row(
                "phase diagram: cells with p+q>1 where a tied run left the unigram plateau no "
                "later than an untied run (count)",
                [escape["tied"][i] for i in cells],
                [escape["untied"][i] for i in cells],
                "steps",
            )
        )
    return claims


def classify(excess: np.ndarray, gap: float) -> np.ndarray:
    """``bigram`` within a tenth of the gap of 0, ``unigram`` within a tenth of the gap, else ``neither``."""
    return np.where(
        excess < GAP_FRACTION * gap, "bigram", np.where(np.abs(excess - gap) < GAP_FRACTION * gap, "unigram", "neither")
    )


def basin_section_rows(config: dict[str, Any], data: BasinData) -> tuple[list[Claim], tuple[str, ...]]:
    """The basin's rows and the reasons for the rows it does not make, from its data alone (as run, or as read back
    from a result file, where the reference check recomputes them)."""
    p, q, scales = data["p"], data["q"], data["scales"]
    ends, waiting, escape = (
        by_kind(data[key], dtype) for key, dtype in (("ends", str), ("waiting", bool), ("escape_step", float))
    )
    silent = too_close([(p, q)], "the basin")
    if min(scales) > GPT2_INIT_STD:
        silent += (
            f"the basin's rows: the paper reports outcomes from init std up to {GPT2_INIT_STD} (GPT-2's), and "
            "every scale here is larger; they are measured, not claimed",
        )
    return basin_rows(p, q, scales, ends, waiting, escape), silent


def basin_rows(
    p: float,
    q: float,
    scales: list[float],
    ends: dict[str, np.ndarray],
    waiting: dict[str, np.ndarray],
    escape: dict[str, np.ndarray],
) -> list[Claim]:
    """From the paper's own scales (init std up to 0.02): untied seeds, and tied ones when p+q<1, reach the bigram; when
    p+q>1 tied seeds leave the unigram plateau after the untied ones. Arrays are scales x seeds, per tied / untied.

    A row about reaching the bigram is undecided while a seed that had not was ``waiting`` (on the plateau or still
    descending).
    """
    small = np.asarray(scales) <= GPT2_INIT_STD
    if information_gap(p, q) < MIN_GAP or not small.any():
        return []

    def bigram_row(kind: str, reason: str) -> Claim:
        off = (ends[kind] != "bigram") & small[:, None]
        claim = Claim.at_most(
            f"basin ({p}, {q}): {kind} seeds from init std <= {GPT2_INIT_STD} that do not reach the bigram (fraction)",
            0.0,
            float(off.sum() / (small.sum() * off.shape[1])),
            reason,
        )
        return claim.eventually(
            *budget_ran_out(
                int((off & waiting[kind]).sum()),
                f"of {off.size} seeds had not reached it and were on the plateau or still descending",
                "steps",
            )
        )

    claims = [
        bigram_row(
            "untied",
            "Thm 3: without tying theta_pi is a saddle; reported (the paper, Sec. 4.2): untied models reach the bigram",
        )
    ]
    if p + q < 1:
        claims.append(
            bigram_row(
                "tied",
                "reported (the paper, Sec. 4.1): small Gaussian initialisations fall outside "
                "the basins of other minima when p+q<1",
            )
        )
    else:
        at = np.flatnonzero(small)
        claims.append(
            later_escape_row(
                f"basin ({p}, {q}): init stds <= {GPT2_INIT_STD} at which a tied seed left the "
                "unigram plateau no later than an untied seed (count)",
                [escape["tied"][i] for i in at],
                [escape["untied"][i] for i in at],
                "steps",
            )
        )
    return claims


def depth_rows(config: dict[str, Any], data: DepthData) -> tuple[list[Claim], tuple[str, ...]]:
    """The depth section's rows and the reasons for the rows it does not make, from its data alone (as run, or as
    read back from a result file, where the reference check recomputes them)."""
    p, q = data["p"], data["q"]
    H_pi = theory.unigram_entropy(binary_kernel(p, q))
    claims = [row for run in data["runs"] if run["depth"] >= 2 for row in depth_run_rows(p, q, run, H_pi)]
    silent = too_close([(p, q)], "the depth rows")
    if 1 in int_list(config["depths"]):
        silent += ("depth 1: drawn for comparison; the training section's rows judge one-layer runs",)
    if p + q < 1:
        silent += (
            "a plateau before the escape: the paper reports it (Sec. 4.4) where one layer has the bad local "
            "minimum, p+q>1",
        )
    elif abs(np.log(2) - H_pi) < plateau_band(information_gap(p, q)):
        silent += (
            "a plateau before the escape: here H(pi) is within the plateau band of ln 2, where training starts, "
            "so a rest there cannot be told from the start",
        )
    return claims, silent


def plateau_rest(eval_steps: np.ndarray, eval_loss: np.ndarray, unigram_entropy: float, gap: float) -> np.ndarray:
    """Per seed: steps its held-out loss stayed on the unigram plateau, over the steps it took to fall to it (0 if it
    never came within :func:`plateau_band` of H(pi))."""
    steps, loss = np.asarray(eval_steps, dtype=float), np.asarray(eval_loss, dtype=float)
    band, out = plateau_band(gap), []
    for curve in loss:
        within = np.abs(curve - unigram_entropy) < band
        if not within.any():
            out.append(0.0)
            continue
        enter = int(np.argmax(within))
        below = np.flatnonzero(curve[enter:] < unigram_entropy - band)
        leave = steps[enter + below[0]] if below.size else steps[-1]
        out.append((leave - steps[enter]) / max(steps[enter], steps[1] - steps[0]))
    return np.array(out)


def depth_run_rows(p: float, q: float, run: DepthRun, unigram_entropy: float) -> list[Claim]:
    """Depth two and more: every seed reaches the entropy rate (the paper's Fig. 1), and with p+q>1 tied seeds at
    depth 2 first sit on the unigram plateau (its Sec. 4.4)."""
    gap = information_gap(p, q)
    if gap < MIN_GAP:
        return []
    label = f"depth {run['depth']} {'tied' if run['tied'] else 'untied'}"
    eval_loss, moving = np.asarray(run["eval_loss"]), np.asarray(run["still_descending"])
    waiting = moving | on_plateau(eval_loss, unigram_entropy, gap)
    claims = [
        reaches_entropy_rate_row(
            f"{label} ({p}, {q}): every seed reaches the entropy rate (max excess loss)",
            np.asarray(run["excess"]),
            gap,
            waiting,
            "reported (the paper's Fig. 1 and Sec. 4.4)",
            "depth_steps",
            "depth_seeds",
        )
    ]
    starts_on_it = abs(np.log(2) - unigram_entropy) < plateau_band(gap)  # nothing to fall from: no plateau to see
    if run["depth"] == 2 and run["tied"] and p + q > 1 and not starts_on_it:
        rest = plateau_rest(np.asarray(run["eval_steps"]), eval_loss, unigram_entropy, gap)
        spacing = int(run["eval_steps"][1] - run["eval_steps"][0])
        claims.append(
            Claim.at_least(
                "depth 2 tied: shortest rest on the unigram plateau, over the fall to it (steps / steps)",
                1.0,
                float(rest.min()),
                "reported (the paper, Sec. 4.4): a plateau at the unigram loss before the drop; a plateau here: the "
                "held-out loss stays within a tenth of the gap (+0.005 of sampling noise) of H(pi) at least as long "
                f"as it took to fall there from the start (evaluated every {spacing} steps)",
            )
            .eventually(
                *budget_ran_out(
                    int(((rest == 0) & moving).sum()),
                    f"of {len(moving)} seeds had not come down to the plateau and were still descending",
                    "depth_steps",
                )
            )
            .held_to_spread(1.0, rest, "depth_seeds", upper=False)
        )
    return claims


def multistate_hessian_rows(data: MultistateData) -> list[Claim]:
    """The tied unigram point's embedding Hessian against its closed form, and where its sign changes."""
    n, threshold = data["states"], data["threshold"]
    signs = "".join("+" if v > EXACT else ("-" if v < -EXACT else "0") for v in data["hessian_eigenvalue"])
    expected = "".join(
        "+" if p > threshold + 1e-9 else ("-" if p < threshold - 1e-9 else "0") for p in data["hessian_probs"]
    )
    return [
        Claim.close(
            f"{n}-state tied unigram point: embedding Hessian = (2/n)(np/(n-1) - 1) off the ones vector "
            "(max deviation over the p sweep)",
            0.0,
            data["hessian_deviation"],
            EXACT,
            EXACT_REASON,
        ),
        Claim.exact(
            f"{n}-state tied Hessian sign along the p sweep changes at p* = (n-1)/n = {threshold:.4g}",
            expected,
            signs,
            "the closed form above; p* is where the chain's mutual information vanishes",
        ),
    ]


def multistate_theory(data: MultistateData) -> tuple[str, ...]:
    """The multi-state rows judged from the Hessian's closed form, not the models: a diverged run leaves them."""
    return tuple(claim.name for claim in multistate_hessian_rows(data))


def multistate_section_rows(config: dict[str, Any], data: MultistateData) -> tuple[list[Claim], tuple[str, ...]]:
    """The multi-state section's rows and the reasons for the rows it does not make, from its data alone (as run,
    or as read back from a result file, where the reference check recomputes them)."""
    probs, gaps = data["switch_probs"], np.asarray(data["gaps"], dtype=float)
    ratios, waiting, escape = (
        by_kind(source, dtype)
        for source, dtype in ((data, float), (data["waiting"], bool), (data["escape_step"], float))
    )
    claims = multistate_hessian_rows(data) + multistate_rows(
        data["states"], probs, gaps, ratios, waiting, escape, config["init_std"]
    )
    silent = tuple(
        f"p = {p:g}: the gap I(x_n; x_n+1) = {gap:.2g} is below {MIN_GAP}, so the two minima cannot be "
        "told apart (at p* = (n-1)/n it is 0)"
        for p, gap in zip(probs, gaps)
        if gap < MIN_GAP
    )
    if config["init_std"] > GPT2_INIT_STD:
        silent += (NO_ORDER_ROW.format(std=config["init_std"]),)
    return claims, silent


def multistate_rows(
    n: int,
    probs: list[float],
    gaps: np.ndarray,
    ratios: dict[str, np.ndarray],
    waiting: dict[str, np.ndarray],
    escape: dict[str, np.ndarray],
    init_std: float,
) -> list[Claim]:
    """Untied runs reach the bigram everywhere and tied ones below p*; above p* tied runs leave the unigram plateau
    after the untied ones. Arrays are switching probabilities x seeds, per tied / untied.

    A row about reaching the bigram is undecided while a run that had not was ``waiting`` (on the plateau or still
    descending), or while the seeds' spread at some p leaves their mean within noise of the bound.
    """
    threshold, resolvable = (n - 1) / n, np.asarray(gaps) >= MIN_GAP
    above = resolvable & (np.asarray(probs) > threshold)
    below = resolvable & (np.asarray(probs) < threshold)
    tolerance_reason = "two tenths of the gap: the multi-state runs use the binary budget for a harder kernel"

    def bigram_row(name: str, kind: str, cells: np.ndarray, reason: str) -> Claim:
        ratio = ratios[kind][cells]
        claim = Claim.at_most(name, 2 * GAP_FRACTION, float(np.max(ratio)), f"{reason}; {tolerance_reason}")
        off = ratio > 2 * GAP_FRACTION
        return claim.eventually(
            *budget_ran_out(
                int((off & waiting[kind][cells]).sum()),
                f"of {off.size} runs had not reached it and were on the plateau or still descending",
                "steps",
            )
        ).held_to_spread(2 * GAP_FRACTION, ratio)

    claims = []
    if resolvable.any():
        claims.append(
            bigram_row(
                f"{n}-state chain, untied: worst excess loss / gap over p with a gap",
                "untied",
                resolvable,
                "reported (the paper's Fig. 5): untied models reach the bigram",
            )
        )
    if below.any():
        claims.append(
            bigram_row(
                f"{n}-state chain, tied, p < p*: worst excess loss / gap",
                "tied",
                below,
                "below p* the tied unigram point has a descent direction (the Hessian above)",
            )
        )
    if above.any() and init_std <= GPT2_INIT_STD:
        at = np.flatnonzero(above)
        claims.append(
            later_escape_row(
                f"{n}-state chain, p > p*: switching probabilities at which a tied run left "
                "the unigram plateau no later than an untied run (count)",
                [escape["tied"][i] for i in at],
                [escape["untied"][i] for i in at],
                "steps",
            )
        )
    return claims
