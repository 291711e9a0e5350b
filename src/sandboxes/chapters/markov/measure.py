"""The Markov chapter's sections: the exact checks of Theorems 1-3 and the reduced flow, and the training runs
that fill each section's data (one ``TypedDict`` per section, which ``figures`` draws and ``judge`` reads)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypedDict

import numpy as np
import torch
from torch import nn

from ... import curves, heldout
from ...calibration import calibrated_map
from ...data.markov import MarkovChain, binary_kernel, symmetric_kernel
from ...model import GPT, GPTConfig
from ...profiles import float_list, int_list
from ...sections import RunContext
from ...theory import markov as theory
from ...theory.markov_flow import ReducedFlow
from ...trainer import TrainConfig, TrainResult, train
from .judge import (
    AXIS_OFFSET,
    AXIS_START,
    EXACT,
    MIN_GAP,
    NOISE,
    classify,
    escape_steps,
    information_gap,
    on_plateau,
)


def _train_config(config: dict[str, Any], steps: int | None = None, eval_every: int | None = None) -> TrainConfig:
    """AdamW at the chapter's batch and rate; held-out evaluations every ``eval_every`` steps (default: 30 per run)."""
    steps = steps or config["steps"]
    return TrainConfig(
        steps=steps, batch_size=config["batch_size"], lr=config["lr"], eval_every=eval_every or max(1, steps // 30)
    )


def _binary_model(config: dict[str, Any], tied: bool, length: int, init_std: float | None = None, n_layer: int = 1):
    gpt_config = replace(
        theory.binary_config(config["d_model"], length, tied), n_layer=n_layer, init_std=init_std or config["init_std"]
    )
    return lambda: GPT(gpt_config)


def _excess(trained: TrainResult, tasks: list[MarkovChain]) -> np.ndarray:
    """Exact-expectation excess loss of every trained member on its own held-out sequences."""

    def excess(member: tuple[nn.Module, MarkovChain]) -> float:
        model, task = member
        x, _ = task.sample(256, heldout.generator(heldout.MARKOV_EXCESS))
        with torch.no_grad():
            return float(theory.excess_loss(model(x), x, task.kernel).mean())

    return np.array(calibrated_map(excess, list(zip(trained.models, tasks))))


def still_descending(trained: TrainResult) -> list[bool]:
    """Per member: the held-out loss had not settled when the budget ran out (see :func:`curves.still_descending`)."""
    return curves.still_descending(trained, NOISE).tolist()


THEORY_LENGTH, THEORY_WIDTH = 6, 3  # the population loss enumerates all 2^6 sequences; width 3 suffices


class GlobalData(TypedDict):
    entropy_rate: float
    loss: dict[str, float]  # tied / untied: L(theta_*)
    gradient: dict[str, float]  # tied / untied: the largest entry of the gradient at theta_*


def global_minimum(config: dict[str, Any], ctx: RunContext) -> GlobalData:
    """Theorem 1 at the featured chain: the bigram construction has loss H and zero gradient."""
    p, q = config["p"], config["q"]
    kernel = binary_kernel(p, q)
    loss, gradient = {}, {}
    for label, tied in (("tied", True), ("untied", False)):
        star = theory.PopulationLoss(
            theory.global_minimum_point(p, q, THEORY_WIDTH, THEORY_LENGTH, tied), kernel, THEORY_LENGTH
        )
        loss[label] = star.value()
        gradient[label] = float(star.gradient().abs().max())
    return {"entropy_rate": theory.entropy_rate(kernel), "loss": loss, "gradient": gradient}


LOCAL_RADII = (1e-3, 1e-2, 1e-1)  # radii of the direct local-minimum test


LOCAL_DIRECTIONS = 200  # random unit directions in all parameters


OFF_HYPOTHESIS_W = -0.9  # an MLP weight of the reduced model below -1/sqrt2, where e = 0 stops being a minimum


class UnigramData(TypedDict):
    unigram_entropy: float
    curvature: float
    loss: dict[str, float]  # tied / untied: L(theta_pi)
    gradient: dict[str, float]  # tied / untied: the largest entry of the gradient at theta_pi
    block_spectrum: dict[str, list[float]]  # tied / untied: eigenvalues of the (e, a, b) block, by autograd
    block_error: dict[str, float]  # tied / untied: largest difference of those eigenvalues from the closed form
    radii: list[float]
    # per point tested: min over directions of L(theta + r u) - L(theta), per radius
    largest_drop: dict[str, list[float]]
    lowering: list[int]  # tied, p+q > 1: [random steps that lowered the loss, steps tried]; else empty
    off_hypothesis_w: float  # the MLP weight beside which e = 0 is tested off Theorem 2's hypothesis
    # tied, p+q > 1: the change along e beside that MLP; untied: along the saddle's direction (radius LOCAL_RADII[1])
    drop_along: dict[str, float]


def unigram_point(config: dict[str, Any], ctx: RunContext) -> UnigramData:
    """Theorems 2 and 3 at the featured chain: theta_pi's loss, gradient and Hessian block, and how the loss moves
    near it (tied: along random directions and beside an MLP off the hypothesis; untied: along the saddle's
    direction)."""
    p, q, d, length = config["p"], config["q"], THEORY_WIDTH, THEORY_LENGTH
    kernel, c = binary_kernel(p, q), theory.curvature(p, q)
    data: UnigramData = {
        "unigram_entropy": theory.unigram_entropy(kernel),
        "curvature": c,
        "loss": {},
        "gradient": {},
        "block_spectrum": {},
        "block_error": {},
        "radii": list(LOCAL_RADII),
        "largest_drop": {},
        "lowering": [],
        "off_hypothesis_w": OFF_HYPOTHESIS_W,
        "drop_along": {},
    }
    for label, tied in (("tied", True), ("untied", False)):
        uni = theory.PopulationLoss(theory.unigram_point(p, q, d, length, tied), kernel, length)
        data["loss"][label] = uni.value()
        data["gradient"][label] = float(uni.gradient().abs().max())
        spectra = theory.hessian_at_unigram_point(p, q, d, length, tied)
        data["block_spectrum"][label] = spectra["block"]
        data["block_error"][label] = float(
            np.abs(spectra["block"] - theory.predicted_block_spectrum(p, q, d, tied)).max()
        )
        if abs(p + q - 1) < MIN_GAP:
            continue  # c = 0: the theorems are silent
        directions = theory.random_directions(
            LOCAL_DIRECTIONS, uni.flat().numel(), heldout.generator(heldout.MARKOV_DIRECTIONS)
        )
        changes = theory.loss_changes(uni, directions, LOCAL_RADII)
        data["largest_drop"][label] = changes.min(axis=0)
        if tied and p + q > 1:
            data["lowering"] = [int((changes < -EXACT).sum()), changes.size]
            off = theory.PopulationLoss(ReducedFlow(p, q).gpt_weights(0.0, OFF_HYPOTHESIS_W, d, length), kernel, length)
            data["largest_drop"][f"tied, MLP w = {OFF_HYPOTHESIS_W}"] = theory.loss_changes(
                off, directions, LOCAL_RADII
            ).min(axis=0)
            moved = ReducedFlow(p, q).gpt_weights(LOCAL_RADII[1], OFF_HYPOTHESIS_W, d, length)
            data["drop_along"][label] = theory.PopulationLoss(moved, kernel, length).value() - off.value()
        elif not tied:
            e_dir = _embedding_direction(uni, tied=False, sign=-np.sign(c))
            data["drop_along"][label] = float(theory.loss_changes(uni, e_dir[None], (LOCAL_RADII[1],))[0, 0])
    return data


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


def hessian_sweep(config: dict[str, Any], ctx: RunContext) -> SweepData:
    """The smallest eigenvalue of the Hessian block at theta_pi along p = q = s/2, tied and untied."""
    sweep = np.linspace(0.1, 1.9, 19)
    tied_eig = [theory.hessian_at_unigram_point(s / 2, s / 2, 1, 3, True)["block"].min() for s in sweep]
    untied_eig = [theory.hessian_at_unigram_point(s / 2, s / 2, 1, 3, False)["block"].min() for s in sweep]
    return {"sweep": sweep.tolist(), "tied_min_eig": tied_eig, "untied_min_eig": untied_eig}


class FlowChain(TypedDict):
    p: float
    q: float
    starts: list[list[float]]  # Gaussian initial points (e, w)
    reached_global: list[bool]
    trajectories: list[list[list[float]]]  # (e, w) along the first few flows
    optimal_slope: float
    gpt_loss: float  # the population loss of the GPT weights of the point (e, w) = (0.8, -0.9)
    reduced_loss: float  # the two-scalar loss at that point
    energy_drift: float  # the largest change of E along the first few flows
    axis_moves: str  # flows started near e = 0 above and below w = -1/sqrt2: toward or away from the axis


class FlowData(TypedDict):
    featured: FlowChain
    contrast: FlowChain


def axis_moves(flow: ReducedFlow) -> str:
    """Where flows started near the axis e = 0 just above and below w = -1/sqrt2 move: toward or away from it."""

    def moves(w0: float) -> str:
        end = flow.trajectory(AXIS_START, w0, t_max=5.0, n_points=2)[-1, 1]
        return "toward" if end < AXIS_START else "away"

    return f"above: {moves(-1 / np.sqrt(2) + AXIS_OFFSET)}, below: {moves(-1 / np.sqrt(2) - AXIS_OFFSET)}"


def reduced_flow(config: dict[str, Any], ctx: RunContext) -> FlowData:
    """The slides' two-scalar reduced model and its gradient flow, for the featured and the contrast chain."""
    data: dict[str, Any] = {}
    rng = np.random.default_rng(0)
    starts = rng.normal(0.0, config["flow_init_std"], size=(config["flow_points"], 2))
    starts[:, 0] = np.abs(starts[:, 0])  # the loss is even in e, so flows of -e mirror those of e
    for name, (p, q) in (("featured", (config["p"], config["q"])), ("contrast", (config["p2"], config["q2"]))):
        flow = ReducedFlow(p, q)
        gpt = theory.PopulationLoss(flow.gpt_weights(0.8, -0.9, 3, 4), binary_kernel(p, q), 4)
        trajectories = [flow.trajectory(e, w, n_points=100) for e, w in starts[:6]]
        data[name] = {
            "p": p,
            "q": q,
            "starts": starts,
            "reached_global": np.array([flow.reaches_global_minimum(e, w) for e, w in starts]),
            "trajectories": [tr[:, 1:] for tr in trajectories],
            "optimal_slope": flow.optimal_slope,
            "gpt_loss": gpt.value(),
            "reduced_loss": flow.loss(0.8, -0.9),
            "energy_drift": float(max(np.ptp([flow.energy(e, w) for _, e, w in tr]) for tr in trajectories)),
            "axis_moves": axis_moves(flow),
        }
    return data  # type: ignore[return-value]


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
    # per seed, each weight matrix's singular values (attention's W_Q, W_K and W_V apart), largest first, and the
    # share of the positional embeddings' squared norm in their mean over positions: what appendix D reads
    spectra: dict[str, list[list[float]]]
    positions_constant: list[float]
    initial: dict[str, Any]  # the same two, of each seed's weights before training


class TrainingData(TypedDict):
    runs: list[TrainingRun]


def training(config: dict[str, Any], ctx: RunContext) -> TrainingData:
    """One-layer runs, tied and untied, on the featured and contrast chains (the paper's Fig. 3)."""
    chains = [(config["p"], config["q"]), (config["p2"], config["q2"])]
    settings = [(p, q, tied) for p, q in chains for tied in (True, False)]
    runs = []
    for tied in (True, False):
        members = [(p, q) for p, q, t in settings if t == tied]
        tasks = [MarkovChain.binary(p, q, config["length"]) for p, q in members for _ in ctx.seeds]
        seeds = [s for _ in members for s in ctx.seeds]
        make_model = _binary_model(config, tied, config["length"])
        trained = train(
            make_model,
            tasks,
            _train_config(config),
            seeds,
            ctx.device,
            progress=ctx.progress,
        )
        excess, moving = _excess(trained, tasks), still_descending(trained)
        n = len(ctx.seeds)
        for i, (p, q) in enumerate(members):
            block = slice(i * n, (i + 1) * n)
            H_pi = theory.unigram_entropy(binary_kernel(p, q))
            runs.append(
                {
                    "p": p,
                    "q": q,
                    "tied": tied,
                    "eval_steps": trained.eval_steps,
                    "eval_loss": trained.eval_loss[block],
                    "excess": excess[block],
                    "still_descending": moving[block],
                    "escape_step": escape_steps(
                        trained.eval_steps, trained.eval_loss[block], H_pi, information_gap(p, q)
                    ),
                    "prediction": _predictions(trained.models[i * n], tasks[i * n]),
                    **weight_shapes(trained.models[block]),
                    "initial": weight_shapes(initial_models(make_model, seeds[block])),
                }
            )
    data: TrainingData = {"runs": runs}
    return data


def matrix_spectra(model: GPT) -> dict[str, list[float]]:
    """Every weight matrix's singular values, largest first, the fused query-key-value matrix as its three parts;
    the positional table is left to :func:`constant_share`."""
    spectra = {}
    for name, weight in model.named_parameters():
        if weight.dim() != 2 or name == "wpe":
            continue
        parts = weight.detach().double().chunk(3) if name.endswith("attn.qkv.weight") else [weight.detach().double()]
        labels = [name.replace("qkv", part) for part in ("query", "key", "value")] if len(parts) == 3 else [name]
        spectra.update({label: torch.linalg.svdvals(part).tolist() for label, part in zip(labels, parts)})
    return spectra


def constant_share(table: torch.Tensor) -> float:
    """The share of a positional table's squared norm in its mean over positions: 1 for the same vector at every
    position, about 1 / T for independent random rows."""
    table = table.detach().double()
    return float(table.shape[0] * table.mean(dim=0).square().sum() / table.square().sum())


def initial_models(make_model: Callable[[], GPT], seeds: list[int]) -> list[GPT]:
    """Each seed's model as the trainer initialised it (seeded, then made; the initialisation draws from torch's
    generator alone), every generator left as it was."""
    models = []
    with torch.random.fork_rng(devices=[]):
        for seed in seeds:
            torch.manual_seed(seed)
            models.append(make_model())
    return models


def weight_shapes(models: list[GPT]) -> dict[str, Any]:
    """Per seed, what appendix D of the paper reads off trained weights: the spectra and the constant positions."""
    spectra = [matrix_spectra(model) for model in models]
    return {
        "spectra": {name: [seed[name] for seed in spectra] for name in spectra[0]},
        "positions_constant": [constant_share(model.wpe) for model in models],
    }


def _predictions(model: GPT, task: MarkovChain) -> Prediction:
    """Predicted P(x_n+1 = 1) at every position of one held-out sequence, with its inputs."""
    x, _ = task.sample(1, heldout.generator(heldout.MARKOV_PREDICTION))
    with torch.no_grad():
        prob = model(x).softmax(dim=-1)[0, :, 1]
    return {"inputs": x[0].numpy(), "prob_one": prob.numpy()}


class PhaseData(TypedDict):
    values: list[float]  # the grid of p and of q
    ratio: dict[str, list[list[float]]]  # tied / untied: mean excess loss / gap per (p, q) cell (NaN: gap < MIN_GAP)
    # tied / untied: per cell and seed, the step it left the plateau (inf: none)
    escape_step: dict[str, list[list[float]]]
    resolvable: list[list[bool]]  # gap at least MIN_GAP
    excess: dict[str, list[list[float]]]  # tied / untied: per cell (p-major) and seed, the final excess loss
    waiting: dict[str, list[list[bool]]]  # tied / untied: per cell and seed, on the plateau or still descending


def phase_diagram(config: dict[str, Any], ctx: RunContext) -> PhaseData:
    """Tied and untied one-layer runs over a grid of ``(p, q)``: which end at the bigram, and which linger at the unigram?"""  # noqa: E501
    values = np.round(np.linspace(0.1, 0.9, config["grid"]), 4)
    cells = [(p, q) for p in values for q in values]
    seeds = list(range(config["grid_seeds"]))
    tasks = [MarkovChain.binary(p, q, config["sweep_length"]) for p, q in cells for _ in seeds]
    gaps = np.array([information_gap(p, q) for p, q in cells])
    unigram = np.array([theory.unigram_entropy(binary_kernel(p, q)) for p, q in cells])
    excess, waiting, escape, ratio = {}, {}, {}, {}
    for tied in (True, False):
        kind = "tied" if tied else "untied"
        trained = train(
            _binary_model(config, tied, config["sweep_length"]),
            tasks,
            _train_config(config),
            [s for _ in cells for s in seeds],
            ctx.device,
            progress=ctx.progress,
        )
        excess[kind] = _excess(trained, tasks).reshape(len(cells), len(seeds))
        loss = np.asarray(trained.eval_loss).reshape(len(cells), len(seeds), -1)
        plateau = np.array([on_plateau(loss[i], unigram[i], gaps[i]) for i in range(len(cells))])
        waiting[kind] = np.reshape(still_descending(trained), (len(cells), len(seeds))) | plateau
        escape[kind] = np.array(
            [escape_steps(trained.eval_steps, loss[i], unigram[i], gaps[i]) for i in range(len(cells))]
        )
        ratio[kind] = np.where(gaps >= MIN_GAP, excess[kind].mean(axis=1) / np.maximum(gaps, MIN_GAP), np.nan).reshape(
            len(values), len(values)
        )  # no ratio where the gap vanishes
    data: PhaseData = {
        "values": values,
        "ratio": ratio,
        "escape_step": escape,
        "resolvable": (gaps >= MIN_GAP).reshape(len(values), len(values)),
        "excess": excess,
        "waiting": waiting,
    }  # type: ignore[typeddict-item]
    return data


class BasinData(TypedDict):
    p: float
    q: float
    scales: list[float]
    outcome: dict[str, dict[str, list[float]]]  # tied / untied -> bigram / unigram / neither / still_descending
    # -> fraction of seeds per scale
    escape_step: dict[str, list[list[float]]]  # tied / untied: per scale and seed, the step it left the plateau
    ends: dict[str, list[list[str]]]  # tied / untied: per scale and seed, bigram / unigram / neither
    waiting: dict[str, list[list[bool]]]  # tied / untied: per scale and seed, on the plateau or still descending


def basin(config: dict[str, Any], ctx: RunContext) -> BasinData:
    """Where seeds end at the featured chain, against the initialisation scale, tied and untied."""
    p, q, gap = config["p"], config["q"], information_gap(config["p"], config["q"])
    scales = float_list(config["init_scales"])
    task = MarkovChain.binary(p, q, config["sweep_length"])
    H_pi, shape = theory.unigram_entropy(task.kernel), (len(scales), len(ctx.seeds))
    outcome: dict[str, dict[str, list[float]]] = {}
    ends, waiting, escape = {}, {}, {}
    for tied in (True, False):
        kind = "tied" if tied else "untied"
        makers = [_binary_model(config, tied, config["sweep_length"], s) for s in scales for _ in ctx.seeds]
        trained = train(
            makers,
            task,
            _train_config(config),
            [s for _ in scales for s in ctx.seeds],
            ctx.device,
            progress=ctx.progress,
        )
        ends[kind] = classify(_excess(trained, [task] * len(makers)), gap).reshape(shape)
        moving = np.reshape(still_descending(trained), shape)
        waiting[kind] = moving | on_plateau(trained.eval_loss, H_pi, gap).reshape(shape)
        escape[kind] = escape_steps(trained.eval_steps, trained.eval_loss, H_pi, gap).reshape(shape)
        outcome[kind] = {k: (ends[kind] == k).mean(axis=1) for k in ("bigram", "unigram", "neither")}
        outcome[kind]["still_descending"] = moving.mean(axis=1)
    data: BasinData = {
        "p": p,
        "q": q,
        "scales": scales,
        "outcome": outcome,
        "escape_step": escape,
        "ends": ends,
        "waiting": waiting,
    }  # type: ignore[typeddict-item]
    return data


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


def depth(config: dict[str, Any], ctx: RunContext) -> DepthData:
    """Tied and untied runs of every depth at the featured chain: beyond one layer, a unigram plateau, then the
    entropy rate (the paper's Fig. 1 and its depth figure)."""
    p, q = config["p"], config["q"]
    task = MarkovChain.binary(p, q, config["depth_length"])
    seeds = list(range(config["depth_seeds"]))
    runs: list[DepthRun] = []
    for n_layer in int_list(config["depths"]):
        for tied in (True, False):
            trained = train(
                _binary_model(config, tied, config["depth_length"], n_layer=n_layer),
                task,
                _train_config(config, config["depth_steps"], _depth_eval_every(config["depth_steps"])),
                seeds,
                ctx.device,
                progress=ctx.progress,
            )
            runs.append(
                {
                    "depth": n_layer,
                    "tied": tied,
                    "eval_steps": trained.eval_steps,
                    "eval_loss": trained.eval_loss,
                    "excess": _excess(trained, [task] * len(seeds)),
                    "still_descending": still_descending(trained),
                }
            )
    data: DepthData = {"p": p, "q": q, "runs": runs}
    return data


def _depth_eval_every(steps: int) -> int:
    """Held-out evaluations at least every 10 steps: a plateau of a few dozen steps must show at any budget."""
    return max(1, min(10, steps // 30))


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


def multistate(config: dict[str, Any], ctx: RunContext) -> MultistateData:
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
        gpt = GPTConfig(
            vocab_size=n,
            block_size=config["sweep_length"],
            d_model=config["d_model"],
            tied=tied,
            init_std=config["init_std"],
        )
        members = [t for t in tasks for _ in ctx.seeds]
        trained = train(
            lambda gpt=gpt: GPT(gpt),
            members,
            _train_config(config),
            [s for _ in tasks for s in ctx.seeds],
            ctx.device,
            progress=ctx.progress,
        )
        excess = _excess(trained, members).reshape(len(tasks), len(ctx.seeds))
        loss = np.asarray(trained.eval_loss).reshape(len(tasks), len(ctx.seeds), -1)
        plateau = np.array([on_plateau(loss[i], unigram[i], gaps[i]) for i in range(len(tasks))])
        waiting[kind] = np.reshape(still_descending(trained), (len(tasks), len(ctx.seeds))) | plateau
        escape[kind] = np.array(
            [escape_steps(trained.eval_steps, loss[i], unigram[i], gaps[i]) for i in range(len(tasks))]
        )
        ratios[kind] = np.where(gaps[:, None] >= MIN_GAP, excess / np.maximum(gaps, MIN_GAP)[:, None], np.nan)
    data: MultistateData = {
        "states": n,
        "threshold": threshold,
        "hessian_probs": list(HESSIAN_PROBS),
        "hessian_eigenvalue": eigenvalue,
        "hessian_deviation": deviation,
        "switch_probs": probs,
        "gaps": gaps,
        "tied": ratios["tied"],
        "untied": ratios["untied"],
        "escape_step": escape,
        "waiting": waiting,
    }  # type: ignore[typeddict-item]
    return data
