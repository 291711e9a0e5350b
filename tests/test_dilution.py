"""Flip-flop data, attention-dilution theory and the dilution chapter's helpers."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from scipy.stats import binom

from sandboxes import members
from sandboxes.chapters import dilution as chapter
from sandboxes.chapters.dilution import judge, measure, paper
from sandboxes.data.flipflop import (
    IGNORE_INDEX,
    NOOP,
    ONE,
    WRITE0,
    WRITE1,
    ZERO,
    Annealed,
    FlipFlop,
    FlipFlopAutomaton,
    I,
    Mixture,
    R,
    Sharpened,
    W,
    all_strings,
    automaton_states,
    check_sequences,
    latest_write_position,
    read_errors,
)
from sandboxes.losses import attention_entropy
from sandboxes.model import GPT, LSTM, GPTConfig, WithAttention
from sandboxes.profiles import resolve
from sandboxes.results import RESULTS_DIR, Result
from sandboxes.theory import dilution as theory
from sandboxes.trainer import TrainConfig, train
from sandboxes.workers import train_spread

from conftest import TINY

EXACT = 1e-12  # float64 round-off


def _latest_write_by_scanning(seq: list[int]) -> list[int | None]:
    """Reference answer at every position: the bit after the latest ``w`` before it (plain loop)."""
    answers, bit = [], None
    for t, token in enumerate(seq):
        if t % 2 == 1 and seq[t - 1] == W:
            bit = token
        answers.append(bit)
    return answers


# ---------------------------------------------------------------- data
@pytest.mark.parametrize("p_i", [0.0, 0.1, 0.8, 0.98, 1.0])
def test_every_read_is_answered_by_the_latest_write(p_i):
    seq = FlipFlop.with_ignore(40, p_i).sequences(200, torch.Generator().manual_seed(0))
    check_sequences(seq)
    for row in seq.tolist():
        answers = _latest_write_by_scanning(row)
        for t in range(1, len(row), 2):
            if row[t - 1] == R:
                assert row[t] == answers[t - 2]


def test_strings_start_with_a_write_end_with_a_read_and_alternate():
    seq = FlipFlop.with_ignore(20, 0.5).sequences(500, torch.Generator().manual_seed(1))
    assert (seq[:, 0] == W).all() and (seq[:, -2] == R).all()
    assert ((seq[:, 0::2] >= W) & (seq[:, 0::2] <= I)).all()
    assert ((seq[:, 1::2] == ZERO) | (seq[:, 1::2] == ONE)).all()


@pytest.mark.parametrize("p_w, p_r", [(0.1, 0.1), (0.45, 0.45), (0.01, 0.01), (0.3, 0.1)])
def test_instruction_frequencies_match_p(p_w, p_r):
    n, length = 4000, 52
    seq = FlipFlop(length, p_w, p_r).sequences(n, torch.Generator().manual_seed(2))
    middle = seq[:, 2:-2:2].reshape(-1)  # the i.i.d. instructions
    for token, p in ((W, p_w), (R, p_r), (I, 1 - p_w - p_r)):
        freq = float((middle == token).double().mean())
        tol = 5 * math.sqrt(p * (1 - p) / middle.numel()) + 1e-12  # five binomial standard deviations
        assert abs(freq - p) <= tol


def test_bits_after_writes_and_ignores_are_fair_coins():
    seq = FlipFlop.with_ignore(64, 0.5).sequences(3000, torch.Generator().manual_seed(3))
    free = seq[:, 1::2][seq[:, 0::2] != R]
    tol = 5 * math.sqrt(0.25 / free.numel())  # five binomial standard deviations
    assert abs(float((free == ONE).double().mean()) - 0.5) <= tol


def test_clean_mode_scores_only_the_bit_after_each_read():
    x, y = FlipFlop.with_ignore(30, 0.5).sample(100, torch.Generator().manual_seed(4))
    assert ((y != IGNORE_INDEX) == (x == R)).all()
    assert ((y[x == R] == ZERO) | (y[x == R] == ONE)).all()


def test_generative_mode_scores_every_next_token():
    task = FlipFlop.with_ignore(30, 0.5, mode="generative")
    x, y = task.sample(50, torch.Generator().manual_seed(5))
    seq = task.sequences(50, torch.Generator().manual_seed(5))
    assert (y != IGNORE_INDEX).all() and torch.equal(torch.cat([x[:, :1], y], dim=1), seq)


def test_sampling_is_reproducible_from_the_generator_seed():
    task = FlipFlop.with_ignore(16, 0.8)
    a = task.sequences(10, torch.Generator().manual_seed(7))
    assert torch.equal(a, task.sequences(10, torch.Generator().manual_seed(7)))


@pytest.mark.parametrize("length", [4, 6, 8, 12])
def test_all_strings_enumerates_each_valid_string_once(length):
    strings = all_strings(length)
    check_sequences(strings)
    assert len(strings) == 2 * 5 ** (length // 2 - 2)  # w: 2 bits, r: 1, i: 2 -> 5 per free slot
    assert len(strings.unique(dim=0)) == len(strings)


def test_read_errors_counts_reads_whose_argmax_is_not_the_written_bit():
    seq = torch.tensor([[W, ONE, I, ZERO, R, ONE, R, ONE]])
    x = seq[:, :-1]
    logits = torch.zeros(1, 7, 5)
    logits[0, 4, ONE] = 1.0  # first read right
    logits[0, 6, ZERO] = 1.0  # second read wrong
    logits[0, 0, ZERO] = 5.0  # a non-read position: not counted
    assert read_errors(logits, x) == (1, 2)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(length=7, p_w=0.1, p_r=0.1),
        dict(length=2, p_w=0.1, p_r=0.1),
        dict(length=8, p_w=0.7, p_r=0.4),
        dict(length=8, p_w=-0.1, p_r=0.1),
        dict(length=8, p_w=0.1, p_r=0.1, mode="noisy"),
    ],
)
def test_invalid_languages_are_rejected(kwargs):
    with pytest.raises(ValueError):
        FlipFlop(**kwargs)


def test_a_read_that_returns_a_stale_bit_is_invalid():
    with pytest.raises(ValueError):
        check_sequences(torch.tensor([[W, ONE, W, ZERO, R, ONE]]))


# ---------------------------------------------------------------- Proposition 4
@pytest.mark.parametrize("T", [1, 2, 17, 1000])
@pytest.mark.parametrize("sigma", [0.0, 0.3, 2.0, 7.0])
def test_bound_is_the_propositions_expression(T, sigma):
    written = 1 - (T - 1) / (T - 1 + math.exp(2 * sigma))
    assert abs(float(theory.max_weight_bound(T, sigma)) - written) <= EXACT


@pytest.mark.parametrize("T", [2, 3, 50, 500])
@pytest.mark.parametrize("sigma", [0.1, 1.0, 4.0])
def test_extremal_input_attains_the_bound_through_gpt_attention(T, sigma):
    model, idx = theory.extremal_attention(sigma, T)
    assert abs(float(theory.spectral_norms(model.blocks[0].attn)[0]) - sigma) <= EXACT
    with torch.no_grad():
        weight = float(model(idx, return_attention=True)[1][0][0, 0, -1, 0])
    assert abs(weight - float(theory.max_weight_bound(T, sigma))) <= EXACT


def _random_gpt(d: int, n_head: int, std: float, seed: int) -> GPT:
    torch.manual_seed(seed)
    config = GPTConfig(
        vocab_size=7, block_size=64, n_layer=2, n_head=n_head, d_model=d, positional="learned", init_std=std, tied=False
    )
    return GPT(config).double()


@pytest.mark.parametrize("n_head", [1, 2, 4])
def test_bilinear_forms_reproduce_the_gpt_attention(n_head):
    model = _random_gpt(8, n_head, 0.5, seed=n_head)
    idx = torch.randint(0, 7, (3, 20), generator=torch.Generator().manual_seed(0))
    x = theory.attention_inputs(model, idx)[0]
    scores = torch.einsum("bid,hde,bje->bhij", x, theory.bilinear_forms(model.blocks[0].attn), x)
    causal = torch.ones(20, 20, dtype=torch.bool).tril()
    expected = scores.masked_fill(~causal, float("-inf")).softmax(-1)
    with torch.no_grad():
        got = model(idx, return_attention=True)[1][0]
    assert torch.allclose(got, expected, atol=EXACT, rtol=0)


@pytest.mark.parametrize("std", [0.05, 0.5, 2.0])
def test_attention_of_any_gpt_obeys_the_bound_at_every_query(std):
    model = _random_gpt(8, 2, std, seed=11)
    idx = torch.randint(0, 7, (8, 64), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        _, attention = model(idx, return_attention=True)
        sigmas = theory.effective_sigmas(model, idx)
    for att, sigma in zip(attention, sigmas):
        bound = theory.max_weight_bound(np.arange(1, 65), sigma.numpy())
        assert (att.max(dim=-1).values.numpy() <= bound + EXACT).all()


@pytest.mark.parametrize("sigma", [0.5, 1.0, 2.5, 4.0])
@pytest.mark.parametrize("threshold", [0.1, 0.5, 0.9, 0.99])
def test_dilution_length_is_the_first_length_at_or_below_threshold(sigma, threshold):
    T = theory.dilution_length(sigma, threshold)
    assert theory.max_weight_bound(T, sigma) <= threshold
    assert T == 1 or theory.max_weight_bound(T - 1, sigma) > threshold


@pytest.mark.parametrize("T", [2, 8, 100])
def test_worst_case_of_a_form_is_below_the_bound_and_attains_it_for_scaled_identities(T):
    rng = np.random.default_rng(T)
    for _ in range(5):
        M = rng.normal(size=(2, 2))
        M *= 1.5 / np.linalg.norm(M, 2)
        assert theory.worst_case_max_weight(M, T) <= theory.max_weight_bound(T, 1.5) + EXACT
    for sign in (1.0, -1.0):
        assert abs(theory.worst_case_max_weight(sign * 1.5 * np.eye(2), T) - theory.max_weight_bound(T, 1.5)) <= EXACT


# ---------------------------------------------------------------- Proposition 3
@pytest.fixture(scope="module")
def construction():
    return theory.flipflop_construction(theory.FlipFlopWeights())


def _wrong_reads(model: GPT, seq: torch.Tensor) -> int:
    x = seq[:, :-1]
    with torch.no_grad():
        return read_errors(model(x), x)[0]


@pytest.mark.parametrize("length", [4, 8, 12])
def test_construction_answers_every_read_of_every_short_string(construction, length):
    assert _wrong_reads(construction, all_strings(length)) == 0


@pytest.mark.parametrize("p_i", [0.0, 0.1, 0.8, 0.98])
def test_construction_answers_every_read_at_its_base_length(construction, p_i):
    seq = FlipFlop.with_ignore(64, p_i).sequences(100, torch.Generator().manual_seed(8))
    assert _wrong_reads(construction, seq) == 0


def test_construction_is_certified_up_to_the_safe_length_and_not_beyond():
    weights = theory.FlipFlopWeights()
    safe = theory.safe_length(weights)
    assert min(theory.construction_conditions(weights, safe).values()) > 0
    assert min(theory.construction_conditions(weights, safe + 2).values()) <= 0


@pytest.mark.parametrize("block_size", [64, 100, 130, 132, 134, 136, 160])
def test_witness_closed_form_agrees_with_the_gpt(block_size):
    weights = theory.FlipFlopWeights()
    x = torch.tensor([theory.WITNESS])
    model = theory.flipflop_construction(weights, block_size)
    assert (_wrong_reads(model, torch.cat([x, x[:, :1]], dim=1)) == 1) == theory.witness_answer_wrong(
        weights, block_size
    )


def test_construction_keeps_its_weights_when_the_block_size_grows():
    weights = theory.FlipFlopWeights()
    small, large = (theory.flipflop_construction(weights, size).state_dict() for size in (64, 256))
    assert all(torch.equal(small[k], large[k]) for k in small)


# ---------------------------------------------------------------- Proposition 5
@pytest.mark.parametrize("delta", [0.5, -0.45, 0.0, 1e-3])
def test_simulator_position_product_is_delta(delta):
    weights = replace(theory.SimulatorWeights(), delta=delta)
    assert abs(theory.position_product(theory.simulator(weights), weights.scale) - delta) <= EXACT


def _top_keys(model: GPT, seq: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(seq, return_attention=True)[1][0][:, 0].argmax(-1)


@pytest.mark.parametrize("delta", [0.5, 0.2, 2.0])
def test_case1_top_key_leaves_the_write_at_the_predicted_query(delta):
    weights = replace(theory.SimulatorWeights(), delta=delta)
    switch = theory.case1_switch(weights)
    top = _top_keys(theory.simulator(weights), theory.case1_sequence(switch + 20))[0]
    assert (top[:switch] == 0).all() and (top[switch:] != 0).all()


@pytest.mark.parametrize("delta", [-0.45, -1.3, -3.0])
def test_case2_top_key_and_output_turn_stale_at_the_predicted_length(delta):
    weights = replace(theory.SimulatorWeights(), delta=delta)
    switch = theory.case2_switch(weights)
    seq = theory.case2_sequences(switch + 10)
    model = theory.simulator(weights)
    rows = torch.arange(2, switch + 10)
    top = _top_keys(model, seq)[rows, rows]
    with torch.no_grad():
        out = model(seq).argmax(-1)[rows, rows]
    stale = rows >= switch
    assert (top[~stale] == rows[~stale] - 1).all() and (top[stale] == 0).all()
    assert (out[~stale] == theory.WRITE0).all() and (out[stale] == theory.WRITE1).all()


def test_orthogonal_simulator_tracks_the_latest_write_on_long_strings():
    model = theory.simulator(theory.SimulatorWeights())
    seq = measure._random_simulator_strings(1024, 2)
    assert torch.equal(_top_keys(model, seq), latest_write_position(seq))
    with torch.no_grad():
        assert torch.equal(model(seq).argmax(-1), automaton_states(seq))


@pytest.mark.parametrize("switch, delta", [(theory.case1_switch, -0.5), (theory.case2_switch, 0.5)])
def test_each_case_needs_its_sign(switch, delta):
    with pytest.raises(ValueError):
        switch(replace(theory.SimulatorWeights(), delta=delta))


# ---------------------------------------------------------------- attention sharpening
def test_attention_entropy_is_zero_for_one_hot_rows_and_log_n_for_uniform_ones():
    rows = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25], [0.5, 0.5, 0.0, 0.0]])
    assert torch.allclose(attention_entropy(rows), torch.tensor([0.0, math.log(4), math.log(2)]), atol=1e-6, rtol=0)


def test_sharpened_loss_is_cross_entropy_plus_weighted_mean_entropy():
    task = FlipFlop.with_ignore(8, 0.5)
    x, y = task.sample(4, torch.Generator().manual_seed(0))
    logits = torch.randn(4, 7, 5, generator=torch.Generator().manual_seed(1))
    uniform = torch.ones(7, 7).tril()
    uniform = (uniform / uniform.sum(-1, keepdim=True)).expand(4, 1, 7, 7)
    expected = task.loss(logits, y) + 0.3 * float(np.mean([math.log(t) for t in range(1, 8)]))
    got = Sharpened(task, 0.3).loss((logits, [uniform, uniform]), y)
    assert abs(float(got) - float(expected)) <= 1e-6  # float32 logs


def test_sharpened_training_runs_batched_and_changes_the_weights():
    config = GPTConfig(vocab_size=5, block_size=8, n_layer=2, d_model=8)
    task = Sharpened(FlipFlop.with_ignore(8, 0.5), 0.1)
    result = train(
        lambda: WithAttention(GPT(config)),
        task,
        TrainConfig(steps=3, batch_size=4, eval_size=4),
        seeds=[0, 1],
        progress=False,
    )
    torch.manual_seed(0)
    start = GPT(config)
    assert not torch.equal(result.models[0].gpt.wte.weight, start.wte.weight)
    assert not torch.equal(result.models[0].gpt.wte.weight, result.models[1].gpt.wte.weight)


def test_sharpened_training_one_seed_after_another_matches_the_batched_run():
    # a model whose output is a tuple (logits, attention) also trains on the trainer's unbatched path
    config = GPTConfig(vocab_size=5, block_size=8, n_layer=2, d_model=8)
    task = Sharpened(FlipFlop.with_ignore(8, 0.5), 0.1)
    schedule = TrainConfig(steps=3, batch_size=4, eval_size=4)
    runs = [
        train(lambda: WithAttention(GPT(config)), task, schedule, seeds=[0, 1], batched=batched, progress=False)
        for batched in (True, False)
    ]
    # float32 with a different reduction order (bmm against mm), as in tests/test_trainer.py
    assert np.allclose(runs[0].train_loss, runs[1].train_loss, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- the chapter
@pytest.mark.parametrize("start_steps, trained", [(2, 1), (3, 2)])
def test_the_training_section_and_the_second_phases_share_a_first_phase_of_as_many_steps(
    start_steps, trained, monkeypatch
):
    calls = []

    def counted(request, *args):
        calls.append(request)
        return train_spread(request, *args)

    monkeypatch.setattr(measure, "train_spread", counted)
    values = {**TINY["dilution"], "start_steps": start_steps}
    result = chapter.CHAPTER.run("quick", values, 1, "cpu", False, ["training", "second_phases"])
    assert len(calls) == trained and set(result.sections) == {"training", "second_phases"}


def test_every_row_but_the_trained_ones_holds_even_at_unit_test_scale(tiny_result):
    claims = tiny_result("dilution")["claims"]
    trained = ("training", "second_phases", "sharpening", "sharpened_training", "tail_length", "scaling", "wrong_write")
    assert [c["name"] for c in claims if c["section"] not in trained and not c["holds"]] == []


@pytest.mark.parametrize("name, value", [("T", "31"), ("T", "2"), ("p_i", "1.0"), ("sharpen", "-1"), ("base", "63")])
def test_bad_parameters_are_rejected(name, value):
    with pytest.raises(ValueError):
        resolve(chapter.PARAMS, "quick", {name: value})


def test_the_member_store_tells_two_weights_of_the_penalty_apart():
    # the sweep trains one first phase's models with each weight: a stored member must not serve another weight
    task, model = FlipFlop.with_ignore(8, 0.8), WithAttention(GPT(GPTConfig(vocab_size=5, block_size=8, d_model=8)))
    schedule = measure._schedule(2, 4, 1e-3, 0.0, 0)
    keys = {members.key(schedule, Sharpened(task, w), 0, model, True, torch.device("cpu")) for w in (0.1, 0.3)}
    assert len(keys) == 2


def test_sharpen_zero_is_a_valid_setting():
    assert resolve(chapter.PARAMS, "quick", {"sharpen": "0"})["sharpen"] == 0.0


# ---------------------------------------------------------------- counterfactuals: every row can fail
# Each case builds a wrong theory, a broken model or an untrained one, runs the chapter's own row
# logic on it and names the row (a substring of its name) that must come out failing. The
# coverage test below asks every row of the chapter for a case.
SMALL_GRID = {"sigmas": (1.0, 6.0), "lengths": (2, 16, 64)}


def _bound_rows(bound_fn=theory.max_weight_bound, **wrong):
    # a wrong extremal input, dilution length or latent radius goes into the data, a wrong bound into the judge
    return judge.bound_claims(measure.bound_data(0.5, **SMALL_GRID, **wrong), 0.5, bound_fn)


def _layer2_uniform(weights, size):
    """The construction with layer 2's queries and keys zeroed: it averages every written bit alike."""
    model = theory.flipflop_construction(weights, size)
    with torch.no_grad():
        model.blocks[1].attn.qkv.weight[: 2 * model.config.d_model] = 0.0
    return model


