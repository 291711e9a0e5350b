"""One online trainer for every chapter: fresh samples each step, AdamW, schedules, seeds.

``train`` fits one model per seed. With ``batched=True`` (the default) the K seeds are trained
as one :class:`Ensemble`: their parameters are stacked and a single ``torch.func.vmap`` runs the
forward and backward pass of all of them at once. Adam's update is element-wise, so one
optimizer over the stacked tensors is K independent optimizers, and member k of a K-run is the
same training run as the single run with seed k (``tests/test_trainer.py`` checks this).

On a CUDA device an ensemble that would not fit in half the free memory is trained in groups of
members, one group after another, and held-out sets are evaluated in chunks (``sandboxes.memory`` plans them);
under :func:`sandboxes.calibration.calibrating` every call runs short and records what its full run would cost.
"""

from __future__ import annotations

import copy
import math
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap
from torch.nn import functional as F
from tqdm import tqdm

from . import calibration, heldout, members, memory
from .calibration import CALIBRATION_EVAL, Timing, TrainCall
from .losses import IGNORE_INDEX
from .runtime import keep_freed_memory, seed_everything


class Task(Protocol):
    """What the trainer needs of a data source: a sampler and a per-model loss.

    A task class may also offer a static ``sample_members(tasks, n, generators)`` that samples
    for many members at once (see :func:`sample_members`), and a task that hands the model a summary of its
    batch instead of the batch a ``batch_rows(n)``: the rows a batch of ``n`` samples reaches the model as
    (:class:`~sandboxes.data.hmm.PerSymbol`; counted by :func:`~sandboxes.memory.meta_batch`). A task whose loss
    changes over training (an annealed penalty) offers ``at_step(step, steps)``: the task whose loss step ``step`` of
    ``steps`` trains on; its own ``loss`` scores the held-out evaluations.
    """

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """``n`` fresh (input, target) pairs drawn with ``generator`` (or their summary: see ``batch_rows``)."""
        ...

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        """Scalar loss of one model's outputs on one batch."""
        ...


