"""A chapter run as jobs (submitit's local executor: separate processes; or, for most seed-group splits, its debug
executor in this process) merges into the single run's result."""

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from sandboxes import cluster, members
from sandboxes.calibration import Timing, TrainCall
from sandboxes.chapters import all_chapters, get_chapter
from sandboxes.cli import main
from sandboxes.results import Result

from conftest import TINY, tiny_plan, what_a_run_computed

pytestmark = pytest.mark.slow  # chapters run as jobs and merged: make check leaves it out

submitit = pytest.importorskip("submitit")  # the optional [cluster] extra; requirements.txt installs it

CHAPTERS = [chapter.name for chapter in all_chapters()]


@pytest.fixture(scope="module")
def job_folders(tmp_path_factory):
    """Every chapter at unit scale run as local jobs, two at a time; its folder, once per chapter."""
    folders = {}

    def run(chapter: str):
        if chapter not in folders:
            folder = tmp_path_factory.mktemp(f"{chapter}-jobs")
            plan = tiny_plan(chapter)
            options = cluster.JobOptions("local", max_jobs=2, timeout_min=10)
            # the jobs' processes inherit the environment: the same threads as this one, so the same reduction order
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv("OMP_NUM_THREADS", str(torch.get_num_threads()))
                assert cluster.submit(plan, folder, plan.jobs(), options, say=lambda line: None) == []
            folders[chapter] = folder
        return folders[chapter]

    return run


def test_jobs_merge_into_exactly_what_one_process_computes(job_folders, tiny_result):
    # one chapter here: every chapter, split into section jobs and seed-group jobs, is merged in
    # test_a_section_split_into_seed_groups_merges_into_exactly_what_one_process_computes
    merged = json.loads(cluster.merge_folder(job_folders("hmm")).to_json())
    assert what_a_run_computed(merged) == what_a_run_computed(tiny_result("hmm"))


def test_a_job_per_section_that_trains_and_one_for_the_theory():
    plan = tiny_plan("hmm")
    theory = ("paper_example", "counterexample", "powers", "recovery", "ghmm", "ghmm_tensor")
    assert plan.jobs() == [cluster.Job(theory), cluster.Job(("learning",))]


def test_seeds_per_job_splits_a_section_that_trains_into_seed_groups_then_its_own_job():
    overrides = {key: str(value) for key, value in TINY["hmm"].items()}
    plan = cluster.Plan.make("hmm", "quick", overrides, 5, "cpu", ["powers", "learning"], seeds_per_job=2)
    # a last group of one seed joins the one before: one seed alone would train unbatched
    assert plan.jobs() == [
        cluster.Job(("powers",)),
        cluster.Job(("learning",), (0, 1)),
        cluster.Job(("learning",), (2, 3, 4)),
        cluster.Job(("learning",)),
    ]
    assert cluster.Plan.make("hmm", "quick", overrides, 2, "cpu", ["learning"], seeds_per_job=2).jobs() == [
        cluster.Job(("learning",))
    ]  # no more seeds than a job takes: not split
    with pytest.raises(ValueError, match="at least 2"):
        cluster.Plan.make("hmm", "quick", overrides, 5, "cpu", ["learning"], seeds_per_job=1)


SPLIT_SEEDS = 4
IN_PROCESSES = "hmm"  # the chapter whose split runs as separate processes (and whose folder the rerun tests copy)


def _in_this_process(options: cluster.JobOptions, folder, name: str):
    """submitit's debug executor: each job runs in this process when its result is asked for."""
    return submitit.AutoExecutor(folder=folder / cluster.LOGS / "%j", cluster="debug")


