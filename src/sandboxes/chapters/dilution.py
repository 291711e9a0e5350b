"""Chapter 3: attention dilution and flip-flop glitches (Liu et al., "Exposing attention glitches").

Each section function computes one section of the chapter page and returns its claims and its
data (a ``TypedDict`` per section, which the section's figures in ``figures.dilution`` read).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
import torch
from scipy.stats import binom
from torch import Tensor, nn
from tqdm import tqdm

from .. import heldout
from ..calibration import calibrated_map, count_chunks
from ..claims import Claim
from ..curves import budget_ran_out, still_descending
from ..data.flipflop import ONE, ZERO, FlipFlop, I, Mixture, R, Sharpened, W, all_strings, read_errors
from ..losses import attention_entropy
from ..model import GPT, LSTM, GPTConfig, WithAttention, check_heads
from ..profiles import (
    FLAG,
    Custom,
    Param,
    at_least,
    each,
    float_list,
    in_open_unit_interval,
    non_negative,
    positive,
    probability,
    with_reference,
)
from ..sections import Chapter, Outcome, RunContext, Section
from ..theory import dilution as theory
from ..trainer import TrainConfig, TrainResult, train
from ..workers import TrainRequest, train_spread

if TYPE_CHECKING:
    from ..results import Result

EXACT = 1e-12
EXACT_REASON = "float64 round-off: the identity is exact"
BOUND_REASON = "Proposition 4 is a theorem: no input may exceed it (1e-12 for float64 round-off)"
SIGMAS = (0.5, 1.0, 2.0, 3.0, 4.0, 6.0)
LENGTHS = (2, 4, 16, 64, 256, 1024, 4096)
THRESHOLDS = (0.5, 0.9, 0.99)
SIMULATOR = theory.SimulatorWeights()
CASE1_DELTA, CASE2_DELTA = 0.5, -0.45  # W_Qp^T W_Kp of the two failing simulators (switches at t = 23 and 143)


def _even_at_least(low: int, why: str) -> Custom:
    """Even integers of at least ``low``: a flip-flop string has pairs of tokens."""
    def check(value: int) -> None:
        if value < low or value % 2:
            raise ValueError(f"must be an even number of at least {low}, got {value}")
    return Custom(check, f"an even integer >= {low} ({why})",
                  lambda rng, near: 2 * int(rng.integers(low // 2, near + 1)))


EVEN_AT_LEAST_4 = _even_at_least(4, "a flip-flop string has pairs of tokens")
BLOCK_SIZE = _even_at_least(6, "the witness string 'w 1 i 0 r' needs five positions")


PARAMS = (
    Param("T", int, 32, 512, "training length in tokens (instruction/bit pairs times 2)", EVEN_AT_LEAST_4),
    Param("p_i", float, 0.8, 0.8, "probability of an ignore instruction in training (p_w = p_r = (1 - p_i)/2)",
          in_open_unit_interval),
    Param("sparse_p_i", float, 0.98, 0.98, "p_i of the sparse (long-range) test set", probability),
    Param("dense_p_i", float, 0.1, 0.1, "p_i of the dense (many writes) test set", probability),
    # quick: about 1.2 x 10^5 dense and as many in-distribution reads at T = 32, where the quick models' tail is thin
    # (2 to 6 wrong reads in 3 x 10^4 dense ones per seed, at one thread): with fewer, the exact test lacks errors
    Param("n_sparse", int, 4000, 100_000, "sequences in the sparse test set", at_least(1)),
    Param("n_dense", int, 16_000, 10_000, "sequences in the dense test set", at_least(1)),
    Param("n_in_distribution", int, 50_000, 50_000, "sequences in the in-distribution test set (about as many reads "
          "as the sparse and dense sets together, so their error rates are compared at equal power)", at_least(1)),
    Param("n_layer", int, 2, 6, "transformer layers", at_least(1)),
    Param("d_model", int, 32, 512, "transformer width", at_least(1)),
    Param("n_head", int, 1, 8, "attention heads per layer", at_least(1)),
    Param("layer_norm", bool, False, True, "layer norm in the transformer", FLAG),
    Param("steps", int, 1000, 10_000, "training steps of the transformers the training section counts", at_least(1)),
    Param("start_steps", int, 1000, 10_000, "first-phase steps of the transformers the second phases start from",
          at_least(1)),
    Param("batch_size", int, 32, 16, "sequences per step", at_least(1)),
    Param("lr", float, 1e-2, 3e-4, "peak AdamW learning rate (linear warm-up and decay)", positive),
    Param("weight_decay", float, 0.1, 0.1, "AdamW weight decay", non_negative),
    Param("warmup", int, 20, 50, "linear warm-up steps of each transformer phase (a second phase starts a fresh AdamW, "
          "whose first step moves every weight by the full rate)", at_least(0)),
    Param("finetune_steps", int, 300, 2000, "steps of each second phase (plain, sharpened, rare)", at_least(1)),
    Param("finetune_lr", float, 3e-3, 1e-4, "peak learning rate of the second phase", positive),
    # quick: 0.3 (in the thesis's grid, 0.01 to 30, Sec. 3.5.6.4), where a 300-step second phase lowers every seed's
    # read entropy clearly and leaves some glitching
    # (issue 48, four seeds: 0.03 left a seed that was already sharp above its plain twin; 0.1 took it only to 0.81
    # of its twin on one kernel path; 0.3 to 0.53, two of four sharpened seeds still glitching there)
    Param("sharpen", float, 0.3, 0.03, "weight of the attention-entropy penalty in the second phase (0: skip)",
          non_negative),
    Param("rare_mix", str, "0.9,0.98,0.1", "0.9,0.98,0.1", "p_i values of the mixture a third second phase trains on "
          "(the thesis's R4: rare strings in training)", each(probability)),
    Param("lstm_hidden", int, 128, 128, "LSTM hidden size", at_least(1)),
    Param("lstm_steps", int, 100, 500, "LSTM training steps", at_least(1)),
    Param("lstm_lr", float, 1e-2, 3e-3, "LSTM learning rate", positive),
    Param("batched_seeds", bool, True, True, "train the seeds as vmapped ensembles (on a GPU, in groups that fit "
          "half its free memory)", FLAG),
    Param("threshold", float, 0.5, 0.5, "weight below which a head no longer selects one position",
          in_open_unit_interval),
    Param("base", int, 64, 64, "block size the Proposition 3 construction is built for", BLOCK_SIZE),
    Param("n_construction", int, 200, 2000, "random strings per test set of the construction", at_least(1)),
)


# Reference (2-core CPU): T = 128, where a sparse string's read reaches back up to 63 pairs across an ignore-filled
# stretch that training strings (p_i = 0.8) almost never have, with 8 seeds of a 2-layer, width-64 GPT. Measured on
# that CPU (run at b492725): 0.28 s per step of the 8-member ensemble, 43 s to count one transformer's test strings
# and 22 s one LSTM's, one minute to train the 8 LSTMs. After 3000 steps the seeds still erred on 0 to 22 of 208444
# in-distribution reads; a pilot took two of them to 1 and 0 with 6000 steps and to zero with 9000. The training
# section trains 8000 steps (0.325 s per step at its start in a run of 9000 that would have taken 49 minutes, so
# about 43) and counts one transformer and one LSTM per seed (about 10 with the LSTMs' training), within its hour;
# the second phases start from 3000 steps (16 minutes), train three 500-step phases (8) and count three
# transformers per seed (17). The test sets
# give each seed about 10^5 sparse reads (1 + 62 x 0.01 per string), 10^5 dense ones (1 + 62 x 0.45) and twice
# that in distribution (1 + 62 x 0.1).
PARAMS = with_reference(PARAMS, {
    "T": 128, "n_layer": 2, "d_model": 64, "n_head": 2, "layer_norm": False, "steps": 8000, "start_steps": 3000,
    "batch_size": 32, "lr": 3e-3, "warmup": 50, "finetune_steps": 500, "finetune_lr": 1e-3, "lstm_steps": 500,
    "lstm_lr": 3e-3, "n_sparse": 64_000, "n_dense": 3_600, "n_in_distribution": 29_000, "sharpen": 0.03,
})

# ---------------------------------------------------------------- Proposition 4
class BoundData(TypedDict):
    sigmas: list[float]  # the spectral norms of the grid
    lengths: list[int]  # the sequence lengths of the grid
    random_max: list[list[float]]  # sigma x length: largest weight among 64 random forms and unit-ball inputs
    worst_ratio: list[list[float]]  # sigma x length: worst-case weight of a random 2-d form / the bound
    sigma_grid: list[float]  # the sigmas at which the dilution length is drawn
    thresholds: list[float]
    dilution_length: dict[str, list[int]]  # threshold (as a string) -> T* at each sigma of sigma_grid


def bound(config: dict[str, Any], ctx: RunContext) -> Outcome[BoundData]:
    """The bound on a grid: attained by an extremal input, never exceeded by random or worst-case ones."""
    claims, data = bound_rows(config["threshold"])
    return Outcome(claims, data)


def bound_rows(threshold: float, bound_fn: Callable[..., Any] = theory.max_weight_bound,
               extremal: Callable[[float, int], tuple[GPT, Tensor]] = theory.extremal_attention,
               length_fn: Callable[[float, float], int] = theory.dilution_length,
               sigmas: tuple[float, ...] = SIGMAS, lengths: tuple[int, ...] = LENGTHS,
               latent_radius: float = 1.0) -> tuple[list[Claim], BoundData]:
    """The rows and data of the bound section for a given bound, extremal input and dilution length.

    The chapter passes the theory's three functions and unit-ball latents; a test passes a wrong one
    (a bound off by a constant, an extremal input of the wrong norm, a dilution length off by one,
    random latents outside the unit ball that the proposition assumes) and sees its row fail.
    """
    rng = np.random.default_rng(0)
    attained, random_excess, worst_excess = [], [], []
    random_max = np.zeros((len(sigmas), len(lengths)))
    worst_ratio = np.zeros((len(sigmas), len(lengths)))
    for a, sigma in enumerate(sigmas):
        for b, T in enumerate(lengths):
            limit = float(bound_fn(T, sigma))
            attained.append(abs(_extremal_weight(sigma, T, extremal) - limit))
            weights = _random_max_weights(rng, sigma, T, n=64, radius=latent_radius)
            random_max[a, b] = weights.max()
            random_excess.append(weights.max() - limit)
            worst = theory.worst_case_max_weight(_random_form(rng, sigma, 2), T)
            worst_ratio[a, b] = worst / limit
            worst_excess.append(worst - limit)
    crossings = []
    for sigma in sigmas:
        T_star = length_fn(sigma, threshold)
        if 2 < T_star <= max(lengths):  # the extremal input is a full T x T attention: keep T small
            crossings.append(_extremal_weight(sigma, T_star - 1, extremal) > threshold
                             >= _extremal_weight(sigma, T_star, extremal))
    sigma_grid = np.linspace(0.0, 6.0, 61)
    claims = [
        Claim.close("Prop 4: the extremal input attains the bound through a GPT attention layer (max |gap|)",
                    0.0, float(max(attained)), EXACT, EXACT_REASON),
        Claim.at_most("Prop 4: random unit-ball inputs and forms never exceed it (max excess)", EXACT,
                      float(max(random_excess)), BOUND_REASON),
        Claim.at_most("Prop 4: worst-case inputs of random 2-d forms never exceed it (max excess)", EXACT,
                      float(max(worst_excess)), BOUND_REASON),
    ]
    if crossings:  # no sigma of the grid has its T* inside the lengths: the inverse is not tested, no row
        claims.append(Claim.exact(
            f"dilution length: the extremal weight first drops to {threshold} at T* = dilution_length(sigma)",
            f"{len(crossings)} of {len(crossings)}", f"{sum(crossings)} of {len(crossings)}",
            f"the bound is attained, so its inverse is the crossing (sigma with T* <= {max(lengths)})"))
    data: BoundData = {
        "sigmas": list(sigmas), "lengths": list(lengths), "random_max": random_max, "worst_ratio": worst_ratio,
        "sigma_grid": sigma_grid, "thresholds": list(THRESHOLDS),
        "dilution_length": {str(t): [length_fn(s, t) for s in sigma_grid] for t in THRESHOLDS}}
    return claims, data


def _extremal_weight(sigma: float, T: int,
                     extremal: Callable[[float, int], tuple[GPT, Tensor]] = theory.extremal_attention) -> float:
    model, idx = extremal(sigma, T)
    with torch.no_grad():
        return float(model(idx, return_attention=True)[1][0][0, 0, -1, 0])


def _random_form(rng: np.random.Generator, sigma: float, d: int) -> np.ndarray:
    M = rng.normal(size=(d, d))
    return sigma * M / np.linalg.norm(M, 2)


def _random_max_weights(rng: np.random.Generator, sigma: float, T: int, n: int, d: int = 8,
                        radius: float = 1.0) -> np.ndarray:
    """Largest attention weight of the last query, for ``n`` random forms and latents in the ball of ``radius``."""
    out = np.empty(n)
    for k in range(n):
        M = _random_form(rng, sigma, d)
        x = rng.normal(size=(T, d))
        x *= radius * rng.uniform(0, 1, size=(T, 1)) ** (1 / d) / np.linalg.norm(x, axis=1, keepdims=True)
        scores = x @ M.T @ x[-1]  # x_j^T M^T x_T = x_T^T M x_j
        w = np.exp(scores - scores.max())
        out[k] = (w / w.sum()).max()
    return out


# ---------------------------------------------------------------- Proposition 3
class ConstructionData(TypedDict):
    sizes: list[int]  # block sizes of the sweep, the construction's weights held fixed
    safe_length: int  # largest block size at which the closed-form conditions certify it
    onset: int  # first block size at which 'w 1 i 0 r' is answered wrongly (closed form)
    base: int  # the block size the weights are built for
    exhaustive: tuple[int, int]  # (wrong, total) reads over every string of length 4..exhaustive_up_to
    exhaustive_up_to: int  # 16, or the block size where that is shorter
    at_base: tuple[int, int]  # (wrong, total) reads on random strings, p_i in 0.98, 0.8, 0.1, 0, at the base length
    witness_scan: int | None  # first block size at which the GPT itself answers 'w 1 i 0 r' wrongly
    errors: dict[str, list[int]]  # p_i (as a string) -> wrong reads on random strings at each size
    witness_at_onset: int  # occurrences of 'w b i (1-b) r' in the random strings at block size `onset`
    self_selection: list[float]  # at each size: smallest layer-1 weight an unwritten bit gives itself
    conditions: dict[str, list[float]]  # written / not_written / latest_wins -> slack at each size


Build = Callable[[theory.FlipFlopWeights, int | None], GPT]


def construction(config: dict[str, Any], ctx: RunContext) -> Outcome[ConstructionData]:
    """The 2-layer construction: exact on every short string and on random ones; then held fixed as T grows."""
    data = construction_data(theory.FlipFlopWeights(base=config["base"]), config["n_construction"])
    silent = () if data["witness_at_onset"] else (
        f"wrong reads on random strings at block size {data['onset']}: none of the {config['n_construction']} strings "
        "per p_i there contains the witness pattern 'w b i (1-b) r'; more strings (--set n_construction=...) make "
        "the row",)
    return Outcome(construction_claims(data, config["n_construction"]), data, silent)


def exhaustive_lengths(base: int) -> range:
    """Even string lengths 4..16 that fit the construction's block size ``base`` (its input drops the last bit)."""
    return range(4, min(16, base) + 1, 2)


