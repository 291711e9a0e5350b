"""The one-layer chapter's sections: per section its ``TypedDict`` (which ``figures`` draws and ``judge`` reads) and
the function that computes it: Sanford et al.'s Match2 unit on every input of a small size, on random larger ones and
in float32, Match3 in one layer of width M, n-gram language models, PARITY and k hops as constructions, all checked
exactly; and one section that trains: one-layer transformers on Match2 and Match3."""

from __future__ import annotations

import math
from functools import partial
from typing import Any, TypedDict

import numpy as np
import torch

from ...curves import still_descending
from ...data.averaging import SparseAveraging
from ...data.matching import TASKS, Matching
from ...model import GPT, GPTConfig, SelfAttentionUnit
from ...profiles import float_list, int_list
from ...runtime import member_seed
from ...sections import RunContext
from ...theory import onelayer as theory
from ...trainer import TrainConfig, TrainResult
from ...workers import TrainRequest, train_each

ROWS_AT_ONCE = 2**21  # attention weights held at once while checking the unit: a chunk of inputs of (N + 1)^2 each
FLOAT32_BITS = 24  # significant bits of a float32


# ---------------------------------------------------------------- Match2
class MatchCheck(TypedDict):
    M: int
    N: int
    c: float
    inputs: int
    paired: float  # share of positions whose token has a partner
    wrong: int  # positions where psi of the unit's output is not Match2
    stray_excess: float  # the largest log-weight on a key that is neither a partner nor the blank, less our bound
    # -2 c sin^2(pi / M) (nats; at most the round-off allowance where the bound holds)
    stray_allowance: float  # float64 round-off of the scores, 16 c 2^-53 (a score sums three products of size <= c)


class PrecisionData(TypedDict):
    N: int
    M: list[int]
    score_error: list[float]  # c 2^-24: a float32 score's rounding error is of this order
    wrong_share: list[float]  # share of positions wrong with the scores in float32


class MatchData(TypedDict):
    every: MatchCheck  # every input of [M]^N
    random: list[MatchCheck]  # random inputs at larger N, M = N^2, half the odd positions given a partner
    precision: PrecisionData
    example: list[int]  # one input, drawn for the figure of the weights
    example_weights: list[list[float]]  # its (N + 1) x (N + 1) attention weights


def strays(X: np.ndarray, M: int) -> np.ndarray:
    """Which keys of ``X`` with the blank appended are strays for each query, ``(B, N, N + 1)``: neither a partner of
    it (``x_i + x_j = 0 mod M``) nor the blank."""
    partner = (X[:, :, None] + X[:, None, :]) % M == 0
    return np.concatenate([~partner, np.zeros((*partner.shape[:2], 1), dtype=bool)], axis=2)