def sample_members(tasks: Sequence[Task], n: int, generators: Sequence[torch.Generator]) -> tuple[Tensor, Tensor]:
    """A batch of ``n`` pairs per member, stacked on a leading member axis; member k's from ``generators[k]``.

    Tasks of one class that defines ``sample_members`` with this signature (Markov chains and
    automata, whose recursions over time then run once for all members) are sampled in one call;
    the others one member at a time.
    """
    joint = getattr(type(tasks[0]), "sample_members", None)
    if joint is not None and all(type(t) is type(tasks[0]) for t in tasks):
        return joint(tasks, n, generators)
    batches = [t.sample(n, g) for t, g in zip(tasks, generators)]
    return torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches])


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings shared by all members of a run."""

    steps: int
    batch_size: int
    lr: float = 2e-3
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 1e-3
    warmup: int = 0
    schedule: Literal["cosine", "linear", "constant"] = "cosine"
    final_lr_fraction: float = 0.1
    eval_every: int = 10
    eval_size: int = 256
    eval_first: int = 0  # also evaluate after each of the first this many steps: a phase over in a few steps, resolved
    optimizer: Literal["adamw", "sgd"] = "adamw"  # "sgd": gradient steps without decay, as theorems about gradient
    # descent take them (plain unless ``momentum``)
    momentum: float = 0.0  # the SGD's heavy-ball momentum (0: plain steps); AdamW has its betas

    def lr_factor(self, step: int) -> float:
        """Multiplier of ``lr`` at ``step``: linear warm-up, then the chosen decay."""
        if step < self.warmup:
            return (step + 1) / self.warmup
        if self.schedule == "constant":
            return 1.0
        progress = (step - self.warmup) / max(1, self.steps - self.warmup)
        floor = self.final_lr_fraction
        if self.schedule == "linear":
            return 1.0 - (1.0 - floor) * progress
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


# vmap runs PyTorch's fused attention member by member (forward and backward) and says so each time; on a CPU the
# model's own kernel (sandboxes.attention) folds the members into the batch instead
warnings.filterwarnings(
    "ignore",
    message="There is a performance drop because we have not yet implemented the "
    "batching rule for aten::_scaled_dot_product",
    category=UserWarning,
)


@dataclass
class TrainResult:
    """Trained models (on the CPU) and their loss curves, one row per seed."""

    seeds: list[int]
    models: list[nn.Module]
    train_loss: np.ndarray  # (K, steps)
    eval_steps: np.ndarray  # (n_evals,)
    eval_loss: np.ndarray  # (K, n_evals)
    wall_time: float
    config: TrainConfig  # the schedule it ran, to judge whether its loss had settled
    probes: np.ndarray | None = None  # (K, n_evals, n_probes): what ``probe`` read of each member at each evaluation


def joined(parts: Sequence[TrainResult], wall_time: float) -> TrainResult:
    """The members of ``parts`` (groups of one call, trained apart) as one result, in order."""
    first = parts[0]
    return TrainResult(
        seeds=[seed for part in parts for seed in part.seeds],
        models=[model for part in parts for model in part.models],
        train_loss=np.concatenate([part.train_loss for part in parts]),
        eval_steps=first.eval_steps,
        eval_loss=np.concatenate([part.eval_loss for part in parts]),
        wall_time=wall_time,
        config=first.config,
        probes=None if first.probes is None else np.concatenate([part.probes for part in parts]),
    )


class Ensemble(nn.Module):
    """K models of one architecture whose forward pass runs as one vmapped call."""

    def __init__(self, models: Sequence[nn.Module]) -> None:
        super().__init__()
        params, buffers = stack_module_state(list(models))
        self.stacked = nn.ParameterDict({k.replace(".", ":"): nn.Parameter(v) for k, v in params.items()})
        self._buffers_stacked = buffers
        self._base = [copy.deepcopy(models[0])]  # a list keeps it out of the module tree
        self._base_device: torch.device | None = None  # where the template was last moved
        self.size = len(models)

    def _params(self) -> dict[str, Tensor]:
        return {k.replace(":", "."): v for k, v in self.stacked.items()}

    def forward(self, x: Tensor) -> Tensor:
        """``x`` has a leading member axis of length K; so does the output."""
        base = self._base[0]
        if x.device != self._base_device:  # moving it walks its module tree: once per device, not once per step
            base.to(x.device)
            self._base_device = x.device

        def one(params: dict[str, Tensor], buffers: dict[str, Tensor], inputs: Tensor) -> Tensor:
            return functional_call(base, (params, buffers), (inputs,))

        buffers = {k: v.to(x.device) for k, v in self._buffers_stacked.items()}
        return vmap(one)(self._params(), buffers, x)

    def member(self, k: int, template: nn.Module) -> nn.Module:
        """A plain copy of ``template`` carrying member ``k``'s weights, on the CPU."""
        model = copy.deepcopy(template).cpu()
        state = {name: value[k].detach().cpu() for name, value in self._params().items()}
        state.update({name: value[k].cpu() for name, value in self._buffers_stacked.items()})
        model.load_state_dict(state, strict=False)
        return model


