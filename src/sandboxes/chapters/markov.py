"""Chapter 1: global and local minima of one-layer transformers on Markov data.

Each section function computes one section of the chapter page and returns its claims and its
data (a ``TypedDict`` per section, which the section's figures in ``figures.markov`` read).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, TypedDict

import numpy as np
import torch

from .. import heldout, trainer
from ..claims import Claim
from ..data.markov import MarkovChain, binary_kernel, symmetric_kernel
from ..model import GPT, GPTConfig
from ..profiles import (
    FLAG,
    Param,
    at_least,
    each,
    float_list,
    in_open_unit_interval,
    positive,
    with_reference,
)
from ..sections import Chapter, Outcome, RunContext, Section
from ..theory import markov as theory
from ..theory.markov_flow import ReducedFlow
from ..trainer import TrainConfig, TrainResult, budget_ran_out, train

EXACT = 1e-10
EXACT_REASON = "float64 round-off: the construction is exact"
GAP_FRACTION = 0.1
GAP_REASON = "a tenth of the unigram-bigram gap I(x_n; x_n+1): separates the two minima, leaves room for finite training"
MIN_GAP = 0.01  # below this mutual information the two minima are too close to tell apart
GPT2_INIT_STD = 0.02  # the initialisation the seed trains from; its reported outcomes are for scales up to it


PARAMS = (
    Param("p", float, 0.5, 0.5, "P(x_n+1 = 1 | x_n = 0) of the featured chain", in_open_unit_interval),
    Param("q", float, 0.8, 0.8, "P(x_n+1 = 0 | x_n = 1) of the featured chain", in_open_unit_interval),
    Param("tied", bool, True, True, "weight tying of the phase-diagram and depth-2 runs "
          "(the loss-curve section always trains both)", FLAG),
    Param("p2", float, 0.2, 0.2, "p of the contrast chain (the book uses p+q<1)", in_open_unit_interval),
    Param("q2", float, 0.3, 0.3, "q of the contrast chain", in_open_unit_interval),
    Param("length", int, 64, 1024, "sequence length T", at_least(2)),
    Param("d_model", int, 8, 8, "embedding dimension", at_least(1)),
    Param("steps", int, 300, 400, "training steps of one-layer runs", at_least(1)),
    Param("batch_size", int, 16, 16, "sequences per step", at_least(1)),
    Param("lr", float, 2e-3, 2e-3, "AdamW learning rate (cosine schedule)", positive),
    Param("init_std", float, 0.02, 0.02, "std of the Gaussian initialisation", positive),
    Param("depth2_steps", int, 1000, 1000, "training steps of the depth-2 runs", at_least(1)),
    Param("grid", int, 4, 9, "phase diagram: values of p and of q in (0.1, 0.9)", at_least(2)),
    Param("grid_seeds", int, 1, 5, "phase diagram: seeds per (p, q) cell", at_least(1)),
    Param("init_scales", str, "0.01,0.03,0.1,0.3", "0.005,0.01,0.02,0.03,0.05,0.1,0.2,0.3,0.5,1.0",
          "basin: initialisation stds to compare", each(positive)),
    Param("states", int, 5, 5, "multi-state chain: number of states", at_least(2)),
    Param("switch_probs", str, "0.3,0.9", "0.1,0.3,0.5,0.7,0.8,0.9",
          "multi-state chain: switching probabilities p", each(in_open_unit_interval)),
    Param("flow_points", int, 40, 400, "reduced flow: Gaussian initial points per chain", at_least(1)),
    Param("flow_init_std", float, 0.5, 0.5, "reduced flow: std of the initial points", positive),
)
# Reference scale (2-core CPU, measured): the loss-curve section at the paper's own setting (T = 1024, 400 AdamW
# steps, batch 16, d = 8; THEORY.md, Makkuva et al. Fig. 3) with 10 seeds: about 1.1 s per step of one 20-member
# ensemble alone on the machine, 33 minutes in all beside other work. The other trained sections wait for their sizing.
PARAMS = with_reference(PARAMS, {"length": 1024, "steps": 400})


def _train_config(config: dict[str, Any], steps: int | None = None) -> TrainConfig:
    return TrainConfig(steps=steps or config["steps"], batch_size=config["batch_size"], lr=config["lr"],
                       eval_every=max(1, (steps or config["steps"]) // 30))


def _binary_model(config: dict[str, Any], tied: bool, init_std: float | None = None, n_layer: int = 1):
    gpt_config = replace(theory.binary_config(config["d_model"], config["length"], tied),
                         n_layer=n_layer, init_std=init_std or config["init_std"])
    return lambda: GPT(gpt_config)


def _excess(trained: TrainResult, tasks: list[MarkovChain]) -> np.ndarray:
    """Exact-expectation excess loss of every trained member on its own held-out sequences."""
    out = []
    for model, task in zip(trained.models, tasks):
        x, _ = task.sample(256, heldout.generator(heldout.MARKOV_EXCESS))
        with torch.no_grad():
            out.append(float(theory.excess_loss(model(x), x, task.kernel).mean()))
    return np.array(out)


NOISE = 0.005  # held-out sampling noise of an evaluated loss (nats)


def still_descending(trained: TrainResult) -> list[bool]:
    """Per member: the held-out loss had not settled when the budget ran out (see :func:`trainer.still_descending`)."""
    return trainer.still_descending(trained, NOISE).tolist()


def on_plateau(eval_loss: np.ndarray, unigram_entropy: float, gap: float) -> np.ndarray:
    """Per seed: the last evaluated loss is within a tenth of the gap (plus the sampling noise) of H(pi)."""
    return np.abs(np.asarray(eval_loss, dtype=float)[:, -1] - unigram_entropy) < GAP_FRACTION * gap + NOISE


def _too_close(chains: list[tuple[float, float]], rows: str) -> tuple[str, ...]:
    """Why ``rows`` are missing for the chains whose unigram-bigram gap is below ``MIN_GAP``."""
    return tuple(f"{rows} at (p, q) = ({p:g}, {q:g}): the gap I(x_n; x_n+1) = {abs(_gap(p, q)):.2g} is below {MIN_GAP}, "
                 "so the two minima cannot be told apart (p + q = 1 makes it 0)" for p, q in chains
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
    largest_drop: dict[str, list[float]]  # per point tested: min over directions of L(theta + r u) - L(theta), per radius


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
        directions = theory.random_directions(LOCAL_DIRECTIONS, uni.flat().numel(), heldout.generator(heldout.MARKOV_DIRECTIONS))
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
            claims.append(Claim.at_most(
                f"Thm 2 needs its hypothesis (other weights 0): e = 0 beside an MLP of w = {OFF_HYPOTHESIS_W} "
                f"< -1/sqrt2 is no minimum (largest drop at radius {LOCAL_RADII[1]})", -EXACT,
                float(drops[off_key][1]), "the MLP turns the curvature in e, c(1 + 2w|w|), negative"))
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
                    "Theorem 2 and its converse for p+q<1"),
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
        claims.append(axis_row(flow))
        reached = np.array([flow.reaches_global_minimum(e, w) for e, w in starts])
        data[name] = {"p": p, "q": q, "starts": starts, "reached_global": reached,
                      "trajectories": [tr[:, 1:] for tr in trajectories],
                      "optimal_slope": flow.optimal_slope}
        majority = "global minimum" if p + q < 1 else "unigram (e = 0)"
        measured = "global minimum" if reached.mean() > 0.5 else "unigram (e = 0)"
        claims.append(Claim.exact(f"reduced model ({p}, {q}): most Gaussian starts (std {config['flow_init_std']}) end at",
                                  majority, measured, "the slides' phase portraits; measured fraction reaching the "
                                  f"global minimum: {reached.mean():.2f}"))
    return Outcome(claims, data)


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
        trained = train(_binary_model(config, tied), tasks, _train_config(config), seeds, ctx.device,
                        progress=ctx.progress)
        excess, moving = _excess(trained, tasks), still_descending(trained)
        n = len(ctx.seeds)
        for i, (p, q) in enumerate(members):
            block = slice(i * n, (i + 1) * n)
            runs.append({"p": p, "q": q, "tied": tied, "eval_steps": trained.eval_steps,
                         "eval_loss": trained.eval_loss[block], "excess": excess[block],
                         "still_descending": moving[block],
                         "prediction": _predictions(trained.models[i * n], tasks[i * n])})
    claims = training_rows(runs)
    return Outcome(claims, {"runs": runs}, _too_close(chains, "where the runs end"))


def training_rows(runs: list[TrainingRun]) -> list[Claim]:
    """Where every seed ends: the unigram for tied p+q>1 (the seed's Fig. 3a), else the entropy rate.

    A row is undecided when a seed that is not where the row says was still descending at the end.
    """
    claims = []
    for run in runs:
        p, q, tied, excess = run["p"], run["q"], run["tied"], np.asarray(run["excess"])
        gap, label = _gap(p, q), f"({p}, {q}) {'tied' if tied else 'untied'}"
        if gap < MIN_GAP:
            continue
        moving = np.asarray(run["still_descending"])
        if tied and p + q > 1:
            off = np.abs(excess - gap) > GAP_FRACTION * gap
            claim = Claim.at_most(f"{label}: every seed ends at the unigram (max |excess loss - gap|)",
                                  GAP_FRACTION * gap, float(np.abs(excess - gap).max()),
                                  f"reported (seed's Fig. 3a) for tied models with p+q>1; {GAP_REASON}")
        else:
            off = excess > GAP_FRACTION * gap
            claim = Claim.at_most(f"{label}: every seed reaches the entropy rate (max excess loss)",
                                  GAP_FRACTION * gap, float(excess.max()),
                                  f"reported (seed's Fig. 3a/b) for untied models or p+q<1; {GAP_REASON}")
        claims.append(claim.eventually(*budget_ran_out(int((off & moving).sum()),
                                                       f"of {len(excess)} seeds were still descending", "steps")))
    return claims


def against_seed(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Rows for the page's seed-versus-reference table: where each loss curve of the seed's Fig. 3 ends."""
    rows = []
    for run in data.get("training", {"runs": []})["runs"]:
        kernel = binary_kernel(run["p"], run["q"])
        stuck = run["tied"] and run["p"] + run["q"] > 1
        target = (f"the unigram loss H(π) = {theory.unigram_entropy(kernel):.3f}" if stuck
                  else f"the entropy rate {theory.entropy_rate(kernel):.3f}")
        final = np.asarray(run["eval_loss"])[:, -1]
        rows.append((f"({run['p']}, {run['q']}) {'tied' if run['tied'] else 'untied'}: held-out loss at the end",
                     f"ends at {target} (Fig. 3)",
                     f"{np.median(final):.3f} (median of {len(final)} seeds; {final.min():.3f} to {final.max():.3f})"))
    return rows


def _predictions(model: GPT, task: MarkovChain) -> Prediction:
    """Predicted P(x_n+1 = 1) at every position of one held-out sequence, with its inputs."""
    x, _ = task.sample(1, heldout.generator(heldout.MARKOV_PREDICTION))
    with torch.no_grad():
        prob = model(x).softmax(dim=-1)[0, :, 1]
    return {"inputs": x[0].numpy(), "prob_one": prob.numpy()}


# ---------------------------------------------------------------- phase diagram and basin
class PhaseData(TypedDict):
    tied: bool
    values: list[float]  # the grid of p and of q
    ratio: list[list[float]]  # mean excess loss / gap per (p, q) cell
    resolvable: list[list[bool]]  # gap at least MIN_GAP


def phase_diagram(config: dict[str, Any], ctx: RunContext) -> Outcome[PhaseData]:
    """Tied one-layer runs over a grid of ``(p, q)``: where do they end at the unigram?"""
    values = np.round(np.linspace(0.1, 0.9, config["grid"]), 4)
    cells = [(p, q) for p in values for q in values]
    seeds = list(range(config["grid_seeds"]))
    tasks = [MarkovChain.binary(p, q, config["length"]) for p, q in cells for _ in seeds]
    trained = train(_binary_model(config, config["tied"]), tasks, _train_config(config),
                    [s for _ in cells for s in seeds], ctx.device, progress=ctx.progress)
    excess = _excess(trained, tasks).reshape(len(cells), len(seeds))
    moving = np.reshape(still_descending(trained), (len(cells), len(seeds)))
    gaps = np.array([_gap(p, q) for p, q in cells])
    ratio = excess.mean(axis=1) / np.maximum(gaps, 1e-12)
    resolvable = gaps >= MIN_GAP
    claims = phase_rows([p + q for p, q in cells], excess, gaps, config["tied"], moving)
    data = {"tied": config["tied"], "values": values, "ratio": ratio.reshape(len(values), len(values)),
            "resolvable": resolvable.reshape(len(values), len(values))}
    return Outcome(claims, data)


def phase_rows(switching: list[float], excess: np.ndarray, gaps: np.ndarray, tied: bool,
               moving: np.ndarray) -> list[Claim]:
    """Runs trapped (excess loss at least half the gap) below and above the line p+q = 1, per cell's seeds.

    A row is undecided while a run that contradicts it was still descending (``moving``, cells x seeds).
    """
    switching, resolvable = np.asarray(switching), gaps >= MIN_GAP
    trapped, moving = excess >= gaps[:, None] / 2, np.asarray(moving, dtype=bool)
    below, above = (switching < 1) & resolvable, (switching > 1) & resolvable

    def judged(claim: Claim, against: np.ndarray) -> Claim:
        waiting = int((against & moving).sum())
        return claim.eventually(*budget_ran_out(waiting, f"of {moving.size} runs contradicted the row and were "
                                                "still descending", "steps"))

    label = "tied" if tied else "untied"
    claims = [judged(Claim.exact(f"phase diagram: {label} runs trapped where p+q<1 (count)", "0",
                                 str(int(trapped[below].sum())), "reported (seed, Sec. 4.1): from the GPT-2 "
                                 "initialisation the models reach the global minimum there"), trapped & below[:, None])]
    if tied:
        claims.append(judged(Claim.exact("phase diagram: tied runs trapped where p+q>1 (count)",
                                         str(int(above.sum() * excess.shape[1])), str(int(trapped[above].sum())),
                                         "reported (seed's Fig. 4): tied models from the GPT-2 initialisation stay at "
                                         "the unigram wherever Thm 2 makes it a local minimum"),
                             ~trapped & above[:, None]))
    else:
        claims.append(judged(Claim.exact("phase diagram: untied runs trapped where p+q>1 (count)", "0",
                                         str(int(trapped[above].sum())), "Thm 3: without tying the unigram point is a "
                                         "saddle; reported: untied models reach the global minimum"),
                             trapped & above[:, None]))
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


def basin(config: dict[str, Any], ctx: RunContext) -> Outcome[BasinData]:
    """Where seeds end at the featured chain, against the initialisation scale, tied and untied."""
    p, q, gap = config["p"], config["q"], _gap(config["p"], config["q"])
    scales = float_list(config["init_scales"])
    task = MarkovChain.binary(p, q, config["length"])
    outcome: dict[str, dict[str, list[float]]] = {}
    for tied in (True, False):
        makers = [_binary_model(config, tied, s) for s in scales for _ in ctx.seeds]
        trained = train(makers, task, _train_config(config), [s for _ in scales for s in ctx.seeds],
                        ctx.device, progress=ctx.progress)
        ends = classify(_excess(trained, [task] * len(makers)), gap).reshape(len(scales), len(ctx.seeds))
        moving = np.reshape(still_descending(trained), (len(scales), len(ctx.seeds)))
        outcome["tied" if tied else "untied"] = {k: (ends == k).mean(axis=1) for k in ("bigram", "unigram", "neither")}
        outcome["tied" if tied else "untied"]["still_descending"] = moving.mean(axis=1)
    claims = basin_rows(p, q, scales, outcome)
    return Outcome(claims, {"p": p, "q": q, "scales": scales, "outcome": outcome}, _too_close([(p, q)], "the basin"))


def basin_rows(p: float, q: float, scales: list[float], outcome: dict[str, dict[str, list[float]]]) -> list[Claim]:
    """Untied seeds never end at the unigram; tied seeds from the smallest scale end where the seed reports.

    A row is undecided while seeds at the scales it judges were still descending (``still_descending``:
    the fraction per scale).
    """
    if _gap(p, q) < MIN_GAP:
        return []

    def judged(claim: Claim, kind: str, at: slice | int) -> Claim:
        waiting = float(np.max(np.asarray(outcome[kind]["still_descending"])[at]))
        return claim.eventually(waiting == 0, f"a fraction {waiting:.2g} of the {kind} seeds were still descending "
                                "when the budget ran out; a longer run (--set steps=...) decides it")

    claims = [judged(Claim.at_most(f"basin ({p}, {q}): untied seeds ending at the unigram, any init scale (largest "
                                   "fraction)", 0.0, float(np.max(outcome["untied"]["unigram"])),
                                   "Thm 3: without tying theta_pi is a saddle; reported: untied models reach the bigram"),
                     "untied", slice(None))]
    smallest = int(np.argmin(scales))
    if scales[smallest] <= GPT2_INIT_STD:
        trapped = float(outcome["tied"]["unigram"][smallest])
        reason = ("reported (seed, Sec. 4.1): small Gaussian initialisations fall in the unigram's basin when "
                  "p+q>1, and outside the basins of other minima when p+q<1")
        name = f"basin ({p}, {q}): tied seeds at the unigram from init std {scales[smallest]} (fraction)"
        row = Claim.at_least(name, 1.0, trapped, reason) if p + q > 1 else Claim.at_most(name, 0.0, trapped, reason)
        claims.append(judged(row, "tied", smallest))
    return claims


# ---------------------------------------------------------------- depth 2 and multi-state chains
class DepthData(TypedDict):
    p: float
    q: float
    eval_steps: list[int]
    eval_loss: list[list[float]]  # seeds x evaluations
    excess: list[float]
    still_descending: list[bool]  # per seed: the loss had not settled when the budget ran out


def depth_two(config: dict[str, Any], ctx: RunContext) -> Outcome[DepthData]:
    """Tied depth-2 runs at the featured chain: a unigram plateau, then the entropy rate."""
    p, q = config["p"], config["q"]
    task = MarkovChain.binary(p, q, config["length"])
    trained = train(_binary_model(config, config["tied"], n_layer=2), task, _train_config(config, config["depth2_steps"]),
                    ctx.seeds, ctx.device, progress=ctx.progress)
    H_pi = theory.unigram_entropy(task.kernel)
    excess = _excess(trained, [task] * len(ctx.seeds))
    moving = still_descending(trained)
    claims = depth_rows(p, q, excess, trained.eval_loss, H_pi, moving)
    return Outcome(claims, {"p": p, "q": q, "eval_steps": trained.eval_steps, "eval_loss": trained.eval_loss,
                            "excess": excess, "still_descending": moving}, _too_close([(p, q)], "depth 2"))


def depth_rows(p: float, q: float, excess: np.ndarray, eval_loss: np.ndarray, unigram_entropy: float,
               moving: list[bool]) -> list[Claim]:
    """Depth 2: every seed reaches the entropy rate, after a plateau at the unigram loss (the seed's Fig. 1)."""
    gap = _gap(p, q)
    if gap < MIN_GAP:
        return []
    near_unigram = np.abs(np.asarray(eval_loss) - unigram_entropy) < GAP_FRACTION * gap + NOISE
    plateau = near_unigram.mean(axis=1)  # fraction of the evaluations spent on the plateau
    short = np.asarray(excess) > GAP_FRACTION * gap
    waiting = short & (on_plateau(eval_loss, unigram_entropy, gap) | np.asarray(moving))
    return [
        Claim.at_most(f"depth 2 ({p}, {q}): every seed reaches the entropy rate (max excess loss)",
                      GAP_FRACTION * gap, float(np.max(excess)), f"reported (seed's Fig. 1); {GAP_REASON}").eventually(
            *budget_ran_out(int(waiting.sum()), f"of {len(short)} seeds were on the unigram plateau (the escape "
                            "had not come) or still descending", "depth2_steps")),
        Claim.at_least("depth 2: shortest time on the unigram plateau (fraction of training)",
                       0.1, float(plateau.min()), "reported (seed, Sec. 4.4); a plateau is a tenth of training or "
                       "more within a tenth of the gap of H(pi) (+0.005 for held-out sampling noise)").eventually(
            *budget_ran_out(int(np.sum(moving)), f"of {len(short)} seeds were still descending", "depth2_steps")),
    ]


HESSIAN_PROBS = tuple(np.round(np.linspace(0.05, 0.95, 19), 2))  # switching probabilities of the exact sweep


class MultistateData(TypedDict):
    states: int
    threshold: float  # p* = (n-1)/n, where the tied Hessian changes sign and the mutual information is 0
    hessian_probs: list[float]
    hessian_eigenvalue: list[float]  # autograd: the embedding block's eigenvalue off the ones vector
    switch_probs: list[float]
    gaps: list[float]
    tied: list[list[float]]  # excess loss / gap, per p and seed (NaN where the gap is below MIN_GAP)
    untied: list[list[float]]


def multistate(config: dict[str, Any], ctx: RunContext) -> Outcome[MultistateData]:
    """The symmetric n-state chain: where the tied unigram point's Hessian changes sign, and where training ends."""
    n, probs = config["states"], float_list(config["switch_probs"])
    threshold = (n - 1) / n
    spectra = [theory.embedding_block_spectrum(symmetric_kernel(n, p), 1, 3) for p in HESSIAN_PROBS]
    eigenvalue = [float(sp[np.argmax(np.abs(sp))]) for sp in spectra]
    predicted = [np.sort([0.0] + [theory.symmetric_block_eigenvalue(n, p)] * (n - 1)) for p in HESSIAN_PROBS]
    signs = "".join("+" if v > EXACT else ("-" if v < -EXACT else "0") for v in eigenvalue)
    expected = "".join("+" if p > threshold + 1e-9 else ("-" if p < threshold - 1e-9 else "0") for p in HESSIAN_PROBS)
    claims = [
        Claim.close(f"{n}-state tied unigram point: embedding Hessian = (2/n)(np/(n-1) - 1) off the ones vector "
                    "(max deviation over the p sweep)", 0.0,
                    float(max(np.abs(sp - pr).max() for sp, pr in zip(spectra, predicted))), EXACT, EXACT_REASON),
        Claim.exact(f"{n}-state tied Hessian sign along the p sweep changes at p* = (n-1)/n = {threshold:.4g}",
                    expected, signs, "the closed form above; p* is where the chain's mutual information vanishes"),
    ]
    tasks = [MarkovChain(symmetric_kernel(n, p), config["length"]) for p in probs]
    gaps = np.array([theory.unigram_entropy(t.kernel) - theory.entropy_rate(t.kernel) for t in tasks])
    ratios, moving = {}, {}
    for tied in (True, False):
        gpt = GPTConfig(vocab_size=n, block_size=config["length"], d_model=config["d_model"], tied=tied,
                        init_std=config["init_std"])
        members = [t for t in tasks for _ in ctx.seeds]
        trained = train(lambda: GPT(gpt), members, _train_config(config), [s for _ in tasks for s in ctx.seeds],
                        ctx.device, progress=ctx.progress)
        excess = _excess(trained, members).reshape(len(tasks), len(ctx.seeds))
        moving["tied" if tied else "untied"] = np.reshape(still_descending(trained), (len(tasks), len(ctx.seeds)))
        ratios["tied" if tied else "untied"] = np.where(gaps[:, None] >= MIN_GAP, excess / np.maximum(gaps, MIN_GAP)[:, None],
                                                        np.nan)
    claims += multistate_rows(n, probs, gaps, ratios["tied"], ratios["untied"], moving)
    silent = tuple(f"p = {p:g}: the gap I(x_n; x_n+1) = {gap:.2g} is below {MIN_GAP}, so the two minima cannot be "
                   "told apart (at p* = (n-1)/n it is 0)" for p, gap in zip(probs, gaps) if gap < MIN_GAP)
    return Outcome(claims, {"states": n, "threshold": threshold, "hessian_probs": list(HESSIAN_PROBS),
                            "hessian_eigenvalue": eigenvalue, "switch_probs": probs, "gaps": gaps,
                            "tied": ratios["tied"], "untied": ratios["untied"]}, silent)


def multistate_rows(n: int, probs: list[float], gaps: np.ndarray, tied: np.ndarray, untied: np.ndarray,
                    moving: dict[str, np.ndarray]) -> list[Claim]:
    """Untied reach the bigram everywhere; tied stay at the unigram above p* and reach the bigram below it.

    ``moving`` says, per p and seed, which runs were still descending at the end: a row that fails
    only through them is undecided.
    """
    threshold, resolvable = (n - 1) / n, np.asarray(gaps) >= MIN_GAP
    above = resolvable & (np.asarray(probs) > threshold)
    below = resolvable & (np.asarray(probs) < threshold)
    tolerance_reason = "two tenths of the gap: the multi-state runs use the binary budget for a harder kernel"

    def row(claim: Claim, cells: np.ndarray, off: np.ndarray, kind: str) -> Claim:
        waiting = off[cells] & np.asarray(moving[kind])[cells]
        return claim.eventually(*budget_ran_out(int(waiting.sum()), f"of {off[cells].size} runs were still "
                                                "descending", "steps"))

    claims = []
    if resolvable.any():
        claims.append(row(Claim.at_most(f"{n}-state chain, untied: worst excess loss / gap over p with a gap",
                                        2 * GAP_FRACTION, float(np.max(untied[resolvable])),
                                        f"reported (seed's Fig. 5): untied models reach the bigram; {tolerance_reason}"),
                          resolvable, untied > 2 * GAP_FRACTION, "untied"))
    if below.any():
        claims.append(row(Claim.at_most(f"{n}-state chain, tied, p < p*: worst excess loss / gap", 2 * GAP_FRACTION,
                                        float(np.max(tied[below])), "below p* the tied unigram point has a descent "
                                        f"direction (the Hessian above); {tolerance_reason}"),
                          below, tied > 2 * GAP_FRACTION, "tied"))
    if above.any():
        claims.append(row(Claim.at_most(f"{n}-state chain, tied, p > p*: every seed at the unigram "
                                        "(max |excess / gap - 1|)", GAP_FRACTION, float(np.max(np.abs(tied[above] - 1))),
                                        "reported (seed's Fig. 5): tied models get stuck for large p; above p* the "
                                        "embedding Hessian of the unigram point is positive off the ones vector; "
                                        f"{GAP_REASON}"),
                          above, np.abs(tied - 1) > GAP_FRACTION, "tied"))
    return claims


CHAPTER = Chapter("markov", "Global and local minima on Markov data", PARAMS, seeds={"quick": 3, "reference": 10, "full": 10},
                  sections=(
                      Section("global_minimum", "Theorem 1: the bigram is a global minimum", global_minimum),
                      Section("unigram_point", "Theorems 2 and 3: the unigram point", unigram_point),
                      Section("hessian_sweep", "The sign change at p + q = 1", hessian_sweep),
                      Section("reduced_flow", "The reduced gradient flow", reduced_flow),
                      Section("training", "Training: loss curves and predictions", training, trains=True),
                      Section("phase_diagram", "Phase diagram over (p, q)", phase_diagram, trains=True),
                      Section("basin", "The basin of the bad minimum", basin, trains=True),
                      Section("depth_two", "Depth two escapes", depth_two, trains=True),
                      Section("multistate", "A multi-state chain", multistate, trains=True),
                  ), reference_sections=("training",))
