"""Chapter 1: global and local minima of one-layer transformers on Markov data.

Each section function computes one section of the chapter page and returns its claims and its
data (a ``TypedDict`` per section, which the section's figures in ``figures.markov`` read).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, TypedDict

import numpy as np
import torch
from torch import nn

from .. import curves, heldout
from ..calibration import calibrated_map
from ..claims import Claim
from ..curves import budget_ran_out
from ..data.markov import MarkovChain, binary_kernel, symmetric_kernel
from ..model import GPT, GPTConfig
from ..profiles import (
    Param,
    at_least,
    each,
    float_list,
    in_open_unit_interval,
    int_list,
    positive,
    with_reference,
)
from ..sections import Chapter, Outcome, RunContext, Section
from ..theory import markov as theory
from ..theory.markov_flow import ReducedFlow
from ..trainer import TrainConfig, TrainResult, train

EXACT = 1e-10
EXACT_REASON = "float64 round-off: the construction is exact"
GAP_FRACTION = 0.1
GAP_REASON = ("a tenth of the unigram-bigram gap I(x_n; x_n+1): separates the two minima, leaves room for finite "
              "training")
MIN_GAP = 0.01  # below this mutual information the two minima are too close to tell apart
GPT2_INIT_STD = 0.02  # the initialisation the seed trains from; its reported outcomes are for scales up to it


PARAMS = (
    Param("p", float, 0.5, 0.5, "P(x_n+1 = 1 | x_n = 0) of the featured chain", in_open_unit_interval),
    Param("q", float, 0.8, 0.8, "P(x_n+1 = 0 | x_n = 1) of the featured chain", in_open_unit_interval),
    Param("p2", float, 0.2, 0.2, "p of the contrast chain (the book uses p+q<1)", in_open_unit_interval),
    Param("q2", float, 0.3, 0.3, "q of the contrast chain", in_open_unit_interval),
    Param("length", int, 64, 1024, "sequence length T of the loss-curve runs", at_least(2)),
    Param("sweep_length", int, 64, 1024, "sequence length T of the phase-diagram, basin and multi-state runs",
          at_least(2)),
    Param("d_model", int, 8, 8, "embedding dimension", at_least(1)),
    Param("steps", int, 300, 400, "training steps of one-layer runs", at_least(1)),
    Param("batch_size", int, 16, 16, "sequences per step", at_least(1)),
    Param("lr", float, 2e-3, 2e-3, "AdamW learning rate (cosine schedule)", positive),
    Param("init_std", float, 0.02, 0.02, "std of the Gaussian initialisation", positive),
    Param("depths", str, "1,2", "1,2,4,8", "depth runs: numbers of layers to compare", each(at_least(1))),
    Param("depth_length", int, 64, 512, "depth runs: sequence length T", at_least(2)),
    Param("depth_steps", int, 1000, 1000, "depth runs: training steps", at_least(1)),
    Param("depth_seeds", int, 3, 3, "depth runs: seeds per depth and tying", at_least(1)),
    Param("grid", int, 4, 9, "phase diagram: values of p and of q in (0.1, 0.9)", at_least(2)),
    Param("grid_seeds", int, 1, 5, "phase diagram: seeds per (p, q) cell", at_least(1)),
    Param("init_scales", str, "0.01,0.03,0.1,0.3", "0.005,0.01,0.02,0.03,0.05,0.1,0.2,0.3,0.5,1.0",
          "basin: initialisation stds to compare", each(positive)),
    Param("states", int, 5, 5, "multi-state chain: number of states", at_least(2)),
    # quick: 0.95 above p* = 0.8, not 0.9, where the gap is 2.5 times smaller and three quick runs end up to 0.13 of it
    # above the bigram, too close to the row's bound to judge against their spread
    Param("switch_probs", str, "0.3,0.95", "0.1,0.3,0.5,0.7,0.8,0.9",
          "multi-state chain: switching probabilities p", each(in_open_unit_interval)),
    Param("flow_points", int, 40, 400, "reduced flow: Gaussian initial points per chain", at_least(1)),
    Param("flow_init_std", float, 0.5, 0.5, "reduced flow: std of the initial points", positive),
)
# Reference scale (2-core CPU): the loss-curve section at the paper's own setting (T = 1024, 400 AdamW steps, batch
# 16, d = 8; THEORY.md, Makkuva et al. Fig. 3) with 10 seeds, measured at about 1.1 s per step of one 20-member
# ensemble alone on the machine, 33 minutes in all. The sweeps (phase diagram 7 x 7 x 3 seeds, basin 8 scales x 10
# seeds, multi-state 6 values of p around p* = 0.8 x 10 seeds, each tied and untied) run at T = 256 with the same
# steps, and the depth runs at the seed's depth-figure length T = 512 (1, 2 and 4 layers, 3 seeds, 1000 steps):
# each sized from that step time to stay within the hour per section.
PARAMS = with_reference(PARAMS, {
    "length": 1024, "steps": 400, "sweep_length": 256, "grid": 7, "grid_seeds": 3,
    "init_scales": "0.005,0.01,0.02,0.05,0.1,0.2,0.5,1.0", "switch_probs": "0.4,0.5,0.6,0.7,0.9,0.95",
    "depths": "1,2,4", "depth_length": 512,
})


def _train_config(config: dict[str, Any], steps: int | None = None, eval_every: int | None = None) -> TrainConfig:
    """AdamW at the chapter's batch and rate; held-out evaluations every ``eval_every`` steps (default: 30 per run)."""
    steps = steps or config["steps"]
    return TrainConfig(steps=steps, batch_size=config["batch_size"], lr=config["lr"],
                       eval_every=eval_every or max(1, steps // 30))


def _binary_model(config: dict[str, Any], tied: bool, length: int, init_std: float | None = None, n_layer: int = 1):
    gpt_config = replace(theory.binary_config(config["d_model"], length, tied),
                         n_layer=n_layer, init_std=init_std or config["init_std"])
    return lambda: GPT(gpt_config)


def _excess(trained: TrainResult, tasks: list[MarkovChain]) -> np.ndarray:
    """Exact-expectation excess loss of every trained member on its own held-out sequences."""
    def excess(member: tuple[nn.Module, MarkovChain]) -> float:
        model, task = member
        x, _ = task.sample(256, heldout.generator(heldout.MARKOV_EXCESS))
        with torch.no_grad():
            return float(theory.excess_loss(model(x), x, task.kernel).mean())

    return np.array(calibrated_map(excess, list(zip(trained.models, tasks))))


NOISE = 0.005  # held-out sampling noise of an evaluated loss (nats)


def still_descending(trained: TrainResult) -> list[bool]:
    """Per member: the held-out loss had not settled when the budget ran out (see :func:`curves.still_descending`)."""
    return curves.still_descending(trained, NOISE).tolist()


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


ORDER_REASON = ("reported (seed's Figs. 3a, 4 and 5: at its budget the tied runs are still at the unigram loss, the "
                "untied ones are not); Thms 2 and 3 are why one expects it: at theta_pi the tied loss curves upward in "
                "the embedding (a local minimum; for n states the embedding block above p*), the untied one has a "
                "descent direction (a saddle). They are statements about the landscape, not about training. A run has "
                "left when its held-out loss is below H(pi) by a tenth of the gap plus 0.005 of sampling noise; while "
                "a run had not come down to H(pi) the row is undecided")
NO_ORDER_ROW = ("which of tied and untied runs leaves the unigram plateau first at init std {std:g}: the seed "
                "reports it from small Gaussian initialisations (std up to 0.02, GPT-2's), and Thms 2 and 3 are local "
                "to theta_pi")


def later_escape_row(name: str, tied: list[np.ndarray], untied: list[np.ndarray], steps_param: str,
                     count: bool = True) -> Claim:
    """The groups (cells, scales, switching probabilities) in which a tied run left the plateau no later than an untied
    one, predicted 0; with ``count=False`` (one group) the measured column gives the two steps instead.

    A group in which neither had left makes the row undecided, unless another group fails it.
    """
    verdicts = [leaves_later(t, u) for t, u in zip(tied, untied)]
    holds, failed = all(v is True for v in verdicts), any(v is False for v in verdicts)
    if not count:
        first, last = float(np.min(tied[0])), float(np.max(untied[0]))  # nan if any run never came down
        claim = Claim(name, "first tied after last untied", f"first tied {_step(first)}, last untied {_step(last)}",
                      "order", ORDER_REASON, holds)
    else:
        claim = Claim(name, "0", str(sum(v is False for v in verdicts)), "exact", ORDER_REASON, holds)
    return claim.eventually(failed or None not in verdicts, f"{sum(v is None for v in verdicts)} of {len(verdicts)} "
                            f"groups had a run not yet down to the plateau, or neither tied nor untied runs off it, "
                            f"when the budget ran out; more steps (--set {steps_param}=...) decide it")


def _too_close(chains: list[tuple[float, float]], rows: str) -> tuple[str, ...]:
    """Why ``rows`` are missing for the chains whose unigram-bigram gap is below ``MIN_GAP``."""
    return tuple(f"{rows} at (p, q) = ({p:g}, {q:g}): the gap I(x_n; x_n+1) = {abs(_gap(p, q)):.2g} is below "
                 f"{MIN_GAP}, so the two minima cannot be told apart (p + q = 1 makes it 0)" for p, q in chains
                 if _gap(p, q) < MIN_GAP)


def _gap(p: float, q: float) -> float:
    kernel = binary_kernel(p, q)
    return theory.unigram_entropy(kernel) - theory.entropy_rate(kernel)


# ---------------------------------------------------------------- Theorems 1-3, exactly
THEORY_LENGTH, THEORY_WIDTH = 6, 3  # the population loss enumerates all 2^6 sequences; width 3 suffices


class GlobalData(TypedDict):
    entropy_rate: float
    loss: dict[str, float]  # tied / untied: L(theta_*)


def global_minimum(config: dict[str, Any], ctx: RunContext) -> Outcome[GlobalData]:
    """Theorem 1 at the featured chain: the bigram construction has loss H and zero gradient."""
    p, q = config["p"], config["q"]
    kernel = binary_kernel(p, q)
    H = theory.entropy_rate(kernel)
    claims, loss = [], {}
    for label, tied in (("tied", True), ("untied", False)):
        star = theory.PopulationLoss(theory.global_minimum_point(p, q, THEORY_WIDTH, THEORY_LENGTH, tied), kernel,
                                     THEORY_LENGTH)
        loss[label] = star.value()
        claims.append(Claim.close(f"Thm 1 ({label}): loss of theta_* = entropy rate", H, loss[label], EXACT,
                                  EXACT_REASON, 10))
        claims.append(Claim.close(f"Thm 1 ({label}): gradient at theta_* vanishes", 0.0,
                                  float(star.gradient().abs().max()), EXACT, EXACT_REASON))
    return Outcome(claims, {"entropy_rate": H, "loss": loss})


LOCAL_RADII = (1e-3, 1e-2, 1e-1)  # radii of the direct local-minimum test
LOCAL_DIRECTIONS = 200  # random unit directions in all parameters
OFF_HYPOTHESIS_W = -0.9  # an MLP weight of the reduced model below -1/sqrt2, where e = 0 stops being a minimum


class UnigramData(TypedDict):
    unigram_entropy: float
    curvature: float
    block_spectrum: dict[str, list[float]]  # tied / untied: eigenvalues of the (e, a, b) block, by autograd
    radii: list[float]
    # per point tested: min over directions of L(theta + r u) - L(theta), per radius
    largest_drop: dict[str, list[float]]


def unigram_point(config: dict[str, Any], ctx: RunContext) -> Outcome[UnigramData]:
    """Theorems 2 and 3 at the featured chain: theta_pi is stationary; tied it is a local minimum
    exactly when p+q > 1 and the other weights are zero, untied a saddle."""
    p, q, d, length = config["p"], config["q"], THEORY_WIDTH, THEORY_LENGTH
    kernel = binary_kernel(p, q)
    H_pi, c = theory.unigram_entropy(kernel), theory.curvature(p, q)
    claims: list[Claim] = []
    spectrum, drops = {}, {}
    for label, tied in (("tied", True), ("untied", False)):
        thm = "Thm 2" if tied else "Thm 3"
        uni = theory.PopulationLoss(theory.unigram_point(p, q, d, length, tied), kernel, length)
        claims.append(Claim.close(f"{thm} ({label}): loss of theta_pi = H(pi)", H_pi, uni.value(), EXACT,
                                  EXACT_REASON, 10))
        claims.append(Claim.close(f"{thm} ({label}): gradient at theta_pi vanishes", 0.0,
                                  float(uni.gradient().abs().max()), EXACT, EXACT_REASON))
        spectra = theory.hessian_at_unigram_point(p, q, d, length, tied)
        predicted = theory.predicted_block_spectrum(p, q, d, tied)
        spectrum[label] = spectra["block"]
        claims.append(Claim.close(f"{thm} ({label}): Hessian (e, a, b) block at theta_pi = closed form",
                                  0.0, float(np.abs(spectra["block"] - predicted).max()), EXACT, EXACT_REASON))
        if abs(p + q - 1) < MIN_GAP:
            continue  # c = 0: the theorems are silent
        directions = theory.random_directions(LOCAL_DIRECTIONS, uni.flat().numel(),
                                              heldout.generator(heldout.MARKOV_DIRECTIONS))
        changes = theory.loss_changes(uni, directions, LOCAL_RADII)
        drops[label] = changes.min(axis=0)
        if tied and p + q > 1:
            claims.append(Claim.exact(
                f"Thm 2 (tied, p+q>1): random directions that lower the loss at theta_pi, radii {LOCAL_RADII} "
                f"(count of {changes.size})", "0", str(int((changes < -EXACT).sum())),
                "a local minimum: no small step in any of the sampled directions of all parameters lowers the loss"))
            off = theory.PopulationLoss(ReducedFlow(p, q).gpt_weights(0.0, OFF_HYPOTHESIS_W, d, length), kernel, length)
            off_key = f"tied, MLP w = {OFF_HYPOTHESIS_W}"
            drops[off_key] = theory.loss_changes(off, directions, LOCAL_RADII).min(axis=0)
            moved = ReducedFlow(p, q).gpt_weights(LOCAL_RADII[1], OFF_HYPOTHESIS_W, d, length)
            drop = theory.PopulationLoss(moved, kernel, length).value() - off.value()
            claims.append(Claim.at_most(
                f"Thm 2 needs its hypothesis (other weights 0): e = 0 beside an MLP of w = {OFF_HYPOTHESIS_W} "
                f"< -1/sqrt2 is no minimum (change along e at radius {LOCAL_RADII[1]})", -EXACT, drop,
                "the MLP turns the curvature in e, c(1 + 2w|w|), negative: a drop of about "
                f"{abs(1 + 2 * OFF_HYPOTHESIS_W * abs(OFF_HYPOTHESIS_W)):.2f} c r^2, far above round-off"))
        elif not tied:
            e_dir = _embedding_direction(uni, tied=False, sign=-np.sign(c))
            drop = float(theory.loss_changes(uni, e_dir[None], (LOCAL_RADII[1],))[0, 0])
            claims.append(Claim.at_most(f"Thm 3 (untied): theta_pi is a saddle: e = u, a = {'-' if c > 0 else '+'}u "
                                        f"lowers the loss (change at radius {LOCAL_RADII[1]})", -EXACT, drop,
                                        "the bilinear term c <a, e> x_n is negative along it"))
    silent = () if abs(p + q - 1) >= MIN_GAP else (
        f"Theorems 2 and 3 beyond the closed forms at (p, q) = ({p:g}, {q:g}): the curvature c vanishes with "
        "p + q - 1, and with it what the theorems say about the loss near theta_pi",)
    return Outcome(claims, {"unigram_entropy": H_pi, "curvature": c, "block_spectrum": spectrum,
                            "radii": list(LOCAL_RADII), "largest_drop": drops}, silent)


def _embedding_direction(loss: theory.PopulationLoss, tied: bool, sign: float) -> torch.Tensor:
    """The unit direction ``e = u`` (``wte[1]``) and, untied, ``a = sign * u`` (``head.weight[1]``)."""
    where, d = loss.slices(), loss.model.config.d_model
    direction = torch.zeros_like(loss.flat())
    direction[where["wte.weight"].start + d] = 1.0
    if not tied:
        direction[where["head.weight"].start + d] = sign
    return direction / direction.norm()


class SweepData(TypedDict):
    sweep: list[float]  # p + q along p = q
    tied_min_eig: list[float]
    untied_min_eig: list[float]


def hessian_sweep(config: dict[str, Any], ctx: RunContext) -> Outcome[SweepData]:
    """The smallest eigenvalue of the Hessian block at theta_pi along p = q = s/2, tied and untied."""
    sweep = np.linspace(0.1, 1.9, 19)
    tied_eig = [theory.hessian_at_unigram_point(s / 2, s / 2, 1, 3, True)["block"].min() for s in sweep]
    untied_eig = [theory.hessian_at_unigram_point(s / 2, s / 2, 1, 3, False)["block"].min() for s in sweep]
    predicted_tied = np.array([min(2 * theory.curvature(s / 2, s / 2), 0.25) for s in sweep])  # pi0 pi1 = 1/4 at p = q
    signs = "".join("+" if v > EXACT else ("-" if v < -EXACT else "0") for v in tied_eig)
    expected = "".join("+" if s > 1 + 1e-9 else ("-" if s < 1 - 1e-9 else "0") for s in sweep)
    claims = [
        Claim.close("Hessian sweep over p+q (p=q): tied block eigenvalue = min(2c, pi0 pi1)",
                    0.0, float(np.abs(np.array(tied_eig) - predicted_tied).max()), EXACT, EXACT_REASON),
        Claim.exact("tied Hessian sign along the sweep follows sign(p+q-1)", expected, signs,
                    "Theorem 2 (positive for p+q>1); for p+q<1 the closed form is negative, so "
                    "theta_pi is no minimum there (the seed leaves that case open)"),
    ]
    return Outcome(claims, {"sweep": sweep.tolist(), "tied_min_eig": tied_eig, "untied_min_eig": untied_eig})


# ---------------------------------------------------------------- reduced gradient flow
class FlowChain(TypedDict):
    p: float
    q: float
    starts: list[list[float]]  # Gaussian initial points (e, w)
    reached_global: list[bool]
    trajectories: list[list[list[float]]]  # (e, w) along the first few flows
    optimal_slope: float


class FlowData(TypedDict):
    featured: FlowChain
    contrast: FlowChain


AXIS_START, AXIS_OFFSET = 0.05, 0.1  # flows started this close to the axis e = 0, this far above/below the switch


def axis_row(flow: ReducedFlow) -> Claim:
    """Flows started near the axis e = 0 just above and below w = -1/sqrt2 move as the sign of c(1 + 2w|w|) says."""
    def moves(w0: float) -> str:
        end = flow.trajectory(AXIS_START, w0, t_max=5.0, n_points=2)[-1, 1]
        return "toward" if end < AXIS_START else "away"

    predicted = "above: toward, below: away" if theory.curvature(flow.p, flow.q) > 0 else "above: away, below: toward"
    measured = f"above: {moves(-1 / np.sqrt(2) + AXIS_OFFSET)}, below: {moves(-1 / np.sqrt(2) - AXIS_OFFSET)}"
    return Claim.exact(f"reduced model ({flow.p}, {flow.q}): flows from e = {AXIS_START} at w = -1/sqrt2 +- "
                       f"{AXIS_OFFSET} move (above, below)", predicted, measured,
                       "the axis e = 0 attracts where c(1 + 2w|w|) > 0: the sign of c and the switch at "
                       "w = -1/sqrt2, against the integrated flow")


def reduced_flow(config: dict[str, Any], ctx: RunContext) -> Outcome[FlowData]:
    """The slides' two-scalar reduced model and its gradient flow, for the featured and the contrast chain."""
    claims: list[Claim] = []
    data: dict[str, Any] = {}
    silent: tuple[str, ...] = ()
    rng = np.random.default_rng(0)
    starts = rng.normal(0.0, config["flow_init_std"], size=(config["flow_points"], 2))
    starts[:, 0] = np.abs(starts[:, 0])  # the loss is even in e, so flows of -e mirror those of e
    for name, (p, q) in (("featured", (config["p"], config["q"])), ("contrast", (config["p2"], config["q2"]))):
        flow = ReducedFlow(p, q)
        gpt = theory.PopulationLoss(flow.gpt_weights(0.8, -0.9, 3, 4), binary_kernel(p, q), 4)
        claims.append(Claim.close(f"reduced model ({p}, {q}): two-scalar loss = population loss of its GPT weights",
                                  gpt.value(), flow.loss(0.8, -0.9), EXACT, EXACT_REASON, 10))
        trajectories = [flow.trajectory(e, w, n_points=100) for e, w in starts[:6]]
        drift = max(np.ptp([flow.energy(e, w) for _, e, w in tr]) for tr in trajectories)
        claims.append(Claim.close(f"reduced model ({p}, {q}): E = e^2 - w^2 - sign(w) ln|w| conserved by its flow",
                                  0.0, float(drift), 1e-6, "ODE solved at rtol 1e-10 over t = 400"))
        reached = np.array([flow.reaches_global_minimum(e, w) for e, w in starts])
        data[name] = {"p": p, "q": q, "starts": starts, "reached_global": reached,
                      "trajectories": [tr[:, 1:] for tr in trajectories],
                      "optimal_slope": flow.optimal_slope}
        if _gap(p, q) < MIN_GAP:
            silent += (f"where flows of ({p}, {q}) go: p+q is so close to 1 that the curvature c and the gap between "
                       "the two minima vanish, and the slides' portraits say nothing there",)
            continue
        claims.append(axis_row(flow))
        majority = "global minimum" if p + q < 1 else "unigram (e = 0)"
        measured = "global minimum" if reached.mean() > 0.5 else "unigram (e = 0)"
        claims.append(Claim.exact(f"reduced model ({p}, {q}): most Gaussian starts (std {config['flow_init_std']}) "
                                  "end at",
                                  majority, measured, "the slides' phase portraits; measured fraction reaching the "
                                  f"global minimum: {reached.mean():.2f}"))
    return Outcome(claims, data, silent)


# ---------------------------------------------------------------- training: loss curves and predictions
class Prediction(TypedDict):
    inputs: list[int]
    prob_one: list[float]  # predicted P(x_n+1 = 1) at every position


class TrainingRun(TypedDict):
    p: float
    q: float
    tied: bool
    eval_steps: list[int]
    eval_loss: list[list[float]]  # seeds x evaluations
    excess: list[float]  # per seed: exact excess loss over the entropy rate at the end
    still_descending: list[bool]  # per seed: the loss had not settled when the budget ran out
    escape_step: list[float]  # per seed: first evaluated step below the unigram plateau (inf: none)
    prediction: Prediction  # of the first seed


class TrainingData(TypedDict):
    runs: list[TrainingRun]


def training(config: dict[str, Any], ctx: RunContext) -> Outcome[TrainingData]:
    """One-layer runs, tied and untied, on the featured and contrast chains (the seed's Fig. 3)."""
    chains = [(config["p"], config["q"]), (config["p2"], config["q2"])]
    settings = [(p, q, tied) for p, q in chains for tied in (True, False)]
    runs = []
    for tied in (True, False):
        members = [(p, q) for p, q, t in settings if t == tied]
        tasks = [MarkovChain.binary(p, q, config["length"]) for p, q in members for _ in ctx.seeds]
        seeds = [s for _ in members for s in ctx.seeds]
        trained = train(_binary_model(config, tied, config["length"]), tasks, _train_config(config), seeds, ctx.device,
                        progress=ctx.progress)
        excess, moving = _excess(trained, tasks), still_descending(trained)
        n = len(ctx.seeds)
        for i, (p, q) in enumerate(members):
            block = slice(i * n, (i + 1) * n)
            H_pi = theory.unigram_entropy(binary_kernel(p, q))
            runs.append({"p": p, "q": q, "tied": tied, "eval_steps": trained.eval_steps,
                         "eval_loss": trained.eval_loss[block], "excess": excess[block],
                         "still_descending": moving[block],
                         "escape_step": escape_steps(trained.eval_steps, trained.eval_loss[block], H_pi, _gap(p, q)),
                         "prediction": _predictions(trained.models[i * n], tasks[i * n])})
    data: TrainingData = {"runs": runs}
    claims, silent = training_section_rows(config, data)
    return Outcome(claims, data, silent)


def training_section_rows(config: dict[str, Any], data: TrainingData) -> tuple[list[Claim], tuple[str, ...]]:
    """The training section's rows and the reasons for the rows it does not make, from its data alone (as run, or as
    read back from a result file, where the reference check recomputes them)."""
    chains = [(config["p"], config["q"]), (config["p2"], config["q2"])]
    silent = _too_close(chains, "where the runs end") + tuple(
        f"where tied runs at (p, q) = ({p:g}, {q:g}) end: Thm 2 makes theta_pi a local minimum, and says nothing of "
        "whether training converges to it; the steps at which the runs left the plateau are in the data"
        for p, q in chains if p + q > 1 and _gap(p, q) >= MIN_GAP)
    if config["init_std"] > GPT2_INIT_STD:
        silent += (NO_ORDER_ROW.format(std=config["init_std"]),)
    return training_rows(data["runs"], config["init_std"]), silent


def reaches_entropy_rate_row(name: str, excess: np.ndarray, gap: float, waiting: np.ndarray, reason: str,
                             steps_param: str, seeds_param: str) -> Claim:
    """Every run ends within a tenth of the gap of the entropy rate; undecided while a run that is not there
    ``waiting`` (on the unigram plateau, where no budget says it stays, or still descending), or while the seeds'
    spread leaves their mean within noise of the bound."""
    bound = GAP_FRACTION * gap
    claim = Claim.at_most(name, bound, float(np.max(excess)), f"{reason}; {GAP_REASON}")
    off = np.asarray(excess) > bound
    return claim.eventually(*budget_ran_out(int((off & waiting).sum()), f"of {off.size} runs were on the unigram "
                                            "plateau or still descending", steps_param)
                            ).held_to_spread(bound, excess, seeds_param)


def training_rows(runs: list[TrainingRun], init_std: float) -> list[Claim]:
    """Untied runs and tied runs with p+q<1 reach the entropy rate; with p+q>1, tied runs leave the unigram plateau
    after the untied ones (made only from the seed's small initialisation)."""
    claims = []
    for run in runs:
        p, q, tied, excess = run["p"], run["q"], run["tied"], np.asarray(run["excess"])
        gap, label = _gap(p, q), f"({p}, {q}) {'tied' if tied else 'untied'}"
        if gap < MIN_GAP:
            continue
        if tied and p + q > 1:
            untied = [r for r in runs if (r["p"], r["q"]) == (p, q) and not r["tied"]]
            if untied and init_std <= GPT2_INIT_STD:
                claims.append(later_escape_row(f"({p}, {q}): tied runs leave the unigram plateau after every untied "
                                               "run (evaluated steps)", [np.asarray(run["escape_step"])],
                                               [np.asarray(untied[0]["escape_step"])], "steps", count=False))
            continue
        H_pi = theory.unigram_entropy(binary_kernel(p, q))
        waiting = np.asarray(run["still_descending"]) | on_plateau(run["eval_loss"], H_pi, gap)
        claims.append(reaches_entropy_rate_row(f"{label}: every seed reaches the entropy rate (max excess loss)",
                                               excess, gap, waiting, "reported (seed's Fig. 3a/b) for untied "
                                               "models or p+q<1", "steps", "--seeds"))
    return claims


def _training_vs_seed(data: TrainingData) -> list[tuple[str, str, str]]:
    """Where each loss curve of the seed's Fig. 3 ends, and for tied runs with p+q>1 how many had left the plateau."""
    rows = []
    for run in data["runs"]:
        kernel = binary_kernel(run["p"], run["q"])
        stuck = run["tied"] and run["p"] + run["q"] > 1
        target = (f"the unigram loss H(π) = {theory.unigram_entropy(kernel):.3f}" if stuck
                  else f"the entropy rate {theory.entropy_rate(kernel):.3f}")
        final = np.asarray(run["eval_loss"])[:, -1]
        ours = f"{np.median(final):.3f} (median of {len(final)} seeds; {final.min():.3f} to {final.max():.3f})"
        if stuck:
            left = np.asarray(run["escape_step"], dtype=float)
            ours += (f"; {int(np.isfinite(left).sum())} of {len(left)} had left the plateau by step "
                     f"{run['eval_steps'][-1]}")
        rows.append((f"({run['p']}, {run['q']}) {'tied' if run['tied'] else 'untied'}: held-out loss at the end",
                     f"ends at {target} (Fig. 3)", ours))
    return rows


def _predictions(model: GPT, task: MarkovChain) -> Prediction:
    """Predicted P(x_n+1 = 1) at every position of one held-out sequence, with its inputs."""
    x, _ = task.sample(1, heldout.generator(heldout.MARKOV_PREDICTION))
    with torch.no_grad():
        prob = model(x).softmax(dim=-1)[0, :, 1]
    return {"inputs": x[0].numpy(), "prob_one": prob.numpy()}


# ---------------------------------------------------------------- phase diagram and basin
class PhaseData(TypedDict):
    values: list[float]  # the grid of p and of q
    ratio: dict[str, list[list[float]]]  # tied / untied: mean excess loss / gap per (p, q) cell (NaN: gap < MIN_GAP)
    # tied / untied: per cell and seed, the step it left the plateau (inf: none)
    escape_step: dict[str, list[list[float]]]
    resolvable: list[list[bool]]  # gap at least MIN_GAP
    excess: dict[str, list[list[float]]]  # tied / untied: per cell (p-major) and seed, the final excess loss
    waiting: dict[str, list[list[bool]]]  # tied / untied: per cell and seed, on the plateau or still descending


def phase_diagram(config: dict[str, Any], ctx: RunContext) -> Outcome[PhaseData]:
    """Tied and untied one-layer runs over a grid of ``(p, q)``: which end at the bigram, and which linger at the unigram?"""  # noqa: E501
    values = np.round(np.linspace(0.1, 0.9, config["grid"]), 4)
    cells = [(p, q) for p in values for q in values]
    seeds = list(range(config["grid_seeds"]))
    tasks = [MarkovChain.binary(p, q, config["sweep_length"]) for p, q in cells for _ in seeds]
    gaps = np.array([_gap(p, q) for p, q in cells])
    unigram = np.array([theory.unigram_entropy(binary_kernel(p, q)) for p, q in cells])
    excess, waiting, escape, ratio = {}, {}, {}, {}
    for tied in (True, False):
        kind = "tied" if tied else "untied"
        trained = train(_binary_model(config, tied, config["sweep_length"]), tasks, _train_config(config),
                        [s for _ in cells for s in seeds],
                        ctx.device, progress=ctx.progress)
        excess[kind] = _excess(trained, tasks).reshape(len(cells), len(seeds))
        loss = np.asarray(trained.eval_loss).reshape(len(cells), len(seeds), -1)
        plateau = np.array([on_plateau(loss[i], unigram[i], gaps[i]) for i in range(len(cells))])
        waiting[kind] = np.reshape(still_descending(trained), (len(cells), len(seeds))) | plateau
        escape[kind] = np.array([escape_steps(trained.eval_steps, loss[i], unigram[i], gaps[i])
                                 for i in range(len(cells))])
        ratio[kind] = np.where(gaps >= MIN_GAP, excess[kind].mean(axis=1) / np.maximum(gaps, MIN_GAP),
                               np.nan).reshape(len(values), len(values))  # no ratio where the gap vanishes
    data: PhaseData = {"values": values, "ratio": ratio, "escape_step": escape,
                       "resolvable": (gaps >= MIN_GAP).reshape(len(values), len(values)), "excess": excess,
                       "waiting": waiting}  # type: ignore[typeddict-item]
    claims, silent = phase_section_rows(config, data)
    return Outcome(claims, data, silent)


def _by_kind(stored: Mapping[str, Any], dtype: type) -> dict[str, np.ndarray]:
    """The tied and untied arrays of a section's data, as arrays of ``dtype`` (JSON gives lists back)."""
    return {kind: np.asarray(stored[kind], dtype=dtype) for kind in ("tied", "untied")}


def phase_section_rows(config: dict[str, Any], data: PhaseData) -> tuple[list[Claim], tuple[str, ...]]:
    """The phase diagram's rows and the reasons for the rows it does not make, from its data alone (as run, or as
    read back from a result file, where the reference check recomputes them)."""
    cells = [(p, q) for p in data["values"] for q in data["values"]]
    gaps = np.array([_gap(p, q) for p, q in cells])
    excess, waiting, escape = (_by_kind(data[key], dtype) for key, dtype in (("excess", float), ("waiting", bool),
                                                                            ("escape_step", float)))
    claims = phase_rows([p + q for p, q in cells], excess, gaps, waiting, escape, config["init_std"])
    silent = () if config["init_std"] <= GPT2_INIT_STD else (NO_ORDER_ROW.format(std=config["init_std"]),)
    return claims, silent


def phase_rows(switching: list[float], excess: dict[str, np.ndarray], gaps: np.ndarray, waiting: dict[str, np.ndarray],
               escape: dict[str, np.ndarray], init_std: float) -> list[Claim]:
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
        claim = Claim.exact(f"phase diagram: {kind} runs trapped where p+q{side}1 (count)", "0",
                            str(int(trapped.sum())), reason)
        return [claim.eventually(*budget_ran_out(int((trapped & waiting[kind]).sum()), f"of {trapped.size} runs "
                                                 "contradicted the row and were on the plateau or still descending",
                                                 "steps"))]

    reported = ("reported (seed, Sec. 4.1): from the GPT-2 initialisation the models reach the global minimum there; "
                "a run counts as trapped when it ended nearer the unigram loss than the entropy rate (excess >= gap/2)")
    claims = (trapped_row("tied", below, "<", reported) + trapped_row("untied", below, "<", reported)
              + trapped_row("untied", above, ">", "Thm 3: without tying the unigram point is a saddle; "
                            "reported (seed's Fig. 4): untied models reach the global minimum; trapped: ended nearer "
                            "the unigram loss than the entropy rate (excess >= gap/2)"))
    if above.any() and init_std <= GPT2_INIT_STD:
        cells = np.flatnonzero(above)
        claims.append(later_escape_row("phase diagram: cells with p+q>1 where a tied run left the unigram plateau no "
                                       "later than an untied run (count)", [escape["tied"][i] for i in cells],
                                       [escape["untied"][i] for i in cells], "steps"))
    return claims


def classify(excess: np.ndarray, gap: float) -> np.ndarray:
    """``bigram`` within a tenth of the gap of 0, ``unigram`` within a tenth of the gap, else ``neither``."""
    return np.where(excess < GAP_FRACTION * gap, "bigram",
                    np.where(np.abs(excess - gap) < GAP_FRACTION * gap, "unigram", "neither"))


class BasinData(TypedDict):
    p: float
    q: float
    scales: list[float]
    outcome: dict[str, dict[str, list[float]]]  # tied / untied -> bigram / unigram / neither / still_descending
    # -> fraction of seeds per scale
    escape_step: dict[str, list[list[float]]]  # tied / untied: per scale and seed, the step it left the plateau
    ends: dict[str, list[list[str]]]  # tied / untied: per scale and seed, bigram / unigram / neither
    waiting: dict[str, list[list[bool]]]  # tied / untied: per scale and seed, on the plateau or still descending


def basin(config: dict[str, Any], ctx: RunContext) -> Outcome[BasinData]:
    """Where seeds end at the featured chain, against the initialisation scale, tied and untied."""
    p, q, gap = config["p"], config["q"], _gap(config["p"], config["q"])
    scales = float_list(config["init_scales"])
    task = MarkovChain.binary(p, q, config["sweep_length"])
    H_pi, shape = theory.unigram_entropy(task.kernel), (len(scales), len(ctx.seeds))
    outcome: dict[str, dict[str, list[float]]] = {}
    ends, waiting, escape = {}, {}, {}
    for tied in (True, False):
        kind = "tied" if tied else "untied"
        makers = [_binary_model(config, tied, config["sweep_length"], s) for s in scales for _ in ctx.seeds]
        trained = train(makers, task, _train_config(config), [s for _ in scales for s in ctx.seeds],
                        ctx.device, progress=ctx.progress)
        ends[kind] = classify(_excess(trained, [task] * len(makers)), gap).reshape(shape)
        moving = np.reshape(still_descending(trained), shape)
        waiting[kind] = moving | on_plateau(trained.eval_loss, H_pi, gap).reshape(shape)
        escape[kind] = escape_steps(trained.eval_steps, trained.eval_loss, H_pi, gap).reshape(shape)
        outcome[kind] = {k: (ends[kind] == k).mean(axis=1) for k in ("bigram", "unigram", "neither")}
        outcome[kind]["still_descending"] = moving.mean(axis=1)
    data: BasinData = {"p": p, "q": q, "scales": scales, "outcome": outcome, "escape_step": escape, "ends": ends,
                       "waiting": waiting}  # type: ignore[typeddict-item]
    claims, silent = basin_section_rows(config, data)
    return Outcome(claims, data, silent)


def basin_section_rows(config: dict[str, Any], data: BasinData) -> tuple[list[Claim], tuple[str, ...]]:
    """The basin's rows and the reasons for the rows it does not make, from its data alone (as run, or as read back
    from a result file, where the reference check recomputes them)."""
    p, q, scales = data["p"], data["q"], data["scales"]
    ends, waiting, escape = (_by_kind(data[key], dtype) for key, dtype in (("ends", str), ("waiting", bool),
                                                                          ("escape_step", float)))
    silent = _too_close([(p, q)], "the basin")
    if min(scales) > GPT2_INIT_STD:
        silent += (f"the basin's rows: the seed reports outcomes from init std up to {GPT2_INIT_STD} (GPT-2's), and "
                   "every scale here is larger; they are measured, not claimed",)
    return basin_rows(p, q, scales, ends, waiting, escape), silent


def basin_rows(p: float, q: float, scales: list[float], ends: dict[str, np.ndarray], waiting: dict[str, np.ndarray],
               escape: dict[str, np.ndarray]) -> list[Claim]:
    """From the seed's own scales (init std up to 0.02): untied seeds, and tied ones when p+q<1, reach the bigram; when
    p+q>1 tied seeds leave the unigram plateau after the untied ones. Arrays are scales x seeds, per tied / untied.

    A row about reaching the bigram is undecided while a seed that had not was ``waiting`` (on the plateau or still
    descending).
    """
    small = np.asarray(scales) <= GPT2_INIT_STD
    if _gap(p, q) < MIN_GAP or not small.any():
        return []

    def bigram_row(kind: str, reason: str) -> Claim:
        off = (ends[kind] != "bigram") & small[:, None]
        claim = Claim.at_most(f"basin ({p}, {q}): {kind} seeds from init std <= {GPT2_INIT_STD} that do not reach the "
                              "bigram (fraction)", 0.0, float(off.sum() / (small.sum() * off.shape[1])), reason)
        return claim.eventually(*budget_ran_out(int((off & waiting[kind]).sum()), f"of {off.size} seeds had not "
                                                "reached it and were on the plateau or still descending", "steps"))

    claims = [bigram_row("untied", "Thm 3: without tying theta_pi is a saddle; reported (seed, Sec. 4.2): untied "
                         "models reach the bigram")]
    if p + q < 1:
        claims.append(bigram_row("tied", "reported (seed, Sec. 4.1): small Gaussian initialisations fall outside the "
                                 "basins of other minima when p+q<1"))
    else:
        at = np.flatnonzero(small)
        claims.append(later_escape_row(f"basin ({p}, {q}): init stds <= {GPT2_INIT_STD} at which a tied seed left the "
                                       "unigram plateau no later than an untied seed (count)",
                                       [escape["tied"][i] for i in at], [escape["untied"][i] for i in at], "steps"))
    return claims


# ---------------------------------------------------------------- depth and multi-state chains
class DepthRun(TypedDict):
    depth: int
    tied: bool
    eval_steps: list[int]
    eval_loss: list[list[float]]  # seeds x evaluations
    excess: list[float]
    still_descending: list[bool]  # per seed: the loss had not settled when the budget ran out


class DepthData(TypedDict):
    p: float
    q: float
    runs: list[DepthRun]


def depth(config: dict[str, Any], ctx: RunContext) -> Outcome[DepthData]:
    """Tied and untied runs of every depth at the featured chain: beyond one layer, a unigram plateau, then the
    entropy rate (the seed's Fig. 1 and its depth figure)."""
    p, q = config["p"], config["q"]
    task = MarkovChain.binary(p, q, config["depth_length"])
    seeds = list(range(config["depth_seeds"]))
    runs: list[DepthRun] = []
    for n_layer in int_list(config["depths"]):
        for tied in (True, False):
            trained = train(_binary_model(config, tied, config["depth_length"], n_layer=n_layer), task,
                            _train_config(config, config["depth_steps"], _depth_eval_every(config["depth_steps"])),
                            seeds, ctx.device, progress=ctx.progress)
            runs.append({"depth": n_layer, "tied": tied, "eval_steps": trained.eval_steps,
                         "eval_loss": trained.eval_loss, "excess": _excess(trained, [task] * len(seeds)),
                         "still_descending": still_descending(trained)})
    data: DepthData = {"p": p, "q": q, "runs": runs}
    claims, silent = depth_rows(config, data)
    return Outcome(claims, data, silent)


def depth_rows(config: dict[str, Any], data: DepthData) -> tuple[list[Claim], tuple[str, ...]]:
    """The depth section's rows and the reasons for the rows it does not make, from its data alone (as run, or as
    read back from a result file, where the reference check recomputes them)."""
    p, q = data["p"], data["q"]
    H_pi = theory.unigram_entropy(binary_kernel(p, q))
    claims = [row for run in data["runs"] if run["depth"] >= 2 for row in depth_run_rows(p, q, run, H_pi)]
    silent = _too_close([(p, q)], "the depth rows")
    if 1 in int_list(config["depths"]):
        silent += ("depth 1: drawn for comparison; the training section's rows judge one-layer runs",)
    if p + q < 1:
        silent += ("a plateau before the escape: the seed reports it (Sec. 4.4) where one layer has the bad local "
                   "minimum, p+q>1",)
    elif abs(np.log(2) - H_pi) < plateau_band(_gap(p, q)):
        silent += ("a plateau before the escape: here H(pi) is within the plateau band of ln 2, where training starts, "
                   "so a rest there cannot be told from the start",)
    return claims, silent


def _depth_eval_every(steps: int) -> int:
    """Held-out evaluations at least every 10 steps: a plateau of a few dozen steps must show at any budget."""
    return max(1, min(10, steps // 30))


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
    """Depth two and more: every seed reaches the entropy rate (the seed's Fig. 1), and with p+q>1 tied seeds at
    depth 2 first sit on the unigram plateau (its Sec. 4.4)."""
    gap = _gap(p, q)
    if gap < MIN_GAP:
        return []
    label = f"depth {run['depth']} {'tied' if run['tied'] else 'untied'}"
    eval_loss, moving = np.asarray(run["eval_loss"]), np.asarray(run["still_descending"])
    waiting = moving | on_plateau(eval_loss, unigram_entropy, gap)
    claims = [reaches_entropy_rate_row(f"{label} ({p}, {q}): every seed reaches the entropy rate (max excess loss)",
                                       np.asarray(run["excess"]), gap, waiting, "reported (seed's Fig. 1 and Sec. 4.4)",
                                       "depth_steps", "--set depth_seeds=...")]
    starts_on_it = abs(np.log(2) - unigram_entropy) < plateau_band(gap)  # nothing to fall from: no plateau to see
    if run["depth"] == 2 and run["tied"] and p + q > 1 and not starts_on_it:
        rest = plateau_rest(np.asarray(run["eval_steps"]), eval_loss, unigram_entropy, gap)
        spacing = int(run["eval_steps"][1] - run["eval_steps"][0])
        claims.append(Claim.at_least(
            "depth 2 tied: shortest rest on the unigram plateau, over the fall to it (steps / steps)", 1.0,
            float(rest.min()), "reported (seed, Sec. 4.4): a plateau at the unigram loss before the drop; a plateau "
            "here: the held-out loss stays within a tenth of the gap (+0.005 of sampling noise) of H(pi) at least as "
            f"long as it took to fall there from the start (evaluated every {spacing} steps)").eventually(
            *budget_ran_out(int(((rest == 0) & moving).sum()), f"of {len(moving)} seeds had not come down to the "
                            "plateau and were still descending", "depth_steps")
        ).held_to_spread(1.0, rest, "--set depth_seeds=...", upper=False))
    return claims


HESSIAN_PROBS = tuple(np.round(np.linspace(0.05, 0.95, 19), 2))  # switching probabilities of the exact sweep


class MultistateData(TypedDict):
    states: int
    threshold: float  # p* = (n-1)/n, where the tied Hessian changes sign and the mutual information is 0
    hessian_probs: list[float]
    hessian_eigenvalue: list[float]  # autograd: the embedding block's eigenvalue off the ones vector
    hessian_deviation: float  # autograd against the closed form: the largest deviation of any eigenvalue, any p
    switch_probs: list[float]
    gaps: list[float]
    tied: list[list[float]]  # excess loss / gap, per p and seed (NaN where the gap is below MIN_GAP)
    untied: list[list[float]]
    escape_step: dict[str, list[list[float]]]  # tied / untied: per p and seed, the step it left the plateau (inf: none)
    waiting: dict[str, list[list[bool]]]  # tied / untied: per p and seed, on the plateau or still descending


def multistate(config: dict[str, Any], ctx: RunContext) -> Outcome[MultistateData]:
    """The symmetric n-state chain: where the tied unigram point's Hessian changes sign, and where training ends."""
    n, probs = config["states"], float_list(config["switch_probs"])
    threshold = (n - 1) / n
    spectra = [theory.embedding_block_spectrum(symmetric_kernel(n, p), 1, 3) for p in HESSIAN_PROBS]
    eigenvalue = [float(sp[np.argmax(np.abs(sp))]) for sp in spectra]
    predicted = [np.sort([0.0] + [theory.symmetric_block_eigenvalue(n, p)] * (n - 1)) for p in HESSIAN_PROBS]
    deviation = float(max(np.abs(sp - pr).max() for sp, pr in zip(spectra, predicted)))
    tasks = [MarkovChain(symmetric_kernel(n, p), config["sweep_length"]) for p in probs]
    gaps = np.array([theory.unigram_entropy(t.kernel) - theory.entropy_rate(t.kernel) for t in tasks])
    unigram = [theory.unigram_entropy(t.kernel) for t in tasks]
    ratios, waiting, escape = {}, {}, {}
    for tied in (True, False):
        kind = "tied" if tied else "untied"
        gpt = GPTConfig(vocab_size=n, block_size=config["sweep_length"], d_model=config["d_model"], tied=tied,
                        init_std=config["init_std"])
        members = [t for t in tasks for _ in ctx.seeds]
        trained = train(lambda gpt=gpt: GPT(gpt), members, _train_config(config), [s for _ in tasks for s in ctx.seeds],
                        ctx.device, progress=ctx.progress)
        excess = _excess(trained, members).reshape(len(tasks), len(ctx.seeds))
        loss = np.asarray(trained.eval_loss).reshape(len(tasks), len(ctx.seeds), -1)
        plateau = np.array([on_plateau(loss[i], unigram[i], gaps[i]) for i in range(len(tasks))])
        waiting[kind] = np.reshape(still_descending(trained), (len(tasks), len(ctx.seeds))) | plateau
        escape[kind] = np.array([escape_steps(trained.eval_steps, loss[i], unigram[i], gaps[i])
                                 for i in range(len(tasks))])
        ratios[kind] = np.where(gaps[:, None] >= MIN_GAP, excess / np.maximum(gaps, MIN_GAP)[:, None], np.nan)
    data: MultistateData = {"states": n, "threshold": threshold, "hessian_probs": list(HESSIAN_PROBS),
                            "hessian_eigenvalue": eigenvalue, "hessian_deviation": deviation, "switch_probs": probs,
                            "gaps": gaps, "tied": ratios["tied"], "untied": ratios["untied"], "escape_step": escape,
                            "waiting": waiting}  # type: ignore[typeddict-item]
    claims, silent = multistate_section_rows(config, data)
    return Outcome(claims, data, silent, tuple(claim.name for claim in multistate_hessian_rows(data)))


def multistate_hessian_rows(data: MultistateData) -> list[Claim]:
    """The tied unigram point's embedding Hessian against its closed form, and where its sign changes."""
    n, threshold = data["states"], data["threshold"]
    signs = "".join("+" if v > EXACT else ("-" if v < -EXACT else "0") for v in data["hessian_eigenvalue"])
    expected = "".join("+" if p > threshold + 1e-9 else ("-" if p < threshold - 1e-9 else "0")
                       for p in data["hessian_probs"])
    return [
        Claim.close(f"{n}-state tied unigram point: embedding Hessian = (2/n)(np/(n-1) - 1) off the ones vector "
                    "(max deviation over the p sweep)", 0.0, data["hessian_deviation"], EXACT, EXACT_REASON),
        Claim.exact(f"{n}-state tied Hessian sign along the p sweep changes at p* = (n-1)/n = {threshold:.4g}",
                    expected, signs, "the closed form above; p* is where the chain's mutual information vanishes"),
    ]


def multistate_section_rows(config: dict[str, Any], data: MultistateData) -> tuple[list[Claim], tuple[str, ...]]:
    """The multi-state section's rows and the reasons for the rows it does not make, from its data alone (as run,
    or as read back from a result file, where the reference check recomputes them)."""
    probs, gaps = data["switch_probs"], np.asarray(data["gaps"], dtype=float)
    ratios, waiting, escape = (_by_kind(source, dtype) for source, dtype in ((data, float), (data["waiting"], bool),
                                                                            (data["escape_step"], float)))
    claims = multistate_hessian_rows(data) + multistate_rows(data["states"], probs, gaps, ratios, waiting, escape,
                                                             config["init_std"])
    silent = tuple(f"p = {p:g}: the gap I(x_n; x_n+1) = {gap:.2g} is below {MIN_GAP}, so the two minima cannot be "
                   "told apart (at p* = (n-1)/n it is 0)" for p, gap in zip(probs, gaps) if gap < MIN_GAP)
    if config["init_std"] > GPT2_INIT_STD:
        silent += (NO_ORDER_ROW.format(std=config["init_std"]),)
    return claims, silent


def multistate_rows(n: int, probs: list[float], gaps: np.ndarray, ratios: dict[str, np.ndarray],
                    waiting: dict[str, np.ndarray], escape: dict[str, np.ndarray], init_std: float) -> list[Claim]:
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
        return claim.eventually(*budget_ran_out(int((off & waiting[kind][cells]).sum()), f"of {off.size} runs had "
                                                "not reached it and were on the plateau or still descending", "steps")
                                ).held_to_spread(2 * GAP_FRACTION, ratio, "--seeds")

    claims = []
    if resolvable.any():
        claims.append(bigram_row(f"{n}-state chain, untied: worst excess loss / gap over p with a gap", "untied",
                                 resolvable, "reported (seed's Fig. 5): untied models reach the bigram"))
    if below.any():
        claims.append(bigram_row(f"{n}-state chain, tied, p < p*: worst excess loss / gap", "tied", below,
                                 "below p* the tied unigram point has a descent direction (the Hessian above)"))
    if above.any() and init_std <= GPT2_INIT_STD:
        at = np.flatnonzero(above)
        claims.append(later_escape_row(f"{n}-state chain, p > p*: switching probabilities at which a tied run left "
                                       "the unigram plateau no later than an untied run (count)",
                                       [escape["tied"][i] for i in at], [escape["untied"][i] for i in at], "steps"))
    return claims


# ---------------------------------------------------------------- the seed's reports beside a run's
def _left(escape: np.ndarray) -> str:
    """How many runs had left the unigram plateau, out of how many."""
    return f"{int(np.isfinite(escape).sum())} of {escape.size} runs had left the unigram plateau"


def _phase_vs_seed(data: PhaseData) -> list[tuple[str, str, str]]:
    """The seed's Fig. 4 regions (tied p+q>1 at the unigram, the rest at the bigram) against the grid's runs."""
    values, resolvable = np.asarray(data["values"]), np.asarray(data["resolvable"], dtype=bool)
    above = (values[:, None] + values[None, :] > 1) & resolvable
    below = (values[:, None] + values[None, :] < 1) & resolvable
    cells = above.ravel()
    rows = []
    for kind in ("tied", "untied"):
        ratio = np.asarray(data["ratio"][kind])
        escape = np.asarray(data["escape_step"][kind], dtype=float)[cells]
        if above.any():
            seed = "the unigram loss (Fig. 4)" if kind == "tied" else "the entropy rate (Fig. 4)"
            rows.append((f"phase diagram, {kind}, p+q>1: where runs end", seed,
                         f"median excess / gap {np.median(ratio[above]):.2f} over {int(above.sum())} cells "
                         f"(1: unigram, 0: entropy rate); {_left(escape)}"))
        if below.any():
            rows.append((f"phase diagram, {kind}, p+q<1: where runs end", "the entropy rate (Fig. 4)",
                         f"largest cell's excess / gap {ratio[below].max():.2f} over {int(below.sum())} cells"))
    return rows


def _basin_vs_seed(data: BasinData) -> list[tuple[str, str, str]]:
    """Where seeds end from each initialisation scale, beside what the seed reports from GPT-2's."""
    stuck = data["p"] + data["q"] > 1
    rows = []
    for kind in ("tied", "untied"):
        seed = ("the unigram loss, from init std 0.02 (Fig. 3a)" if kind == "tied" and stuck
                else "the entropy rate, from init std 0.02 (Figs. 3, 4)")
        ours = ", ".join(f"{scale:g}: {fraction:.0%}" for scale, fraction
                         in zip(data["scales"], data["outcome"][kind]["bigram"]))
        rows.append((f"basin ({data['p']}, {data['q']}), {kind}: seeds at the bigram, per init std", seed, ours))
    return rows


def _depth_vs_seed(data: DepthData) -> list[tuple[str, str, str]]:
    """Depth two and more: the seed's plateau then entropy rate, against each depth's runs."""
    kernel = binary_kernel(data["p"], data["q"])
    H_pi, gap = theory.unigram_entropy(kernel), _gap(data["p"], data["q"])
    rows = []
    for run in data["runs"]:
        kind = "tied" if run["tied"] else "untied"
        escape = escape_steps(np.asarray(run["eval_steps"]), np.asarray(run["eval_loss"]), H_pi, gap)
        left = escape[np.isfinite(escape)]
        if run["depth"] > 1:
            seed = "the entropy rate, after a plateau at the unigram loss (Fig. 1, Sec. 4.4)"
        elif run["tied"] and data["p"] + data["q"] > 1:
            seed = "one layer, tied: the unigram loss when its budget ends (Fig. 3a)"
        else:
            seed = "one layer: the entropy rate (Fig. 3)"
        ours = f"largest excess / gap {np.max(run['excess']) / gap:.2f}; {_left(escape)}"
        if left.size:
            ours += f" (median step {np.median(left):.0f} of {run['eval_steps'][-1]})"
        rows.append((f"depth {run['depth']} {kind} ({data['p']}, {data['q']}): where runs end", seed, ours))
    return rows


def _multistate_vs_seed(data: MultistateData) -> list[tuple[str, str, str]]:
    """The seed's Fig. 5 (tied runs stuck for large p, untied ones at the bigram) against each p of the sweep."""
    rows = []
    for kind in ("tied", "untied"):
        ratio = np.asarray(data[kind], dtype=float)
        escape = np.asarray(data["escape_step"][kind], dtype=float)
        ours = "; ".join(f"p = {p:g}: {np.nanmedian(r):.2f}, {int(np.isfinite(e).sum())}/{e.size} left"
                         for p, r, e in zip(data["switch_probs"], ratio, escape) if np.isfinite(r).any())
        seed = ("the unigram loss for large p (Fig. 5); threshold not known in closed form" if kind == "tied"
                else "the entropy rate (Fig. 5)")
        rows.append((f"{data['states']}-state chain, {kind}: median excess / gap per p (1: unigram, 0: entropy "
                     f"rate), runs that left the plateau; p* = {data['threshold']:.3g}", seed, ours))
    return rows


def against_seed(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Rows for the page's seed-versus-reference table, one group per section the run made."""
    compare = {"training": _training_vs_seed, "phase_diagram": _phase_vs_seed, "basin": _basin_vs_seed,
               "depth": _depth_vs_seed, "multistate": _multistate_vs_seed}
    return [row for name, rows_of in compare.items() if name in data for row in rows_of(data[name])]


CHAPTER = Chapter("markov", "Global and local minima on Markov data", PARAMS,
                  seeds={"quick": 3, "reference": 10, "full": 10},
                  sections=(
                      Section("global_minimum", "Theorem 1: the bigram is a global minimum", global_minimum),
                      Section("unigram_point", "Theorems 2 and 3: the unigram point", unigram_point),
                      Section("hessian_sweep", "The sign change at p + q = 1", hessian_sweep),
                      Section("reduced_flow", "The reduced gradient flow", reduced_flow),
                      Section("training", "Training: loss curves and predictions", training, trains=True,
                              rows=training_section_rows),
                      Section("phase_diagram", "Phase diagram over (p, q)", phase_diagram, trains=True,
                              by_seed=False, rows=phase_section_rows),  # grid_seeds per cell
                      Section("basin", "The basin of the bad minimum", basin, trains=True, rows=basin_section_rows),
                      Section("depth", "Depth two and more escape", depth, trains=True, by_seed=False,  # depth_seeds
                              rows=depth_rows),
                      Section("multistate", "A multi-state chain", multistate, trains=True,
                              rows=multistate_section_rows),
                  ), reference_sections=("training", "phase_diagram", "basin", "depth", "multistate"))