class Single(nn.Module):
    """One plain model behind the ensemble interface (member axis of length 1)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.size = 1

    def forward(self, x: Tensor) -> Tensor | tuple:
        return _with_member_axis(self.model(x[0]))

    def member(self, k: int, template: nn.Module) -> nn.Module:
        return copy.deepcopy(self.model).cpu()


def _with_member_axis(out: Tensor | tuple | list) -> Tensor | tuple | list:
    """``out`` (a tensor, or tuples and lists of them) with a leading member axis of length 1, as vmap gives."""
    if isinstance(out, Tensor):
        return out[None]
    return type(out)(_with_member_axis(part) for part in out)


def _decay_groups(module: nn.Module, weight_decay: float, member_axis: bool) -> list[dict]:
    """Weight decay on matrices (and embeddings) only, as in GPT-2; never on biases or norms."""
    decay, no_decay = [], []
    for p in module.parameters():
        ndim = p.dim() - (1 if member_axis else 0)
        (decay if ndim >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _optimizer(runner: nn.Module, config: TrainConfig, batched: bool) -> torch.optim.Optimizer:
    """AdamW with GPT-2's decay groups, or gradient descent (with heavy-ball momentum if asked): each member's
    parameters get their own steps, and momentum buffers, elementwise."""
    if config.optimizer == "sgd":
        return torch.optim.SGD(runner.parameters(), lr=config.lr, momentum=config.momentum)
    return torch.optim.AdamW(
        _decay_groups(runner, config.weight_decay, member_axis=batched), lr=config.lr, betas=config.betas
    )


def _repeated(part: TrainResult, seeds: list[int]) -> TrainResult:
    """The first group's models (copied) and curves repeated to a row per seed: what a calibration hands on in
    place of the groups it did not train, so that what follows sees every member."""
    have, rows = len(part.models), np.arange(len(seeds)) % len(part.models)
    return replace(
        part,
        seeds=list(seeds),
        models=part.models + [copy.deepcopy(part.models[i % have]) for i in range(have, len(seeds))],
        train_loss=part.train_loss[rows],
        eval_loss=part.eval_loss[rows],
        probes=None if part.probes is None else part.probes[rows],
    )


def _scored(targets: Tensor) -> Tensor:
    """Per member, how much a batch weighs in a mean over batches: its class-label targets other
    than ``IGNORE_INDEX`` (what :func:`~sandboxes.losses.next_token_loss` averages over), or its samples for real targets."""  # noqa: E501
    if targets.dtype.is_floating_point:
        return torch.full((targets.shape[0],), float(targets.shape[1]), device=targets.device)
    return (targets != IGNORE_INDEX).flatten(1).sum(dim=1).float()


def _held_out_loss(runner: nn.Module, loss: Callable, x: Tensor, y: Tensor, chunk: int) -> np.ndarray:
    """Held-out loss of every member, in chunks of ``chunk`` sequences weighted by what they score."""
    with torch.no_grad():
        if chunk >= x.shape[1]:
            return loss(runner(x), y).cpu().numpy()
        chunks = list(zip(x.split(chunk, dim=1), y.split(chunk, dim=1)))
        total = sum(loss(runner(xs), ys) * _scored(ys) for xs, ys in chunks)
        return (total / _scored(y)).cpu().numpy()


class TrainingDiverged(UserWarning):
    """A member's training loss became NaN or infinite: its run decides nothing, and training goes on."""


def _check_finite(losses: Tensor, first_step: int, seeds: list[int], lr: float, diverged: set[int]) -> None:
    """Warn once per member at the first step of ``losses`` (K, steps from ``first_step``) with a NaN or
    infinite loss; ``diverged`` holds the members already reported."""
    bad = ~torch.isfinite(losses)
    bad[sorted(diverged)] = False
    if bad.any():
        step = int(bad.any(dim=0).nonzero()[0])
        members = bad[:, step].nonzero().flatten().tolist()
        diverged.update(members)
        warnings.warn(
            f"training loss became NaN/inf at step {first_step + step} for seed(s) {[seeds[k] for k in members]} "
            f"(lr={lr})",
            TrainingDiverged,
            stacklevel=3,
        )


@dataclass(frozen=True)
class _Call:
    """One :func:`train` call: its members (a model factory, a task and a seed each) and how they train."""

    makers: list[Callable[[], nn.Module]]
    tasks: list[Task]
    seeds: list[int]
    config: TrainConfig
    device: torch.device
    vmapped: bool  # decided for the whole call, so that a group of one member trains as it would among the others
    progress: bool
    budget: int | None
    probe: Callable[[nn.Module], Sequence[float]] | None

    def only(self, rows: Sequence[int]) -> _Call:
        """The same call for the members at ``rows``."""
        return replace(
            self,
            makers=[self.makers[i] for i in rows],
            tasks=[self.tasks[i] for i in rows],
            seeds=[self.seeds[i] for i in rows],
        )


def _check_again(train_loss: list[np.ndarray], eval_steps: np.ndarray, seeds: list[int], lr: float) -> None:
    """The warnings :func:`_check_finite` gave at each evaluation while these members trained, given again in the
    same order, for members served from a store instead of trained."""
    losses, checked, diverged = torch.from_numpy(np.stack(train_loss)), 0, set()
    for step in eval_steps:
        _check_finite(losses[:, checked : int(step) + 1], checked, seeds, lr, diverged)
        checked = int(step) + 1


def warn_diverged(result: TrainResult) -> None:
    """The divergence warnings the training of ``result`` gave, given again here (it ran in another process)."""
    _check_again(list(result.train_loss), result.eval_steps, result.seeds, result.config.lr)