_construction_runs: dict[str, dict] = {}


def _construction_rows(kind: str):
    builds = {
        "layer 2 attention off": _layer2_uniform,
        # the thesis's weights, rebuilt for every length (c grows with T): no positional margin is lost
        "weights rebuilt per length": lambda w, size: theory.flipflop_construction(
            replace(w, base=size or w.base), size
        ),
    }
    if kind not in _construction_runs:
        _construction_runs[kind] = measure.construction_data(theory.FlipFlopWeights(), 4, builds[kind])
    return judge.construction_claims(_construction_runs[kind], 4)


_simulator_runs: dict[str, dict] = {}


def _simulator_rows(kind: str):
    builds = {
        "beta too small": lambda w: theory.simulator(replace(w, beta=1.0)),  # beta / scale = 1/8 < ln 2
        "delta = 0.5 in the orthogonal one": lambda w: theory.simulator(replace(w, delta=w.delta or 0.5)),
    }
    if kind not in _simulator_runs:
        _simulator_runs[kind] = measure.simulator_data(builds[kind], length=160, random_length=512)
    return judge.simulator_claims(_simulator_runs[kind])


def _tiny_tests():
    config = {
        "T": 8,
        "p_i": 0.8,
        "sparse_p_i": 0.98,
        "dense_p_i": 0.1,
        "n_in_distribution": 200,
        "n_sparse": 200,
        "n_dense": 200,
    }
    return measure._test_sets(config)