@pytest.fixture(scope="module")
def split_folders(tmp_path_factory):
    """A chapter at unit scale with four seeds, every section that trains split into two group jobs of two seeds,
    two at a time: its folder and what the jobs said, once per chapter. The HMM chapter's jobs are local processes;
    the others' run in this process (submitit's debug executor), since starting a Python with torch for each of up
    to 16 jobs cost most of the 53 s the induction chapter took (two workers, one thread each)."""
    folders = {}

    def run(chapter: str):
        if chapter not in folders:
            folder = tmp_path_factory.mktemp(f"{chapter}-split")
            overrides = {key: str(value) for key, value in TINY[chapter].items()}
            plan = cluster.Plan.make(chapter, "quick", overrides, SPLIT_SEEDS, "cpu", seeds_per_job=2)
            said: list[str] = []
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv("OMP_NUM_THREADS", str(torch.get_num_threads()))
                if chapter != IN_PROCESSES:
                    patch.setattr(cluster, "_executor", _in_this_process)
                options = cluster.JobOptions("local", max_jobs=2, timeout_min=10)
                assert cluster.submit(plan, folder, plan.jobs(), options, say=said.append) == []
            folders[chapter] = folder, said
        return folders[chapter]

    return run


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_section_split_into_seed_groups_merges_into_exactly_what_one_process_computes(chapter, split_folders):
    folder, said = split_folders(chapter)
    overrides = {key: str(value) for key, value in TINY[chapter].items()}
    alone = get_chapter(chapter).run("quick", overrides, SPLIT_SEEDS, "cpu", False)
    merged = json.loads(cluster.merge_folder(folder).to_json())
    assert what_a_run_computed(merged) == what_a_run_computed(json.loads(alone.to_json()))
    plan = cluster.Plan.load(folder)
    split = [name for name in plan.sections if plan.split(name)]
    assert split == [s.name for s in get_chapter(chapter).sections if s.trains and s.by_seed]
    done = [
        found for line in said if (found := re.search(r" done: (.*): (\d+) members found stored, (\d+) trained$", line))
    ]
    for name in split:
        (own,) = [found for found in done if found[1].endswith(f"/{cluster.PARTS}/{name}.json")]
        groups = [found for found in done if found[1].startswith(f"{name} seeds ")]
        assert own[3] == "0" and len(groups) == SPLIT_SEEDS // 2  # the section's own job trained nothing
        # between them its group jobs met exactly the members it serves: none trained for two groups
        assert sum(int(found[2]) + int(found[3]) for found in groups) == int(own[2]) > 0


def test_a_killed_group_job_is_rerun_alone_and_finds_what_it_had_stored(split_folders, tmp_path):
    source, _ = split_folders("hmm")
    for path in source.rglob("*"):
        if path.is_file() and "logs" not in path.parts:
            copy = tmp_path / path.relative_to(source)
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_bytes(path.read_bytes())
    plan = cluster.Plan.load(tmp_path)
    killed = cluster.Job(("learning",), (2, 3))
    (tmp_path / cluster.PARTS / "learning.json").unlink()  # as if the group job and the section's job never ended
    cluster.group_path(tmp_path, killed).unlink()
    assert cluster.pending_jobs(plan, tmp_path) == [killed, cluster.Job(("learning",))]
    said: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", str(torch.get_num_threads()))
        options = cluster.JobOptions("local", timeout_min=10)
        assert cluster.submit(plan, tmp_path, cluster.pending_jobs(plan, tmp_path), options, say=said.append) == []
    (rerun,) = [line for line in said if "done: learning seeds 2,3: " in line]
    assert re.search(r": [1-9]\d* members found stored, 0 trained$", rerun)  # it had stored all before it was killed
    assert cluster.pending_jobs(plan, tmp_path) == []
    assert what_a_run_computed(json.loads(cluster.merge_folder(tmp_path).to_json())) == what_a_run_computed(
        json.loads(cluster.merge_folder(source).to_json())
    )


SHARED = "phase_diagram"  # the Markov chapter's grid: one training call per kind over every (p, q) cell and seed
SHARES = 3
GRID = {**{key: str(value) for key, value in TINY["markov"].items()}, "grid_seeds": "2"}  # 8 members per call


def _copy(source, target):
    """A job folder's files, less its logs."""
    for path in source.rglob("*"):
        if path.is_file() and "logs" not in path.parts:
            copy = target / path.relative_to(source)
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_bytes(path.read_bytes())


