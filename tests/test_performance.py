"""The performance survey: its counts of a step's work, and one survey of a toy reference section."""

import copy
import json

import pytest
import torch
from torch import nn

from sandboxes import performance
from sandboxes.chapters import all_chapters
from sandboxes.claims import Claim
from sandboxes.data.markov import MarkovChain, symmetric_kernel
from sandboxes.model import FUSED_FROM, GPT, GPTConfig
from sandboxes.profiles import Param, at_least, with_reference
from sandboxes.sections import Chapter, RunContext, Section
from sandboxes.trainer import TrainConfig, train


class _Rows:
    """A task of ``n`` random feature rows and class targets, for models whose work is known by hand."""

    def __init__(self, features: int, classes: int) -> None:
        self.features, self.classes = features, classes

    def sample(self, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(n, self.features, generator=generator), torch.randint(
            self.classes, (n,), generator=generator
        )

    def loss(self, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(out, target)


def test_a_linear_layer_counts_two_flops_per_multiply_add_forward_and_as_many_for_the_weights_gradient():
    # forward x W^T: batch x in x out multiply-adds; backward as many for the weight's gradient (the input needs none)
    work = performance.count_step(nn.Linear(16, 4, bias=False), _Rows(16, 4), batch_size=32)
    assert work.flops == 2 * 2 * 32 * 16 * 4


def test_a_softmax_counts_one_exponential_per_entry_and_the_bytes_grow_with_the_batch():
    small = performance.count_step(nn.Linear(16, 4), _Rows(16, 4), batch_size=32)
    large = performance.count_step(nn.Linear(16, 4), _Rows(16, 4), batch_size=64)
    assert small.exps == 32 * 4  # the loss's log-softmax over 4 classes
    assert 0 < small.bytes < large.bytes


def test_causal_attention_counts_an_exponential_per_score_it_computes():
    # the CPU kernel computes the exponentials of the causal half of each T x T score table once a step
    T, batch = 64, 4
    model = GPT(GPTConfig(vocab_size=2, block_size=T, n_layer=1, n_head=1, d_model=8))
    work = performance.count_step(model, MarkovChain(symmetric_kernel(2, 0.3), T), batch)
    causal = batch * T * (T + 1) // 2
    assert causal <= work.exps - batch * T * 2 <= 2 * causal  # less the loss's log-softmax over 2 symbols


def test_the_compiled_kernel_of_narrow_heads_counts_its_causal_pairs_products():
    # per causal pair: 4 d flops forward (score, output), 10 d backward (score again, its gradient, dq, dk, dv)
    T, batch, d = FUSED_FROM, 4, 8
    model = GPT(GPTConfig(vocab_size=2, block_size=T, n_layer=1, n_head=1, d_model=d))
    work = performance.count_step(model, MarkovChain(symmetric_kernel(2, 0.3), T), batch)
    assert work.compiled_attention
    attention_flops = 14 * d * batch * T * (T + 1) // 2
    linear_flops = 3 * 2 * batch * T * (d * 3 * d + d * d + 2 * d * 4 * d + d * 2)  # qkv, proj, MLP, head: 3 passes
    assert attention_flops <= work.flops <= attention_flops + linear_flops


def _toy_train(steps: int, ctx: RunContext) -> dict:
    # long enough for the fused kernels: the compiled one of narrow heads, where it is built
    model = GPTConfig(vocab_size=2, block_size=FUSED_FROM, n_layer=1, n_head=1, d_model=8)
    trained = train(
        lambda: GPT(model),
        MarkovChain(symmetric_kernel(2, 0.3), FUSED_FROM),
        TrainConfig(steps=steps, batch_size=4, eval_every=steps),
        ctx.seeds,
        ctx.device,
        progress=False,
    )
    return {"loss": float(trained.eval_loss[:, -1].mean())}


def _toy_training(config: dict, ctx: RunContext) -> dict:
    return _toy_train(config["steps"], ctx)


def _toy_one_step(config: dict, ctx: RunContext) -> dict:
    return _toy_train(1, ctx)  # its only step warms up: nothing is timed


def _toy_rows(config: dict, data: dict) -> tuple[list[Claim], tuple[str, ...]]:
    return [Claim.at_most("the loss is finite", 10.0, data["loss"], "r")], ()


TOY = Chapter(
    "toy",
    "Toy",
    with_reference((Param("steps", int, 4, 4, "steps", at_least(1)),), {"steps": 100}),
    seeds={"quick": 2, "reference": 2, "full": 2},
    sections=(
        Section("training", "Training", _toy_training, _toy_rows, trains=True, reference=True, paper=lambda d: []),
        Section("one_step", "One step", _toy_one_step, _toy_rows, trains=True, reference=True, paper=lambda d: []),
    ),
)


@pytest.fixture(scope="module")
def toy_survey():
    peaks = performance.Peaks("a machine", 1, 1e10, 1e9, 1e10)
    return {
        "peaks": peaks.__dict__,
        "capability": "DEFAULT",
        "steps": 3,
        "sections": [performance.survey_section(TOY, "training", peaks, steps=3)],
        "provenance": {"git_commit": "0" * 40, "versions": {"torch": "x"}, "created": "now", "wall_time_s": 60},
    }


def test_a_survey_times_the_shortened_call_and_sets_its_work_beside_the_limit(toy_survey):
    (section,) = toy_survey["sections"]
    (call,) = section["calls"]
    assert (call["length"], call["batch_size"], call["members"], call["planned_steps"]) == (FUSED_FROM, 4, 2, 100)
    assert call["step_s"] > 0 and call["tokens_per_s"] == pytest.approx(2 * 4 * FUSED_FROM / call["step_s"])
    least = 2 * sum(call["member_step"][key] / rate for key, rate in (("flops", 1e10), ("exps", 1e9), ("bytes", 1e10)))
    assert call["limit_fraction"] == pytest.approx(least / call["step_s"])
    assert section["operators"] and all(0 < share <= 1 for _, share in section["operators"])
    json.dumps(toy_survey)  # the file is JSON


def test_the_page_tables_show_every_call_and_name_the_sections_not_surveyed(toy_survey):
    table = performance.sections_table(toy_survey)
    assert "toy/training" in table and "markov/training" in table and "not surveyed yet" in table
    assert "a machine" in performance.machine_table(toy_survey)
    assert "toy/training" in performance.operators_table(toy_survey)


def test_a_search_s_runs_of_many_sizes_share_one_row_and_a_few_shapes_keep_theirs(toy_survey):
    (call,) = toy_survey["sections"][0]["calls"]
    runs = [
        {**call, "batch_size": 4 + n, "member_step": {**call["member_step"], "compiled_attention": False}}
        for n in range(performance.MAX_SETTINGS + 1)
    ]
    surveyed = {**toy_survey, "sections": [{**toy_survey["sections"][0], "calls": runs}]}
    table, speed = performance.sections_table(surveyed), performance.speedup_table(surveyed)
    assert table.count("toy/training") == speed.count("toy/training") == 1
    assert f"batch 4 to {4 + performance.MAX_SETTINGS}" in table and "runs of their own sizes" in speed
    few = {**surveyed, "sections": [{**surveyed["sections"][0], "calls": runs[:-1]}]}
    assert performance.sections_table(few).count("toy/training") == performance.MAX_SETTINGS


def test_a_call_with_no_timed_step_is_counted_not_timed():
    peaks = performance.Peaks("a machine", 1, 1e10, 1e9, 1e10)
    surveyed = performance.survey_section(TOY, "one_step", peaks, steps=3)
    assert (surveyed["calls"], surveyed["untimed_calls"]) == ([], 1)


def test_the_committed_survey_names_reference_sections_and_was_made_from_a_clean_tree():
    # the performance page shows this file; a section renamed or no longer a reference section would show stale rows
    surveyed = json.loads(performance.SURVEY_FILE.read_text())
    reference = {(c.name, s) for c in all_chapters() for s in c.reference_sections}
    assert {(s["chapter"], s["section"]) for s in surveyed["sections"]} <= reference
    assert surveyed["provenance"]["git_dirty"] is False
    narrow = [s for s in surveyed["sections"] if any(c["member_step"]["compiled_attention"] for c in s["calls"])]
    assert narrow and all(s["blocked"]["calls"] for s in narrow)  # the speedup table's pairs


def test_a_sequence_counts_its_positions_and_a_vector_of_features_one():
    assert performance.positions(torch.zeros(2, 7, dtype=torch.long)) == 7
    assert performance.positions(torch.zeros(2, 7, 3)) == 7
    assert performance.positions(torch.zeros(2, 4)) == 1  # the HMM's one-hot token


def _paired(surveyed: dict, factor: float) -> dict:
    """The survey with each section also surveyed on the blocked kernel, ``factor`` times slower."""
    out = copy.deepcopy(surveyed)
    for section in out["sections"]:
        section["blocked"] = copy.deepcopy(section)
        for call in section["blocked"]["calls"]:
            call["tokens_per_s"] /= factor
    return out


@pytest.mark.parametrize("factor, verdict", [(2.5, "met"), (1.5, "not met")])
def test_the_speedup_table_asks_twice_the_throughput_on_the_blocked_kernel(toy_survey, factor, verdict):
    row = performance.speedup_table(_paired(toy_survey, factor))
    assert f"{factor:.2f}" in row and f">{verdict}" in row
    if verdict == "not met":
        assert "% of the limit" in row


def test_a_setting_not_surveyed_on_the_blocked_kernel_is_named_unchanged_with_what_holds_it(toy_survey):
    table = performance.speedup_table(toy_survey)
    assert "kernels unchanged" in table and "% of the limit" in table


def test_the_survey_runs_a_section_with_narrow_heads_again_on_the_blocked_kernel(monkeypatch):
    monkeypatch.setattr(performance, "get_chapter", lambda name: TOY)
    monkeypatch.setattr(performance, "measure_peaks", lambda: performance.Peaks("a machine", 1, 1e10, 1e9, 1e10))
    (section,) = performance.survey([("toy", "training")], steps=3, isolated=False)["sections"]
    assert [call["member_step"]["compiled_attention"] for call in section["calls"]] == [True]
    assert [call["member_step"]["compiled_attention"] for call in section["blocked"]["calls"]] == [False]


@pytest.mark.parametrize("ours_ms, verdict", [(10.0, "yes"), (30.0, "no")])
def test_the_authors_table_asks_every_round_to_reach_the_target(ours_ms, verdict):
    made = {"device_name": "a machine", "git_commit": "0" * 40, "created": "now"}
    rounds = [{"theirs_ms": 100.0, "ours_ms": 20.0}, {"theirs_ms": 100.0, "ours_ms": ours_ms}]
    profiled = {"least_ms": 5.0, "operators": [["sandboxes::narrow_attention_backward", 0.4]]}
    record = {"capability": "AVX512", "threads": 2, "rounds": rounds, "provenance": made, "ours_profiled": profiled}
    table = performance.against_table([record], 4.0)
    assert f'<td style="padding: 0.2em 0.6em">{verdict}</td>' in table
    assert f"{500 / ((20.0 + ours_ms) / 2):.0f} % of the limit; sandboxes::narrow_attention_backward 40 %" in table


def test_the_committed_rounds_against_the_authors_were_made_from_a_clean_tree():
    records = [json.loads(p.read_text()) for p in performance.SURVEY_FILE.parent.glob("against-authors-*.json")]
    assert records and all(r["rounds"] for r in records)
    assert all(made["provenance"]["git_dirty"] is False for made in records)


def test_an_isolated_survey_runs_each_section_in_a_process_of_its_own(monkeypatch):
    monkeypatch.setattr(performance, "measure_peaks", lambda: performance.Peaks("a machine", 1, 1e10, 1e9, 1e10))
    (section,) = performance.survey([("memories", "hallucination")], steps=3)["sections"]
    assert (section["chapter"], section["section"]) == ("memories", "hallucination") and section["calls"]