def _untrained_counts(kind: str):
    torch.manual_seed(0)
    models = [LSTM(5, 8)] if kind == "lstm" else [GPT(GPTConfig(vocab_size=5, block_size=8, n_layer=2, d_model=8))]
    return measure._count(models, _tiny_tests(), torch.device("cpu"))


SETTLED = {"transformer": 0, "sharpened": 0, "lstm": 0}  # every run had settled: the rows may fail


def _training_rows(T: int = judge.SPARSE_TAIL_T, **kinds):
    counts = {kind: _untrained_counts(kind) for kind in ("transformer", "lstm")}
    return judge._training_claims({**counts, **kinds}, SETTLED, T)[0]


def _uniform_rate_counts():
    """One error rate, 1e-3, everywhere: the old count-against-count row passed this model."""
    reads = {"in-distribution": 2394, "sparse": 4607, "dense": 29261}
    return {name: [(round(1e-3 * n), n)] * 3 for name, n in reads.items()}


def _sharp(model, sigmas_of=theory.effective_sigmas):
    seq = FlipFlop.with_ignore(32, 0.8).sequences(16, torch.Generator().manual_seed(0))
    return measure._sharpness(model, seq, torch.device("cpu"), sigmas_of=sigmas_of)


def _sharp_gpt(seed: int) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=5, block_size=32, n_layer=2, d_model=8, init_std=0.5, tied=False))


def _sigma_without_norms(model, idx):
    """Wrong theory: the head's norm alone, as if the latents had norm 1 (they do not)."""
    return [theory.spectral_norms(b.attn)[None, :, None].expand(idx.shape[0], -1, idx.shape[1]) for b in model.blocks]


DIFFUSE_PENALTY = {"sharp_top": 0.85, "stuck": {0.5: 0, 0.9: 0}}  # sharpened heads as diffuse as their plain twins