@pytest.fixture(scope="module")
def share_folder(tmp_path_factory):
    """The Markov phase diagram at unit scale split into three share jobs and its own, run in this process: the
    folder and what the jobs said."""
    folder = tmp_path_factory.mktemp("markov-shares")
    plan = cluster.Plan.make("markov", "quick", GRID, None, "cpu", [SHARED], shares={SHARED: SHARES})
    said: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cluster, "_executor", _in_this_process)
        assert cluster.submit(plan, folder, plan.jobs(), cluster.JobOptions("local"), say=said.append) == []
    return folder, said


def test_share_jobs_take_blocks_of_two_or_more_of_every_call_s_members():
    shared = members.Shared(Path("unused"), share=(0, 3))
    blocks = [members.share_rows(replace(shared, share=(g, 3)), 8) for g in range(3)]
    assert blocks == [{0, 1, 2}, {3, 4, 5}, {6, 7}]
    assert [members.share_rows(replace(shared, share=(g, 3)), 5) for g in range(3)] == [{0, 1, 2}, {3, 4}, set()]
    assert [members.share_rows(replace(shared, share=(g, 2)), 1) for g in range(2)] == [{0}, set()]
    assert members.share_rows(members.Shared(Path("unused")), 8) is None  # no share: every member


def test_a_section_split_into_shares_plans_its_share_jobs_then_its_own():
    overrides = {key: str(value) for key, value in TINY["markov"].items()}
    plan = cluster.Plan.make("markov", "quick", overrides, None, "cpu", [SHARED, "depth"], shares={SHARED: 2})
    assert plan.jobs() == [
        cluster.Job((SHARED,), share=(0, 2)),
        cluster.Job((SHARED,), share=(1, 2)),
        cluster.Job((SHARED,)),
        cluster.Job(("depth",)),
    ]
    assert [job.name for job in plan.jobs()[:2]] == [f"{SHARED} share 1 of 2", f"{SHARED} share 2 of 2"]
    for shares in ({"global_minimum": 2}, {SHARED: 1}, {"basin": 2}):  # not shareable; one share; not in the plan
        with pytest.raises(ValueError, match="shares"):
            cluster.Plan.make("markov", "quick", overrides, None, "cpu", [SHARED, "global_minimum"], shares=shares)


def test_a_section_split_into_shares_merges_into_exactly_what_one_process_computes(share_folder):
    folder, said = share_folder
    alone = get_chapter("markov").run("quick", GRID, None, "cpu", False, [SHARED])
    merged = json.loads(cluster.merge_folder(folder).to_json())
    assert what_a_run_computed(merged) == what_a_run_computed(json.loads(alone.to_json()))
    pattern = r" done: (.*): (\d+) members found stored, (\d+) trained(?:, (\d+) left to other shares)?$"
    done = [found for line in said if (found := re.search(pattern, line))]
    (own,) = [found for found in done if found[1].endswith(f"/{cluster.PARTS}/{SHARED}.json")]
    shares = [found for found in done if found[1].startswith(f"{SHARED} share ")]
    assert own[3] == "0" and len(shares) == SHARES  # the section's own job trained nothing
    assert [int(found[3]) for found in shares] == [6, 6, 4]  # blocks of 3, 3 and 2 of both calls' 8 members
    assert sum(int(found[3]) for found in shares) == int(own[2])  # and between them every member once


