"""The cluster path against a real Slurm: the one-node cluster that `make slurm` starts on this machine
(tests/slurm/up.sh). Where no Slurm node is idle here, every test is skipped with the reason."""

import json
import shutil
import subprocess

import pytest
import torch

from sandboxes import cluster
from sandboxes.chapters import get_chapter
from sandboxes.cli import main

from conftest import tiny_flags, tiny_plan, what_a_run_computed

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

submitit = pytest.importorskip("submitit")  # the optional [cluster] extra; requirements.txt installs it

PARTITION = "debug"  # tests/slurm/up.sh's partition


def _no_cluster() -> str | None:
    """Why the Slurm tests cannot run here, or None where a node of ``PARTITION`` is idle."""
    if shutil.which("sinfo") is None:
        return "no Slurm on this machine: `make slurm` installs and starts a one-node cluster (as root, on Debian)"
    shown = subprocess.run(["sinfo", "-h", "-p", PARTITION, "-o", "%T"], capture_output=True, text=True, timeout=30)
    if shown.returncode != 0 or "idle" not in shown.stdout.split():
        told = shown.stderr.strip() or shown.stdout.strip()
        return f"no idle Slurm node in partition {PARTITION} ({told}): make slurm"
    return None


@pytest.fixture(scope="module", autouse=True)
def slurm():
    reason = _no_cluster()
    if reason:
        pytest.skip(reason)


@pytest.fixture(autouse=True)
def same_threads(monkeypatch):
    """Jobs inherit the submitting environment (sbatch's --export=ALL): this process's threads, its reduction order."""
    monkeypatch.setenv("OMP_NUM_THREADS", str(torch.get_num_threads()))


def _options() -> cluster.JobOptions:
    return cluster.JobOptions("slurm", partition=PARTITION, max_jobs=2, timeout_min=10)


def test_a_chapter_run_as_slurm_jobs_merges_into_exactly_what_one_process_computes(tmp_path, tiny_result):
    plan = tiny_plan("hmm")
    assert cluster.submit(plan, tmp_path, plan.jobs(), _options(), say=lambda line: None) == []
    merged = json.loads(cluster.merge_folder(tmp_path).to_json())
    assert what_a_run_computed(merged) == what_a_run_computed(tiny_result("hmm"))


def test_a_failed_job_shows_its_slurm_state_and_log_and_nothing_is_merged(tmp_path):
    plan = tiny_plan("hmm")
    failing = cluster.Plan(
        plan.chapter, plan.profile, {**plan.overrides, "steps": "-1"}, plan.seeds, "cpu", ("learning",)
    )  # a value the parameter check refuses, reached only inside the job
    failures = cluster.submit(failing, tmp_path, failing.jobs(), _options(), say=lambda line: None)
    assert len(failures) == 1 and " FAILED (" in failures[0], failures
    assert (tmp_path / failures[0].rsplit("log ", 1)[1]).exists()
    assert cluster.pending(failing, tmp_path) == ["learning"]
    with pytest.raises(ValueError, match="learning"):
        cluster.merge_folder(tmp_path)


def test_a_cancelled_job_is_reported_and_the_next_run_reruns_it(tmp_path):
    plan = cluster.Plan.make("hmm", "quick", tiny_plan("hmm").overrides, tiny_plan("hmm").seeds, "cpu", ["learning"])

    def cancel(line: str) -> None:  # scancel each job as soon as it is submitted
        if line.startswith("job ") and " done" not in line:
            subprocess.run(["scancel", line.split()[1].rstrip(":")], check=True)

    failures = cluster.submit(plan, tmp_path, plan.jobs(), _options(), say=cancel)
    assert len(failures) == 1 and " CANCELLED (" in failures[0], failures
    assert cluster.pending(plan, tmp_path) == ["learning"]
    assert cluster.submit(plan, tmp_path, cluster.pending_jobs(plan, tmp_path), _options(), say=lambda line: None) == []
    assert cluster.pending(plan, tmp_path) == []