COUNTERFACTUALS = {
    "extremal input attains the bound": lambda: _bound_rows(
        extremal=lambda sigma, T: theory.extremal_attention(0.9 * sigma, T)
    ),
    "random unit-ball inputs": lambda: _bound_rows(latent_radius=3.0),
    "worst-case inputs of random 2-d forms": lambda: _bound_rows(
        bound_fn=lambda T, sigma: theory.max_weight_bound(T, 0.9 * sigma)
    ),
    "dilution length": lambda: _bound_rows(length_fn=lambda sigma, t: theory.dilution_length(sigma, t) + 1),
    "every string of length 4..16": lambda: _construction_rows("layer 2 attention off"),
    "wrong reads on sparse to all-write strings": lambda: _construction_rows("layer 2 attention off"),
    "up to the safe length": lambda: _construction_rows("layer 2 attention off"),
    "answers 'w 1 i 0 r' with 0": lambda: _construction_rows("weights rebuilt per length"),
    "wrong reads on random strings at block size": lambda: _construction_rows("weights rebuilt per length"),
    "case 1 (delta > 0)": lambda: _simulator_rows("beta too small"),
    "case 2 (delta < 0)": lambda: _simulator_rows("beta too small"),
    "output is the stale bit": lambda: _simulator_rows("beta too small"),
    "top key is not the latest write": lambda: _simulator_rows("delta = 0.5 in the orthogonal one"),
    "wrong states on 4 random strings": lambda: _simulator_rows("beta too small"),
    "LSTM: wrong reads": lambda: _training_rows(),
    "transformer seeds whose error rate on sparse strings": lambda: _training_rows(transformer=_uniform_rate_counts()),
    "transformer seeds whose error rate on dense strings": lambda: _training_rows(transformer=_uniform_rate_counts()),
    "transformer seeds whose error rate on sparse strings (untrained)": lambda: _training_rows(),
    "transformer seeds whose error rate on dense strings (untrained)": lambda: _training_rows(),
    "sharpened seeds whose error rate on sparse strings": lambda: judge._sharpened_claims(
        {"sharpened": _untrained_counts("transformer")}, SETTLED, judge.SPARSE_TAIL_T
    )[0],
    "sharpened seeds whose error rate on dense strings": lambda: judge._sharpened_claims(
        {"sharpened": _untrained_counts("transformer")}, SETTLED, judge.SPARSE_TAIL_T
    )[0],
    # broken: the "rare" phase trained on the plain distribution, so its errors match the plain run's
    "second phase on rare strings against the plain one, sparse strings": lambda: judge._rare_training_claims(
        {"plain": _uniform_rate_counts(), "rare": _uniform_rate_counts()}, {"rare": 0}
    )[0],
    "second phase on rare strings against the plain one, dense strings": lambda: judge._rare_training_claims(
        {"plain": _uniform_rate_counts(), "rare": _uniform_rate_counts()}, {"rare": 0}
    )[0],
    "trained attention obeys Prop 4": lambda: judge._bound_claims(
        {"transformer": [_sharp(_sharp_gpt(0), _sigma_without_norms)]}, "trained attention"
    ),
    "second-phase attention, plain and sharpened, obeys Prop 4": lambda: judge._bound_claims(
        {"plain": [_sharp(_sharp_gpt(0))], "sharpened": [_sharp(_sharp_gpt(1), _sigma_without_norms)]},
        "second-phase attention, plain and sharpened,",
    ),
    "sharpening lowers": lambda: judge._sharpening_claims(  # sharpen = 0: the sharpened run is the plain one
        {"plain": [_sharp(_sharp_gpt(k)) for k in (0, 1)], "sharpened": [_sharp(_sharp_gpt(k)) for k in (0, 1)]}, 0
    ),
    "the penalty acts": lambda: judge.sharpening_rows(SWEEP_CONFIG, _sweep([400, 50], [0.3, 0.3]))[0],
    # a penalty that works as the thesis reports: the weight 1 leaves a hundredth of the plain twins' wrong reads
    "R6 not seen at this scale, sparse strings": lambda: judge.sharpening_rows(SWEEP_CONFIG, _sweep([400, 4]))[0],
    "R6 not seen at this scale, dense strings": lambda: judge.sharpening_rows(SWEEP_CONFIG, _sweep([400, 4]))[0],
    # broken: a penalty from the first step that sharpens nothing (the twins alike), or leaves the errors as they were
    "from the first step, weight": lambda: judge.sharpened_training_rows(SWEEP_CONFIG, _sweep([400, 4], [0.3] * 2))[0],
    "R6, sparse strings": lambda: judge.sharpened_training_rows(SWEEP_CONFIG, _sweep([400, 200]))[0],
    "R6, dense strings": lambda: judge.sharpened_training_rows(SWEEP_CONFIG, _sweep([400, 200]))[0],
    # wrong theory: one error rate in and out of distribution, no tail at the thesis's length
    "at T = 512: transformer seeds whose error rate on sparse strings": lambda: _tail_rows(_uniform_rate_counts()),
    "at T = 512: transformer seeds whose error rate on dense strings": lambda: _tail_rows(_uniform_rate_counts()),
    # wrong theory: more steps leave more wrong sparse reads and fewer dense ones (the budgets' order turned round)
    # (one width, so that each steps row is the only one of its name)
    ": fewer wrong sparse reads per seed": lambda: _scaling_rows(_steps_reversed(R5_SWEEP[:1])),
    ": more wrong dense reads per seed": lambda: _scaling_rows(_steps_reversed(R5_SWEEP[:1])),
    # wrong theory: the wrong reads fall with the width, by a factor 4 a width under seed noise of a factor 3
    "R5, size: no discernible monotonic relation between the width and the wrong sparse": lambda: _scaling_rows(
        _ordered_by_width(R5_SWEEP, "sparse")
    ),
    "R5, size: no discernible monotonic relation between the width and the wrong dense": lambda: _scaling_rows(
        _ordered_by_width(R5_SWEEP, "dense")
    ),
    # broken model: a plain seed at p_noop 0.5 settled with wrong states
    "plain heads simulate the automaton, p_noop = 0.5": lambda: _wrong_write_rows(plain_errors=0.01),
    "plain heads simulate the automaton, p_noop = 0.9": lambda: _wrong_write_rows(plain_errors=0.01),
    # wrong theory of the penalty: it changes nothing, the sharpened heads are as diffuse as their twins
    "the penalty makes the head one-hot, p_noop = 0.5": lambda: _wrong_write_rows(**DIFFUSE_PENALTY),
    "the penalty makes the head one-hot, p_noop = 0.9": lambda: _wrong_write_rows(**DIFFUSE_PENALTY),
    # the thesis's hurdle absent: as many seeds stuck on sparse strings as on dense ones
    "sharpened heads stuck on an earlier write": lambda: _wrong_write_rows(stuck={0.5: 2, 0.9: 2}),
    # wrong theory: Prop 5 without its position-position term predicts no switch where the head switches
    "Prop 5's decomposition read off every trained head": lambda: _wrong_write_rows(
        first_wrong=_first_wrong_of(lambda m: replace(theory.noop_query_scores(m), delta=0.0))
    ),
}

GLITCHING = {"in-distribution": [(0, 30000)] * 3, "sparse": [(40, 30000)] * 3, "dense": [(40, 30000)] * 3}


def _tail_rows(at_512: dict, moving: int = 0) -> list:
    """The tail section's rows for lengths 128 (no row: below the thesis's) and 512, whose seeds count ``at_512``."""
    data = {
        "lengths": [128, 512],
        "counts": [GLITCHING, at_512],
        "still_descending": [0, moving],
        "final_loss": [[0.0] * 3, [0.0] * 3],
    }
    return judge.tail_length_rows({}, data)[0]


def test_the_tail_rows_come_at_the_thesis_s_length_only_and_wait_while_runs_descend():
    claims, silent = judge.tail_length_rows(
        {}, {"lengths": [128], "counts": [GLITCHING], "still_descending": [0], "final_loss": [[0.0] * 3]}
    )
    assert claims == [] and "3 of 3 seeds glitch on sparse strings (120 wrong reads)" in silent[0]
    assert [c.holds for c in _tail_rows(GLITCHING)] == [True, True]
    assert [c.holds for c in _tail_rows(_uniform_rate_counts(), moving=1)] == [None, None]


FLIPFLOP_SETS = ("in-distribution", "sparse", "dense")
SCALE_SEEDS = 25  # the thesis's replicates: the full profile's scale_seeds