def test_a_lost_share_job_holds_back_the_section_and_its_rerun_finds_what_it_had_stored(share_folder, tmp_path):
    source, _ = share_folder
    _copy(source, tmp_path)
    plan = cluster.Plan.load(tmp_path)
    lost = cluster.Job((SHARED,), share=(1, SHARES))
    (tmp_path / cluster.PARTS / f"{SHARED}.json").unlink()  # as if the share job and the section's job never ended
    cluster.group_path(tmp_path, lost).unlink()
    assert cluster.pending_jobs(plan, tmp_path) == [lost, cluster.Job((SHARED,))]
    said: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cluster, "_executor", _in_this_process)
        real = cluster.run_job

        def fails(plan, job, folder):  # the share job fails: its section's own job must not run
            if job == lost:
                raise RuntimeError("lost")
            return real(plan, job, folder)

        patch.setattr(cluster, "run_job", fails)
        patch.setattr(cluster, "job_state", lambda job: "failed")  # the debug executor records no state to wait for
        failures = cluster.submit(
            plan, tmp_path, cluster.pending_jobs(plan, tmp_path), cluster.JobOptions(), say=said.append
        )
        assert len(failures) == 2 and f"{SHARED}: not submitted, since a share job of it failed" in failures
        patch.setattr(cluster, "run_job", real)
        assert (
            cluster.submit(plan, tmp_path, cluster.pending_jobs(plan, tmp_path), cluster.JobOptions(), say=said.append)
            == []
        )
    (rerun,) = [line for line in said if f"done: {SHARED} share 2 of {SHARES}: " in line]
    assert re.search(r": [1-9]\d* members found stored, 0 trained, \d+ left to other shares$", rerun)
    assert what_a_run_computed(json.loads(cluster.merge_folder(tmp_path).to_json())) == what_a_run_computed(
        json.loads(cluster.merge_folder(source).to_json())
    )


def test_max_hours_splits_a_grid_section_into_the_share_jobs_that_fit():
    plan = cluster.Plan.make("markov", "quick", {}, 8, "cpu")
    theory = plan.jobs()[0]
    grid, training = (next(job for job in plan.jobs() if job.sections == (name,)) for name in (SHARED, "training"))
    estimates = [
        cluster.JobEstimate(theory, 60.0, 0),
        cluster.JobEstimate(grid, 2.5 * 3600.0, 0, members=50),
        cluster.JobEstimate(training, 4 * 3600.0, 0, members=8),  # by seed: seed groups, not shares
    ]
    assert cluster.shares_for(plan, estimates, 1.0) == {SHARED: 3}
    assert cluster.shares_for(plan, estimates, 0.01) == {SHARED: 25}  # no block smaller than two members
    assert cluster.shares_for(plan, estimates, 3.0) == {}  # every job fits
    induction = cluster.Plan.make("induction", "quick", {}, None, "cpu", ["parent_heads"])
    (heads,) = induction.jobs()
    assert cluster.shares_for(induction, [cluster.JobEstimate(heads, 9 * 3600.0, 0, members=50)], 1.0) == {}
    with pytest.raises(ValueError, match="may be shared"):  # kept whole: its members differ in another ensemble
        cluster.Plan.make("induction", "quick", {}, None, "cpu", ["parent_heads"], shares={"parent_heads": 2})


def test_the_dry_run_under_max_hours_plans_share_jobs_for_a_grid(tmp_path, capsys):
    flags = [arg for key, value in GRID.items() for arg in ("--set", f"{key}={value}")]
    where = ["--device", "cpu", "--executor", "local", "--folder", str(tmp_path), "--dry-run"]
    assert main(["run", "markov", *flags, "--section", SHARED, "--max-hours", "1e-9", *where]) == 0
    out = capsys.readouterr().out
    assert f"--max-hours 1e-09: {SHARED} split into 4 share jobs" in out  # 8 members per call: 4 blocks of 2
    assert f"{SHARED} share 4 of 4" in out and "(after its group or share jobs; serves their members)" in out


def test_each_jobs_plan_is_set_beside_what_its_sections_took(job_folders, tmp_path):
    folder = tmp_path / "jobs"
    shutil.copytree(job_folders("hmm"), folder)
    plan = cluster.Plan.load(folder)
    cluster.save_estimates(folder, [cluster.JobEstimate(job, 10.0, 0) for job in plan.jobs()], "a test")
    rows = cluster.estimates_against_runs(folder)
    assert [name for name, _, _ in rows] == [job.name for job in plan.jobs()]
    for (_, planned, took), job in zip(rows, plan.jobs()):
        parts = {name: cluster.valid_part(plan, folder, name) for name in job.sections}
        assert planned == 10.0 and took == sum(part.sections[name]["wall_time_s"] for name, part in parts.items())
    body = json.loads(cluster.save_comparison(folder, cluster.merge_folder(folder), rows).read_text())
    assert body["planned_on"] == "a test" and len(body["jobs"]) == len(rows)
    assert cluster.comparison_table(body).count("<tr>") == len(rows) + 1