def _fit(call: _Call, eval_chunk: int) -> TrainResult:
    """Train the members of ``call`` at once (vmapped, or one plain model)."""
    began = time.perf_counter()
    seeds, tasks, config, device, batched, probe = (
        call.seeds,
        call.tasks,
        call.config,
        call.device,
        call.vmapped,
        call.probe,
    )
    models = []
    for seed, make_model in zip(seeds, call.makers):
        seed_everything(seed)
        models.append(make_model())
    template = models[0]
    runner: nn.Module = Ensemble(models) if batched else Single(models[0])
    runner.to(device)
    generators = [torch.Generator().manual_seed(seed) for seed in seeds]
    optimizer = _optimizer(runner, config, batched)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, config.lr_factor)
    per_member_loss = vmap(tasks[0].loss)
    at_step = getattr(tasks[0], "at_step", None)
    x_eval, y_eval = sample_members(tasks, config.eval_size, [heldout.generator(heldout.TRAINER_EVAL) for _ in tasks])
    planning = calibration.active()
    timing = planning.timing if planning is not None else None
    if timing is not None and x_eval.shape[1] > CALIBRATION_EVAL:  # a plan reads a few rows and scales their time
        timing.eval_scale = x_eval.shape[1] / CALIBRATION_EVAL
        x_eval, y_eval = x_eval[:, :CALIBRATION_EVAL], y_eval[:, :CALIBRATION_EVAL]
    x_eval, y_eval = x_eval.to(device), y_eval.to(device)

    # Losses stay on the device and are checked at each evaluation, so between evaluations the
    # host never waits for the device and samples the next batch while the device computes.
    train_curve = torch.zeros(len(seeds), config.steps, device=device)
    checked, diverged = 0, set()
    eval_steps, eval_curve, probed = [], [], []
    label = f"seed {seeds[0]}" if len(seeds) == 1 else f"{len(seeds)} seeds"
    bar = tqdm(range(config.steps), desc=label, disable=not call.progress, leave=False, file=sys.stderr)
    if timing is not None:
        timing.groups += 1
    for step in bar:
        # step 0 and its evaluation warm up, untimed: a one-off cost there (a kernel loaded on first use) would be
        # scaled to every step, and to the whole held-out set at every evaluation, of the full run
        timed = timing if step > 0 else None
        started = timed.mark(device) if timed is not None else 0.0
        x, y = sample_members(tasks, config.batch_size, generators)
        step_loss = per_member_loss if at_step is None else vmap(at_step(step, config.steps).loss)
        losses = step_loss(runner(x.to(device)), y.to(device))
        optimizer.zero_grad(set_to_none=True)
        losses.sum().backward()
        optimizer.step()
        schedule.step()
        train_curve[:, step] = losses.detach()
        if timed is not None:
            timed.step_s, timed.steps = timed.step_s + timed.mark(device) - started, timed.steps + 1
        if step % config.eval_every == 0 or step < config.eval_first or step == config.steps - 1:
            started = timed.mark(device) if timed is not None else 0.0
            _check_finite(train_curve[:, checked : step + 1], checked, seeds, config.lr, diverged)
            checked = step + 1
            eval_curve.append(_held_out_loss(runner, per_member_loss, x_eval, y_eval, eval_chunk))
            eval_steps.append(step)
            if timed is not None:
                timed.heldout_s += timed.mark(device) - started
            if probe is not None:
                with torch.no_grad():
                    probed.append([list(probe(runner.member(k, template))) for k in range(runner.size)])
            bar.set_postfix(eval_loss=f"{eval_curve[-1].mean():.4f}")
            if timed is not None:
                timed.eval_s, timed.evals = timed.eval_s + timed.mark(device) - started, timed.evals + 1
    return TrainResult(
        seeds=list(seeds),
        models=[runner.member(k, template) for k in range(runner.size)],
        train_loss=train_curve.double().cpu().numpy(),
        eval_steps=np.asarray(eval_steps),
        eval_loss=np.stack(eval_curve, axis=1),
        wall_time=time.perf_counter() - began,
        config=config,
        probes=np.asarray(probed, dtype=float).transpose(1, 0, 2) if probe is not None else None,
    )


