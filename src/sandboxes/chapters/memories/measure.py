"""The memories chapter's sections: per section its ``TypedDict`` (which ``figures`` draws and ``judge`` reads) and
the function that computes it: the lemma's gradient against autograd, the capacity of the outer-product memory and of
the memory one gradient step writes, the capacity of trained MLP memories, and the factual recall model trained from
a small initialisation."""

from __future__ import annotations

import copy
import math
import sys
from collections.abc import Callable
from functools import cache, partial
from typing import Any, TypedDict

import numpy as np
import torch
from scipy.special import lambertw
from torch import Tensor, nn
from torch.nn import functional as F
from tqdm import tqdm

from ... import calibration
from ...curves import still_descending
from ...data.facts import FactRecall
from ...data.trigger import TriggerTask
from ...model import GPT, FactTransformer, GPTConfig, LinearAttentionRecall, MLPMemory
from ...profiles import int_list
from ...runtime import member_seed
from ...sections import RunContext
from ...theory import memories as theory
from ...trainer import TrainConfig, fit_to_accuracy, train
from ...workers import map_each

LOSS_NOISE = 1e-3  # a held-out loss that moved less than this has hardly started
PROBE_SIZE = 4096  # held-out sequences on which each evaluation splits the loss into its relation and subject parts
EVALUATIONS = 128  # evaluations of each factual recall run, as in the authors' notebook (every steps / 128)
NOISY_CONCENTRATION = 0.5  # the noisy recall task's bigram rows: peaked, as a language's letter bigram is (the
NOISY_ZIPF = 1.0  # induction chapter's trigger task); a Zipf base measure makes the trigger, its most frequent token,
# come back often, as Chen et al.'s most frequent character does