def test_a_rerun_submits_only_the_missing_and_the_mismatched_sections(job_folders, tmp_path):
    source = job_folders("hmm")
    plan = cluster.Plan.load(source)
    plan.save(tmp_path)
    (tmp_path / cluster.PARTS).mkdir()
    for part in (source / cluster.PARTS).glob("*.json"):
        (tmp_path / cluster.PARTS / part.name).write_text(part.read_text())
    assert cluster.pending(plan, tmp_path) == []
    (tmp_path / cluster.PARTS / "powers.json").unlink()
    foreign = Result.load(tmp_path / cluster.PARTS / "learning.json")
    foreign.seeds = [0]  # a partial from another plan (one seed, not two) does not count as done
    foreign.save(tmp_path / cluster.PARTS / "learning.json")
    assert cluster.pending(plan, tmp_path) == ["powers", "learning"]
    assert plan.jobs(cluster.pending(plan, tmp_path)) == [cluster.Job(("powers",)), cluster.Job(("learning",))]
    with pytest.raises(ValueError, match="powers, learning"):
        cluster.merge_folder(tmp_path)


def test_a_failed_job_is_reported_with_its_log_and_leaves_no_partial(tmp_path, monkeypatch):
    plan = tiny_plan("hmm")
    failing = cluster.Plan(
        plan.chapter, plan.profile, {**plan.overrides, "steps": "-1"}, plan.seeds, "cpu", ("learning",)
    )  # a value the parameter check refuses, reached only inside the job
    failures = cluster.submit(
        failing, tmp_path, failing.jobs(), cluster.JobOptions("local", timeout_min=5), say=lambda line: None
    )
    assert len(failures) == 1 and failures[0].startswith("learning: job ") and "log " in failures[0]
    assert (tmp_path / failures[0].rsplit("log ", 1)[1]).exists()
    assert cluster.pending(failing, tmp_path) == ["learning"]