def train(
    make_model: Callable[[], nn.Module] | Sequence[Callable[[], nn.Module]],
    task: Task | Sequence[Task],
    config: TrainConfig,
    seeds: Sequence[int],
    device: torch.device | str = "cpu",
    batched: bool = True,
    progress: bool | None = None,
    budget: int | None = None,
    probe: Callable[[nn.Module], Sequence[float]] | None = None,
) -> TrainResult:
    """Train one model per seed on fresh samples from ``task`` and log train and held-out loss.

    ``make_model`` is called after seeding, so a seed fixes the initialisation; the data stream
    of each seed comes from its own generator, so it does not depend on the other seeds.
    ``make_model`` and ``task`` may also be sequences with one entry per seed: members then
    differ in data (say ``p`` and ``q``) or initialisation but must share their shapes.
    Each member is evaluated on a held-out set drawn from its own task with a fixed seed.
    ``budget`` caps the bytes of one step (default: :func:`sandboxes.memory.memory_budget` of ``device``); members
    beyond it train in later groups, which changes no member's run. ``probe`` reads numbers off a copy of
    each member at every evaluation (say, how far a weight matrix has formed), without touching the run.
    """
    if not seeds:
        raise ValueError("train() needs at least one seed")
    seeds = list(seeds)
    tasks = list(task) if isinstance(task, Sequence) else [task] * len(seeds)
    makers = list(make_model) if isinstance(make_model, Sequence) else [make_model] * len(seeds)
    if not len(tasks) == len(makers) == len(seeds):
        raise ValueError("give one task and one model factory per seed, or a single one of each")
    device = torch.device(device)
    keep_freed_memory()
    progress = sys.stderr.isatty() if progress is None else progress
    call = _Call(
        makers,
        tasks,
        seeds,
        config,
        device,
        batched and len(seeds) > 1,  # one member: a plain model
        progress,
        budget,
        probe,
    )
    shared = members.active()
    if shared is not None and not calibration.is_calibrating():
        return _train_shared(shared, call)
    return _train_all(call)


def _train_all(call: _Call) -> TrainResult:
    """:func:`train` of every member of ``call``, in groups that fit its budget (shortened under
    :func:`calibrating`)."""
    makers, tasks, seeds, config = call.makers, call.tasks, call.seeds, call.config
    planning = calibration.active()
    budget = memory.memory_budget(call.device) if call.budget is None else call.budget
    if budget is None and planning is not None:  # planning a run sized for another machine: fit this one
        budget = memory.host_budget()
    planned_steps = config.steps
    if planning is not None:
        config = replace(config, steps=min(config.steps, planning.steps))
        planning.timing = Timing()
    size, eval_chunk = memory.plan(makers[0], tasks[0], config, len(seeds) if call.vmapped else 1, budget, call.device)
    groups = [list(range(i, min(i + size, len(seeds)))) for i in range(0, len(seeds), size)]
    start = time.perf_counter()
    # a calibration trains the first group alone: the others have its shapes, and its time is scaled to them
    parts = [
        _fit(replace(call.only(group), config=config), eval_chunk)
        for group in (groups[:1] if planning is not None else groups)
    ]
    if planning is not None:
        step_bytes = memory.step_bytes(makers[0], tasks[0], config, size, call.device)
        planning.calls.append(
            TrainCall(
                planned_steps,
                config.eval_every,
                time.perf_counter() - start,
                planning.timing,
                step_bytes,
                len(groups),
                makers[0],
                tasks[0],
                len(groups[0]),
                config.batch_size,
                len(seeds),
            )
        )
        return replace(_repeated(parts[0], seeds), wall_time=time.perf_counter() - start)
    return joined(parts, time.perf_counter() - start)


def _train_shared(shared: members.Shared, call: _Call) -> TrainResult:
    """:func:`train` under :func:`members.sharing`: the members stored are loaded, the others trained and stored."""
    start = time.perf_counter()
    seeds, config = call.seeds, call.config
    models, keys = [], []
    for seed, make, task in zip(seeds, call.makers, call.tasks):
        seed_everything(seed)  # as _fit seeds before it builds a member, so the key sees its initial weights
        models.append(make())
        keys.append(members.key(config, task, seed, models[-1], call.vmapped, call.device))
    found = {
        i: stored
        for i, name in enumerate(keys)
        if (stored := members.load(shared, name)) is not None and (call.probe is None or stored.probes is not None)
    }  # a member stored unprobed cannot serve a probe
    mine = members.share_rows(shared, len(seeds))
    todo = [i for i in range(len(seeds)) if i not in found and (mine is None or i in mine)]
    served = [i for i in range(len(seeds)) if i in found]
    if served:  # the divergence warnings its training gave, which decide whether a failed row is undecided
        _check_again(
            [found[i].train_loss for i in served], found[served[0]].eval_steps, [seeds[i] for i in served], config.lr
        )
    if todo:
        fresh = _train_all(call.only(todo))
        for row, i in enumerate(todo):
            found[i] = members.Stored(
                fresh.models[row].state_dict(),
                fresh.train_loss[row],
                fresh.eval_steps,
                fresh.eval_loss[row],
                None if fresh.probes is None else fresh.probes[row],
            )
            members.save(shared, keys[i], found[i])
    skipped = [i for i in range(len(seeds)) if i not in found]
    for i in skipped:  # another share's: untrained, with curves of NaN, so that the section can go on
        found[i] = _untrained(models[i], config, call.probe)
    shared.served += len(served)
    shared.trained += len(todo)
    shared.skipped += len(skipped)
    for i, model in enumerate(models):
        model.load_state_dict(found[i].state)
    rows = [found[i] for i in range(len(seeds))]
    return TrainResult(
        seeds=list(seeds),
        models=models,
        train_loss=np.stack([r.train_loss for r in rows]),
        eval_steps=rows[0].eval_steps,
        eval_loss=np.stack([r.eval_loss for r in rows]),
        wall_time=time.perf_counter() - start,
        config=config,
        probes=np.stack([r.probes for r in rows]) if call.probe is not None else None,
    )


