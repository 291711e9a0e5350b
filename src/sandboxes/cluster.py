"""A chapter's run as jobs on an existing scheduler (submitit: Slurm, or processes on this machine), then merged.

Each job runs one section that trains (the theory sections, which are cheap, share one job) and writes a
*partial result* per section, ``parts/<section>.json`` in the run's folder: the result file a single run of
that section alone would write. :func:`merge_folder` assembles the partials, in the chapter's reading order,
into the file a single process would write; sections do not share state, so the claims and data are the
same, bit for bit on one CPU (``tests/test_cluster.py``). A rerun submits only the sections whose partial is
missing or does not match the plan; a failed job is reported with its log, never dropped.

With ``seeds_per_job`` a section with more seeds is split: first one *group job* per group of its seeds, each
training those seeds' members of every training call of the section and storing them (``members/``, see
:mod:`sandboxes.members`), then the section's own job, which finds every member stored, trains none, and computes
the section over all its seeds as one process would. A group job that has finished leaves a marker,
``groups/<section>/<seeds>.json``; a rerun skips it.

A section whose training is not one member per seed (a grid of cells, a sweep) splits into *share jobs* instead
(``shares``): share g of n trains the g-th block of every training call's members and stores them
(:func:`sandboxes.members.share_rows`), leaving the other blocks untrained; its own result is thrown away, and its
marker is ``groups/<section>/share-<g>-of-<n>.json``. The section's own job then finds the members stored, as after
group jobs. A training call that starts from what an earlier call trained gets other keys in a share job wherever
that job left the earlier call's member untrained, so the section's own job trains those: slower, never different.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from . import members
from .calibration import TrainCall, calibrating
from .chapters import get_chapter
from .profiles import resolve
from .results import RESULTS_DIR, Result, merge
from .runtime import device_name, pick_device

PLAN_FILE = "plan.json"
PARTS = "parts"
LOGS = "logs"
GROUPS = "groups"
MEMBERS = "members"
COMPARISONS_DIR = RESULTS_DIR / "cluster"  # committed estimates-against-runs files, which the cluster page shows
ESTIMATES_FILE = "estimates.json"  # each job's planned seconds, by the job's name, beside what the jobs then took
JOBS_FILE = "jobs.json"  # each submitted job's scheduler id by the job's name: a rerun reattaches to those not ended
EXECUTORS = ("local", "slurm")
ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED")  # Slurm: not ended
CALIBRATION_STEPS = 10  # steps per train() call when planning: the first warms up, the other nine are timed


MIN_GROUP = 2  # seeds per group job at least: one seed alone would train as a plain model, not vmapped as in the
# section's own run, and agree with it to float precision only


@dataclass(frozen=True)
class Job:
    """One job: ``sections`` run and written as partial results; with ``seeds``, a group job that trains those
    seeds of its one section and stores their members; with ``share`` = (g, n), a share job that trains the g-th of
    n blocks of every training call of its one section and stores them."""

    sections: tuple[str, ...]
    seeds: tuple[int, ...] = ()
    share: tuple[int, int] | tuple[()] = ()

    @property
    def stores(self) -> bool:
        """Whether the job only trains and stores members (a group or share job) and writes no partial result."""
        return bool(self.seeds or self.share)

    @property
    def name(self) -> str:
        """How the plan and the logs name the job."""
        if self.seeds:
            return f"{self.sections[0]} seeds {','.join(map(str, self.seeds))}"
        if self.share:
            return f"{self.sections[0]} share {self.share[0] + 1} of {self.share[1]}"
        return self.sections[0] if len(self.sections) == 1 else f"{len(self.sections)} theory sections"


@dataclass(frozen=True)
class Plan:
    """What a cluster run computes: a chapter at a profile with a reader's values, and its jobs' sections."""

    chapter: str
    profile: str
    overrides: Mapping[str, str] = field(default_factory=dict)
    seeds: int | None = None
    device: str = "auto"
    sections: tuple[str, ...] = ()
    seeds_per_job: int | None = None  # split a section with more seeds into group jobs of this many seeds
    shares: Mapping[str, int] = field(default_factory=dict)  # split these sections into this many share jobs each

    @classmethod
    def make(
        cls,
        chapter: str,
        profile: str,
        overrides: Mapping[str, str],
        seeds: int | None,
        device: str,
        sections: Sequence[str] = (),
        seeds_per_job: int | None = None,
        shares: Mapping[str, int] | None = None,
    ) -> Plan:
        """Check the values as a single run would (every check before any job starts); default: all sections."""
        found = get_chapter(chapter)
        run = found.start(profile, overrides, seeds, "cpu")  # the job's device is not this machine's
        names = [found.section(name).name for name in sections] or [s.name for s in found.sections]
        for name in found.closure(names):
            run.check_seeds(name)
        for name, n in (shares or {}).items():
            if name not in names or not found.section(name).shareable or n < 2:
                raise ValueError(f"shares: {name} is not a section of the plan that may be shared, or {n} < 2 shares")
        shared = {found.section(name).name: n for name, n in (shares or {}).items()}
        plan = cls(found.name, profile, dict(overrides), seeds, device, tuple(names), seeds_per_job, shared)
        if seeds_per_job is not None:
            least = max([MIN_GROUP] + [found.section(name).min_seeds for name in found.closure(names)])
            if seeds_per_job < least:
                raise ValueError(
                    f"--seeds-per-job must be at least {least} (a group of one seed would train unbatched"
                    f"{'; a section compares seeds' if least > MIN_GROUP else ''}), got {seeds_per_job}"
                )
        return plan

    def groups(self, section: str) -> list[tuple[int, ...]]:
        """The seed groups of ``section``'s group jobs: none unless it trains and has more seeds than a job takes;
        a last group smaller than the others joins the one before when it would be too small to run alone."""
        found = get_chapter(self.chapter).section(section)
        if self.seeds_per_job is None or not (found.trains and found.by_seed):
            return []
        seeds = self.expected()[1]
        if len(seeds) <= self.seeds_per_job:
            return []
        size = self.seeds_per_job
        groups = [tuple(seeds[i : i + size]) for i in range(0, len(seeds), size)]
        least = max(MIN_GROUP, found.min_seeds)
        if len(groups[-1]) < least:
            groups[-2:] = [groups[-2] + groups[-1]]
        return groups

    def _trains(self, section: str) -> bool:
        """Whether ``section`` trains models (so it is a job of its own)."""
        return get_chapter(self.chapter).section(section).trains

    def jobs(self, sections: Sequence[str] | None = None) -> list[Job]:
        """The jobs for ``sections`` (default: the plan's): one for the sections that train nothing, and per section
        that trains, its group jobs (if it is split) and then its own job."""
        wanted = self.sections if sections is None else sections
        theory = tuple(name for name in wanted if not self._trains(name))
        out = [Job(theory)] if theory else []
        for name in (n for n in wanted if self._trains(n)):
            out += [Job((name,), group) for group in self.groups(name)] + self.share_jobs(name) + [Job((name,))]
        return out

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / PLAN_FILE).write_text(json.dumps(asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, folder: Path) -> Plan:
        path = folder / PLAN_FILE
        if not path.exists():
            raise ValueError(f"{folder} holds no {PLAN_FILE}: not a folder that `run --executor` made")
        body = json.loads(path.read_text())
        return cls(**{**body, "sections": tuple(body["sections"])})

    def split(self, section: str) -> bool:
        """Whether ``section`` runs as group or share jobs and then its own."""
        return bool(self.groups(section) or self.share_jobs(section))

    def share_jobs(self, section: str) -> list[Job]:
        """The share jobs of ``section``: none if it is split into seed groups or not named in ``shares``."""
        n = self.shares.get(section, 0)
        return [] if self.groups(section) or n < 2 else [Job((section,), share=(g, n)) for g in range(n)]

    def expected(self) -> tuple[dict[str, Any], list[int]]:
        """The config and seed list every partial result of this plan must carry."""
        chapter = get_chapter(self.chapter)
        config = json.loads(json.dumps(resolve(chapter.params, self.profile, self.overrides)))
        return config, list(range(chapter.seeds[self.profile] if self.seeds is None else self.seeds))


def run_job(plan: Plan, job: Job, folder: str) -> str:
    """One job: run its sections (and the sections they read) and write each one's partial result; or, for a group
    or share job, train its members of its section, store them and leave its marker. What it did, in a line."""
    chapter = get_chapter(plan.chapter)
    root = Path(folder)
    if not any(plan.split(name) for name in job.sections):
        result = chapter.run(plan.profile, plan.overrides, plan.seeds, plan.device, False, list(job.sections))
        return ", ".join(str(_save_atomically(only(result, n), part_path(root, n))) for n in job.sections)
    with members.sharing(root / MEMBERS, job.share or None) as shared:
        result = chapter.run(
            plan.profile, plan.overrides, plan.seeds, plan.device, False, list(job.sections), job.seeds
        )
    counts = f"{shared.served} members found stored, {shared.trained} trained"
    if job.share:
        counts += f", {shared.skipped} left to other shares"
    if job.stores:
        _write_atomically(group_path(root, job), json.dumps(_group_record(plan, job)) + "\n")
        return f"{job.name}: {counts}"
    (name,) = job.sections
    return f"{_save_atomically(only(result, name), part_path(root, name))}: {counts}"


def group_path(folder: Path, job: Job) -> Path:
    """Where group or share job ``job`` leaves its marker when it has finished."""
    name = f"share-{job.share[0] + 1}-of-{job.share[1]}" if job.share else "-".join(map(str, job.seeds))
    return folder / GROUPS / job.sections[0] / f"{name}.json"


def _group_record(plan: Plan, job: Job) -> dict[str, Any]:
    """What a group or share job's marker holds: the plan's chapter, profile, config and seeds, and its own
    section, seeds and share, so that a marker left by another plan does not count."""
    config, seeds = plan.expected()
    return {
        "chapter": plan.chapter,
        "profile": plan.profile,
        "config": config,
        "seeds": seeds,
        "section": job.sections[0],
        "group": list(job.seeds),
        **({"share": list(job.share)} if job.share else {}),
    }


def group_done(plan: Plan, folder: Path, job: Job) -> bool:
    """Whether group or share job ``job`` of this plan has finished (its marker exists and matches the plan)."""
    path = group_path(folder, job)
    try:
        return json.loads(path.read_text()) == json.loads(json.dumps(_group_record(plan, job)))
    except (OSError, ValueError):
        return False


def only(result: Result, section: str) -> Result:
    """The result of ``section`` alone, as a single run of that section would write it."""
    record = result.sections[section]
    return Result(
        chapter=result.chapter,
        profile=result.profile,
        config=result.config,
        seeds=result.seeds,
        claims=[c for c in result.claims if c.section == section],
        data={section: result.data[section]},
        sections={section: record},
        provenance={**result.provenance, **record["provenance"]},
    )


def part_path(folder: Path, section: str) -> Path:
    return folder / PARTS / f"{section}.json"


def _save_atomically(result: Result, path: Path) -> Path:
    """A partial result, written so that a job killed while writing leaves none that looks whole."""
    return _write_atomically(path, result.to_json() + "\n")


def _write_atomically(path: Path, text: str) -> Path:
    """Write to a temporary name, then rename: a job killed while writing leaves no file that looks whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_text(text)
    temporary.replace(path)
    return path


def valid_part(plan: Plan, folder: Path, section: str) -> Result | None:
    """The partial result of ``section`` if it exists and belongs to this plan (chapter, profile, config, seeds)."""
    path = part_path(folder, section)
    if not path.exists():
        return None
    try:
        part = Result.load(path)
    except (ValueError, KeyError, TypeError):
        return None
    config, seeds = plan.expected()
    matches = (part.chapter, part.profile, part.config, part.seeds) == (plan.chapter, plan.profile, config, seeds)
    return part if matches and list(part.sections) == [section] else None


def pending(plan: Plan, folder: Path) -> list[str]:
    """The plan's sections that still need a job: no valid partial result."""
    return [name for name in plan.sections if valid_part(plan, folder, name) is None]


def pending_jobs(plan: Plan, folder: Path) -> list[Job]:
    """The jobs still to run: those of the sections without a valid partial, less the group jobs that finished."""
    return [job for job in plan.jobs(pending(plan, folder)) if not (job.stores and group_done(plan, folder, job))]


def merge_folder(folder: Path) -> Result:
    """The chapter's result from the partials in ``folder``, in reading order; an error names what is missing."""
    plan = Plan.load(folder)
    missing = pending(plan, folder)
    if missing:
        raise ValueError(
            f"no valid partial result for {', '.join(missing)} in {folder / PARTS}; rerun the same "
            "`run --executor ...` command to submit them"
        )
    order = [s.name for s in get_chapter(plan.chapter).sections]
    merged: Result | None = None
    for name in [n for n in order if n in plan.sections]:
        merged = merge(merged, valid_part(plan, folder, name), order)
    assert merged is not None  # a plan has at least one section
    return merged


@dataclass(frozen=True)
class JobEstimate:
    """What planning measured for one job: seconds on the measuring device and the largest training step's bytes."""

    job: Job
    seconds: float
    step_bytes: int
    error: str = ""
    members: int = 0  # the most members one of its training calls trains: what share jobs can split


def estimate(
    plan: Plan, jobs: list[Job], device: str = "auto", steps: int = CALIBRATION_STEPS
) -> tuple[list[JobEstimate], str]:
    """Each job's cost, from a short calibration on this machine: every train() call runs ``steps`` steps and is
    scaled to its planned steps, the rest of a section runs in full; and the device that measured it. Group jobs
    of one size are calibrated once; a split section's own job trains nothing, so only the rest of it counts; a
    share job of n is the whole section with its training divided by n (calibrated once per section)."""
    if steps < 2:
        raise ValueError(f"--calibration-steps must be at least 2 (the first step warms up, untimed), got {steps}")
    chapter = get_chapter(plan.chapter)
    measured_on = pick_device(device)
    estimates: list[JobEstimate] = []
    known: dict[tuple[tuple[str, ...], int, tuple[int, ...]], JobEstimate] = {}
    for job in jobs:
        alike = (job.sections, len(job.seeds), job.share[1:])
        if job.stores and alike in known:
            estimates.append(replace(known[alike], job=job))
            continue
        served = not job.stores and any(plan.split(name) for name in job.sections)
        shares = job.share[1] if job.share else 1
        start = time.perf_counter()
        error = ""
        with calibrating(steps) as calls:
            try:
                chapter.run(plan.profile, plan.overrides, plan.seeds, device, False, list(job.sections), job.seeds)
            except Exception as err:  # noqa: BLE001 - barely trained models may trip a section; say so, keep the rest
                error = f"{type(err).__name__}: {err}"
        counted = [call for call in calls if not (served and isinstance(call, TrainCall))]
        seconds = (
            time.perf_counter()
            - start
            - sum(call.wall_time for call in calls)
            + sum(call.estimated_s / (shares if isinstance(call, TrainCall) else 1) for call in counted)
        )
        most = max((call.total for call in calls if isinstance(call, TrainCall)), default=0)
        known[alike] = JobEstimate(job, seconds, max((call.step_bytes for call in counted), default=0), error, most)
        estimates.append(known[alike])
    return estimates, device_name(measured_on)


def seeds_per_job_for(plan: Plan, estimates: Sequence[JobEstimate], max_hours: float) -> int | None:
    """The seeds a group job may take so that every section job planned over ``max_hours`` and splittable fits,
    its time taken as proportional to its seeds (the split plan is estimated again after); None where every job fits
    or none over it can be split."""
    chapter = get_chapter(plan.chapter)
    seeds = len(plan.expected()[1])
    least = max([MIN_GROUP] + [chapter.section(name).min_seeds for name in chapter.closure(list(plan.sections))])
    sizes = [
        max(least, int(seeds * max_hours * 3600 / row.seconds))
        for row in estimates
        if not row.job.stores
        and row.seconds > max_hours * 3600
        and len(row.job.sections) == 1
        and chapter.section(row.job.sections[0]).trains
        and chapter.section(row.job.sections[0]).by_seed
    ]
    size = min(sizes, default=None)
    return size if size is not None and size < seeds else None


def shares_for(plan: Plan, estimates: Sequence[JobEstimate], max_hours: float) -> dict[str, int]:
    """Per section job planned over ``max_hours`` whose training is not one member per seed (so seed groups cannot
    split it) and whose members may be shared (``Section.shareable``), the share jobs that bring it under, its
    training taken as evenly divisible (the split plan is estimated again after), and no more than its largest
    training call has blocks of two members."""
    chapter = get_chapter(plan.chapter)
    shares = {}
    for row in estimates:
        if row.job.stores or len(row.job.sections) != 1:
            continue
        section = chapter.section(row.job.sections[0])
        most = min(math.ceil(row.seconds / (max_hours * 3600)), row.members // MIN_GROUP)
        if section.shareable and not section.by_seed and row.seconds > max_hours * 3600 and most >= 2:
            shares[section.name] = most
    return shares


def save_estimates(folder: Path, estimates: Sequence[JobEstimate], measured_on: str) -> None:
    """Keep each job's planned seconds in the folder (``estimates.json``), to set beside what the job took."""
    path = folder / ESTIMATES_FILE
    kept = json.loads(path.read_text())["seconds"] if path.exists() else {}
    body = {"measured_on": measured_on, "seconds": {**kept, **{e.job.name: e.seconds for e in estimates}}}
    _write_atomically(path, json.dumps(body, indent=1) + "\n")


def estimates_against_runs(folder: Path) -> list[tuple[str, float, float]]:
    """Per section job planned in ``folder`` whose partial results exist: its name, its planned seconds and the
    seconds its sections took (their wall times, as the partials record them; a job's start-up is in neither)."""
    path = folder / ESTIMATES_FILE
    if not path.exists():
        return []
    planned = json.loads(path.read_text())["seconds"]
    plan = Plan.load(folder)
    rows = []
    for job in (job for job in plan.jobs() if not job.stores and job.name in planned):
        parts = [valid_part(plan, folder, name) for name in job.sections]
        if all(part is not None for part in parts):
            took = sum(part.sections[name]["wall_time_s"] for part, name in zip(parts, job.sections))  # type: ignore
            rows.append((job.name, float(planned[job.name]), float(took)))
    return rows


def save_comparison(folder: Path, result: Result, compared: Sequence[tuple[str, float, float]]) -> Path:
    """``estimates-against-runs.json`` in ``folder``: each job's planned and taken seconds, the machine that planned
    and the one that ran (the cluster page shows such a file from ``results/cluster/``)."""
    body = {
        "chapter": result.chapter,
        "profile": result.profile,
        "planned_on": json.loads((folder / ESTIMATES_FILE).read_text())["measured_on"],
        "ran_on": result.provenance.get("device_name"),
        "git_commit": result.provenance.get("git_commit"),
        "jobs": [{"job": name, "planned_s": round(planned, 2), "took_s": took} for name, planned, took in compared],
    }
    return _write_atomically(folder / "estimates-against-runs.json", json.dumps(body, indent=1) + "\n")


def comparison_table(body: Mapping[str, Any]) -> str:
    """An ``estimates-against-runs.json`` as an HTML table: per job, planned and taken seconds and their ratio."""
    rows = "".join(
        f"<tr><td>{row['job']}</td><td>{row['planned_s']:.1f}</td><td>{row['took_s']:.1f}</td>"
        f"<td>{row['planned_s'] / row['took_s']:.2f}</td></tr>"
        for row in body["jobs"]
    )
    head = "".join(f"<th>{h}</th>" for h in ("job", "planned (s)", "took (s)", "planned / took"))
    caption = (
        f"{body['chapter']} at the {body['profile']} profile, planned on {body['planned_on']}, run on "
        f"{body['ran_on']} (commit {str(body['git_commit'])[:7]})"
    )
    return f"<table><caption>{caption}</caption><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def plan_report(
    plan: Plan, estimates: list[JobEstimate], measured_on: str, gpus_per_job: int, steps: int = CALIBRATION_STEPS
) -> str:
    """The table printed before submitting: each job, its estimated hours and memory, and the total."""
    unit = "GPU-hours" if gpus_per_job else "hours"
    lines = [
        f"{plan.chapter} at the {plan.profile} profile: {len(estimates)} jobs to run; estimated from a "
        f"{steps}-step calibration of each train() call on {measured_on}"
    ]
    for row in estimates:
        hours = row.seconds / 3600 * max(1, gpus_per_job)
        note = f"  (calibration stopped early: {row.error})" if row.error else ""
        if not row.job.stores and any(plan.split(name) for name in row.job.sections):
            note += "  (after its group or share jobs; serves their members)"
        lines.append(f"  {row.job.name:<24} {hours:9.3f} {unit}  largest step {row.step_bytes / 2**30:6.2f} GiB{note}")
    total = sum(e.seconds for e in estimates) / 3600 * max(1, gpus_per_job)
    lines.append(f"  {'total':<24} {total:9.3f} {unit}")
    return "\n".join(lines)


@dataclass(frozen=True)
class JobOptions:
    """What the scheduler is asked for, per job."""

    executor: str = "local"
    partition: str | None = None
    gpus_per_job: int = 0
    max_jobs: int = 8
    timeout_min: int = 60

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise ValueError(f"--executor must be one of {', '.join(EXECUTORS)}, got {self.executor!r}")
        if self.max_jobs < 1 or self.gpus_per_job < 0 or self.timeout_min < 1:
            raise ValueError("--max-jobs and --timeout-min must be at least 1, --gpus-per-job at least 0")
        if self.partition is not None and self.executor != "slurm":
            raise ValueError("--partition is a Slurm option: give it with --executor slurm")


def check_partition(options: JobOptions) -> None:
    """Refuse, before any work, a Slurm partition that this cluster's ``sinfo`` does not list (sbatch would refuse
    it only when the jobs are submitted, after the calibration, and print its own lines)."""
    if options.executor != "slurm" or options.partition is None:
        return
    try:
        listed = subprocess.run(["sinfo", "-h", "-o", "%R"], capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as err:
        raise ValueError(f"--partition {options.partition}: sinfo could not list the partitions ({err})") from None
    partitions = sorted(set(listed.stdout.split()))
    if options.partition not in partitions:
        raise ValueError(
            f"Slurm has no partition {options.partition!r} (sinfo lists: {', '.join(partitions) or 'none'})"
        )


def _executor(options: JobOptions, folder: Path, name: str) -> Any:
    """A submitit executor for ``options`` whose logs go under ``folder``."""
    try:
        import submitit
    except ImportError as err:
        raise ValueError("running on a scheduler needs submitit: pip install -e .[cluster]") from err
    executor = submitit.AutoExecutor(folder=folder / LOGS / "%j", cluster=options.executor)
    parameters: dict[str, Any] = {
        "name": name,
        "timeout_min": options.timeout_min,
        "gpus_per_node": options.gpus_per_job,
    }
    if options.executor == "slurm":
        parameters["slurm_array_parallelism"] = options.max_jobs
        if options.partition:
            parameters["slurm_partition"] = options.partition
    executor.update_parameters(**parameters)
    return executor


def submit(
    plan: Plan,
    folder: Path,
    jobs: list[Job],
    options: JobOptions,
    say: Callable[[str], None] = print,
    attached: Sequence[tuple[Job, Any, str]] = (),
) -> list[str]:
    """Wait for the jobs an earlier command submitted that are still running (``attached``, from
    :func:`still_running`), then run ``jobs`` and wait for them, the group jobs first, then the jobs of split sections
    whose groups all succeeded; the failures, each with its log's path."""
    plan.save(folder)
    for job, handle, state in attached:
        say(f"job {handle.job_id}: {job.name}, {state} since an earlier command: waiting for it, not submitting again")
    failed = _wait([(handle, job) for job, handle, _ in attached], say)
    if not jobs:
        if not attached:
            say(f"every section already has a valid partial result in {folder / PARTS}")
        return [message for _, message in failed]
    executor = _executor(options, folder, f"sandboxes-{plan.chapter}")
    waiting = [job for job in jobs if not job.stores and any(plan.split(name) for name in job.sections)]
    failed += _run_wave(executor, plan, folder, [job for job in jobs if job not in waiting], options, say)
    broken = {job.sections[0]: "share" if job.share else "group" for job, _ in failed if job.stores}
    held = [
        (job, f"{job.name}: not submitted, since a {broken[job.sections[0]]} job of it failed")
        for job in waiting
        if job.sections[0] in broken
    ]
    failed += held + _run_wave(
        executor, plan, folder, [j for j in waiting if j.sections[0] not in broken], options, say
    )
    return [message for _, message in failed]


def still_running(plan: Plan, folder: Path, jobs: Sequence[Job], options: JobOptions) -> list[tuple[Job, Any, str]]:
    """Of ``jobs``, those an earlier command submitted to Slurm (``jobs.json``) that have not ended, each with a
    handle on it and its state: a rerun waits for them instead of submitting them again."""
    path = folder / JOBS_FILE
    if options.executor != "slurm" or not path.exists():
        return []
    import submitit

    known = json.loads(path.read_text())
    found = []
    for job in (job for job in jobs if job.name in known):
        handle = submitit.SlurmJob(folder=folder / LOGS / "%j", job_id=known[job.name])
        state = _recorded_state(handle)
        if state in ACTIVE:
            found.append((job, handle, state))
    return found


def _record(folder: Path, submitted: Mapping[str, str]) -> None:
    """Add the scheduler ids of jobs just submitted, by name, to the folder's ``jobs.json``."""
    path = folder / JOBS_FILE
    known = json.loads(path.read_text()) if path.exists() else {}
    _write_atomically(path, json.dumps({**known, **submitted}, indent=1) + "\n")


def _run_wave(
    executor: Any, plan: Plan, folder: Path, jobs: list[Job], options: JobOptions, say: Callable[[str], None]
) -> list[tuple[Job, str]]:
    """Submit ``jobs`` and wait for every one; the jobs that failed, each with a line that names its log."""
    failed = []
    # Slurm limits how many run at once itself; local processes are started max_jobs at a time
    batches = (
        [jobs]
        if options.executor == "slurm"
        else [jobs[i : i + options.max_jobs] for i in range(0, len(jobs), options.max_jobs)]
    )
    for batch in (b for b in batches if b):
        try:
            submitted = executor.map_array(run_job, [plan] * len(batch), batch, [str(folder)] * len(batch))
        except Exception as err:  # noqa: BLE001 - sbatch refused the jobs (a partition, an option): say why in a line
            raise ValueError(f"the scheduler refused the jobs: {_reason(err)}") from None
        _record(folder, {spec.name: job.job_id for job, spec in zip(submitted, batch)})
        for job, spec in zip(submitted, batch):
            say(f"job {job.job_id}: {spec.name}")
        failed += _wait(list(zip(submitted, batch)), say)
    return failed


def _wait(running: Sequence[tuple[Any, Job]], say: Callable[[str], None]) -> list[tuple[Job, str]]:
    """Wait for each submitted job; those that failed, each with a line that names its state and its log."""
    failed = []
    for job, spec in running:
        if not _ends(job):
            failed.append((spec, f"{spec.name}: job {job.job_id} left Slurm without a record ({FORGOTTEN}); no log"))
            continue
        try:
            say(f"job {job.job_id} done: {job.result()}")
        except Exception as err:  # noqa: BLE001 - a failed job is reported, whatever it raised
            failed.append(
                (spec, f"{spec.name}: job {job.job_id} {job_state(job)} ({_reason(err)}); log {job.paths.stderr}")
            )
    return failed


FORGOTTEN = "an array task cancelled before it started leaves none"
QUEUE_CHECK_S = 15.0  # between two looks at Slurm's queue and records while a job runs: gentle on a shared cluster


def _ends(job: Any, check_s: float = QUEUE_CHECK_S, poll_s: float = 1.0) -> bool:
    """Wait until ``job`` ends; False where Slurm neither queues nor records it at two looks ``check_s`` apart (a
    job between queue and record is missed by one look at most), which submitit would wait for forever. Jobs of
    other executors end when their result is asked for."""
    from submitit import SlurmJob  # installed wherever a job was submitted

    if not isinstance(job, SlurmJob):
        return True
    missed, last_look = 0, -check_s
    while not job.done():
        if time.monotonic() - last_look >= check_s:
            last_look = time.monotonic()
            missed = 0 if _queued(job.job_id) or _recorded_state(job) not in (None, "UNKNOWN") else missed + 1
            if missed == 2:
                return False
        time.sleep(poll_s)
    return True


def _queued(job_id: str) -> bool:
    """Whether Slurm's queue lists ``job_id`` now."""
    shown = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%i"], capture_output=True, text=True, timeout=30)
    return shown.returncode != 0 or bool(shown.stdout.strip())  # an error is no evidence that the job is gone


def _reason(err: Exception) -> str:
    """The line of an error that says what went wrong: sbatch's own error, or the exception a job's trace ends on,
    where there is one; else the first."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    told = [line.removeprefix("sbatch: error: ") for line in lines if line.startswith("sbatch: error:")]
    raised = [line for line in lines if re.match(r"^[\w.]+(Error|Exception): ", line)]
    return (told or raised[-1:] or lines or [type(err).__name__])[0]


SETTLING = (*ACTIVE, "UNKNOWN")  # states before a job's end is recorded


def _recorded_state(job: Any) -> str | None:
    """The state the scheduler records for ``job`` now (Slurm's, from sacct; a local process's); None where it has
    no record to read (a local process that is gone)."""
    try:
        info = job.get_info(mode="force")
    except Exception:  # noqa: BLE001 - whatever the scheduler raised, there is no record
        return None
    return str(info.get("State") or info.get("jobState") or "UNKNOWN").split()[0]


def job_state(job: Any, patience_s: float = 60.0) -> str:
    """A finished job's state as the scheduler records it (Slurm's: FAILED, CANCELLED, TIMEOUT, ...), waiting up to
    ``patience_s`` for the record to catch up with the job's end; "failed" where none is recorded."""
    deadline = time.monotonic() + patience_s
    while (state := _recorded_state(job)) in SETTLING and time.monotonic() < deadline:
        time.sleep(1.0)
    # a local process that raised ends "FINISHED"
    return "failed" if state in (None, *SETTLING, "FINISHED", "COMPLETED") else state