def construction_data(weights: theory.FlipFlopWeights, n: int,
                      build: Build = theory.flipflop_construction) -> ConstructionData:
    """Wrong reads of ``build(weights, block_size)`` (the construction, or a broken one in a test) and the closed forms."""  # noqa: E501
    model = build(weights, None)
    exhaustive = [_errors(model, all_strings(length)) for length in exhaustive_lengths(weights.base)]
    generator = heldout.generator(heldout.FLIPFLOP_CONSTRUCTION)
    sets = {p: FlipFlop.with_ignore(weights.base, p).sequences(n, generator) for p in (0.98, 0.8, 0.1, 0.0)}
    at_base = [_errors(model, seq) for seq in sets.values()]
    safe, onset = theory.safe_length(weights), theory.witness_onset(weights)
    step = max(2, weights.base // 8 * 2)  # even block sizes only: a flip-flop string has an even length
    sizes = sorted(set(range(weights.base, 5 * weights.base // 2 + 1, step)) | {safe, onset - 2, onset})
    sweep: dict[float, list[int]] = {p: [] for p in (0.98, 0.8, 0.1)}
    selection, witnesses = [], 0
    for size in sizes:
        fixed = build(weights, size)
        generator = heldout.generator(heldout.LENGTH_SWEEP + size)
        for p in sweep:
            seq = FlipFlop.with_ignore(size, p).sequences(n, generator)
            sweep[p].append(_errors(fixed, seq)[0])
            witnesses += witness_count(seq) if size == onset else 0
        selection.append(_self_selection(fixed, seq[:64]))
    return {
        "sizes": sizes, "safe_length": safe, "onset": onset, "base": weights.base,
        "exhaustive": (sum(e for e, _ in exhaustive), sum(t for _, t in exhaustive)),
        "exhaustive_up_to": exhaustive_lengths(weights.base)[-1],
        "at_base": (sum(e for e, _ in at_base), sum(t for _, t in at_base)),
        "witness_scan": _witness_scan(weights, build),
        "errors": {str(p): v for p, v in sweep.items()}, "self_selection": selection, "witness_at_onset": witnesses,
        "conditions": {k: [theory.construction_conditions(weights, s)[k] for s in sizes]
                       for k in ("written", "not_written", "latest_wins")}}


def construction_claims(data: ConstructionData, n: int) -> list[Claim]:
    """The construction's rows, from its measured counts and its closed-form lengths."""
    (wrong, total), (base_wrong, base_total) = data["exhaustive"], data["at_base"]
    safe, onset = data["safe_length"], data["onset"]
    errors_at = {size: sum(v[k] for v in data["errors"].values()) for k, size in enumerate(data["sizes"])}
    margin = "the per-position score margin kappa base / C of the fixed linear positions"
    claims = [
        Claim.exact(f"Prop 3 construction: wrong reads over every string of length 4..{data['exhaustive_up_to']}",
                    "0", str(wrong),
                    f"exhaustive: {total} reads"),
        Claim.exact(f"Prop 3 construction at T = {data['base']}: wrong reads on sparse to all-write strings",
                    "0", str(base_wrong), f"{base_total} reads, p_i in 0.98, 0.8, 0.1, 0"),
        Claim.exact(f"fixed weights: wrong reads at every block size up to the safe length {safe}",
                    "0", str(sum(e for size, e in errors_at.items() if size <= safe)),
                    f"the closed-form sufficient conditions hold there; {n} strings per p_i and size"),
        Claim.exact("fixed weights, positional margin: first block size at which the GPT answers 'w 1 i 0 r' with 0",
                    str(onset), str(data["witness_scan"]),
                    f"closed form: {margin} shrinks until the w three tokens back outweighs the bit "
                    "(5 keys: not Prop 4's dilution, whose bound is 1 here)"),
    ]
    if data["witness_at_onset"]:  # strings without the pattern need not be misread there: no row
        claims.append(Claim.at_least(
            f"fixed weights, positional margin: wrong reads on random strings at block size {onset}", 1,
            errors_at[onset], f"the witness pattern occurs {data['witness_at_onset']} times in them; {n} strings per "
            "p_i", digits=8))
    return claims


def witness_count(seq: Tensor) -> int:
    """Occurrences of the witness pattern 'w b i (1-b) r', either bit, at instruction positions of ``seq``."""
    windows = seq.unfold(1, 5, 2)  # (B, windows, 5), each starting at an instruction
    count = 0
    for bit, other in ((ONE, ZERO), (ZERO, ONE)):
        count += int((windows == torch.tensor([W, bit, I, other, R])).all(dim=-1).sum())
    return count


def _witness_scan(weights: theory.FlipFlopWeights, build: Build = theory.flipflop_construction) -> int | None:
    """First even block size from ``base`` at which the GPT itself answers the witness read wrongly."""
    x = torch.tensor([theory.WITNESS])
    for size in range(weights.base, 8 * weights.base, 2):
        with torch.no_grad():
            if read_errors(build(weights, size)(x), x)[0]:
                return size
    return None


def _errors(model: nn.Module, seq: Tensor, chunk: int = 256) -> tuple[int, int]:
    """Wrong and total reads of ``model`` on full strings (the input drops the last bit)."""
    def read(part: Tensor) -> tuple[int, int]:
        x = part[:, :-1]
        return read_errors(model(x.to(_device(model))).cpu(), x)

    with torch.no_grad():
        counts = calibrated_map(read, count_chunks(seq, chunk))
    return sum(w for w, _ in counts), sum(t for _, t in counts)


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def _self_selection(model: GPT, seq: Tensor) -> float:
    """Smallest layer-1 weight a bit that was not written gives itself (it must stay above 1/2); NaN if the
    strings have no such bit (short or all-write strings)."""
    x = seq[:, :-1]
    with torch.no_grad():
        att = model(x, return_attention=True)[1][0][:, 0]
    pos = torch.arange(1, x.shape[1], 2)
    weights = att[:, pos, pos][x[:, pos - 1] != W]
    return float(weights.min()) if weights.numel() else float("nan")


# ---------------------------------------------------------------- Proposition 5
class SimulatorRun(TypedDict):
    delta: float  # W_Qp^T W_Kp of this simulator
    case1_top: list[int]  # case 1's input (a write at 0, then noops): the top-scored key at each query
    case2_top: list[int]  # case 2's inputs (writes at 0 and t - 1): the top-scored key at query t = 2, 3, ...
    case2_out: list[int]  # case 2's inputs: the output (argmax) at query t = 2, 3, ...
    # delta = 0 only: queries of 4 random strings of 2048 whose top key is not the latest write
    random_misses: int | None
    random_wrong: int | None  # delta = 0 only: wrong states on those strings


# three simulators (keys with spaces, so the functional form) and the two closed-form switches
SimulatorData = TypedDict("SimulatorData", {
    "case 1": SimulatorRun,  # delta > 0
    "case 2": SimulatorRun,  # delta < 0
    "orthogonal": SimulatorRun,  # delta = 0
    "case1_switch": int,  # first query of case 1 whose top key is a noop
    "case2_switch": int,  # first query of case 2 whose top key is the stale write
})


def simulator(config: dict[str, Any], ctx: RunContext) -> Outcome[SimulatorData]:
    """Linear positions: a position-position term makes the top score leave the latest write; without it, never."""
    data = simulator_data()
    return Outcome(simulator_claims(data), data)


def simulator_data(build: Callable[[theory.SimulatorWeights], GPT] = theory.simulator,
                   length: int = 240, random_length: int = 2048) -> SimulatorData:
    """Top keys and outputs of ``build(weights)`` (the simulator, or a broken one in a test) on the proof's inputs."""
    data: dict[str, Any] = {}
    for name, delta in (("case 1", CASE1_DELTA), ("case 2", CASE2_DELTA), ("orthogonal", 0.0)):
        model = build(replace(SIMULATOR, delta=delta))
        case2_seq = theory.case2_sequences(length)
        rows = torch.arange(2, length)
        with torch.no_grad():
            case2_out = model(case2_seq).argmax(-1)[rows, rows]
        run: dict[str, Any] = {"delta": delta, "case1_top": _top_key(model, theory.case1_sequence(length))[0].tolist(),
                               "case2_top": _top_key(model, case2_seq)[rows, rows].tolist(),
                               "case2_out": case2_out.tolist(), "random_misses": None, "random_wrong": None}
        if delta == 0:
            long = _random_simulator_strings(random_length, 4)
            run["random_misses"] = int((_top_key(model, long) != theory.latest_write_position(long)).sum())
            with torch.no_grad():
                run["random_wrong"] = int((model(long).argmax(-1) != theory.simulator_states(long)).sum())
        data[name] = run
    data["case1_switch"] = theory.case1_switch(replace(SIMULATOR, delta=CASE1_DELTA))
    data["case2_switch"] = theory.case2_switch(replace(SIMULATOR, delta=CASE2_DELTA))
    return data  # type: ignore[return-value]


def simulator_claims(data: SimulatorData) -> list[Claim]:
    """The simulators' rows: measured switches against the closed forms; none for delta = 0."""
    def first(ts: list[int]) -> str:
        return str(ts[0] if ts else None)

    def case1_wrong(run: SimulatorRun) -> list[int]:
        return [t for t, key in enumerate(run["case1_top"]) if key != 0]

    def case2_wrong(run: SimulatorRun, key: str, right: Callable[[int], int]) -> list[int]:
        return [t for t, v in enumerate(run[key], start=2) if v != right(t)]  # type: ignore[literal-required]

    one, two, zero = data["case 1"], data["case 2"], data["orthogonal"]
    misses = (len(case1_wrong(zero)) + len(case2_wrong(zero, "case2_top", lambda t: t - 1))
              + (zero["random_misses"] or 0))
    return [
        Claim.exact("Prop 5 case 1 (delta > 0): first query whose top key is a noop, not the write",
                    str(data["case1_switch"]), first(case1_wrong(one)), "root of delta p^2 + (beta - gamma) p - big"),
        Claim.exact("Prop 5 case 2 (delta < 0): first length whose top key is the stale write",
                    str(data["case2_switch"]), first(case2_wrong(two, "case2_top", lambda t: t - 1)),
                    "p_t = beta / |delta|"),
        Claim.exact("Prop 5 case 2: first length whose output is the stale bit",
                    str(data["case2_switch"]), first(case2_wrong(two, "case2_out", lambda t: theory.WRITE0)),
                    "the output's sign is that of the higher-scored write"),
        Claim.exact("converse in our simulators, delta = 0: queries whose top key is not the latest write",
                    "0", str(misses), "not Prop 5's statement: delta = 0, big > 0, gamma >= beta > 0 suffice "
                    "(proved on the page); both proof inputs to 240 and 4 random strings of 2048"),
        Claim.exact("converse in our simulators, delta = 0: wrong states on 4 random strings of 2048",
                    "0", str(zero["random_wrong"]), "beta / scale > ln 2: the latest write outweighs all earlier ones"),
    ]


def _top_key(model: GPT, seq: Tensor) -> Tensor:
    """``(B, T)``: the key with the highest attention weight at every query."""
    with torch.no_grad():
        return model(seq, return_attention=True)[1][0][:, 0].argmax(-1)


def _random_simulator_strings(length: int, n: int) -> Tensor:
    """Strings of writes (probability 0.05 each) and noops, starting with a write."""
    g = heldout.generator(heldout.SIMULATOR_STRINGS)
    u = torch.rand(n, length, generator=g)
    seq = torch.where(u < 0.025, theory.WRITE0, torch.where(u < 0.05, theory.WRITE1, theory.NOOP))
    seq[:, 0] = theory.WRITE1
    return seq


# ---------------------------------------------------------------- training
class LayerSharpness(TypedDict):
    # the sharpest head at each read, averaged per position bin (None: no read in the bin)
    max_weight: list[float | None]  # mean largest attention weight
    entropy: list[float | None]  # mean entropy of the attention row (nats)
    sigma: list[float | None]  # median Proposition 4 sigma of the head at the read


class Sharpness(TypedDict):
    bin_edges: list[float]  # position bins of the reads
    layers: list[LayerSharpness]  # one per layer
    # largest weight minus its Proposition 4 bound over the queries, heads and layers where the bound is below
    # 1 - BOUND_TOL (elsewhere, the first query above all, weight and bound are both 1 and nothing is tested);
    # None when there is no such query
    excess: float | None
    tested: int  # how many (query, head, layer) triples entered ``excess``


class TrainingData(TypedDict):
    counts: dict[str, dict[str, list[tuple[int, int]]]]  # transformer / lstm -> test set -> per seed (wrong, total)
    eval_steps: list[int]
    eval_loss: list[list[float]]  # transformer seeds x evaluations
    lstm_eval_steps: list[int]
    lstm_eval_loss: list[list[float]]  # LSTM seeds x evaluations
    sharpness: dict[str, list[Sharpness]]  # transformer -> per seed
    still_descending: dict[str, int]  # transformer / lstm -> runs whose loss had not settled at the end


class SecondPhaseData(TypedDict):
    counts: dict[str, dict[str, list[tuple[int, int]]]]  # plain / sharpened / rare -> test set -> per seed
    eval_steps: list[int]  # the first phase's evaluations, then the second phase's, shifted to follow it
    second_phase_start: int
    eval_loss: dict[str, list[list[float]]]  # plain / sharpened / rare -> seeds x evaluations (first phase, then own)
    sharpness: dict[str, list[Sharpness]]  # plain / sharpened -> per seed
    still_descending: dict[str, int]  # plain / sharpened / rare -> runs whose loss had not settled at the end


def _gpt_config(config: dict[str, Any]) -> GPTConfig:
    return GPTConfig(vocab_size=5, block_size=config["T"], n_layer=config["n_layer"], n_head=config["n_head"],
                     d_model=config["d_model"], tied=False, positional="learned", layer_norm=config["layer_norm"])


def _schedule(steps: int, batch: int, lr: float, weight_decay: float, warmup: int) -> TrainConfig:
    return TrainConfig(steps=steps, batch_size=batch, lr=lr, weight_decay=weight_decay,
                       warmup=warmup, schedule="linear", final_lr_fraction=0.0, eval_every=max(1, steps // 20),
                       eval_size=256)


def _first_phase(config: dict[str, Any], ctx: RunContext, steps: int) -> TrainResult:
    """Transformers trained on FFL(p_i) from scratch for ``steps`` (warm-up, then linear decay to zero), their seeds
    spread over ``ctx.workers`` processes; once per run where both sections train ``steps`` (quick: the training
    section's models are those the second phases start from)."""
    schedule = _schedule(steps, config["batch_size"], config["lr"], config["weight_decay"], config["warmup"])
    task = FlipFlop.with_ignore(config["T"], config["p_i"])
    request = TrainRequest(partial(GPT, _gpt_config(config)), task, schedule, ctx.seeds, ctx.device,
                           config["batched_seeds"])
    return ctx.train_once(("first phase", steps), lambda: train_spread(request, ctx.workers, ctx.progress))


def training(config: dict[str, Any], ctx: RunContext) -> Outcome[TrainingData]:
    """Transformers and LSTMs on FFL(p_i), counted on in-distribution, sparse and dense strings."""
    first = _first_phase(config, ctx, config["steps"])
    lstm = train(lambda: LSTM(5, config["lstm_hidden"]), FlipFlop.with_ignore(config["T"], config["p_i"]),
                 _schedule(config["lstm_steps"], config["batch_size"], config["lstm_lr"], 0.0, 0), batched=False,
                 seeds=ctx.seeds, device=ctx.device, progress=ctx.progress)
    moving = {kind: int(still_descending(run, LOSS_NOISE).sum()) for kind, run in (("transformer", first),
                                                                                  ("lstm", lstm))}
    tests = _test_sets(config)
    counts = {kind: _count(run.models, tests, ctx.device, kind, ctx.progress)
              for kind, run in (("transformer", first), ("lstm", lstm))}
    sharpness = {"transformer": calibrated_map(lambda m: _sharpness(m, tests["in-distribution"][:64], ctx.device),
                                               first.models)}
    data: TrainingData = {
        "counts": counts, "eval_steps": first.eval_steps, "eval_loss": first.eval_loss,
        "lstm_eval_steps": lstm.eval_steps, "lstm_eval_loss": lstm.eval_loss, "sharpness": sharpness,
        "still_descending": moving}
    claims, silent = training_rows(config, data)
    return Outcome(claims, data, silent)


def training_rows(config: dict[str, Any], data: TrainingData) -> tuple[list[Claim], tuple[str, ...]]:
    """The training section's rows from its data alone (as run, or as read back from a result file, where the
    reference check recomputes them); it leaves no row out."""
    return _training_claims(data["counts"], data["still_descending"]) + _bound_claims(data["sharpness"],
                                                                                       "trained attention"), ()


def second_phases(config: dict[str, Any], ctx: RunContext) -> Outcome[SecondPhaseData]:
    """From one first phase, three second phases on the same batches: plain (the control), with the sharpening
    penalty, and on the rare-string mixture; counted on the same strings."""
    task = FlipFlop.with_ignore(config["T"], config["p_i"])
    first = _first_phase(config, ctx, config["start_steps"])
    second = _schedule(config["finetune_steps"], config["batch_size"], config["finetune_lr"], config["weight_decay"],
                       config["warmup"])
    run = dict(seeds=ctx.seeds, device=ctx.device, progress=ctx.progress, batched=config["batched_seeds"])
    phases = {"plain": train([_copier(m) for m in first.models], task, second, **run)}
    if config["sharpen"] > 0:
        phases["sharpened"] = train([_copier(m, WithAttention) for m in first.models],
                                    Sharpened(task, config["sharpen"]), second, **run)
    mixture = Mixture(config["T"], tuple(float_list(config["rare_mix"])))
    phases["rare"] = train([_copier(m) for m in first.models], mixture, second, **run)
    models = {kind: [getattr(m, "gpt", m) for m in phase.models] for kind, phase in phases.items()}
    moving = {kind: int(still_descending(phase, LOSS_NOISE, continued=True).sum()) for kind, phase in phases.items()}
    tests = _test_sets(config)
    counts = {kind: _count(ms, tests, ctx.device, kind, ctx.progress) for kind, ms in models.items()}
    sharpness = {kind: calibrated_map(lambda m: _sharpness(m, tests["in-distribution"][:64], ctx.device),
                                      models[kind]) for kind in ("plain", "sharpened") if kind in models}
    start = int(first.eval_steps[-1] + 1)
    data: SecondPhaseData = {
        "counts": counts, "eval_steps": np.concatenate([first.eval_steps, start + phases["plain"].eval_steps]),
        "second_phase_start": start,
        "eval_loss": {kind: np.concatenate([first.eval_loss, phase.eval_loss], axis=1)
                      for kind, phase in phases.items()},
        "sharpness": sharpness, "still_descending": moving}
    claims, silent = second_phase_rows(config, data)
    return Outcome(claims, data, silent)


def second_phase_rows(config: dict[str, Any], data: SecondPhaseData) -> tuple[list[Claim], tuple[str, ...]]:
    """The second phases' rows and the reasons for the rows they do not make, from their data alone (as run, or as
    read back from a result file, where the reference check recomputes them)."""
    counts, moving, sharpness = data["counts"], data["still_descending"], data["sharpness"]
    rare_rows, silent = _rare_training_claims(counts, moving)
    claims = (_sharpened_claims(counts, moving) + rare_rows
              + _bound_claims(sharpness, "second-phase attention, plain and sharpened,")
              + _sharpening_claims(sharpness, moving.get("sharpened", 0)))
    return claims, silent


def _count(models: list[nn.Module], tests: dict[str, Tensor], device: torch.device, label: str = "",
           progress: bool | None = None) -> dict[str, list[tuple[int, int]]]:
    """Wrong and total reads of every model on every test set (evaluated on ``device``, returned to the CPU)."""
    bar = tqdm(total=len(models), desc=f"counting {label} reads", disable=not progress, leave=False, file=sys.stderr)

    def count(model: nn.Module) -> dict[str, tuple[int, int]]:
        model.to(device)
        counts = {name: _errors(model, seq) for name, seq in tests.items()}
        model.cpu()
        bar.update()
        return counts

    per_model = calibrated_map(count, models)
    bar.close()
    return {name: [counts[name] for counts in per_model] for name in tests}


def _copier(model: nn.Module, wrap: type[nn.Module] | None = None):
    """A factory that hands the trainer a fresh copy of a trained model (optionally wrapped)."""
    def make() -> nn.Module:
        fresh = copy.deepcopy(model)
        return wrap(fresh) if wrap is not None else fresh
    return make


def _test_sets(config: dict[str, Any]) -> dict[str, Tensor]:
    """Held-out strings from fixed seeds that no training stream uses."""
    T = config["T"]
    spec = {"in-distribution": (config["p_i"], config["n_in_distribution"]),
            "sparse": (config["sparse_p_i"], config["n_sparse"]), "dense": (config["dense_p_i"], config["n_dense"])}
    return {name: FlipFlop.with_ignore(T, p).sequences(n, heldout.generator(heldout.FLIPFLOP_TEST_SETS + k))
            for k, (name, (p, n)) in enumerate(spec.items())}


GLITCH_LEVEL = 0.01  # family-wise level of the per-seed rate tests (Bonferroni over the seeds)
BOUND_TOL = 1e-5  # float32 attention and norms


def rate_pvalue(wrong_in: int, reads_in: int, wrong_rare: int, reads_rare: int) -> float:
    """One-sided exact test that the rare strings' error rate exceeds the in-distribution one.

    Under equal rates, given ``k`` errors in all, the in-distribution count is
    ``Binomial(k, reads_in / (reads_in + reads_rare))``; the p-value is the chance of at most the
    observed in-distribution count. It is 1 without errors, and near 1/2 for one uniform error rate.
    """
    k = wrong_in + wrong_rare
    if k == 0:
        return 1.0
    return float(binom.cdf(wrong_in, k, reads_in / (reads_in + reads_rare)))


def glitching_seeds(runs: dict[str, list[tuple[int, int]]]) -> int:
    """Seeds whose read error rate on the sparse and dense sets together exceeds the in-distribution one.

    Exact one-sided test per seed (:func:`rate_pvalue`) at level ``GLITCH_LEVEL`` divided by the
    number of seeds, so that a model with one error rate everywhere counts no seed at that level.
    """
    n = len(runs["in-distribution"])
    count = 0
    for k in range(n):
        wrong_in, reads_in = runs["in-distribution"][k]
        wrong_rare = runs["sparse"][k][0] + runs["dense"][k][0]
        reads_rare = runs["sparse"][k][1] + runs["dense"][k][1]
        count += rate_pvalue(wrong_in, reads_in, wrong_rare, reads_rare) < GLITCH_LEVEL / n
    return count


def _unsettled(moving: Mapping[str, int], kind: str) -> tuple[bool, str]:
    """Whether every ``kind`` run had settled, and what to say where one had not (for ``Claim.eventually``)."""
    steps = {"lstm": "lstm_steps", "transformer": "steps"}.get(kind, "finetune_steps")
    return budget_ran_out(moving[kind], f"{kind} runs were still descending", steps)


def _training_claims(counts: dict[str, dict[str, list[tuple[int, int]]]], moving: Mapping[str, int]) -> list[Claim]:
    """Rows about trained models: undecided where a model of the kind was still descending at the end."""
    lstm_wrong = sum(w for name in ("sparse", "dense") for w, _ in counts["lstm"][name])
    reads = sum(t for name in ("sparse", "dense") for _, t in counts["lstm"][name])
    return [Claim.exact("LSTM: wrong reads on the sparse and dense sets, all seeds", "0", str(lstm_wrong),
                        f"reported (R2): 0 errors in 100/100 runs; {reads} reads here"
                        ).eventually(*_unsettled(moving, "lstm")),
            _glitch_claim(counts, moving, "transformer", "reported (R1): a long tail of errors on rare strings")]


def _sharpened_claims(counts: dict[str, dict[str, list[tuple[int, int]]]], moving: Mapping[str, int]) -> list[Claim]:
    """R7, R8: the tail after the sharpening phase (no row where the penalty was switched off)."""
    if "sharpened" not in counts:
        return []
    return [_glitch_claim(counts, moving, "sharpened", "reported (R7, R8): sharpening does not remove the tail")]


def _glitch_claim(counts: dict[str, dict[str, list[tuple[int, int]]]], moving: Mapping[str, int], kind: str,
                  reported: str) -> Claim:
    """At least one ``kind`` seed errs at a higher rate on sparse and dense strings than in distribution."""
    runs = counts[kind]
    test = (f"exact one-sided test of equal rates per seed, p < {GLITCH_LEVEL:g} / seeds; "
            f"{runs['in-distribution'][0][1]} in-distribution reads, "
            f"{runs['sparse'][0][1] + runs['dense'][0][1]} rare ones per seed")
    return Claim.at_least(f"{kind} seeds whose error rate on sparse and dense strings exceeds the in-distribution rate",
                          1, glitching_seeds(runs), f"{reported}; {test}", digits=8
                          ).eventually(*_unsettled(moving, kind))


MIN_ERRORS = 7  # below 7 wrong reads in all, no split between two runs reaches p < 0.01 (2^-7 < 0.01 < 2^-6)


def rare_training_pvalue(plain: dict[str, list[tuple[int, int]]], rare: dict[str, list[tuple[int, int]]]) -> float:
    """One-sided exact test that rare-string training leaves fewer wrong sparse and dense reads than plain training.

    Both kinds read the same test strings, so under equal error rates each of the ``k`` wrong reads of the two
    together is the rare-trained model's with probability 1/2: the p-value is ``P(Binomial(k, 1/2) <= its count)``.
    """
    wrong = {kind: sum(w for name in ("sparse", "dense") for w, _ in runs[name]) for kind, runs in
             (("plain", plain), ("rare", rare))}
    return float(binom.cdf(wrong["rare"], wrong["plain"] + wrong["rare"], 0.5))


def _rare_training_claims(counts: dict[str, dict[str, list[tuple[int, int]]]],
                          moving: Mapping[str, int]) -> tuple[list[Claim], tuple[str, ...]]:
    """R4: the second phase on the rare-string mixture against the plain one, over all seeds; no row with too few
    errors to test (and the reason why in ``silent``)."""
    total = sum(w for kind in ("plain", "rare") for name in ("sparse", "dense") for w, _ in counts[kind][name])
    if total < MIN_ERRORS:
        return [], (f"training on rare strings (R4): {total} wrong sparse and dense reads in all, plain and rare "
                    f"together; below {MIN_ERRORS} no split of them is significant at p < {GLITCH_LEVEL:g}",)
    return [Claim.at_most("second phase on rare strings against the plain one: fewer wrong sparse and dense reads "
                          "(one-sided exact p-value, all seeds)", GLITCH_LEVEL,
                          rare_training_pvalue(counts["plain"], counts["rare"]),
                          f"reported (R4): training on a mixture of FFL(p_i) over rare p_i cuts the errors by a wide "
                          f"margin (there from the start of training; here a second phase, from the same model as "
                          f"the plain one, tested on the same strings); {total} wrong reads in all, pooled over "
                          f"the seeds: a test of these models, not of how the effect varies from seed to seed",
                          digits=4).eventually(*_unsettled(moving, "rare"))], ()


def _sharpness(model: GPT, seq: Tensor, device: torch.device, bins: int = 8,
               sigmas_of: Callable[[GPT, Tensor], list[Tensor]] = theory.effective_sigmas) -> Sharpness:
    """Sharpest head of each layer at read queries, binned by the read's position.

    Per bin: mean largest weight, mean entropy and median Proposition 4 ``sigma`` of the head
    with the largest weight at each read; ``excess`` is the largest weight minus its bound over
    every query, head and layer where the bound is below ``1 - BOUND_TOL`` (a theorem says it is
    at most 0). ``sigmas_of`` is the theory's effective sigma; a test passes a wrong one.
    """
    model = model.to(device)
    x = seq[:, :-1].to(device)
    with torch.no_grad():
        _, attention = model(x, return_attention=True)
        sigmas = sigmas_of(model, x)
    model.cpu()
    reads = (x == R).cpu()
    length = x.shape[1]
    which = (torch.arange(length).expand_as(x)[reads] * bins // length).numpy()
    out: dict[str, Any] = {"bin_edges": [b * length / bins for b in range(bins + 1)], "layers": []}
    excess, tested = -np.inf, 0
    for att, sigma in zip(attention, sigmas):
        top = att.max(dim=-1).values.cpu().permute(0, 2, 1)  # (B, T, H)
        sigma = sigma.cpu().permute(0, 2, 1)
        limit = theory.max_weight_bound(np.arange(1, length + 1)[None, :, None], sigma.numpy())
        informative = limit < 1 - BOUND_TOL
        if informative.any():
            excess = max(excess, float((top.numpy() - limit)[informative].max()))
            tested += int(informative.sum())
        best = top[reads].argmax(dim=1, keepdim=True)  # the sharpest head at each read
        values = {"max_weight": top, "entropy": attention_entropy(att).cpu().permute(0, 2, 1), "sigma": sigma}
        picked = {k: v[reads].gather(1, best).squeeze(1).numpy() for k, v in values.items()}
        layer = {}
        for key, value in picked.items():
            reduce = np.median if key == "sigma" else np.mean
            layer[key] = [float(reduce(value[which == b])) if (which == b).any() else None for b in range(bins)]
        out["layers"].append(layer)
    out["excess"] = excess if tested else None
    out["tested"] = tested
    return out


SHARPENING_RATIO = 0.9  # a sharpened run's read entropy over its plain twin's, at most
LOSS_NOISE = 0.005  # held-out sampling noise of an evaluated loss (nats): a smaller descent has hardly started


def _read_entropy(run: Sharpness) -> float:
    """Mean over position bins of the last layer's read entropy (sharpest head)."""
    return float(np.mean([e for e in run["layers"][-1]["entropy"] if e is not None]))


def _bound_claims(sharpness: dict[str, list[Sharpness]], what: str) -> list[Claim]:
    """Prop 4 on trained attention (a theorem: never undecided); no row where every bound is 1 (within float32)."""
    runs = [s for kind in sharpness.values() for s in kind if s["excess"] is not None]
    if not runs:
        return []
    tested = sum(s["tested"] for s in runs)
    return [Claim.at_most(
        f"{what} obeys Prop 4 wherever its bound is below 1 (max excess over queries, heads, layers)",
        BOUND_TOL, max(s["excess"] for s in runs),  # type: ignore[type-var]
        f"a theorem, with sigma = sigma_max |x_i| max_j |x_j| (the latents' norms); {BOUND_TOL:g} for float32; "
        f"{tested} (query, head, layer) triples; the rest, the first query among them, have bound 1")]


def _sharpening_claims(sharpness: dict[str, list[Sharpness]], sharpened_moving: int) -> list[Claim]:
    """Sharpening's direct effect on the read entropy against the plain control, undecided while it descends or while
    the seeds' spread leaves their mean within noise of the bound."""
    if "sharpened" not in sharpness:
        return []
    plain = [_read_entropy(p) for p in sharpness["plain"]]
    ratios = [_read_entropy(s) / max(p, 1e-12) for s, p in zip(sharpness["sharpened"], plain)]
    ratio = float(np.max(ratios))  # a seed without a finite ratio makes the row fail, not vanish from it
    return [Claim.at_most(
        "sharpening lowers the last layer's read entropy by at least a tenth, every seed (largest sharpened / "
        "plain ratio)", SHARPENING_RATIO, ratio,
        "the penalty's direct effect on paired runs (same start, same batches): without the penalty the ratio is "
        "exactly 1; a tenth below it asks the penalty for an effect of some size, not only a sign, while the spread "
        "between unsharpened seeds varies too much between machines to be the bound"
    ).eventually(*_unsettled({"sharpened": sharpened_moving}, "sharpened")
                 ).held_to_spread(SHARPENING_RATIO, ratios, "--seeds")]


def _per_seed(runs: dict[str, list[tuple[int, int]]], name: str) -> str:
    """Wrong reads per seed on one test set, with the reads each seed made."""
    return f"{', '.join(str(w) for w, _ in runs[name])} of {runs[name][0][1]} reads"


REPORTED = {
    "transformer": "a long, irregular tail of errors on sparse and dense strings, varying between seeds "
                   "(R1; 6 layers, T = 512)",
    "lstm": "0 errors in 100 of 100 runs (R2)",
    "plain": "no counterpart: a second phase without penalty, the paired control of the sharpened and rare ones "
             "(same start, batches and schedule)",
    "sharpened": "among the strongest cuts of sparse-string errors, orders of magnitude (R6), but errors persist "
                 "(R7, R8)",
    "rare": "the fewest errors by a wide margin; none detected in 6 of 25 runs (R4)",
}


def _per_kind(counts: dict[str, dict[str, list[tuple[int, int]]]]) -> list[tuple[str, str, str]]:
    """Each kind's wrong reads per seed on the three test sets, beside what the thesis reports for it."""
    return [(f"{kind}: wrong reads per seed ({len(runs['sparse'])} seeds), in distribution; sparse; dense",
             REPORTED[kind], "; ".join(_per_seed(runs, name) for name in ("in-distribution", "sparse", "dense")))
            for kind, runs in counts.items()]


def _training_vs_seed(data: TrainingData) -> list[tuple[str, str, str]]:
    """The premise, R1 and R2 beside the first phase's and the LSTMs' wrong reads."""
    runs = data["counts"]["transformer"]
    inside = runs["in-distribution"]
    seeds = len(inside)
    erring = sorted(errors for errors, _ in inside if errors)
    others = f", the others {erring[0]} to {erring[-1]} wrong in {inside[0][1]} reads" if erring else ""
    trained_to_zero = ("transformer seeds with no wrong read on the held-out in-distribution strings (the premise "
                       "this reference asks of its models; the thesis filters no run)",
                       "Transformers \"can appear to learn flip-flop languages perfectly on held-out samples from the "
                       "training distribution\" (Section 3.2.2)",
                       f"{seeds - len(erring)} of {seeds} seeds{others}; {data['still_descending']['transformer']} "
                       f"of {seeds} runs still descending when their steps ended")
    clean = [i for i, (errors, _) in enumerate(inside) if errors == 0]
    rare_errors = [runs["sparse"][i][0] + runs["dense"][i][0] for i in clean]
    both = ("transformer seeds with a wrong read on each rare test set",
            "errors \"on both sparse and dense sequences\", varying between seeds (R1)",
            "; ".join(f"{name}: {sum(errors > 0 for errors, _ in runs[name])} of {seeds}"
                      for name in ("sparse", "dense"))
            + f"; of the {len(clean)} seeds with no wrong in-distribution read, {sum(e > 0 for e in rare_errors)} "
              "err on a rare set")
    return [trained_to_zero, both] + _per_kind(data["counts"])


def _against_twin(counts: dict[str, dict[str, list[tuple[int, int]]]], kind: str) -> str:
    """Per test set: the seeds at which ``kind`` made more wrong reads than its plain twin, and both kinds' wrong
    reads summed over the seeds."""
    def pooled(name: str, of: str) -> int:
        return sum(errors for errors, _ in counts[of][name])
    return "; ".join(
        f"{name}: more in {sum(a[0] > b[0] for a, b in zip(counts[kind][name], counts['plain'][name]))} of "
        f"{len(counts[kind][name])} seeds, {pooled(name, 'plain')} wrong reads in all -> {pooled(name, kind)}"
        for name in ("in-distribution", "sparse", "dense"))


def _second_phases_vs_seed(data: SecondPhaseData) -> list[tuple[str, str, str]]:
    """R4, R6 and R7 beside the second phases' wrong reads, each kind against its plain twin."""
    counts = data["counts"]

    def without_error(runs: dict[str, list[tuple[int, int]]]) -> int:
        return sum(all(errors == 0 for errors, _ in seed) for seed in zip(*runs.values()))
    flawless = "; ".join(f"{kind}: {without_error(runs)} of {len(runs['sparse'])}" for kind, runs in counts.items())
    return _per_kind(counts) + [
        ("sharpened against its plain twin, per test set", "attention sharpening cuts reasoning errors by an order of "
         "magnitude, never to exactly 0 (Section 3.2.2; R6 to R8)", _against_twin(counts, "sharpened")),
        ("rare strings against the plain twin, per test set", "significantly fewer errors on each of the three "
         "distributions (R4)", _against_twin(counts, "rare")),
        ("runs with no wrong read on any of the three test sets", "6 of 25 runs trained on the mixture (R4)", flawless),
    ]


def against_seed(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Rows for the page's seed-versus-reference table, one group per section the run made."""
    rows = _training_vs_seed(data["training"]) if "training" in data else []
    return rows + (_second_phases_vs_seed(data["second_phases"]) if "second_phases" in data else [])


def premise_attempts(reference: Result, attempts: Sequence[Result]) -> list[tuple[str, str, str]]:
    """The reference's training section and each attempt to bring every seed to no wrong in-distribution read:
    what it changed, its seeds, and their wrong in-distribution reads."""
    def row(result: Result, changed: str) -> tuple[str, str, str]:
        inside = result.data["training"]["counts"]["transformer"]["in-distribution"]
        return (changed, ", ".join(str(seed) for seed in result.seeds),
                f"{', '.join(str(errors) for errors, _ in inside)} of {inside[0][1]} reads")
    base = reference.sections["training"]["values"]
    rows = [row(reference, "the reference run")]
    for result in attempts:
        values = result.sections["training"]["values"]
        rows.append(row(result, ", ".join(f"{key} = {values[key]}" for key in values if values[key] != base.get(key))))
    return rows


def check(config: dict[str, Any], n_seeds: int) -> None:
    """d_model divisible by n_head (the heads split the width); checked before any section runs."""
    check_heads(config["d_model"], config["n_head"])


# quick: four seeds. The quick runs are chaotic: another kernel path or thread count trains other models from the
# same seeds, so each CPU draws afresh which seeds glitch (results/kernel-paths/dilution-quick.json). Two in three
# seed-runs glitched in the survey at three seeds (issue 48), so a row that needs one glitching seed of three went
# unmet on about one CPU in 27, of four on one in 80; the first phase the two sections share pays for the fourth
CHAPTER = Chapter("dilution", "Attention dilution and flip-flop glitches", PARAMS,
                  seeds={"quick": 4, "reference": 8, "full": 10},
                  sections=(
                      Section("bound", "Proposition 4: the dilution bound", bound),
                      Section("construction", "Proposition 3: a two-layer construction, then its weights held fixed",
                              construction),
                      Section("simulator", "Proposition 5: linear positions and the wrong write", simulator),
                      Section("training", "Training: a tail of errors on rare strings", training, trains=True,
                              rows=training_rows),
                      Section("second_phases", "Second phases: sharpening the attention, training on rare strings",
                              second_phases, trains=True, rows=second_phase_rows),
                  ), check=check, reference_sections=("training", "second_phases"))