def _cell(sparse: np.ndarray, dense: np.ndarray) -> dict:
    """One (width, budget) cell of the scaling sweep: each seed's wrong reads of 30000 per test set."""
    wrong = (np.zeros(len(sparse), dtype=int), sparse, dense)
    return {name: [(int(w), 30000) for w in seeds] for name, seeds in zip(FLIPFLOP_SETS, wrong)}


def _r5_sweep(seed: int = 0) -> list:
    """R5 as the thesis reports it, over 3 widths and 25 seeds: more steps, fewer wrong sparse reads and more dense
    ones; heavy-tailed counts that the width does not order."""
    rng = np.random.default_rng(seed)

    def tail(low: float, high: float) -> np.ndarray:
        return np.round(np.exp(rng.uniform(np.log(low), np.log(high), SCALE_SEEDS))).astype(int)

    return [[_cell(tail(100, 3000), tail(1, 30)), _cell(tail(1, 60), tail(40, 900))] for _ in range(3)]


R5_SWEEP = _r5_sweep()


def _scaling_rows(counts: list, T: int = 512, moving: int = 0) -> list:
    data = {"widths": [64, 128, 256][: len(counts)], "budgets": [1000, 3000], "counts": counts}
    data |= {"still_descending": [[0, moving]] * len(counts)}
    return judge.scaling_rows({"T": T}, data)[0]


def _steps_reversed(counts: list) -> list:
    """The budgets' order turned round: fewer steps leave fewer wrong sparse reads and more dense ones."""
    return [cells[::-1] for cells in counts]


def _ordered_by_width(counts: list, name: str) -> list:
    """The longest budget's ``name`` reads made to fall with the width, each width's seeds scattered over a factor 3
    (a monotonic law of size under seed noise)."""
    rng = np.random.default_rng(1)
    return [
        [cells[0], {**cells[1], name: [(int(w), 30000) for w in 30 * 4 ** (2 - k) * rng.uniform(1, 3, SCALE_SEEDS)]}]
        for k, cells in enumerate(counts)
    ]


def test_r5_rows_hold_on_the_thesis_s_findings_and_judge_sparse_strings_at_its_length_only():
    assert [c.holds for c in _scaling_rows(R5_SWEEP)] == [True] * 8
    shorter = _scaling_rows(R5_SWEEP, T=128)
    assert [c.holds for c in shorter] == [True] * 4 and not any("sparse" in c.name for c in shorter)


def test_r5_steps_rows_wait_for_runs_still_descending_and_for_seeds_that_disagree():
    assert {c.holds for c in _scaling_rows(R5_SWEEP, moving=1) if c.name.startswith("R5, steps")} == {None}
    # one seed carries the pooled sum (1000 -> 900 sparse reads) while the three others go from 0 to 10: no direction
    split = [
        [_cell(np.array([1000, 0, 0, 0]), np.array([5] * 4)), _cell(np.array([900, 10, 10, 10]), np.array([5] * 4))]
    ]
    data = {"widths": [64], "budgets": [1000, 3000], "counts": split, "still_descending": [[0, 0]]}
    sparse = judge.scaling_rows({"T": 512}, data)[0][0]
    assert "sparse" in sparse.name and sparse.holds is None and "neither direction" in sparse.reason


def _unlearned(cell: dict, rate: float = 0.1) -> dict:
    """``cell`` with each run wrong on ``rate`` of its in-distribution reads: models that have not learned the task."""
    return {**cell, "in-distribution": [(int(rate * reads), reads) for _, reads in cell["in-distribution"]]}


def test_r5_rows_wait_for_models_that_learned_the_task():
    short_unlearned = [[_unlearned(cells[0]), cells[1]] for cells in R5_SWEEP]
    rows = {c.name: c for c in _scaling_rows(short_unlearned)}
    assert {c.holds for name, c in rows.items() if name.startswith("R5, steps")} == {None}
    assert all("in-distribution reads" in c.reason for name, c in rows.items() if name.startswith("R5, steps"))
    assert {c.holds for name, c in rows.items() if name.startswith("R5, size")} == {True}
    long_unlearned = [[cells[0], _unlearned(cells[1], judge.LEARNED_RATE * 1.5)] for cells in R5_SWEEP]
    assert {c.holds for c in _scaling_rows(long_unlearned)} == {None}


def test_r5_makes_no_steps_row_where_its_seeds_cannot_reach_the_level():
    two = [[{name: runs[:2] for name, runs in cell.items()} for cell in cells] for cells in R5_SWEEP]
    data = {"widths": [64, 128, 256], "budgets": [1000, 3000], "counts": two, "still_descending": [[0, 0]] * 3}
    claims, silent = judge.scaling_rows({"T": 512}, data)
    assert not any(c.name.startswith("R5, steps") for c in claims)
    assert any("smallest p-value with 2 a side, 0.167" in s for s in silent)
    three = [[{name: runs[:3] for name, runs in cell.items()} for cell in cells] for cells in R5_SWEEP]
    assert any(c.name.startswith("R5, steps") for c in judge.scaling_rows({"T": 512}, data | {"counts": three})[0])


def test_r5_size_row_asks_for_the_fewest_runs_whose_interval_can_lie_within_its_bound():
    def widest_at_zero(runs: int) -> float:
        return math.tanh(1.959964 * math.sqrt(1.06 / (runs - 3)))

    assert widest_at_zero(judge.SIZE_RUNS) <= judge.SIZE_NEGLIGIBLE < widest_at_zero(judge.SIZE_RUNS - 1)


def test_r5_makes_no_row_without_errors_to_compare_or_runs_to_order():
    quiet = [[_cell(np.zeros(4, int), np.array([3, 0, 0, 0])), _cell(np.zeros(4, int), np.array([5, 0, 0, 0]))]] * 2
    data = {"widths": [64, 128], "budgets": [1000, 3000], "counts": quiet, "still_descending": [[0, 0]] * 2}
    claims, silent = judge.scaling_rows({"T": 512}, data)
    assert [c.name.split(":")[1].split(" per seed")[0] for c in claims] == [" more wrong dense reads"] * 2
    assert any("no wrong sparse read at either budget" in s for s in silent)
    assert any("2 widths and 8 runs" in s for s in silent)


WRONG_WRITE_CONFIG = {"drift_length": 64, "automaton_T": 16}


def _first_wrong_of(predict=theory.noop_query_scores) -> dict:
    """Prop 5's inputs read off the case-1 simulator (delta > 0) with ``predict`` as the decomposition."""
    model = theory.simulator(replace(measure.SIMULATOR, delta=measure.CASE1_DELTA), max_length=64)
    return measure._first_wrong(model, WRONG_WRITE_CONFIG["drift_length"], predict)


def _wrong_write_rows(
    plain_errors: float = 0.0,
    sharp_top: float = 1.0,
    stuck: dict | None = None,
    moving: int = 0,
    first_wrong: dict | None = None,
) -> list:
    """The section's rows on four seeds per run: plain twins diffuse and right, sharpened ones one-hot, ``stuck``
    seeds per p_noop on an earlier write with wrong states (default: 3 at 0.5, none at 0.9)."""
    stuck = {0.5: 3, 0.9: 0} if stuck is None else stuck
    fw = first_wrong or {"case 1": {"predicted": 20, "measured": 20}, "case 2": {"predicted": None, "measured": None}}
    runs = []
    for p in (0.5, 0.9):
        for weight in (0.0, 0.1):
            n = stuck[p] if weight else 0
            top = sharp_top if weight else 0.85
            runs.append(
                {
                    "p_noop": p,
                    "weight": weight,
                    "eval_loss": [[0.5, 0.1]] * 4,
                    "still_descending": moving,
                    "state_errors": [0.2] * n + [0.0 if weight else plain_errors] * (4 - n),
                    "earlier_write": [0.5] * n + [0.0] * (4 - n),
                    "top_weight": [1.0 if weight else top] * n + [top] * (4 - n),
                    "delta": [1.0] * 4,
                    "first_wrong": [fw] * 4,
                    "attention": [[[1.0]]] * 4,
                }
            )
    data = {"automaton_T": 16, "drift_length": 64, "example": [1], "eval_steps": [0, 1], "runs": runs}
    return judge.wrong_write_rows(WRONG_WRITE_CONFIG, data)[0]