def check_unit(X: np.ndarray, M: int, c: float) -> MatchCheck:
    """The unit at inverse temperature ``c`` on every row of ``X``: its wrong outputs after psi, and its largest
    log-weight on a stray key against our bound, in chunks."""
    N = X.shape[1]
    unit, wrong, stray, paired = theory.match2_unit(M, c), 0, -np.inf, 0
    rows = max(1, ROWS_AT_ONCE // (N + 1) ** 2)
    for start in range(0, len(X), rows):
        chunk = X[start : start + rows]
        tokens = theory.with_blank(chunk, M)
        log_weights = unit.log_weights(tokens)
        out = (np.exp(log_weights) @ (unit.phi[tokens] @ unit.value))[..., 0]
        truth = theory.match2(chunk, M)
        wrong += int((theory.match2_output(out[:, :N]) != truth).sum())
        paired += int(truth.sum())
        stray = max(stray, float(np.where(strays(chunk, M), log_weights[:, :N], -np.inf).max()))
    return {
        "M": M,
        "N": N,
        "c": c,
        "inputs": len(X),
        "paired": paired / X.size,
        "wrong": wrong,
        "stray_excess": stray - theory.log_stray_bound(M, c),
        "stray_allowance": 16 * c * 2.0**-53,
    }


def random_inputs(N: int, M: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` inputs in ``[0, M)^N``, uniform, then each odd position given the partner of the one before it with
    odds one half (uniform tokens at ``M = N^2`` seldom have one)."""
    X = rng.integers(0, M, size=(count, N))
    give = rng.random((count, N // 2)) < 0.5
    X[:, 1 : 2 * (N // 2) : 2] = np.where(give, (-X[:, 0 : 2 * (N // 2) : 2]) % M, X[:, 1 : 2 * (N // 2) : 2])
    return X


def float32_wrong_share(X: np.ndarray, M: int) -> float:
    """The share of positions the unit gets wrong when its embedding, maps and scores are float32 (the softmax and
    what follows in float64, so that only the scores' precision changes), in chunks."""
    N = X.shape[1]
    unit = theory.match2_unit(M, theory.match2_scale(M, N))
    query, key = unit.query.astype(np.float32), unit.key.astype(np.float32)
    wrong = 0
    rows = max(1, ROWS_AT_ONCE // (N + 1) ** 2)
    for start in range(0, len(X), rows):
        chunk = X[start : start + rows]
        x = unit.phi[theory.with_blank(chunk, M)].astype(np.float32)
        scores = ((x @ query) @ (x @ key).transpose(0, 2, 1)).astype(np.float64)
        weights = np.exp(scores - scores.max(axis=2, keepdims=True))
        weights /= weights.sum(axis=2, keepdims=True)
        out = (weights @ (x.astype(np.float64) @ unit.value))[..., 0]
        wrong += int((theory.match2_output(out[:, :N]) != theory.match2(chunk, M)).sum())
    return wrong / X.size


def match2(config: dict[str, Any], ctx: RunContext) -> MatchData:
    """The unit on every input of ``[match_M]^match_N``, on random inputs at each of ``match_random_N`` (with
    ``M = N^2``), and with float32 scores at each of ``precision_M``."""
    M, N = config["match_M"], config["match_N"]
    every = check_unit(theory.every_input(M, N), M, theory.match2_scale(M, N))
    count = config["match_random_inputs"]
    random = []
    for n in int_list(config["match_random_N"]):
        X = random_inputs(n, n**2, count, np.random.default_rng(member_seed("match2", n, config["seed"])))
        random.append(check_unit(X, n**2, theory.match2_scale(n**2, n)))
    n_precision, wrong_share, score_error = config["precision_N"], [], []
    for m in int_list(config["precision_M"]):
        X = random_inputs(n_precision, m, count, np.random.default_rng(member_seed("precision", m, config["seed"])))
        wrong_share.append(float32_wrong_share(X, m))
        score_error.append(theory.match2_scale(m, n_precision) * 2.0**-FLOAT32_BITS)
    example = random_inputs(8, 10, 1, np.random.default_rng(member_seed("example", config["seed"])))
    _, weights = theory.match2_unit(10, theory.match2_scale(10, 8))(theory.with_blank(example, 10))
    return {
        "every": every,
        "random": random,
        "precision": {
            "N": n_precision,
            "M": int_list(config["precision_M"]),
            "score_error": score_error,
            "wrong_share": wrong_share,
        },
        "example": example[0].tolist(),
        "example_weights": weights[0].tolist(),
    }


# ---------------------------------------------------------------- n-gram language models
class OrderCheck(TypedDict):
    n: int
    shape: str  # "heads": n - 1 heads in one layer (Thm 3.1); "layers": one head in each of n - 1 layers (Thm 3.2)
    histories: int  # the MLP's units, one per history a padded string can show
    log_prob_range: float  # Lambda, the largest |log p| of the model's laws
    hard_error: float  # max |log p_model - log p| with hard attention, over every string and position
    soft_error: list[float]  # the same with softmax heads, per scale
    bound: list[float]  # our bound at each scale (inf where a slot may miss half its token or more)
    scale_needed: dict[str, float]  # the scale our bound asks for each error, keyed by the error


class OneHeadCheck(TypedDict):
    n: int
    units: int  # the MLP's units: a history and a residue mod n - 1 each
    error: float  # max |log p_model - log p| with one sparse head, over every string and position


class NGramData(TypedDict):
    symbols: int
    length: int
    strings: int
    scales: list[float]
    orders: list[OrderCheck]  # per order, each shape
    one_head: list[OneHeadCheck]  # per order: one layer of one sparse head (Thm 3.3's shape)


ERRORS_SHOWN = (1e-3, 1e-6)  # the errors whose scale the page tabulates


def worst_error(model: theory.NGram, length: int, beta: float | None, gap: float = 1.0, shape: str = "heads") -> float:
    """max |log p_model - log p| over every position of every string of length 0 to ``length``, a length at a time."""
    worst = 0.0
    for size in range(length + 1):
        strings = theory.strings_of_length(model.symbols, size)
        got = theory.ngram_transformer(model, theory.padded(strings, model), beta, gap, shape)
        worst = max(worst, float(np.abs(got - np.log(theory.ngram_targets(model, strings))).max()))
    return worst


def check_one_head(n: int, config: dict[str, Any], curvature: float | None = None) -> OneHeadCheck:
    """The order-n model of :func:`check_order` against one layer of one sparse head, on every string (the head's
    curvature ``curvature``, or the construction's: the tests' counterfactual)."""
    symbols = config["ngram_symbols"]
    model = theory.random_ngram(n, symbols, np.random.default_rng(member_seed("ngram", n, symbols, config["seed"])))
    worst = 0.0
    for size in range(config["ngram_length"] + 1):
        strings = theory.strings_of_length(symbols, size)
        got = theory.ngram_one_head(model, theory.padded(strings, model), curvature)
        worst = max(worst, float(np.abs(got - np.log(theory.ngram_targets(model, strings))).max()))
    return {"n": n, "units": len(model.histories) * (n - 1), "error": worst}


def string_count(symbols: int, length: int) -> int:
    """How many strings have length 0 to ``length``."""
    return sum(symbols**size for size in range(length + 1))


def check_order(n: int, shape: str, config: dict[str, Any], gap: float = 1.0) -> OrderCheck:
    """One random n-gram LM of order ``n`` against the transformer of ``shape``, hard and at every scale (positional
    scores ``gap`` times the construction's: the tests' counterfactual)."""
    symbols, scales = config["ngram_symbols"], float_list(config["ngram_scales"])
    model = theory.random_ngram(n, symbols, np.random.default_rng(member_seed("ngram", n, symbols, config["seed"])))
    length = config["ngram_length"]
    return {
        "n": n,
        "shape": shape,
        "histories": len(model.histories),
        "log_prob_range": float(np.abs(np.log(model.laws)).max()),
        "hard_error": worst_error(model, length, None, gap, shape),
        "soft_error": [worst_error(model, length, beta, gap, shape) for beta in scales],
        "bound": [theory.ngram_error_bound(model, beta, shape) for beta in scales],
        "scale_needed": {f"{e:g}": theory.ngram_scale_needed(model, e, shape) for e in ERRORS_SHOWN},
    }


def ngram(config: dict[str, Any], ctx: RunContext) -> NGramData:
    """Per order, a random n-gram LM (Dirichlet(1) laws) against one layer of n - 1 heads and, from n = 3 on, against
    n - 1 layers of one head and against one layer of one sparse head, on every string up to ``ngram_length``."""
    return {
        "symbols": config["ngram_symbols"],
        "length": config["ngram_length"],
        "strings": string_count(config["ngram_symbols"], config["ngram_length"]),
        "scales": float_list(config["ngram_scales"]),
        "orders": [
            check_order(n, shape, config)
            for n in int_list(config["ngram_orders"])
            for shape in theory.SHAPES
            if n > 2 or shape == "heads"  # at n = 2 both shapes are one layer of one head
        ],
        "one_head": [check_one_head(n, config) for n in int_list(config["ngram_orders"]) if n > 2],
    }


# ---------------------------------------------------------------- PARITY with softmax attention
class ParityData(TypedDict):
    lengths: list[int]
    strings: list[int]  # every bit string of each length is read
    hard_wrong: list[int]  # per length: wrong decisions with hard attention in layer 2
    scaled: float  # b: layer 2 at scale beta = b N^2 (N = n + 1 positions)
    scaled_wrong: list[int]  # per length: wrong decisions at that scale
    scaled_margin: list[float]  # per length: the least |output| at that scale
    scaled_deviation: list[float]  # per length: the largest |output - (-1)^k| at that scale
    margin_bound: float  # our bound 1 - 2 delta(b), the same at every length
    fixed_scales: list[float]  # beta held fixed while the length grows
    fixed_wrong: list[list[float]]  # per fixed scale, per length: the share of strings decided wrongly
    fixed_covered: list[list[bool]]  # per fixed scale, per length: whether our bound covers it (beta / N^2 above
    # about 1.40)


def parity(config: dict[str, Any], ctx: RunContext) -> ParityData:
    """The construction on every bit string of each length: hard, at a scale that grows as N^2, and at fixed scales
    (where our bound stops covering the longer strings)."""
    lengths, b = int_list(config["parity_lengths"]), config["parity_scale"]
    fixed = float_list(config["parity_fixed_scales"])
    strings = [theory.every_string(n) for n in lengths]
    truth = [bits.sum(axis=1) % 2 == 1 for bits in strings]

    def wrong(output: np.ndarray, odd: np.ndarray) -> int:
        return int(np.where(odd, output >= 0, output <= 0).sum())  # odd below 0, even above; 0 decides nothing

    scaled = [theory.parity_output(bits, b * (n + 1) ** 2) for n, bits in zip(lengths, strings)]
    return {
        "lengths": lengths,
        "strings": [len(bits) for bits in strings],
        "hard_wrong": [wrong(theory.parity_output(bits, None), odd) for bits, odd in zip(strings, truth)],
        "scaled": b,
        "scaled_wrong": [wrong(out, odd) for out, odd in zip(scaled, truth)],
        "scaled_margin": [float(np.abs(out).min()) for out in scaled],
        "scaled_deviation": [
            float(np.abs(out - (-1.0) ** bits.sum(axis=1)).max()) for out, bits in zip(scaled, strings)
        ],
        "margin_bound": theory.parity_margin_bound(b),
        "fixed_scales": fixed,
        "fixed_wrong": [
            [wrong(theory.parity_output(bits, beta), odd) / len(bits) for bits, odd in zip(strings, truth)]
            for beta in fixed
        ],
        "fixed_covered": [[theory.parity_margin_bound(beta / (n + 1) ** 2) > 0 for n in lengths] for beta in fixed],
    }


# ---------------------------------------------------------------- k-hop composition in context
class KhopData(TypedDict):
    V: int
    inputs: int  # every function [V] -> [V] with every start
    ks: list[int]
    layers: list[int]  # per k: the layers our construction uses, the bits of k
    wrong: list[int]  # per k: wrong answers with those layers
    fewer_right: list[float]  # per k: the share still right with one layer fewer


def khop(config: dict[str, Any], ctx: RunContext) -> KhopData:
    """Pointer doubling for k = 1 .. khop_max_k hops on every function of ``khop_V`` symbols and every start."""
    V, ks = config["khop_V"], list(range(1, config["khop_max_k"] + 1))
    functions = theory.every_function(V)
    tables, starts = np.repeat(functions, V, axis=0), np.tile(np.arange(V), len(functions))
    truth = {k: theory.khop_truth(tables, starts, k) for k in ks}
    return {
        "V": V,
        "inputs": len(tables),
        "ks": ks,
        "layers": [theory.hop_layers(k) for k in ks],
        "wrong": [int((theory.khop_answer(tables, starts, k) != truth[k]).sum()) for k in ks],
        "fewer_right": [
            float((theory.khop_answer(tables, starts, k, theory.hop_layers(k) - 1) == truth[k]).mean()) for k in ks
        ],
    }


# ---------------------------------------------------------------- Match3 in one layer of width M
class Match3Check(TypedDict):
    M: int
    N: int
    inputs: int
    positive: float  # share of positions where Match3 is 1
    wrong: int  # positions where the layer's output is not Match3


class Match3Data(TypedDict):
    every: Match3Check  # every input of [M]^N
    random: list[Match3Check]  # uniform random inputs at larger N, M = N^2


def check_match3(X: np.ndarray, M: int, clip: bool = True) -> Match3Check:
    """Our width-M layer against Match3 on every row of ``X`` (``clip=False``: counts for presence, the tests'
    counterfactual)."""
    truth = theory.match3(X, M)
    return {
        "M": M,
        "N": X.shape[1],
        "inputs": len(X),
        "positive": float(truth.mean()),
        "wrong": int((theory.match3_layer(X, M, clip) != truth).sum()),
    }


def match3(config: dict[str, Any], ctx: RunContext) -> Match3Data:
    """The layer on every input of ``[match3_M]^match3_N`` and on uniform random inputs at each of
    ``match3_random_N`` with ``M = N^2`` (at the theorem's smallest M, N + 1, almost every position is matched)."""
    M, N, count = config["match3_M"], config["match3_N"], config["match3_random_inputs"]
    random = []
    for n in int_list(config["match3_random_N"]):
        X = np.random.default_rng(member_seed("match3", n, config["seed"])).integers(0, n**2, size=(count, n))
        random.append(check_match3(X, n**2))
    return {"every": check_match3(theory.every_input(M, N), M), "random": random}


# ---------------------------------------------------------------- Match2 and Match3 trained
HELD_OUT = 4096  # held-out inputs per task and N: a balanced error of 0.05 is then measured to about +-0.01
LOSS_NOISE = 1e-3  # a held-out loss that moved less than this has hardly started
EVALUATIONS = 40  # held-out evaluations of each run
MIN_EVAL_EVERY = (
    10  # steps between them at least: a short run (a unit test, a reader's draw) is not evaluated at every step
)


class PairRun(TypedDict):
    depth: int
    width: int
    N: int
    M: int  # where about half the positions of Match3 are positive; Match2 reads inputs of the same law
    positive: list[float]  # per task: share of held-out positions matched
    balanced_error: list[list[float]]  # task x seed: mean of the error rates on matched and unmatched positions
    eval_steps: list[int]
    eval_loss: list[list[list[float]]]  # task x seed x evaluation
    still_descending: list[list[bool]]  # task x seed


class LearningData(TypedDict):
    N: list[int]
    widths: list[int]
    depths: list[int]
    runs: list[PairRun]  # one layer at every width and N; deeper models at the smallest width
    solved: float  # the run's threshold, for the figure (the rows read the config's)


def learning_model(N: int, M: int, depth: int, width: int) -> GPTConfig:
    """A transformer of ``depth`` layers of one head of width ``width`` that reads the whole input (no causal mask, no
    positions: Match2 and Match3 do not depend on order) and gives two logits per position."""
    return GPTConfig(
        vocab_size=M + 1,
        block_size=N + 1,
        n_layer=depth,
        d_model=width,
        positional="none",
        tied=False,
        n_outputs=2,
        causal=False,
        layer_norm=True,
    )


def adamw_schedule(steps: int, batch_size: int, lr: float) -> TrainConfig:
    """AdamW on fresh inputs, warm-up then cosine decay, no weight decay, about ``EVALUATIONS`` evaluations."""
    return TrainConfig(
        steps=steps,
        batch_size=batch_size,
        lr=lr,
        weight_decay=0.0,
        warmup=min(100, steps // 10),
        eval_every=max(MIN_EVAL_EVERY, steps // EVALUATIONS),
    )


def learning_schedule(config: dict[str, Any]) -> TrainConfig:
    """The Match2 and Match3 runs' schedule."""
    return adamw_schedule(config["learn_steps"], config["learn_batch"], config["learn_lr"])


def binary_entropy(p: float) -> float:
    """The loss (nats) of the best constant answer where a share ``p`` of the positions is matched."""
    return float(-sum(q * np.log(q) for q in (p, 1 - p) if q > 0))


def balanced_error(model: torch.nn.Module, held_out: tuple[torch.Tensor, torch.Tensor]) -> float:
    """The mean of the error rates on matched and on unmatched positions (0.5 for any constant answer), or the one
    class's error where the held-out set has only one."""
    tokens, targets = held_out
    with torch.no_grad():
        predicted = model(tokens).argmax(dim=-1)
    scored = targets >= 0
    truth, guess = targets[scored], predicted[scored]
    rates = [float((guess[truth == label] != label).float().mean()) for label in (0, 1) if (truth == label).any()]
    return float(np.mean(rates))


def pair_request(N: int, depth: int, width: int, config: dict[str, Any], ctx: RunContext) -> TrainRequest:
    """Both tasks at one N, depth and width, the run's seeds of each, as one ensemble's training call."""
    seeds = list(ctx.seeds)
    tasks = [Matching(task, N, config["learn_M"]) for task in TASKS]
    return TrainRequest(
        partial(GPT, learning_model(N, config["learn_M"], depth, width)),
        [t for t in tasks for _ in seeds],
        learning_schedule(config),
        seeds * len(tasks),
        ctx.device,
    )


def pair_run(N: int, depth: int, width: int, config: dict[str, Any], n_seeds: int, run: TrainResult) -> PairRun:
    """One trained pair's record: each member's balanced error on held-out inputs, its curve and whether it moved."""
    M = config["learn_M"]
    tasks = [Matching(task, N, M) for task in TASKS]
    held = [
        t.sample(HELD_OUT, torch.Generator().manual_seed(member_seed("matching", t.task, N, config["seed"])))
        for t in tasks
    ]
    k, shape = n_seeds, (len(tasks), n_seeds)
    positive = [float(y[y >= 0].float().mean()) for _, y in held]
    # a loss that has not come below the best constant answer's (the entropy of the matched share) has not started
    constant = np.repeat([binary_entropy(p) for p in positive], k)[:, None]
    moving = still_descending(run, LOSS_NOISE, curve=np.minimum(run.eval_loss, constant))
    return {
        "depth": depth,
        "width": width,
        "N": N,
        "M": M,
        "positive": positive,
        "balanced_error": [
            [balanced_error(run.models[i * k + j], held[i]) for j in range(k)] for i in range(len(tasks))
        ],
        "eval_steps": run.eval_steps.tolist(),
        "eval_loss": run.eval_loss.reshape(*shape, -1).tolist(),
        "still_descending": moving.reshape(shape).tolist(),
    }


def learning(config: dict[str, Any], ctx: RunContext) -> LearningData:
    """One layer at each width and N trained on Match2 and on Match3 over inputs of one law; deeper models at the
    smallest width. Each (shape, N) is one ensemble; with ``--workers`` they train side by side."""
    sizes, widths, depths = (int_list(config[key]) for key in ("learn_N", "learn_widths", "learn_depths"))
    shapes = [(depth, width) for depth in depths for width in widths if depth == 1 or width == min(widths)]
    pairs = [(N, depth, width) for depth, width in shapes for N in sizes]
    trained = train_each([pair_request(*pair, config, ctx) for pair in pairs], ctx.workers, ctx.progress)
    return {
        "N": sizes,
        "widths": widths,
        "depths": depths,
        "runs": [pair_run(*pair, config, len(ctx.seeds), run) for pair, run in zip(pairs, trained)],
        "solved": config["solved"],
    }


# ---------------------------------------------------------------- q-sparse averaging
class QSACheck(TypedDict):
    N: int
    q: int
    width: int  # m' = ceil(factor q ln N), the keys' width (the unit's embedding is d' + 2 m' wide: value, query, key)
    alpha: float
    inputs: int
    queries: int  # positions checked per input
    error: float  # the largest ||f(X)_i - qSA(X)_i|| over the checked positions of every input
    off_score: float  # the largest |<u_j, w_{y_i}>| off the support, over every query
    bound: float  # our bound at that off-support score (values in the unit ball)


class QSALaw(TypedDict):
    N: int
    q: int
    factors: list[float]
    off_score: list[float]  # per factor: the largest off-support score over the drawn supports, keys of that width


class DisjointnessRun(TypedDict):
    q: int
    pairs: int  # 4^q: every pair (a, b) of q-bit vectors
    qsa_wrong: int  # pairs where "qSA(X)_{2q+1} = -e_1" disagrees with DISJ(a, b) = 0
    gap: float  # over the pairs whose sets meet, the least first coordinate of qSA(X)_{2q+1} above -1
    width: int  # keys of the protocol's unit, qsa_factor q ln N at N = 2q + 1
    bits: int  # mantissa bits of each coordinate of Alice's message
    alpha: float  # the unit's scale, for eps = 1/(2q)
    protocol_wrong: int  # pairs Bob misanswers
    protocol_error: float  # the largest |f(X)_{2q+1} - qSA(X)_{2q+1}| of the protocol's unit
    off_score: float  # the largest |<u_j, w_y>| off Alice's set, over her sets (nan where she has no query)
    shift: float  # the most her rounding moves a score alpha <u_j, w_y>


class QSAData(TypedDict):
    eps: float
    checks: list[QSACheck]
    law: list[QSALaw]
    disjointness: list[DisjointnessRun]


def qsa_input(N: int, q: int, dim: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One input of qSA: values uniform in the unit ball of R^dim, and for each position q distinct positions."""
    Z = rng.standard_normal((N, dim))
    Z *= rng.random((N, 1)) ** (1 / dim) / np.linalg.norm(Z, axis=1, keepdims=True)
    return Z, np.argsort(rng.random((N, N)), axis=1)[:, :q]


def keys_width(N: int, q: int, factor: float) -> int:
    """The keys' width ``ceil(factor q ln N)``: the theorem's order q log N with our constant."""
    return math.ceil(factor * q * math.log(N))


def check_qsa(N: int, q: int, config: dict[str, Any]) -> QSACheck:
    """The proof's unit, with keys of width ``qsa_factor q ln N`` drawn once, at ``qsa_queries`` random positions (each
    output reads every key) of each of ``qsa_inputs`` random inputs."""
    rng = np.random.default_rng(member_seed("qsa", N, q, config["seed"]))
    width, alpha = keys_width(N, q, config["qsa_factor"]), theory.qsa_scale(N, config["qsa_eps"])
    U, queries = theory.rademacher_keys(width, N, rng), min(N, config["qsa_queries"])
    error, off = 0.0, 0.0
    for _ in range(config["qsa_inputs"]):
        Z, Y = qsa_input(N, q, config["qsa_dim"], rng)
        asked = Y[rng.choice(N, queries, replace=False)]
        outputs, off_scores = theory.qsa_unit(Z, asked, U, alpha)
        error = max(error, float(np.linalg.norm(outputs - theory.qsa(Z, asked), axis=1).max()))
        off = max(off, float(off_scores.max()))
    return {
        "N": N,
        "q": q,
        "width": width,
        "alpha": alpha,
        "inputs": config["qsa_inputs"],
        "queries": queries,
        "error": error,
        "off_score": off,
        "bound": theory.qsa_error_bound(N, q, alpha, off) if off < 1 else math.inf,
    }


def qsa_law(N: int, q: int, config: dict[str, Any]) -> QSALaw:
    """The largest off-support score at each width of the grid, keys nested (the first rows of one sign matrix, so a
    wider key extends a narrower one), over ``qsa_supports`` random supports."""
    rng = np.random.default_rng(member_seed("qsa law", N, q, config["seed"]))
    factors = float_list(config["qsa_factors"])
    signs = rng.choice([-1.0, 1.0], size=(keys_width(N, q, max(factors)), N))
    Y = np.argsort(rng.random((config["qsa_supports"], N)), axis=1)[:, :q]
    scores = []
    for factor in factors:
        width = keys_width(N, q, factor)
        U = signs[:width] / math.sqrt(width)
        s = theory.support_queries(U, Y) @ U
        np.put_along_axis(s, Y, 0.0, axis=1)
        scores.append(float(np.abs(s).max()))
    return {"N": N, "q": q, "factors": factors, "off_score": scores}


def disjointness(q: int, config: dict[str, Any]) -> DisjointnessRun:
    """Sanford et al.'s lower-bound reduction on every pair of q-bit vectors: qSA at position 2q + 1 of the encoded
    input against DISJ, then the protocol through the proof's unit (keys ``qsa_factor q ln N`` wide at N = 2q + 1, the
    theorem's least N; alpha for eps = 1/(2q), the theorem's approximation) with Alice's query at ``qsa_bits`` bits."""
    a, b = theory.bit_pairs(q)
    Z, Y = theory.disjointness_inputs(a, b)
    meet = theory.intersect(a, b)
    first = Z[np.arange(len(Z))[:, None], Y].mean(axis=1)  # qSA(X)_{2q+1}'s first coordinate
    N, bits = 2 * q + 1, config["qsa_bits"]
    width, alpha = keys_width(N, q, config["qsa_factor"]), theory.qsa_scale(N, 1 / (2 * q))
    U = theory.rademacher_keys(width, N, np.random.default_rng(member_seed("qsa disjointness", q, config["seed"])))
    sets = Y[:: 2**q]  # Alice's set for each a, in the order of the pairs
    try:
        exact, sent = theory.protocol_scores(U, sets, alpha, bits)
    except np.linalg.LinAlgError:  # q keys linearly dependent: no query scores each of them 1
        exact = sent = np.full((len(sets), N), math.nan)
    answers, out = theory.protocol_answers(sent, Z, q)
    off = np.ones_like(exact, dtype=bool)
    np.put_along_axis(off, sets, False, axis=1)
    return {
        "q": q,
        "pairs": len(a),
        "qsa_wrong": int(((first == -1.0) == meet).sum()),
        "gap": float(first[meet].min() + 1) if meet.any() else math.nan,
        "width": width,
        "bits": bits,
        "alpha": alpha,
        "protocol_wrong": int((answers != meet).sum()),
        "protocol_error": float(np.abs(out - first).max()),
        "off_score": float(np.abs(exact[off]).max() / alpha),
        "shift": float(np.abs(sent - exact).max()),
    }


def qsa(config: dict[str, Any], ctx: RunContext) -> QSAData:
    """Sanford et al.'s unit for q-sparse averaging at each N and q, the off-support score against the keys' width in
    units of q ln N, and the lower bound's reduction from set disjointness with its protocol run."""
    sizes = [(N, q) for N in int_list(config["qsa_N"]) for q in int_list(config["qsa_q"])]
    return {
        "eps": config["qsa_eps"],
        "checks": [check_qsa(N, q, config) for N, q in sizes],
        "law": [qsa_law(N, q, config) for N, q in sizes],
        "disjointness": [disjointness(q, config) for q in int_list(config["qsa_disjoint_q"])],
    }


# ---------------------------------------------------------------- q-sparse averaging trained
class QSATrainData(TypedDict):
    N: int
    q: int
    dim: int
    widths: list[int]  # m of the query and key maps
    error: list[list[float]]  # width x seed: over held-out inputs, the mean of the largest ||f(X)_i - qSA(X)_i||
    support_mass: list[list[float]]  # width x seed: the attention's mean weight on the q positions each one names
    uniform_error: float  # the same error of uniform attention (every value averaged), the untrained baseline
    eval_steps: list[int]
    eval_loss: list[list[list[float]]]  # width x seed x evaluation
    still_descending: list[list[bool]]  # width x seed
    attention: list[list[float]]  # the widest unit's first seed on one held-out input, N x N
    named: list[list[int]]  # that input's sets, N x q


def qsa_train_schedule(config: dict[str, Any]) -> TrainConfig:
    """The trained qSA units' schedule, in batches of the Match2 section's size."""
    return adamw_schedule(config["qsa_train_steps"], config["learn_batch"], config["qsa_train_lr"])


def largest_errors(outputs: torch.Tensor, targets: torch.Tensor) -> np.ndarray:
    """Per input, the largest ``||f(X)_i - qSA(X)_i||`` over its positions."""
    return (outputs - targets).norm(dim=-1).amax(dim=-1).double().numpy()


def qsa_trained(config: dict[str, Any], ctx: RunContext) -> QSATrainData:
    """Self-attention units of each width trained on qSA at the slide's N and q, the run's seeds as one ensemble per
    width (side by side with ``--workers``); each unit's error and attention on held-out inputs."""
    task = SparseAveraging(config["qsa_train_N"], config["qsa_train_q"], config["qsa_dim"])
    widths = int_list(config["qsa_train_widths"])
    z, named = task.draw(HELD_OUT, torch.Generator().manual_seed(member_seed("qsa held-out", task.N, config["seed"])))
    x, target = task.encode(z, named)
    requests = [
        TrainRequest(
            partial(SelfAttentionUnit, task.in_dim, m, task.dim),
            task,
            qsa_train_schedule(config),
            ctx.seeds,
            ctx.device,
        )
        for m in widths
    ]
    runs = train_each(requests, ctx.workers, ctx.progress)
    mask = torch.zeros(*named.shape[:2], task.N).scatter_(-1, named, 1.0)
    error, mass = [], []
    with torch.no_grad():
        for run in runs:
            units = [unit.cpu() for unit in run.models]
            error.append([float(largest_errors(unit(x), target).mean()) for unit in units])
            mass.append([float((unit.attention(x) * mask).sum(dim=-1).mean()) for unit in units])
        widest = runs[-1].models[0].cpu().attention(x[:1])[0]
    uniform = z.mean(dim=1, keepdim=True).float().expand_as(target)
    return {
        "N": task.N,
        "q": task.q,
        "dim": task.dim,
        "widths": widths,
        "error": error,
        "support_mass": mass,
        "uniform_error": float(largest_errors(uniform, target).mean()),
        "eval_steps": runs[0].eval_steps.tolist(),
        "eval_loss": [run.eval_loss.tolist() for run in runs],
        "still_descending": [still_descending(run, LOSS_NOISE).tolist() for run in runs],
        "attention": widest.tolist(),
        "named": named[0].tolist(),
    }