def _untrained(
    model: nn.Module, config: TrainConfig, probe: Callable[[nn.Module], Sequence[float]] | None
) -> members.Stored:
    """A member a share job leaves to another share: its initial weights and curves of NaN, shaped as a trained
    member's (what the job computes from it is thrown away)."""
    evals = np.asarray([s for s in range(config.steps) if s % config.eval_every == 0 or s == config.steps - 1])
    probed = None
    if probe is not None:
        with torch.no_grad():
            probed = np.full((len(evals), len(list(probe(model)))), np.nan)
    return members.Stored(
        {k: v.clone() for k, v in model.state_dict().items()},
        np.full(config.steps, np.nan),
        evals,
        np.full(len(evals), np.nan),
        probed,
    )


class BatchStream:
    """The batches of a :func:`fit_to_accuracy` run as a :class:`Task`, so that planning can count a step's work and
    bytes: a sample is the first rows of step 0's batch, the loss the cross-entropy that run minimises."""

    def __init__(self, batches: Callable[[int], tuple[Tensor, Tensor]]) -> None:
        self.batches = batches

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        inputs, targets = self.batches(0)
        return inputs[:n], targets[:n]

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        return F.cross_entropy(outputs, targets)


def fit_to_accuracy(
    model: nn.Module,
    batches: Callable[[int], tuple[Tensor, Tensor]],
    held_out: tuple[Tensor, Tensor],
    steps: int,
    lr: float,
    accuracy: float,
    checks: int = 128,
) -> bool:
    """Whether Adam on ``batches(step)`` reaches ``accuracy`` on ``held_out`` within ``steps`` steps, checked at
    ``checks`` evenly spaced steps (the first before any step) and after the last; it stops at the first check that
    does. The capacity searches' loop: each run has its own task size, so a search's runs do not stack into an
    ensemble, and most runs that succeed stop long before the budget. Under :func:`calibration.calibrating` it runs
    the calibration's steps without stopping, times them and records the call with its whole budget."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    every = max(1, steps // checks)
    planning = calibration.active()
    timing = Timing(groups=1) if planning is not None else None
    start = copy.deepcopy(model) if planning is not None else None
    began = time.perf_counter()

    def reached() -> bool:
        with torch.no_grad():
            return (model(held_out[0]).argmax(-1) == held_out[1]).double().mean().item() >= accuracy

    for step in range(min(steps, planning.steps) if planning is not None else steps):
        if step % every == 0 and timing is None and reached():
            return True
        started = time.perf_counter()
        inputs, targets = batches(step)
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(inputs), targets).backward()
        optimizer.step()
        if timing is not None and step > 0:  # the first step warms up, untimed
            timing.step_s, timing.steps = timing.step_s + time.perf_counter() - started, timing.steps + 1
    if planning is not None and start is not None and timing is not None:
        checked = time.perf_counter()
        done = reached()
        timing.eval_s, timing.evals = time.perf_counter() - checked, 1
        stream = BatchStream(batches)
        config = TrainConfig(steps, len(batches(0)[1]), lr, eval_every=every)
        planning.calls.append(
            TrainCall(
                steps,
                every,
                time.perf_counter() - began,
                timing,
                memory.step_bytes(lambda: start, stream, config, 1, held_out[0].device),
                make_model=lambda: copy.deepcopy(start),
                task=stream,
                batch_size=config.batch_size,
            )
        )
        return done
    return reached()