def test_the_wrong_write_rows_hold_on_the_thesis_s_picture_and_wait_while_runs_descend():
    assert [c.holds for c in _wrong_write_rows(first_wrong=_first_wrong_of())] == [True] * 6
    waiting = _wrong_write_rows(plain_errors=0.01, stuck={0.5: 2, 0.9: 2}, moving=1)
    assert [c.holds for c in waiting] == [None, None, True, True, None, True]


def test_a_stuck_seed_is_sharp_on_an_earlier_write_with_wrong_states():
    run = {"state_errors": [0.1, 0.1, 0.0, 0.1], "earlier_write": [0.3, 0.3, 0.3, 0.01], "top_weight": [1, 0.5, 1, 1]}
    assert judge.stuck_seeds(run) == 1  # the second is diffuse, the third right, the fourth on the latest write


def test_the_stuck_row_asks_twice_as_many_and_a_quarter_of_the_seeds_more():
    def stuck_row(dense: int, sparse: int):
        return _row(_wrong_write_rows(stuck={0.5: dense, 0.9: sparse}), "stuck on an earlier write")

    assert stuck_row(1, 0).holds is True  # a quarter of four seeds more, and twice none
    assert stuck_row(3, 2).holds is False and stuck_row(2, 1).holds is True and stuck_row(0, 0).holds is False


def test_the_case1_simulator_switches_where_the_closed_form_says_by_weights_and_by_forward_pass():
    first = _first_wrong_of()["case 1"]
    assert (
        first["predicted"]
        == first["measured"]
        == theory.case1_switch(replace(measure.SIMULATOR, delta=measure.CASE1_DELTA))
    )


def test_the_case1_switch_is_delta_s_doing_and_lands_on_the_query_s_own_noop():
    reading = _first_wrong_of()
    first = reading["case 1"]
    assert first["without_delta"] is None  # the position-position term alone pulls the top key off the write
    assert first["key"] == first["measured"]  # onto the query itself, a noop (Fig. 3.33: recent reads)
    assert set(reading) == {"case 1", "case 2", "Fig. 3.33b"}


def test_fig_3_33b_string_has_its_two_writes_and_is_read_after_the_second():
    inputs = theory.drift_inputs(40, gap=5)
    strings, queries = inputs["Fig. 3.33b"]
    assert strings[0, 0] == WRITE1 and strings[0, 6] == WRITE0 and (strings[0, 7:] == NOOP).all()
    assert int(queries[0]) == 7 and int(queries[-1]) == 39
    assert "Fig. 3.33b" not in theory.drift_inputs(30)  # too short for a gap of 32


def test_the_noop_query_decomposition_gives_every_top_key_of_a_random_linear_position_head():
    torch.manual_seed(0)
    config = GPTConfig(
        vocab_size=3, block_size=48, d_model=8, positional="linear", tied=False, n_outputs=2, init_std=1.0
    )
    model = GPT(config).double()
    seq = FlipFlopAutomaton(48, 0.6).sequences(16, torch.Generator().manual_seed(1))
    queries = torch.randint(1, 48, (16,), generator=torch.Generator().manual_seed(2))
    seq[torch.arange(16), queries] = NOOP
    with torch.no_grad():
        weights = model(seq, return_attention=True)[1][0][:, 0]
    expected = weights[torch.arange(16), queries].argmax(-1)
    assert torch.equal(theory.predicted_top_keys(theory.noop_query_scores(model), seq, queries), expected)
    with pytest.raises(ValueError, match="without norm"):
        theory.noop_query_scores(GPT(replace(config, layer_norm=True)))


def test_an_extended_head_reads_the_training_length_as_the_trained_one_did():
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=3, block_size=16, d_model=8, positional="linear", tied=False, n_outputs=2)
    model = GPT(config).double()
    long = measure.extended(model, 128)  # positions rescaled eightfold, as the reference reads them
    seq = FlipFlopAutomaton(128, 0.7).sequences(4, torch.Generator().manual_seed(3))
    state = torch.random.get_rng_state()
    measure.extended(model, 64)
    assert torch.equal(torch.random.get_rng_state(), state)  # building one leaves the global stream alone
    with torch.no_grad():
        short = model(seq[:, :16], return_attention=True)
        extended = long(seq, return_attention=True)
    assert torch.allclose(short[1][0], extended[1][0][:, :, :16, :16], atol=EXACT)
    assert torch.allclose(short[0], extended[0][:, :16], atol=EXACT)


def test_automaton_strings_start_with_a_write_and_target_the_latest_one():
    task = FlipFlopAutomaton(200, 0.9)
    seq, states = task.sample(64, torch.Generator().manual_seed(0))
    assert ((seq[:, 0] == WRITE0) | (seq[:, 0] == WRITE1)).all()
    assert abs(float((seq[:, 1:] == NOOP).float().mean()) - 0.9) < 0.01  # 12736 draws: 3.7 standard errors
    assert torch.equal(states, automaton_states(seq)) and ((states == WRITE0) | (states == WRITE1)).all()
    writes = seq[0] != NOOP
    assert torch.equal(states[0][writes], seq[0][writes])
    with pytest.raises(ValueError, match="p_noop"):
        FlipFlopAutomaton(8, 1.0)


def test_the_penalised_automaton_loss_adds_the_weighted_attention_entropy():
    model = WithAttention(GPT(GPTConfig(vocab_size=3, block_size=8, n_outputs=2, tied=False, positional="linear")))
    task = FlipFlopAutomaton(8, 0.5)
    x, y = task.sample(4, torch.Generator().manual_seed(0))
    logits, attention = model(x)
    entropy = attention_entropy(attention[0]).mean()
    assert torch.allclose(Sharpened(task, 0.3).loss((logits, attention), y), task.loss(logits, y) + 0.3 * entropy)


SWEEP_CONFIG = {"finetune_steps": 500, "start_steps": 3000}