def test_the_dry_run_prints_each_job_and_the_total_and_submits_nothing(tmp_path, capsys):
    flags = [arg for key, value in TINY["hmm"].items() for arg in ("--set", f"{key}={value}")]
    assert (
        main(
            [
                "run",
                "hmm",
                *flags,
                "--seeds",
                "2",
                "--device",
                "cpu",
                "--executor",
                "local",
                "--folder",
                str(tmp_path),
                "--dry-run",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "2 jobs to run" in out and "learning" in out and "6 theory sections" in out and "total" in out
    assert "10-step calibration" in out
    assert not (tmp_path / cluster.PARTS).exists()


def test_the_dry_run_of_a_split_section_plans_its_group_jobs_and_its_own(tmp_path, capsys):
    flags = [arg for key, value in TINY["hmm"].items() for arg in ("--set", f"{key}={value}")]
    assert (
        main(
            [
                "run",
                "hmm",
                *flags,
                "--section",
                "learning",
                "--seeds",
                "4",
                "--seeds-per-job",
                "2",
                "--device",
                "cpu",
                "--executor",
                "local",
                "--folder",
                str(tmp_path),
                "--dry-run",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "3 jobs to run" in out and "learning seeds 0,1" in out and "learning seeds 2,3" in out
    assert "(after its group or share jobs; serves their members)" in out


def test_max_hours_chooses_the_largest_seed_groups_that_fit():
    plan = cluster.Plan.make("markov", "quick", {}, 8, "cpu")
    theory, training = plan.jobs()[0], next(job for job in plan.jobs() if job.sections == ("training",))
    estimates = [cluster.JobEstimate(theory, 60.0, 0), cluster.JobEstimate(training, 4 * 3600.0, 0)]
    assert cluster.seeds_per_job_for(plan, estimates, 1.0) == 2  # 8 seeds at a quarter of the time
    assert cluster.seeds_per_job_for(plan, estimates, 2.0) == 4
    assert cluster.seeds_per_job_for(plan, estimates, 0.01) == 2  # no group smaller than two seeds
    assert cluster.seeds_per_job_for(plan, estimates, 4.0) is None  # every job fits


def test_the_dry_run_under_max_hours_plans_seed_groups_and_says_what_cannot_fit(tmp_path, capsys):
    flags = [arg for key, value in TINY["hmm"].items() for arg in ("--set", f"{key}={value}")]
    where = ["--device", "cpu", "--executor", "local", "--folder", str(tmp_path), "--dry-run"]
    assert main(["run", "hmm", *flags, "--section", "learning", "--seeds", "4", "--max-hours", "1e-9", *where]) == 0
    out = capsys.readouterr().out
    assert "--max-hours 1e-09: sections split into groups of 2 seeds" in out
    assert "learning seeds 0,1" in out and "learning seeds 2,3" in out
    assert "learning seeds 0,1: planned over --max-hours 1e-09 and cannot be split further" in out


def test_a_rerun_may_split_what_is_left_differently_but_not_change_what_is_computed(tmp_path, capsys):
    flags = [arg for key, value in TINY["hmm"].items() for arg in ("--set", f"{key}={value}")]
    common = [
        "run",
        "hmm",
        *flags,
        "--section",
        "learning",
        "--device",
        "cpu",
        "--executor",
        "local",
        "--folder",
        str(tmp_path),
        "--dry-run",
    ]
    cluster.Plan.make("hmm", "quick", {k: str(v) for k, v in TINY["hmm"].items()}, 4, "cpu", ["learning"]).save(
        tmp_path
    )
    assert main([*common, "--seeds", "4", "--seeds-per-job", "2"]) == 0  # how many seeds a job takes: no result
    assert main([*common, "--seeds", "3"]) == 2 and "holds another plan" in capsys.readouterr().err


def test_a_shorter_calibration_is_a_flag_and_says_so(tmp_path, capsys):
    flags = [arg for key, value in TINY["hmm"].items() for arg in ("--set", f"{key}={value}")]
    assert (
        main(
            [
                "run",
                "hmm",
                *flags,
                "--seeds",
                "2",
                "--device",
                "cpu",
                "--executor",
                "local",
                "--folder",
                str(tmp_path),
                "--dry-run",
                "--calibration-steps",
                "3",
            ]
        )
        == 0
    )
    assert "3-step calibration" in capsys.readouterr().out


def test_the_calibration_scales_a_shortened_run_to_its_planned_steps():
    # the first of three groups trained: 1 s a step, 1 s an evaluation, 2 s of set-up
    timing = Timing(step_s=9.0, steps=9, eval_s=2.0, evals=2, groups=1)
    call = TrainCall(planned_steps=1000, eval_every=100, wall_time=13.0, timing=timing, step_bytes=0, groups=3)
    assert call.estimated_s == pytest.approx(3 * (2.0 + 1000 + 11))  # each group: set-up, its steps, its evaluations


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--executor", "pbs"], "invalid choice"),
        (["--executor", "local", "--partition", "gpu"], "Slurm option"),
        (["--executor", "local", "--max-jobs", "0"], "at least 1"),
        (["--partition", "gpu"], "go with --executor"),
        (["--calibration-steps", "3"], "go with --executor"),
        (["--no-wait"], "go with --executor"),
        (["--max-hours", "2"], "go with --executor"),
        (["--executor", "local", "--max-hours", "0"], "positive"),
        (["--executor", "local", "--max-hours", "1", "--seeds-per-job", "2"], "not with --seeds-per-job"),
        (["--seeds-per-job", "2"], "go with --executor"),
        (["--executor", "local", "--seeds-per-job", "1"], "at least 2"),
        (["--executor", "local", "--dry-run", "--calibration-steps", "1"], "at least 2"),
        (["--executor", "local", "--into", "x.json"], "not --into"),
    ],
)
def test_bad_scheduler_options_stop_before_any_work(flags, message, capsys):
    try:
        code = main(["run", "hmm", *flags])
    except SystemExit as exit_:  # argparse's own refusal
        code = exit_.code
    assert code == 2 and message in capsys.readouterr().err
