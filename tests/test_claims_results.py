"""Claims decide and fail loudly; result files round-trip with their provenance."""

import dataclasses
import json
import subprocess

import numpy as np
import pytest

from sandboxes import results
from sandboxes.claims import Claim, ClaimFailed, Verdict, seed_bounds
from sandboxes.results import Result, provenance


def test_close_claim_holds_inside_and_fails_outside_its_tolerance():
    assert Claim.close("x", 1.0, 1.05, 0.1, "r").holds
    assert not Claim.close("x", 1.0, 1.2, 0.1, "r").holds


def test_bound_and_exact_claims():
    assert Claim.at_most("x", 1.0, 0.5, "r").holds and not Claim.at_most("x", 1.0, 1.5, "r").holds
    assert Claim.at_least("x", 1.0, 1.5, "r").holds and not Claim.at_least("x", 1.0, 0.5, "r").holds
    assert Claim.exact("x", "a", "a", "r").holds and not Claim.exact("x", "a", "b", "r").holds


def test_failed_claim_makes_check_raise_and_names_it(capsys):
    verdict = Verdict([Claim.close("fine", 0, 0, 1, "r"), Claim.close("broken claim", 0, 5, 1, "r")])
    with pytest.raises(ClaimFailed, match="broken claim"):
        verdict.check()


def test_check_prints_no_measured_numbers(capsys):
    Verdict([Claim.close("stable", 1.0, 1.0123456, 0.1, "r")]).check()
    out = capsys.readouterr().out
    assert "1.012" not in out and "all 1 claims hold" in out


def test_verdict_renders_an_html_table():
    html = Verdict([Claim.close("a < b", 0, 0, 1, "because")])._repr_html_()
    assert "<table>" in html and "a &lt; b" in html and "because" in html


def test_result_file_round_trips_with_provenance(tmp_path):
    result = Result(
        "markov",
        "quick",
        {"p": 0.5},
        [0, 1],
        [Claim.close("x", 1, 1, 0.1, "r")],
        {"curve": np.arange(3.0), "nested": {"k": np.float64(2.5)}},
        {"curve": {"params": ["p"], "wall_time_s": 0.5}},
        provenance("cpu", "test cpu", 1.234),
    )
    path = result.save(tmp_path / "r.json")
    loaded = Result.load(path)
    assert loaded.config == {"p": 0.5} and loaded.data["curve"] == [0.0, 1.0, 2.0]
    assert loaded.claims == result.claims and loaded.sections == result.sections
    body = json.loads(path.read_text())
    for key in ("git_commit", "versions", "device_name", "wall_time_s", "created"):
        assert key in body["provenance"]
    assert not loaded.from_gpu


def test_a_tree_copied_without_git_takes_its_commit_from_the_environment(monkeypatch):
    monkeypatch.setattr(results, "_git", lambda *args: "unknown")
    monkeypatch.setenv("SANDBOXES_GIT_COMMIT", "abc123")
    made = provenance("cuda", "test gpu", 1.0)
    assert made["git_commit"] == "abc123" and made["git_dirty"] is None
    monkeypatch.delenv("SANDBOXES_GIT_COMMIT")
    assert provenance("cuda", "test gpu", 1.0)["git_commit"] == "unknown"


def test_only_results_made_on_a_gpu_count_as_gpu_results():
    made = Result("markov", "full", {}, [0], [], {}, provenance={"device_type": "cuda"})
    assert made.from_gpu
    assert not Result("markov", "full", {}, [0], [], {}, provenance={"device_type": "cpu"}).from_gpu


def test_a_claim_about_eventual_behaviour_is_undecided_only_while_its_run_had_not_settled():
    failed = Claim.at_most("reaches", 0.1, 0.5, "r")
    assert failed.eventually(settled=True, unsettled="more steps").holds is False
    undecided = failed.eventually(settled=False, unsettled="more steps")
    assert undecided.holds is None and undecided.mark == "undecided" and "more steps" in undecided.reason
    held = Claim.at_most("reaches", 0.1, 0.05, "r")
    assert held.eventually(settled=False, unsettled="more steps") is held


def test_a_claim_already_undecided_keeps_its_one_reason_through_both_settled_checks():
    undecided = Claim.at_most("reaches", 0.1, 0.5, "r").eventually(settled=False, unsettled="more steps")
    twice = undecided.eventually(settled=False, unsettled="more steps").so_far(settled=False, unsettled="more steps")
    assert twice is undecided and twice.reason.count("more steps") == 1


def test_seed_bounds_are_the_one_sided_95_percent_bounds_of_the_mean_and_of_a_new_seed():
    # mean 1, s 1, n 3, t_0.95(2) = 2.919986: the mean's bound 1 + t / sqrt(3), a new seed's 1 + t sqrt(4/3)
    t = 2.919986
    assert seed_bounds([0.0, 1.0, 2.0]) == pytest.approx((1 + t / np.sqrt(3), 1 + t * np.sqrt(4 / 3)), rel=1e-6)
    assert seed_bounds([0.0, 1.0, 2.0], upper=False) == pytest.approx(
        (1 - t / np.sqrt(3), 1 - t * np.sqrt(4 / 3)), rel=1e-6
    )
    # cells x seeds: the worst cell's bounds, each from its own spread
    assert seed_bounds([[0.0, 0.0, 0.0], [0.0, 1.0, 2.0]]) == pytest.approx(seed_bounds([0.0, 1.0, 2.0]))
    assert all(np.isnan(seed_bounds([0.3])))