def test_seed_groups_merge_into_what_one_process_computes_after_a_group_lost_in_the_queue_is_rerun(tmp_path):
    overrides = tiny_plan("hmm").overrides
    plan = cluster.Plan.make("hmm", "quick", overrides, 4, "cpu", ["learning"], seeds_per_job=2)
    one_at_a_time = cluster.JobOptions("slurm", partition=PARTITION, max_jobs=1, timeout_min=10)
    lost = []

    def cancel_the_second_group(line: str) -> None:  # pending behind the first, Slurm keeps no record of it
        if line.startswith("job ") and line.endswith(": learning seeds 2,3"):
            lost.append(line.split()[1].rstrip(":"))
            subprocess.run(["scancel", lost[-1]], check=True)

    failures = cluster.submit(plan, tmp_path, plan.jobs(), one_at_a_time, say=cancel_the_second_group)
    # where the first group ends before scancel arrives (a loaded machine), the second has started and is cancelled
    # with a record: lost either way, and the rerun below must recover it
    forgotten = f"learning seeds 2,3: job {lost[0]} left Slurm without a record ({cluster.FORGOTTEN}); no log"
    started = f"learning seeds 2,3: job {lost[0]} CANCELLED ("
    assert len(failures) == 2 and (failures[0] == forgotten or failures[0].startswith(started)), failures
    assert failures[1] == "learning: not submitted, since a group job of it failed"
    assert cluster.pending_jobs(plan, tmp_path) == [cluster.Job(("learning",), (2, 3)), cluster.Job(("learning",))]
    assert cluster.submit(plan, tmp_path, cluster.pending_jobs(plan, tmp_path), _options(), say=lambda _: None) == []
    alone = what_a_run_computed(json.loads(get_chapter("hmm").run("quick", overrides, 4, "cpu", False).to_json()))
    merged = what_a_run_computed(json.loads(cluster.merge_folder(tmp_path).to_json()))
    assert merged["data"]["learning"] == alone["data"]["learning"]
    assert merged["sections"]["learning"] == alone["sections"]["learning"]
    assert merged["claims"] == [claim for claim in alone["claims"] if claim["section"] == "learning"]


def test_share_jobs_of_a_grid_section_merge_into_what_one_process_computes(tmp_path):
    overrides = {**tiny_plan("markov").overrides, "grid_seeds": "2"}  # 8 members per training call
    plan = cluster.Plan.make("markov", "quick", overrides, None, "cpu", ["phase_diagram"], shares={"phase_diagram": 2})
    said: list[str] = []
    assert cluster.submit(plan, tmp_path, plan.jobs(), _options(), say=said.append) == []
    assert sum(" done: phase_diagram share " in line for line in said) == 2
    alone = get_chapter("markov").run("quick", overrides, None, "cpu", False, ["phase_diagram"])
    merged = what_a_run_computed(json.loads(cluster.merge_folder(tmp_path).to_json()))
    assert merged == what_a_run_computed(json.loads(alone.to_json()))


def test_a_partition_slurm_does_not_list_is_refused_in_one_line_before_any_work(tmp_path, capsys):
    flags = ["--executor", "slurm", "--partition", "nosuchpartition", "--calibration-steps", "2"]
    code = main(["run", "hmm", *tiny_flags("hmm"), "--section", "learning", *flags, "--folder", str(tmp_path)])
    error = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(error) == 1 and "no partition 'nosuchpartition'" in error[0], error


def test_an_option_sbatch_refuses_is_reported_in_one_line(tmp_path):
    plan = cluster.Plan.make("hmm", "quick", tiny_plan("hmm").overrides, tiny_plan("hmm").seeds, "cpu", ["learning"])
    no_such_node = cluster.JobOptions("slurm", partition=PARTITION, gpus_per_job=1, timeout_min=10)  # no GPU here
    with pytest.raises(ValueError, match=r"^the scheduler refused the jobs: [^\n]+$"):
        cluster.submit(plan, tmp_path, plan.jobs(), no_such_node, say=lambda line: None)


class _Stopped(Exception):
    """The submitting command ended (killed, logged out) right after its jobs were submitted."""


def test_a_rerun_waits_for_jobs_still_running_instead_of_submitting_them_again(tmp_path, capsys, monkeypatch):
    plan = tiny_plan("hmm")
    held = []

    def stop_after_submitting(line: str) -> None:  # hold each job in the queue, then end the command
        if line.startswith("job ") and " done" not in line:
            held.append(line.split()[1].rstrip(":"))
            subprocess.run(["scontrol", "hold", held[-1]], check=True)
            raise _Stopped

    learning = cluster.Plan.make("hmm", "quick", plan.overrides, plan.seeds, "cpu", ["learning"])
    with pytest.raises(_Stopped):
        cluster.submit(learning, tmp_path, learning.jobs(), _options(), say=stop_after_submitting)
    try:
        where = ["--executor", "slurm", "--partition", PARTITION, "--folder", str(tmp_path)]
        flags = [*tiny_flags("hmm"), "--device", "cpu", "--section", "learning", "--calibration-steps", "2", *where]
        rerun = ["run", "hmm", *flags]
        assert main([*rerun, "--no-wait"]) == 3
        assert f"job {held[0]}: learning, PENDING" in capsys.readouterr().out
        waiting = cluster._wait

        def release_then_wait(running, say):  # released once the rerun has seen it held: it cannot end unseen first
            subprocess.run(["scontrol", "release", held[0]], check=True)
            return waiting(running, say)

        monkeypatch.setattr(cluster, "_wait", release_then_wait)
        assert main(rerun) == 0
        told = capsys.readouterr().out
        assert f"job {held[0]}: learning, PENDING since an earlier command" in told
        assert json.loads((tmp_path / cluster.JOBS_FILE).read_text()) == {
            "learning": held[0]
        }  # nothing submitted again
        assert cluster.pending(learning, tmp_path) == []
    finally:  # a held job left by a failing test would block the queue
        subprocess.run(["scancel", *held], check=False)