def unit_embeddings(n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` embeddings drawn uniformly on the unit sphere of R^d (nearly orthonormal when d is large)."""
    x = rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


# ---------------------------------------------------------------- the lemma: gradients are memories
class GradientData(TypedDict):
    inputs: int
    outputs: int
    dim: int
    lemma_error: float  # max |autograd - lemma| over max |autograd|, at a random W
    one_step_error: float  # max |W_1 - (lr/N) sum (1{f(z)=k} - 1/K) u_k e_z^T| over max |W_1|, one step from W = 0
    one_step_scores: list[list[float]]  # u_k^T W_1 e_z, input x output, of that step (lr = N)
    targets: list[int]  # f(z)
    one_step_recall: float  # share of inputs whose target scores highest after that step


def autograd_gradient(W: np.ndarray, U: np.ndarray, E: np.ndarray, joint: np.ndarray) -> np.ndarray:
    """The gradient of the population cross-entropy of ``u_k^T W e_z``, by autograd in float64."""
    w = torch.tensor(W, requires_grad=True)
    logits = torch.from_numpy(E) @ w.T @ torch.from_numpy(U).T
    loss = -(torch.from_numpy(joint) * torch.log_softmax(logits, dim=1)).sum()
    (grad,) = torch.autograd.grad(loss, w)
    return grad.numpy()


def gradient_problem(config: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The lemma's example: unit embeddings of ``grad_inputs`` inputs and ``grad_outputs`` outputs in R^grad_d, a
    uniform input and a target f(z) drawn uniformly: (U, E, f, joint law)."""
    rng = np.random.default_rng(member_seed("gradient", config["seed"]))
    n, k, d = config["grad_inputs"], config["grad_outputs"], config["grad_d"]
    U, E = unit_embeddings(k, d, rng), unit_embeddings(n, d, rng)
    f = rng.integers(k, size=n)
    joint = np.zeros((n, k))
    joint[np.arange(n), f] = 1.0 / n
    return U, E, f, joint


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| over max |want|."""
    return float(np.abs(got - want).max() / np.abs(want).max())


def gradient(config: dict[str, Any], ctx: RunContext) -> GradientData:
    """The lemma at a random W and at W = 0 (one step), against autograd."""
    U, E, f, joint = gradient_problem(config)
    n, d = len(E), U.shape[1]
    W = np.random.default_rng(member_seed("gradient W", config["seed"])).standard_normal((d, d))
    step = -n * autograd_gradient(np.zeros((d, d)), U, E, joint)  # one step of size N from zero
    scores = theory.scores(step, U, E)
    data: GradientData = {
        "inputs": n,
        "outputs": len(U),
        "dim": d,
        "lemma_error": relative_error(theory.memory_gradient(W, U, E, joint), autograd_gradient(W, U, E, joint)),
        "one_step_error": relative_error(theory.one_step_memory(f, U, E, float(n)), step),
        "one_step_scores": scores,
        "targets": f,
        "one_step_recall": float((scores.argmax(axis=1) == f).mean()),
    }  # type: ignore[typeddict-item]
    return data


# ---------------------------------------------------------------- capacity
class CapacityData(TypedDict):
    dims: list[int]
    construction: list[list[int]]  # dim x seed: the most associations the outer-product memory recalls all of
    one_step: list[list[int]]  # the same for the memory one gradient step from zero writes
    predicted: list[float]  # per dim: N at which the Gaussian model gives even odds of recalling all
    single_share: list[float]  # per dim: the share of a candidate's margin variance in single dot products at N*


CHUNK = 2**22  # scores held at once while checking recall: a chunk of inputs against every output


def recalls_all(U: np.ndarray, E: np.ndarray, n: int, one_step: bool) -> bool:
    """Whether the memory of the first ``n`` associations x -> x recalls each of them (its target scores above every
    other of the n outputs): the construction sum_x u_x e_x^T, or the one-step memory sum_x (u_x - mean u) e_x^T.
    Inputs are scored a chunk at a time, so memory stays bounded at any n."""
    u, e = U[:n], E[:n]
    W = (u - u.mean(axis=0) if one_step else u).T @ e
    rows = max(1, CHUNK // n)
    for start in range(0, n, rows):
        scores = (e[start : start + rows] @ W.T) @ u.T  # scores[x, y] = u_y^T W e_x
        if not (scores.argmax(axis=1) == np.arange(start, start + len(scores))).all():
            return False
    return True


def largest_recalled(d: int, seed: int, one_step: bool, guess: float) -> int:
    """The n at which recall of the first n associations of one draw is lost, less one, found by bisection over
    nested prefixes (from twice the predicted capacity, doubled until some association is lost). Adding an
    association can now and then repair an earlier loss, so this is a boundary of the bisection, the largest n
    recalled in all but such rare draws. Inputs and outputs come from streams of their own, so a prefix does not
    depend on how many were drawn."""
    high = max(4, int(2 * guess))
    while True:
        U, E = (
            unit_embeddings(high, d, np.random.default_rng(member_seed("capacity", side, d, seed)))
            for side in ("outputs", "inputs")
        )
        if not recalls_all(U, E, high, one_step):
            break
        high *= 2
    low = 1
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if recalls_all(U, E, middle, one_step) else (low, middle)
    return low


def capacity(config: dict[str, Any], ctx: RunContext) -> CapacityData:
    """Per dimension and seed, the most associations each memory recalls, beside the Gaussian model's prediction."""
    dims, seeds = int_list(config["capacity_dims"]), range(config["capacity_seeds"])
    predicted = [theory.predicted_capacity(d) for d in dims]
    kinds = ("construction", "one_step")
    progress = sys.stderr.isatty() if ctx.progress is None else ctx.progress
    bar = tqdm(total=len(dims) * len(seeds) * 2, desc="capacity", disable=not progress, leave=False, file=sys.stderr)
    measured: dict[str, list[list[int]]] = {kind: [] for kind in kinds}
    for d, guess in zip(dims, predicted):
        for kind in kinds:
            measured[kind].append([largest_recalled(d, s, kind == "one_step", guess) for s in seeds])
            bar.update(len(seeds))
    bar.close()
    data: CapacityData = {
        "dims": dims,
        "construction": measured["construction"],
        "one_step": measured["one_step"],
        "predicted": predicted,
        "single_share": [theory.single_product_share(n, d) for n, d in zip(predicted, dims)],
    }
    return data


# ---------------------------------------------------------------- capacity of a trained MLP memory
class MlpCapacityData(TypedDict):
    dims: list[int]
    ratios: list[int]  # widths m as multiples of d
    stored: list[list[list[int]]]  # dim x ratio x seed: the most associations the trained MLP memorised
    steps: int  # the step budget of each training run


START_CONSTANT = 3.0  # each search starts where N ln N = 3 m d, about what pilots measured; only its path depends on it


def search_start(params: int) -> float:
    """The N at which a search starts for an MLP memory of ``params`` = m d: N ln N = 3 m d."""
    return START_CONSTANT * params / float(np.real(lambertw(START_CONSTANT * params)))


def search_runs(guess: float, precision: float) -> int:
    """About the runs :func:`largest_stored` makes when its answer lies in its first bracket (to within one): the
    bracket's two ends, then halvings of its width (1.5 ``guess``) down to ``precision`` of the guess (at least 1)."""
    return 2 + max(0, math.ceil(math.log2(1.5 * guess / max(1.0, guess * precision))))


def largest_stored(stores: Callable[[int], bool], guess: float, precision: float) -> int:
    """The largest n for which ``stores(n)`` holds (0 if not even for 1), to within ``precision`` of it (at least 1),
    by bisection from the bracket [guess / 2, 2 guess] widened until its ends disagree; each n is trained once.
    Runs near the boundary now and then disagree with their neighbours, so this is the boundary the bisection finds,
    as the authors' is."""
    stores = cache(stores)
    if calibration.is_calibrating():  # a plan times one run, at the guess, for each run the search would make
        n = max(1, round(guess))
        calibration.repeated(lambda: stores(n), search_runs(guess, precision))
        return n
    low, high = max(1, int(guess / 2)), max(2, int(2 * guess))
    while stores(high):
        low, high = high, 2 * high
    while low > 1 and not stores(low):
        low, high = low // 2, low
    if low == 1 and not stores(1):
        return 0
    while high - low > max(1, int(low * precision)):
        middle = (low + high) // 2
        low, high = (middle, high) if stores(middle) else (low, middle)
    return low


def memorised(config: dict[str, Any], d: int, m: int, n: int, seed: int, device: torch.device) -> bool:
    """Whether an MLP memory of width ``m`` trained by full-batch Adam memorises the first ``n`` associations
    x -> x of one draw of unit embeddings in R^d (the authors' f*, one output per input) to ``mlp_accuracy``.
    Inputs, outputs and the starting weights come from streams fixed by (d, m, seed), so a draw's associations are
    nested prefixes and only ``n`` changes between a search's runs."""
    inputs, outputs = (
        torch.from_numpy(unit_embeddings(n, d, np.random.default_rng(member_seed("mlp capacity", side, d, m, seed))))
        for side in ("inputs", "outputs")
    )
    start = torch.Generator().manual_seed(member_seed("mlp capacity start", d, m, seed))
    model = MLPMemory(inputs.float(), outputs.float(), m, start).to(device)
    pairs = torch.arange(n, device=device), torch.arange(n, device=device)  # the full batch: x -> x
    return fit_to_accuracy(
        model, lambda step: pairs, pairs, config["mlp_steps"], config["mlp_lr"], config["mlp_accuracy"]
    )


def most_memorised(config: dict[str, Any], d: int, m: int, seed: int, device: torch.device) -> int:
    """The largest n memorised, to within 1 % (the authors' bisection), searched from N ln N = 3 m d."""
    return largest_stored(lambda n: memorised(config, d, m, n, seed, device), search_start(m * d), 0.01)


MLP_SEARCH = ("mlp_steps", "mlp_lr", "mlp_accuracy")  # what a search for an MLP memory's capacity reads
FACTS_SEARCH = (
    "facts_heads",
    "facts_per_relation",
    "facts_T",
    "facts_batch",
    "facts_steps",
    "facts_lrs",
    "facts_accuracy",
)


def read_here(config: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """The values of ``keys``, read in this process: a search in a worker process reads a copy of them, and the
    section's record of the parameters it read (which the reference check compares) must still name them."""
    return {key: config[key] for key in keys}


def mlp_capacity(config: dict[str, Any], ctx: RunContext) -> MlpCapacityData:
    """Per dimension, width and seed, the most associations a trained MLP memory stores (the authors' Fig. 1,
    right)."""
    dims, ratios, seeds = int_list(config["mlp_dims"]), int_list(config["mlp_ratios"]), range(config["mlp_seeds"])
    search = read_here(config, MLP_SEARCH)
    cells = [(search, d, r * d, s, ctx.device) for d in dims for r in ratios for s in seeds]
    stored = map_each(
        most_memorised, cells, ctx.workers, ctx.progress, "MLP capacity", [m * d for _, d, m, _, _ in cells], ctx.device
    )
    data: MlpCapacityData = {
        "dims": dims,
        "ratios": ratios,
        "stored": np.reshape(stored, (len(dims), len(ratios), len(seeds))).tolist(),
        "steps": config["mlp_steps"],
    }
    return data


# ---------------------------------------------------------------- how many facts one layer stores
class FactCapacityData(TypedDict):
    dims: list[int]
    shapes: list[list[float]]  # (alpha, beta) per shape: H d_h = alpha d and m = beta d
    heads: int
    per_relation: int
    params: list[list[int]]  # shape x dim: the authors' count, 4 H d_h d + 2 m d
    sizes: list[list[list[int]]]  # shape x dim x seed: the most subjects S (= relations R) whose facts were recalled
    steps: int
    batch: int
    lrs: list[float]  # Adam step sizes tried in turn


FACTS_START = 0.15  # each search starts where S R = 0.15 x parameters, the authors' guide line (their Fig. 4)
FACT_HELD_OUT = 1024  # held-out sequences on which a run's accuracy is checked, as the authors'


def fact_model_shape(config: dict[str, Any], d: int, alpha: float, beta: float) -> tuple[int, int, int]:
    """(heads, head width, MLP width) of the shape H d_h = alpha d, m = beta d, as the authors round them."""
    heads = config["facts_heads"]
    return heads, max(1, int(d * alpha / heads)), int(d * beta)


def fresh_batches(
    task: FactRecall, n: int, generator: torch.Generator, device: torch.device
) -> Callable[[int], tuple[Tensor, Tensor]]:
    """A fresh batch of ``n`` sequences at every step, drawn from ``generator`` on the CPU and moved to ``device``."""

    def batch(step: int) -> tuple[Tensor, Tensor]:
        tokens, answers = task.sample(n, generator)
        return tokens.to(device), answers.to(device)

    return batch


def recalls_facts(
    config: dict[str, Any], d: int, shape: tuple[int, int, int], size: int, seed: int, device: torch.device
) -> bool:
    """Whether a one-layer transformer of ``shape`` trained on S = R = ``size`` recalls its facts on held-out
    sequences to ``facts_accuracy``, at some step size of ``facts_lrs`` (tried in turn, as the authors do).
    The facts table, the model's start and the sequences come from streams fixed by the run's settings."""
    heads, head_dim, width = shape
    task = FactRecall(
        size, size, config["facts_per_relation"], 2 * size, config["facts_T"], member_seed("facts", size, seed)
    )
    tokens, answers = task.sample(
        FACT_HELD_OUT, torch.Generator().manual_seed(member_seed("facts held out", size, seed))
    )
    held_out = tokens.to(device), answers.to(device)
    batch = config["facts_batch"]
    for lr in fact_lrs(config):
        start = torch.Generator().manual_seed(member_seed("facts start", d, shape, size, seed))
        model = FactTransformer(task.vocabulary, task.answers, d, heads, head_dim, width, start).to(device)
        draws = torch.Generator().manual_seed(member_seed("facts batches", d, shape, size, seed, lr))
        if fit_to_accuracy(
            model,
            fresh_batches(task, batch, draws, device),
            held_out,
            config["facts_steps"],
            lr,
            config["facts_accuracy"],
        ):
            return True
    return False


def fact_lrs(config: dict[str, Any]) -> list[float]:
    """The Adam step sizes a run tries in turn."""
    return [float(v) for v in str(config["facts_lrs"]).split(",")]


def most_facts(config: dict[str, Any], d: int, alpha: float, beta: float, seed: int, device: torch.device) -> int:
    """The largest S = R whose facts a model of the shape recalls (0 if not even one subject's), exactly, searched
    from S R = 0.15 x parameters."""
    shape = fact_model_shape(config, d, alpha, beta)
    guess = math.sqrt(FACTS_START * fact_parameters(d, shape))
    return largest_stored(lambda size: recalls_facts(config, d, shape, size, seed, device), guess, 0.0)


def fact_parameters(d: int, shape: tuple[int, int, int]) -> int:
    """The authors' parameter count of a one-layer transformer: 4 H d_h d + 2 m d."""
    heads, head_dim, width = shape
    return 4 * heads * head_dim * d + 2 * width * d


def fact_capacity(config: dict[str, Any], ctx: RunContext) -> FactCapacityData:
    """Per shape, dimension and seed, the most facts (S = R subjects and relations) a one-layer transformer trained
    on them recalls (the authors' Fig. 4, left)."""
    dims, seeds = int_list(config["facts_dims"]), range(config["facts_seeds"])
    shapes = [[float(v) for v in pair.split(":")] for pair in str(config["facts_shapes"]).split(",")]
    search = read_here(config, FACTS_SEARCH)
    cells = [(search, d, *shape, s, ctx.device) for shape in shapes for d in dims for s in seeds]
    costs = [fact_parameters(d, fact_model_shape(config, d, a, b)) for _, d, a, b, _, _ in cells]
    sizes = np.reshape(
        map_each(most_facts, cells, ctx.workers, ctx.progress, "facts stored", costs, ctx.device),
        (len(shapes), len(dims), len(seeds)),
    )
    data: FactCapacityData = {
        "dims": dims,
        "shapes": shapes,
        "heads": config["facts_heads"],
        "per_relation": config["facts_per_relation"],
        "params": [[fact_parameters(d, fact_model_shape(config, d, *shape)) for d in dims] for shape in shapes],
        "sizes": sizes.tolist(),
        "steps": config["facts_steps"],
        "batch": config["facts_batch"],
        "lrs": fact_lrs(config),
    }
    return data


# ---------------------------------------------------------------- a one-layer transformer set by hand
BUILT_SCALES = (0.125, 0.25, 0.5, 1.0, 2.0)  # dimensions tried, as multiples of the one the layer is built in (the
# smallest is the counterfactual's, far below it)
SINK_SCORE = 0.5  # the end token's attention score, per unit of SCORE_SCALE: above noise, below the held tokens
SCORE_SCALE = 100.0  # the held token's score: its weight 1 - e^-50, a non-held token's at most e^-25 of the sink's
HEAD_DIM = 1  # one token a head: a key's noise on other tokens, sqrt(1.25 / d), 0.05 at d = 500 against the
# sink's 1/2 (at d = 63, 0.14: some heads then prefer a noise token, failures the union bound does not count)
CHUNK_FLOATS = 2**24  # floats a forward pass of the layer set by hand holds at once (embedded tokens and the heads'
# folded queries and gathered values): 64 MB
MOST_FACT_SEQUENCES = 2**22  # sequences the layer set by hand reads at most (S R build_draws): 32 MB of tokens a
# position


class FactBuildData(TypedDict):
    subjects: int
    relations: int
    per_relation: int
    heads: int  # of the layer with a slot for every subject and relation (HEAD_DIM each)
    built_dim: int  # theory.built_dim: where the union bound leaves at most BUILT_FAILURES wrong facts
    dims: list[int]  # BUILT_SCALES times built_dim
    draws: int  # sequences per fact
    recalled: list[float]  # per dimension: the share of facts right on every one of their sequences
    covered: int  # subjects with a slot in the layer short of heads (the first ones), at built_dim
    covered_right: float  # share of their sequences answered right
    uncovered_right: float  # share of the other subjects' sequences answered right
    uncovered_in_relation: float  # share of the other subjects' sequences answered within the relation's answers
    mlp_dim: int  # theory.built_dim with the MLP-held layer's extra variance
    mlp_dims: list[int]  # BUILT_SCALES times mlp_dim
    mlp_recalled: list[float]  # per dimension, as recalled, for the layer whose MLP holds the facts
    mlp_units: int  # S + R
    mlp_covered_right: float  # with units for the first `covered` subjects, at mlp_dim: their sequences answered right
    mlp_uncovered_right: float  # the other subjects' sequences answered right


def slot_targets(task: FactRecall, unembed: Tensor) -> Tensor:
    """What each subject and relation writes through its value slot: the sum of the subject's R answers' and of the
    relation's A answers' unembeddings, ``(S + R, d)``."""
    facts = torch.from_numpy(task.facts)
    answers = unembed[facts].sum(dim=1)
    relations = unembed.reshape(task.relations, task.per_relation, -1).sum(dim=1)
    return torch.cat([answers, relations])


def slot_groups(with_slot: int, subjects: int, relations: int, head_dim: int) -> list[list[int]]:
    """The tokens each head holds a slot for: the first ``with_slot`` subjects, then the relations, ``head_dim`` to a
    head, no head holding both (a sequence's two tokens never share a head's attention)."""
    held = [list(range(with_slot)), list(range(subjects, subjects + relations))]
    return [kind[i : i + head_dim] for kind in held for i in range(0, len(kind), head_dim)]


def _attend_by_hand(model: FactTransformer, groups: list[list[int]], writes: Tensor) -> None:
    """Set ``model``'s heads, one per group of tokens: each head's key scores its own tokens 1 and the end token 1/2
    (times :data:`SCORE_SCALE`, read against the end token's query), so a head attends to its token where the
    sequence holds one and to the end token otherwise; its value map reads 1 on its token's slot and 0 on the end
    token, and its output map writes ``writes[token]``. Keys and values are dual to the tokens' random embeddings
    (exact on them); every other token falls where the embeddings put it."""
    embed, end = model.embed.double(), model.embed[-1].double()
    with torch.no_grad():
        for weight in (model.query, model.key, model.value, model.out):
            weight.zero_()
        for h, group in enumerate(groups):
            dual = torch.linalg.pinv(torch.cat([embed[group], end[None]]))  # (d, n + 1): embedding . dual = identity
            model.query[h, :, 0] = SCORE_SCALE * HEAD_DIM**0.5 * end / end.dot(end)  # read back as SCORE_SCALE
            model.key[h, :, 0] = dual[:, :-1].sum(dim=1) + SINK_SCORE * dual[:, -1]
            model.value[h, :, : len(group)] = dual[:, :-1]
            model.out[h * HEAD_DIM : h * HEAD_DIM + len(group)] = writes[group]


def fact_layer_by_hand(task: FactRecall, d: int, with_slot: int, generator: torch.Generator) -> FactTransformer:
    """A :class:`~sandboxes.model.FactTransformer` without MLP whose weights are set, not trained: the first
    ``with_slot`` subjects and every relation each get a value slot (:func:`slot_groups`, :data:`HEAD_DIM` tokens a
    head; H d_h = S + R where every subject has one), whose output map writes the token's :func:`slot_targets`
    (:func:`_attend_by_hand`): the attention holds the facts."""
    groups = slot_groups(with_slot, task.subjects, task.relations, HEAD_DIM)
    model = FactTransformer(task.vocabulary, task.answers, d, len(groups), HEAD_DIM, 0, generator)
    _attend_by_hand(model, groups, slot_targets(task, model.unembed))
    return model


def memory_units(with_unit: int, subjects: int, relations: int) -> list[int]:
    """The tokens the MLP holds a unit for: the first ``with_unit`` subjects and every relation."""
    return [*range(with_unit), *range(subjects, subjects + relations)]


def fact_mlp_by_hand(task: FactRecall, d: int, with_unit: int, generator: torch.Generator) -> FactTransformer:
    """The same transformer with the facts in its MLP: every subject and relation holds a head whose output map
    copies the token's embedding (:func:`_attend_by_hand`; H d_h = S + R), and the MLP holds a unit for each token
    of :func:`memory_units` (m = S + R where every subject has one) that reads the token's embedding (scaled to read
    it as 1), opens past a bias of -1/2 and writes twice the token's :func:`slot_targets`."""
    subjects, relations = task.subjects, task.relations
    groups = slot_groups(subjects, subjects, relations, HEAD_DIM)
    units = memory_units(with_unit, subjects, relations)
    model = FactTransformer(task.vocabulary, task.answers, d, len(groups), HEAD_DIM, len(units), generator)
    _attend_by_hand(model, groups, model.embed)
    keys = model.embed[units]
    with torch.no_grad():
        model.hidden.copy_(keys / (keys * keys).sum(dim=1, keepdim=True))
        model.bias.fill_(-0.5)
        model.readout.copy_(2 * slot_targets(task, model.unembed)[units])
    return model


def every_fact(task: FactRecall, draws: int, generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    """``draws`` sequences of every fact, subject-major: (tokens, subject, answer)."""
    subject = torch.arange(task.subjects).repeat_interleave(task.relations * draws)
    relation = torch.arange(task.relations).repeat_interleave(draws).repeat(task.subjects)
    answer = torch.from_numpy(task.facts)[subject, relation]
    return task.sequences(subject, relation, generator), subject, answer


def fact_build(config: dict[str, Any], ctx: RunContext) -> FactBuildData:
    """The layer set by hand (:func:`fact_layer_by_hand`) at dimensions around the one the theory asks for, every
    fact read on `build_draws` sequences; and at that dimension with slots for only half the subjects (H d_h short
    of S + R), whose other subjects' answers are split into right, within the relation, and outside it. The same for
    the layer whose MLP holds the facts (:func:`fact_mlp_by_hand`), with units for half the subjects (m short of
    S + R)."""
    task = fact_task(config)
    S, R, A = task.subjects, task.relations, task.per_relation
    d_built = theory.built_dim(S, R, A)
    dims = sorted({max(1, round(d_built * k)) for k in BUILT_SCALES})
    draws = config["build_draws"]
    draw = torch.Generator().manual_seed(member_seed("fact build", config["seed"], S, R, A))
    tokens, subject, answer = every_fact(task, draws, draw)

    def answers(d: int, with_slot: int, build: Callable = fact_layer_by_hand) -> Tensor:
        start = torch.Generator().manual_seed(member_seed("fact build embeddings", config["seed"], d))
        layer = build(task, d, with_slot, start).to(ctx.device)
        per_sequence = task.length * d + layer.query.shape[0] * (d + task.length)
        with torch.no_grad():
            chunks = tokens.split(max(1, CHUNK_FLOATS // per_sequence))
            return torch.cat([layer(chunk.to(ctx.device)).argmax(dim=-1).cpu() for chunk in chunks])

    def recalled(d: int, build: Callable) -> float:
        return float((answers(d, S, build) == answer).reshape(S * R, draws).all(dim=1).float().mean())

    covered = S // 2
    given = answers(d_built, covered)
    held = subject < covered
    mlp_dim = theory.built_dim(S, R, A, extra=theory.MLP_GAP_EXTRA)
    mlp_dims = sorted({max(1, round(mlp_dim * k)) for k in BUILT_SCALES})
    mlp_given = answers(mlp_dim, covered, fact_mlp_by_hand)
    data: FactBuildData = {
        "subjects": S,
        "relations": R,
        "per_relation": A,
        "heads": len(slot_groups(S, S, R, HEAD_DIM)),
        "built_dim": d_built,
        "dims": dims,
        "draws": draws,
        "recalled": [recalled(d, fact_layer_by_hand) for d in dims],
        "covered": covered,
        "covered_right": float((given == answer)[held].float().mean()) if covered else math.nan,
        "uncovered_right": float((given == answer)[~held].float().mean()),
        "uncovered_in_relation": float((given // A == answer // A)[~held].float().mean()),
        "mlp_dim": mlp_dim,
        "mlp_dims": mlp_dims,
        "mlp_recalled": [recalled(d, fact_mlp_by_hand) for d in mlp_dims],
        "mlp_units": len(memory_units(S, S, R)),
        "mlp_covered_right": float((mlp_given == answer)[held].float().mean()) if covered else math.nan,
        "mlp_uncovered_right": float((mlp_given == answer)[~held].float().mean()),
    }  # type: ignore[typeddict-item]
    return data


# ---------------------------------------------------------------- the hallucination stage
class HallucinationData(TypedDict):
    levels: dict[str, float]  # the four predictors' losses (theory.fact_levels)
    eval_steps: list[int]
    parts: list[list[list[float]]]  # seed x evaluation x (loss, relation part, subject part), held out
    still_descending: list[bool]  # per seed


def fact_task(config: dict[str, Any]) -> FactRecall:
    """The factual recall task of the chapter's values."""
    return FactRecall(
        config["subjects"],
        config["relations"],
        config["per_relation"],
        config["noise"],
        config["fact_T"],
        config["seed"],
    )


def loss_parts(
    model: LinearAttentionRecall, held_out: tuple[torch.Tensor, torch.Tensor], per_relation: int
) -> list[float]:
    """The held-out loss and its two parts: -log of the mass on the relation's answers (the relation part) plus
    -log of the answer's share of that mass (the subject part)."""
    tokens, answers = held_out
    with torch.no_grad():
        log_p = F.log_softmax(model(tokens).double(), dim=-1)
    groups = log_p.reshape(len(answers), -1, per_relation)
    relation = answers // per_relation
    on_relation = torch.logsumexp(groups[torch.arange(len(answers)), relation], dim=-1)
    answer = log_p[torch.arange(len(answers)), answers]
    return [float(-answer.mean()), float(-on_relation.mean()), float(-(answer - on_relation).mean())]


def fact_schedule(config: dict[str, Any]) -> TrainConfig:
    """Plain gradient steps of constant size on fresh sequences, as the authors' notebook takes them."""
    steps = config["fact_steps"]
    return TrainConfig(
        steps=steps,
        batch_size=config["fact_batch"],
        lr=config["fact_lr"],
        schedule="constant",
        optimizer="sgd",
        eval_every=max(1, steps // EVALUATIONS),
        eval_size=256,
    )


def hallucination(config: dict[str, Any], ctx: RunContext) -> HallucinationData:
    """The one-layer linear-attention model trained on the facts from a small positive start, its loss split into
    the relation and the subject parts along the way."""
    task = fact_task(config)
    held_out = task.sample(PROBE_SIZE, torch.Generator().manual_seed(member_seed("facts held out", config["seed"])))
    run = train(
        lambda: LinearAttentionRecall(task.vocabulary, task.answers, config["fact_init"]),
        task,
        fact_schedule(config),
        ctx.seeds,
        ctx.device,
        progress=ctx.progress,
        probe=lambda model: loss_parts(model, held_out, task.per_relation),
    )
    parts = np.asarray(run.probes)
    data: HallucinationData = {
        "levels": theory.fact_levels(task.facts, task.per_relation),
        "eval_steps": run.eval_steps,
        "parts": parts,
        "still_descending": list(still_descending(run, LOSS_NOISE, curve=parts[..., 0])),
    }  # type: ignore[typeddict-item]
    return data


# ---------------------------------------------------------------- distributional associations against in-context recall
class DistributionalData(TypedDict):
    tokens: list[int]  # vocabulary sizes N, one ensemble each
    noise_p: float  # the noise token's probability after the trigger (noisy_p)
    noise_token: list[int]  # per N: the token that follows the trigger with probability ``noisy_p``
    recall_positions: list[int]  # per N: clean held-out positions scored (a trigger seen before)
    recalls_per_sequence: list[float]  # per N: the scored recalls in a training sequence, on average
    eval_steps: list[int]  # the trainer's step index of each evaluation: after eval_steps + 1 updates
    batch: int  # sequences per step
    curves: list[list[list[list[float]]]]  # N x seed x evaluation x (p of the noise token, of the answer; the same
    # with layer 2's MLP zeroed), held out
    ablations: dict[str, list[list[list[float]]]]  # "full" / "no_mlp_1" / "no_mlp_2" -> N x seed x (p of the noise
    # token, p of the answer, share of recalls with the answer on top)
    flipped: list[list[float]]  # N x seed: of the recalls where the full model puts the noise token on top, the share
    # where the answer is on top with layer 2's MLP zeroed (NaN: no such recall)
    still_descending: list[list[bool]]  # N x seed: the answer's probability still rising when the budget ran out


MLP_ABLATIONS = {"full": None, "no_mlp_1": 0, "no_mlp_2": 1}  # which block's MLP is zeroed (Chen et al. truncate it)
NOISY_HELD_OUT_TOKENS = 4096  # tokens of clean held-out sequences per N (128 sequences at T = 32: a thousand or more
# recall positions at the chapter's sizes, since they grow with T), so that an evaluation costs about as much at any T
NOISY_LOSS_SIZE = 32  # sequences of the trainer's own held-out loss, which no row reads: the probes on the clean
# sequences are what is judged, and an evaluation every few steps should cost little beside them
NOISY_EARLY = 32  # updates evaluated one by one: the noise token's association forms within them in every pilot
NOISY_COUNTED = 512  # training sequences drawn (a fixed stream) to count the scored recalls per sequence


def noisy_task(config: dict[str, Any], tokens: int) -> TriggerTask:
    """Chen et al.'s noisy in-context recall at ``tokens`` tokens: one trigger (the bigram's most frequent token), its
    sequence's answer after it, or the noise token with probability ``noisy_p``; the loss scores the trigger's second
    and later occurrences only, as their code does."""
    return TriggerTask(
        tokens,
        1,
        config["noisy_T"],
        NOISY_CONCENTRATION,
        config["seed"],
        scored="recall",
        zipf=NOISY_ZIPF,
        choice="frequent",
        noise=config["noisy_p"],
    )


def recalls_per_sequence(task: TriggerTask) -> float:
    """The scored recalls (the trigger's second and later occurrences) in a training sequence, on average over a fixed
    stream of :data:`NOISY_COUNTED` noisy sequences."""
    seq, triggers, _ = task.draw(NOISY_COUNTED, torch.Generator().manual_seed(member_seed("noisy recalls counted")))
    return float(task.recall_positions(seq.numpy(), triggers).sum() / NOISY_COUNTED)


def noisy_model(config: dict[str, Any], tokens: int) -> GPT:
    """Two layers of one head with an MLP each, no normalisation, embeddings and output random and held fixed (Chen
    et al.'s model)."""
    return GPT(
        GPTConfig(
            vocab_size=tokens,
            block_size=config["noisy_T"],
            n_layer=2,
            n_head=1,
            d_model=config["noisy_d"],
            tied=False,
            head_bias=False,
            frozen_embeddings=True,
        )
    )


def without_mlp(model: GPT, block: int | None) -> GPT:
    """A copy of ``model`` whose ``block``'s MLP writes nothing (its weights zeroed: Chen et al.'s truncation to rank
    0); ``model`` itself where ``block`` is None."""
    if block is None:
        return model
    ablated = copy.deepcopy(model)
    with torch.no_grad():
        for weight in ablated.blocks[block].mlp.parameters():
            weight.zero_()
    return ablated


def recall_reads(model: nn.Module, inputs: Tensor, answers: Tensor, mask: Tensor, noise_token: int) -> list[float]:
    """At the clean held-out recall positions: the mean probability of the noise token, of the answer, and the share
    of positions whose top prediction is the answer."""
    with torch.no_grad():
        p = torch.softmax(model(inputs).double(), dim=-1)[mask]
    answer = answers[mask]
    on_answer = p.gather(1, answer[:, None])[:, 0]
    return [float(p[:, noise_token].mean()), float(on_answer.mean()), float((p.argmax(-1) == answer).double().mean())]


def flipped_to_answer(model: GPT, inputs: Tensor, answers: Tensor, mask: Tensor, noise_token: int) -> float:
    """Of the clean held-out recalls where ``model`` puts the noise token on top, the share where it puts the answer on
    top once layer 2's MLP is zeroed: the prediction changed from the bigram to the in-context answer."""
    with torch.no_grad():
        full = model(inputs)[mask].argmax(-1)
        ablated = without_mlp(model, 1)(inputs)[mask].argmax(-1)
    on_noise = full == noise_token
    if not bool(on_noise.any()):
        return math.nan
    return float((ablated[on_noise] == answers[mask][on_noise]).double().mean())


def recall_curves(model: GPT, inputs: Tensor, answers: Tensor, mask: Tensor, noise_token: int) -> list[float]:
    """What each evaluation reads: the noise token's and the answer's mean probability at the
    recall positions, with layer 2's MLP and without it, so that the MLP's own share is seen as it forms."""
    full = recall_reads(model, inputs, answers, mask, noise_token)[:2]
    return full + recall_reads(without_mlp(model, 1), inputs, answers, mask, noise_token)[:2]


NOISY_MOMENTUM = 0.9  # Chen et al.'s SGD momentum


def noisy_schedule(config: dict[str, Any]) -> TrainConfig:
    """AdamW or SGD with momentum (``noisy_optimizer``) at a constant step size, no weight decay; an evaluation after
    each of the first :data:`NOISY_EARLY` updates (the noise token's association forms within them) and every
    ``noisy_every`` steps after."""
    sgd = config["noisy_optimizer"] == "sgd"
    return TrainConfig(
        steps=config["noisy_steps"],
        batch_size=config["noisy_batch"],
        lr=config["noisy_lr"],
        weight_decay=0.0,
        schedule="constant",
        eval_every=config["noisy_every"],
        eval_size=NOISY_LOSS_SIZE,
        eval_first=NOISY_EARLY,
        optimizer="sgd" if sgd else "adamw",
        momentum=NOISY_MOMENTUM if sgd else 0.0,
    )


def distributional(config: dict[str, Any], ctx: RunContext) -> DistributionalData:
    """Chen et al.'s two-layer transformers trained on noisy in-context recall, one ensemble per vocabulary size:
    along training, the probability they give the noise token and the sequence's answer where a trigger comes back
    (clean held-out sequences), with and without layer 2's MLP; at the end, the same with either layer's MLP zeroed."""
    data: DistributionalData = {
        "tokens": int_list(config["noisy_tokens"]),
        "noise_p": config["noisy_p"],
        "noise_token": [],
        "recall_positions": [],
        "recalls_per_sequence": [],
        "eval_steps": [],
        "batch": config["noisy_batch"],
        "curves": [],
        "ablations": {name: [] for name in MLP_ABLATIONS},
        "flipped": [],
        "still_descending": [],
    }
    for tokens in data["tokens"]:
        task = noisy_task(config, tokens)
        held_out = torch.Generator().manual_seed(member_seed("noisy recall held out", tokens, config["seed"]))
        seq = task.draw(max(1, NOISY_HELD_OUT_TOKENS // config["noisy_T"]), held_out, noisy=False)[0]
        inputs, answers = seq[:, :-1], seq[:, 1:]
        mask = torch.from_numpy(task.recall_positions(seq.numpy()))
        noise_token = task.noise_token
        assert noise_token is not None
        run = train(
            lambda tokens=tokens: noisy_model(config, tokens),
            task,
            noisy_schedule(config),
            list(range(config["noisy_seeds"])),
            ctx.device,
            progress=ctx.progress,
            probe=partial(recall_curves, inputs=inputs, answers=answers, mask=mask, noise_token=noise_token),
        )
        curves = np.asarray(run.probes)
        data["noise_token"].append(noise_token)
        data["recall_positions"].append(int(mask.sum()))
        data["recalls_per_sequence"].append(recalls_per_sequence(task))
        data["eval_steps"] = run.eval_steps.tolist()
        data["curves"].append(curves.tolist())
        for name, block in MLP_ABLATIONS.items():
            data["ablations"][name].append(
                [recall_reads(without_mlp(model, block), inputs, answers, mask, noise_token) for model in run.models]
            )
        data["flipped"].append([flipped_to_answer(model, inputs, answers, mask, noise_token) for model in run.models])
        data["still_descending"].append(still_descending(run, LOSS_NOISE, curve=-curves[..., 1]).tolist())
    return data