def test_a_row_about_every_seed_is_undecided_when_their_spread_leaves_their_mean_within_noise_of_its_bound():
    bound = 0.1
    tight = [0.01, 0.011, 0.012, 0.01]
    scattered = [0.099, 0.001, 0.098, 0.002]  # every seed within the bound, the mean's 95% bound beyond it
    held = Claim.at_most("every seed", bound, max(tight), "r").held_to_spread(bound, tight)
    assert held.holds is True and "seeds' mean ≤ 0.0" in held.tolerance and "(n = 4)" in held.tolerance
    wide = Claim.at_most("every seed", bound, max(scattered), "r").held_to_spread(bound, scattered)
    assert wide.holds is None and "more seeds (--seeds)" in wide.reason
    counted = Claim.at_most("every seed", bound, max(scattered), "r").held_to_spread(bound, scattered, "grid_seeds")
    assert "more seeds (--set grid_seeds=...)" in counted.reason  # seeds that a parameter counts
    failed = Claim.at_most("every seed", bound, 0.2, "r").held_to_spread(bound, [0.2, 0.01])
    assert failed.holds is False  # a failed row stays failed
    low = Claim.at_least("every seed", 0.05, 0.2, "r").held_to_spread(0.05, [0.2, 0.21, 0.22], upper=False)
    assert low.holds is True and "≥" in low.tolerance
    one = Claim.at_most("every seed", bound, 0.01, "r").held_to_spread(bound, [0.01])
    assert one.holds is True and "one seed: no spread" in one.tolerance
    diverged = Claim.at_most("every seed", bound, 0.01, "r").held_to_spread(bound, [0.01, float("nan")])
    assert diverged.holds is None and "not finite" in diverged.tolerance


def test_a_rows_margin_is_its_slack_over_its_tolerance_or_its_bounds_size():
    assert Claim.close("c", 1.0, 1.02, 0.1, "r").margin == pytest.approx(0.8)
    assert Claim.close("c", 1.0, 1.2, 0.1, "r").margin == pytest.approx(-1.0)  # the failing side is negative
    assert Claim.at_most("m", 0.5, 0.4, "r").margin == pytest.approx(0.2)
    assert Claim.at_least("l", 0.5, 0.4, "r").margin == pytest.approx(-0.2)
    assert Claim.at_least("l", 0.0, 0.3, "r").margin == pytest.approx(0.3)  # a bound of 0 gives no scale
    assert Claim.at_most("m", 0.5, float("nan"), "r").margin is None and Claim.exact("e", "1", "1", "r").margin is None
    row = Claim.at_most("m", 0.5, 0.4, "r")
    assert dataclasses.replace(row, margin=None) == row  # rows compare without it: stored files made before it match


def test_a_row_held_to_the_seeds_spread_takes_the_margin_of_their_means_bound_where_it_is_smaller():
    seeds = [0.6, 0.7]  # both clear of 0.5; their mean's 95% bound (n = 2, t = 6.31) is not
    row = Claim.at_least("every seed", 0.5, min(seeds), "r").held_to_spread(0.5, seeds, upper=False)
    mean_bound, _ = seed_bounds(seeds, upper=False)
    assert row.holds is None and row.margin == pytest.approx((mean_bound - 0.5) / 0.5) and row.margin < 0
    many = np.linspace(0.6, 0.7, 10)  # ten seeds: their mean's bound (0.63) stands clearer than the least seed
    assert Claim.at_least("every seed", 0.5, 0.6, "r").held_to_spread(0.5, many, upper=False).margin == pytest.approx(
        0.2
    )


def test_an_undecided_claim_neither_holds_nor_fails_the_check(capsys):
    verdict = Verdict([Claim.exact("a", "1", "1", "r"), Claim.at_most("b", 0.1, 0.5, "r").eventually(False, "x")])
    assert not verdict.holds and verdict.failures() == [] and len(verdict.undecided()) == 1
    verdict.check()  # does not raise
    out = capsys.readouterr().out
    assert "[UNDECIDED] b" in out and "1 of 2 claims hold, 1 undecided" in out
    page = verdict._repr_html_()
    assert 'class="verdict-undecided"' in page and "undecided at this budget" in page
    assert "<svg" in page and not any(ch in page for ch in "✅❌⏳")  # inline SVG marks, no emoji a font may lack
    rows = page.split("<tr>")[2:]  # after the header: one line per row, its tolerance and reason folded in it
    assert len(rows) == 2 and all(row.count("<details>") == 1 and row.count("<td") == 4 for row in rows)
    assert rows[1].index("undecided at this budget") < rows[1].index("<details>") < rows[1].index(">r; undecided")
    with pytest.raises(ClaimFailed):
        Verdict([*verdict, Claim.exact("c", "1", "2", "r")]).check()


def test_a_changed_result_file_does_not_make_the_tree_dirty_but_changed_code_does(tmp_path, monkeypatch):
    # `run --into` merges into a tracked results/ file; that output must not pass for a change to the code
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "r.json").write_text("{}")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")
    monkeypatch.setattr(results, "REPO_ROOT", tmp_path)
    (tmp_path / "results" / "r.json").write_text('{"merged": 1}')
    assert results.current_commit()[1] is False
    (tmp_path / "code.py").write_text("x = 2\n")
    assert results.current_commit()[1] is True