def _sweep(wrong: list[int], entropy: list[float] | None = None, moving: list[int] | None = None) -> dict:
    """A sweep over the weights (0 first) whose seeds make ``wrong`` wrong reads together on each rare set, two
    seeds alike, with the last layer's read entropy of each weight's seeds."""
    entropy = entropy or [0.3 / (1 + 10 * k) for k in range(len(wrong))]
    return {
        "coefficients": [0.0, 1.0, 10.0][: len(wrong)],
        "counts": {name: [[(w // 2, 30000), (w - w // 2, 30000)] for w in wrong] for name in judge.RARE_SETS},
        "read_entropy": [[e, e] for e in entropy],
        "final_loss": [[0.01, 0.01] for _ in wrong],
        "still_descending": moving or [0] * len(wrong),
    }


def test_the_sweep_holds_where_no_weight_cuts_tenfold_and_waits_while_a_sharpened_run_descends():
    claims, silent = judge.sharpening_rows(SWEEP_CONFIG, _sweep([400, 200, 300]))
    assert [c.holds for c in claims] == [True, True, True] and silent == ()
    assert claims[1].measured == "0.5" and "smallest at 1" in claims[1].reason
    waiting, _ = judge.sharpening_rows(SWEEP_CONFIG, _sweep([400, 200, 300], moving=[0, 0, 1]))
    assert [c.holds for c in waiting] == [True, None, None]  # the penalty acted; R6 may yet appear


def test_the_sweep_s_findings_and_table_give_each_weight_against_the_plain_twins():
    data = _sweep([400, 200, 30000], moving=[0, 0, 2])
    lines = chapter.sharpening_findings(data)
    assert lines[0].startswith("weight 1: wrong reads over the plain twins' (pooled), sparse 0.50, dense 0.50")
    assert "seeds with fewer or more than their twin, sparse 2 fewer, 0 more, dense 2 fewer, 0 more" in lines[0]
    assert "50.0% of sparse reads wrong; 2 of 2 runs still descending" in lines[1]
    table = paper.sharpening_vs_paper(data)
    assert "0: 400, 1: 200, 10: 30000 (of 30000 each)" in table[1][2]


def test_the_penalty_row_reads_the_largest_weight_wherever_the_reader_lists_it():
    data = _sweep([400, 200, 300], entropy=[0.3, 0.1, 0.3])  # weights 0, 1, 10: only 1 sharpens
    unsorted = {**data, "coefficients": [0.0, 10.0, 1.0]}  # the same runs, the sharp one now the largest weight
    assert judge.sharpening_rows(SWEEP_CONFIG, data)[0][0].holds is False
    acts = judge.sharpening_rows(SWEEP_CONFIG, unsorted)[0][0]
    assert acts.holds is True and "largest weight (10)" in acts.name


def test_no_sweep_row_on_a_set_where_the_plain_twins_made_too_few_errors():
    claims, silent = judge.sharpening_rows(SWEEP_CONFIG, _sweep([6, 0]))
    assert [c.name.split(":")[0] for c in claims] == ["the penalty acts"] and len(silent) == 2
    assert "made 6 wrong reads" in silent[0]


def test_the_penalty_from_the_first_step_holds_r6_where_it_cuts_tenfold_and_waits_on_descending_runs():
    claims, silent = judge.sharpened_training_rows(SWEEP_CONFIG, _sweep([400, 40, 4]))
    assert [c.holds for c in claims] == [True, True, True, True] and silent == ()
    assert claims[2].measured == "0.01" and "smallest at 10" in claims[2].reason and "3000 steps" in claims[2].reason
    failing = judge.sharpened_training_rows(SWEEP_CONFIG, _sweep([400, 200, 300], moving=[0, 0, 1]))[0]
    assert [c.holds for c in failing] == [True, True, None, None]  # fails while a sharpened run still descends
    early = judge.sharpened_training_rows(SWEEP_CONFIG, _sweep([400, 40, 4], moving=[1, 0, 0]))[0]
    assert [c.holds for c in early] == [True, True, None, None]  # holds while a plain twin still descends
    assert judge.sharpened_training_rows(SWEEP_CONFIG, _sweep([6, 0]))[1][0].startswith("R6 from the first step")


def test_the_annealed_penalty_trains_its_first_step_unpenalised_and_its_last_at_the_full_weight():
    task = FlipFlop.with_ignore(8, 0.8)
    annealed = Annealed(task, 5.0)
    assert annealed.at_step(0, 3) == Sharpened(task, 0.0) and annealed.at_step(2, 3) == Sharpened(task, 5.0)
    make = lambda: WithAttention(GPT(GPTConfig(vocab_size=5, block_size=8, d_model=8)))  # noqa: E731
    schedule = measure._schedule(2, 4, 1e-3, 0.0, 0)
    ramped, plain = (
        train(make, t, schedule, [0], batched=False).train_loss[0] for t in (annealed, Sharpened(task, 0.0))
    )
    full = train(make, Sharpened(task, 5.0), schedule, [0], batched=False).train_loss[0]
    assert ramped[0] == plain[0] != full[0]  # the same model and batch: the penalty off at the first step
    assert ramped[1] > plain[1]  # and on at the last
    model, (x, y) = make(), task.sample(4, torch.Generator().manual_seed(0))
    logits, attention = model(x)
    assert annealed.loss((logits, attention), y) == task.loss(logits, y)  # held out: the reads alone


def test_the_findings_of_runs_from_scratch_give_each_weight_s_wrong_reads_in_distribution_first():
    data = _sweep([400, 200])
    data["counts"]["in-distribution"] = [[(0, 500), (3, 500)], [(7, 500), (9, 500)]]
    lines = chapter.sharpening_findings(data)
    assert lines[0] == "in distribution (500 reads a seed), wrong reads per seed: plain [0, 3]; weight 1 [7, 9]"
    assert lines[1].startswith("weight 1: wrong reads over the plain twins' (pooled), sparse 0.50")
    assert "rising linearly from 0" in paper.sharpened_training_vs_paper(data)[0][2]


def _row(claims, key: str):
    name = key.split(" (untrained)")[0]
    matches = [c for c in claims if name in c.name]
    assert len(matches) == 1, f"{key!r} matches {[c.name for c in matches]}"
    return matches[0]


@pytest.mark.parametrize("key", list(COUNTERFACTUALS))
def test_each_row_fails_on_its_counterfactual(key):
    assert _row(COUNTERFACTUALS[key](), key).holds is False


@pytest.mark.parametrize(
    "key",
    [
        "extremal input attains the bound",
        "random unit-ball inputs",
        "worst-case inputs of random 2-d forms",
        "dilution length",
    ],
)
def test_the_bound_rows_hold_with_the_right_theory_on_the_small_grid(key):
    assert _row(_bound_rows(), key).holds


def test_the_prop4_row_holds_with_the_latents_norms_on_the_same_model():
    claims = judge._bound_claims({"transformer": [_sharp(_sharp_gpt(0))]}, "trained attention")
    assert _row(claims, "trained attention obeys Prop 4").holds


def test_the_first_query_is_not_tested_by_the_prop4_row():
    # one key: weight 1 and bound 1, the excess is exactly 0 whatever the theory; only informative queries count
    run = _sharp(_sharp_gpt(0))
    assert run["excess"] is not None and run["excess"] < 0
    assert run["tested"] < 2 * 16 * 31  # layers x strings x queries


def test_rate_test_separates_a_tail_from_one_uniform_rate():
    assert judge.rate_pvalue(0, 30000, 20, 30000) < 1e-5
    assert judge.rate_pvalue(3, 2394, 35, 33868) > 0.1  # one rate, 1e-3, in both
    assert judge.rate_pvalue(0, 10, 0, 10) == 1.0
    assert judge.glitching_seeds(_uniform_rate_counts(), "sparse") == 0
    assert judge.glitching_seeds(_uniform_rate_counts(), "dense") == 0


def test_every_row_of_the_chapter_has_a_counterfactual(tiny_result):
    keys = [key.split(" (untrained)")[0] for key in COUNTERFACTUALS]
    missing = [c["name"] for c in tiny_result("dilution")["claims"] if not any(k in c["name"] for k in keys)]
    assert missing == []


def test_rows_about_trained_models_are_undecided_while_those_models_still_descend():
    counts = {kind: _untrained_counts(kind) for kind in ("transformer", "lstm")}
    claims, _ = judge._training_claims(counts, {"transformer": 1, "lstm": 1}, judge.SPARSE_TAIL_T)
    assert [c.holds for c in claims] == [None, None, None] and "lstm_steps" in claims[0].reason
    sharpened, _ = judge._sharpened_claims({"sharpened": counts["transformer"]}, {"sharpened": 1}, judge.SPARSE_TAIL_T)
    assert [c.holds for c in sharpened] == [None, None] and "finetune_steps" in sharpened[0].reason


def test_sparse_and_dense_tails_are_rows_of_their_own_and_sparse_waits_for_the_thesis_length():
    # errors on dense strings alone: the pooled row held on them; the sparse row must not
    dense_only = {
        "in-distribution": [(0, 30000)] * 3,
        "sparse": [(0, 30000)] * 3,
        "dense": [(40, 30000)] * 3,
    }
    claims, silent = judge._training_claims(
        {"transformer": dense_only, "lstm": _untrained_counts("lstm")}, SETTLED, judge.SPARSE_TAIL_T
    )
    by_set = {rare: _row(claims, f"transformer seeds whose error rate on {rare} strings") for rare in judge.RARE_SETS}
    assert by_set["dense"].holds is True and by_set["sparse"].holds is False and silent == ()
    shorter, silent = judge._training_claims(
        {"transformer": dense_only, "lstm": _untrained_counts("lstm")}, SETTLED, judge.SPARSE_TAIL_T - 2
    )
    assert not any("sparse strings" in c.name for c in shorter) and "T = 512" in silent[0]


def test_the_rare_training_rows_ask_an_order_of_magnitude_on_each_set_apart():
    plain = {"in-distribution": [(5, 1000)] * 2, "sparse": [(50, 1000)] * 2, "dense": [(50, 1000)] * 2}
    # a tenth on dense, a fifth on sparse: significant on both, an order of magnitude on dense alone
    rare = {"in-distribution": [(5, 1000)] * 2, "sparse": [(10, 1000)] * 2, "dense": [(5, 1000)] * 2}
    claims, _ = judge._rare_training_claims({"plain": plain, "rare": rare}, {"rare": 0})
    assert judge.rare_training_pvalue(plain["sparse"], rare["sparse"]) < judge.GLITCH_LEVEL
    assert [c.holds for c in claims] == [False, True]


@pytest.mark.parametrize("base", [6, 8, 20, 30])
def test_the_construction_runs_and_holds_at_every_even_base(base):
    # base 20 once swept odd block sizes, base 8 once checked strings longer than its block
    result = chapter.CHAPTER.run(
        "quick", {"base": base, "n_construction": 4}, seeds=1, device="cpu", sections=["construction"]
    )
    assert result.claims and result.verdict.holds, result.verdict.text()


def test_the_rare_training_row_holds_when_rare_training_removes_the_errors_and_is_silent_without_errors():
    plain, clean = (
        _uniform_rate_counts(),
        {name: [(0, n)] * 3 for name, n in (("in-distribution", 2394), ("sparse", 4607), ("dense", 29261))},
    )
    claims, silent = judge._rare_training_claims({"plain": plain, "rare": clean}, {"rare": 0})
    assert [c.holds for c in claims] == [True, True] and silent == ()
    claims, silent = judge._rare_training_claims({"plain": clean, "rare": clean}, {"rare": 0})
    assert claims == [] and all("below 7" in s for s in silent) and len(silent) == 2
    still, _ = judge._rare_training_claims({"plain": plain, "rare": plain}, {"rare": 1})
    assert still[0].holds is None and "finetune_steps" in still[0].reason  # no fewer errors, but still descending


def test_the_smallest_significant_split_needs_seven_errors():
    # all errors in the plain run: p = 2^-k, which is below 0.01 first at k = 7
    assert binom.cdf(0, judge.MIN_ERRORS, 0.5) < judge.GLITCH_LEVEL < binom.cdf(0, judge.MIN_ERRORS - 1, 0.5)


def test_a_mixture_draws_each_strings_p_i_from_its_list():
    mix = Mixture(64, (0.98, 0.1))
    seq = mix.sequences(4000, torch.Generator().manual_seed(0))
    check_sequences(seq)
    ignore_share = (seq[:, 2:-2:2] == I).float().mean(dim=1)  # the free instructions of each string
    assert ((ignore_share > 0.8) | (ignore_share < 0.35)).all()  # each string is from one component
    assert abs(float((ignore_share > 0.5).float().mean()) - 0.5) < 0.03  # half from each: 4 std errors of 0.008
    again = mix.sequences(4000, torch.Generator().manual_seed(0))
    assert torch.equal(seq, again)


def test_a_mixture_of_one_p_i_is_that_language():
    # same generator stream but for the component draw; the law is the same, so compare instruction frequencies
    seq = Mixture(32, (0.5,)).sequences(4000, torch.Generator().manual_seed(1))
    assert abs(float((seq[:, 2:-2:2] == I).float().mean()) - 0.5) < 0.01
    with pytest.raises(ValueError, match="p_i"):
        Mixture(32, (1.5,))


def test_the_witness_count_finds_either_bit_at_instruction_positions_only():
    seq = torch.tensor(
        [[W, ONE, I, ZERO, R, ONE, W, ZERO, I, ONE, R, ZERO], [R, W, ONE, I, ZERO, R, I, ONE, I, ONE, R, ONE]]
    )  # row 2: the pattern off the instruction grid
    assert measure.witness_count(seq) == 2


def test_the_random_string_row_is_made_only_where_the_witness_pattern_occurs():
    data = measure.construction_data(theory.FlipFlopWeights(base=8), 1)
    names = [c.name for c in judge.construction_claims(data, 1)]
    assert any("wrong reads on random strings" in n for n in names) == (data["witness_at_onset"] > 0)
    data["witness_at_onset"] = 0
    assert not any("wrong reads on random strings" in c.name for c in judge.construction_claims(data, 1))


def test_the_table_counts_each_kind_against_its_plain_twin_and_the_runs_without_an_error():
    def runs(inside, sparse, dense):
        return {
            "in-distribution": [(e, 100) for e in inside],
            "sparse": [(e, 50) for e in sparse],
            "dense": [(e, 50) for e in dense],
        }

    counts = {
        "plain": runs([1, 0], [5, 0], [7, 0]),
        "sharpened": runs([2, 0], [1, 0], [9, 1]),
        "rare": runs([0, 3], [0, 0], [0, 0]),
    }
    rows = {what: ours for what, _, ours in paper.second_phases_vs_paper({"counts": counts})}
    assert rows["sharpened against its plain twin, per test set"] == (
        "in-distribution: more in 1 of 2 seeds, 1 wrong reads in all -> 2; sparse: more in 0 of 2 seeds, 5 wrong reads "
        "in all -> 1; dense: more in 2 of 2 seeds, 7 wrong reads in all -> 10"
    )
    assert (
        rows["runs with no wrong read on any of the three test sets"]
        == "plain: 1 of 2; sharpened: 0 of 2; rare: 1 of 2"
    )


def test_the_premise_table_names_what_each_attempt_changed_and_its_seeds_errors():
    reference = Result.load(RESULTS_DIR / "dilution-reference.json")
    tried = replace(
        reference,
        seeds=[3],
        sections={
            "training": {
                **reference.sections["training"],
                "values": {**reference.sections["training"]["values"], "weight_decay": 0.0},
            }
        },
        data={"training": {"counts": {"transformer": {"in-distribution": [[0, 9]]}}}},
    )
    rows = paper.premise_attempts(reference, [tried])
    inside = reference.data["training"]["counts"]["transformer"]["in-distribution"]
    assert rows[0] == (
        "the reference run",
        "0, 1, 2, 3, 4, 5, 6, 7",
        f"{', '.join(str(e) for e, _ in inside)} of {inside[0][1]} reads",
    )
    assert rows[1] == ("weight_decay = 0.0", "3", "0 of 9 reads")


def test_no_rare_training_row_where_the_plain_seeds_left_too_few_errors_to_cut():
    # at quick scale the plain seeds make no wrong sparse read and the rare-trained ones a few, near MIN_ERRORS
    plain = {"in-distribution": [(0, 1000)] * 2, "sparse": [(0, 1000)] * 2, "dense": [(50, 1000)] * 2}
    rare = {"in-distribution": [(0, 1000)] * 2, "sparse": [(8, 1000)] * 2, "dense": [(0, 1000)] * 2}
    claims, silent = judge._rare_training_claims({"plain": plain, "rare": rare}, {"rare": 0})
    assert [c.name.split(", ")[1].split(":")[0] for c in claims] == ["dense strings"] and claims[0].holds
    assert "plain seeds made 0 wrong reads" in silent[0] and "(the rare-trained ones 16)" in silent[0]
    more = {**plain, "sparse": [(4, 1000)] * 2}  # 8 plain errors: a row, and 16 after rare training fail it
    claims, _ = judge._rare_training_claims({"plain": more, "rare": rare}, {"rare": 0})
    assert [c.holds for c in claims] == [False, True]
