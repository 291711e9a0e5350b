"""A chapter's run as jobs on an existing scheduler (submitit: Slurm, or processes on this machine), then merged.

Each job runs one section that trains (the theory sections, which are cheap, share one job) and writes a
*partial result* per section, ``parts/<section>.json`` in the run's folder: the result file a single run of
that section alone would write. :func:`merge_folder` assembles the partials, in the chapter's reading order,
into the file a single process would write; sections do not share state, so the claims and data are the
same, bit for bit on one CPU (``tests/test_cluster.py``). A rerun submits only the sections whose partial is
missing or does not match the plan; a failed job is reported with its log, never dropped.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .chapters import get_chapter
from .profiles import resolve
from .results import Result, merge
from .runtime import device_name, pick_device
from .trainer import calibrating

PLAN_FILE = "plan.json"
PARTS = "parts"
LOGS = "logs"
EXECUTORS = ("local", "slurm")
CALIBRATION_STEPS = 10  # steps per train() call when planning: the first warms up, the other nine are timed


@dataclass(frozen=True)
class Plan:
    """What a cluster run computes: a chapter at a profile with a reader's values, and its jobs' sections."""

    chapter: str
    profile: str
    overrides: Mapping[str, str] = field(default_factory=dict)
    seeds: int | None = None
    device: str = "auto"
    sections: tuple[str, ...] = ()

    @classmethod
    def make(cls, chapter: str, profile: str, overrides: Mapping[str, str], seeds: int | None, device: str,
             sections: Sequence[str] = ()) -> "Plan":
        """Check the values as a single run would (every check before any job starts); default: all sections."""
        found = get_chapter(chapter)
        run = found.start(profile, overrides, seeds, "cpu")  # the job's device is not this machine's
        names = [found.section(name).name for name in sections] or [s.name for s in found.sections]
        for name in found.closure(names):
            run.check_seeds(name)
        return cls(found.name, profile, dict(overrides), seeds, device, tuple(names))

    def jobs(self, sections: Sequence[str] | None = None) -> list[tuple[str, ...]]:
        """The jobs for ``sections`` (default: the plan's): one per section that trains, one for the rest."""
        chapter = get_chapter(self.chapter)
        wanted = self.sections if sections is None else sections
        theory = tuple(name for name in wanted if not chapter.section(name).trains)
        return ([theory] if theory else []) + [(name,) for name in wanted if chapter.section(name).trains]

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / PLAN_FILE).write_text(json.dumps(asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, folder: Path) -> "Plan":
        path = folder / PLAN_FILE
        if not path.exists():
            raise ValueError(f"{folder} holds no {PLAN_FILE}: not a folder that `run --executor` made")
        body = json.loads(path.read_text())
        return cls(**{**body, "sections": tuple(body["sections"])})

    def expected(self) -> tuple[dict[str, Any], list[int]]:
        """The config and seed list every partial result of this plan must carry."""
        chapter = get_chapter(self.chapter)
        config = json.loads(json.dumps(resolve(chapter.params, self.profile, self.overrides)))
        return config, list(range(chapter.seeds[self.profile] if self.seeds is None else self.seeds))


def run_job(plan: Plan, sections: tuple[str, ...], folder: str) -> list[str]:
    """One job: run ``sections`` (and the sections they read) and write each one's partial result; the paths."""
    chapter = get_chapter(plan.chapter)
    result = chapter.run(plan.profile, plan.overrides, plan.seeds, plan.device, False, list(sections))
    return [str(_save_atomically(only(result, name), part_path(Path(folder), name))) for name in sections]


def only(result: Result, section: str) -> Result:
    """The result of ``section`` alone, as a single run of that section would write it."""
    record = result.sections[section]
    return Result(chapter=result.chapter, profile=result.profile, config=result.config, seeds=result.seeds,
                  claims=[c for c in result.claims if c.section == section], data={section: result.data[section]},
                  sections={section: record}, provenance={**result.provenance, **record["provenance"]})


def part_path(folder: Path, section: str) -> Path:
    return folder / PARTS / f"{section}.json"


def _save_atomically(result: Result, path: Path) -> Path:
    """Write to a temporary name, then rename: a job killed while writing leaves no partial that looks whole."""
    temporary = result.save(path.with_suffix(".json.tmp"))
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


def merge_folder(folder: Path) -> Result:
    """The chapter's result from the partials in ``folder``, in reading order; an error names what is missing."""
    plan = Plan.load(folder)
    missing = pending(plan, folder)
    if missing:
        raise ValueError(f"no valid partial result for {', '.join(missing)} in {folder / PARTS}; rerun the same "
                         "`run --executor ...` command to submit them")
    order = [s.name for s in get_chapter(plan.chapter).sections]
    merged: Result | None = None
    for name in [n for n in order if n in plan.sections]:
        merged = merge(merged, valid_part(plan, folder, name), order)
    assert merged is not None  # a plan has at least one section
    return merged


@dataclass(frozen=True)
class JobEstimate:
    """What planning measured for one job: seconds on the measuring device and the largest training step's bytes."""

    sections: tuple[str, ...]
    seconds: float
    step_bytes: int
    error: str = ""


def estimate(plan: Plan, jobs: list[tuple[str, ...]], device: str = "auto",
             steps: int = CALIBRATION_STEPS) -> tuple[list[JobEstimate], str]:
    """Each job's cost, from a short calibration on this machine: every train() call runs ``steps`` steps and is
    scaled to its planned steps, the rest of a section runs in full; and the device that measured it."""
    if steps < 2:
        raise ValueError(f"--calibration-steps must be at least 2 (the first step warms up, untimed), got {steps}")
    chapter = get_chapter(plan.chapter)
    measured_on = pick_device(device)
    estimates = []
    for job in jobs:
        start = time.perf_counter()
        error = ""
        with calibrating(steps) as calls:
            try:
                chapter.run(plan.profile, plan.overrides, plan.seeds, device, False, list(job))
            except Exception as err:  # noqa: BLE001 - barely trained models may trip a section; say so, keep the rest
                error = f"{type(err).__name__}: {err}"
        trained = sum(call.wall_time for call in calls)
        seconds = time.perf_counter() - start - trained + sum(call.estimated_s for call in calls)
        estimates.append(JobEstimate(job, seconds, max((call.step_bytes for call in calls), default=0), error))
    return estimates, device_name(measured_on)


def plan_report(plan: Plan, estimates: list[JobEstimate], measured_on: str, gpus_per_job: int,
                steps: int = CALIBRATION_STEPS) -> str:
    """The table printed before submitting: each job, its estimated hours and memory, and the total."""
    unit = "GPU-hours" if gpus_per_job else "hours"
    lines = [f"{plan.chapter} at the {plan.profile} profile: {len(estimates)} jobs to run; estimated from a "
             f"{steps}-step calibration of each train() call on {measured_on}"]
    for job in estimates:
        hours = job.seconds / 3600 * max(1, gpus_per_job)
        note = f"  (calibration stopped early: {job.error})" if job.error else ""
        name = job.sections[0] if len(job.sections) == 1 else f"{len(job.sections)} theory sections"
        lines.append(f"  {name:<24} {hours:9.3f} {unit}  largest step {job.step_bytes / 2**30:6.2f} GiB{note}")
    total = sum(job.seconds for job in estimates) / 3600 * max(1, gpus_per_job)
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


def _executor(options: JobOptions, folder: Path, name: str) -> Any:
    """A submitit executor for ``options`` whose logs go under ``folder``."""
    try:
        import submitit
    except ImportError as err:
        raise ValueError("running on a scheduler needs submitit: pip install -e .[cluster]") from err
    executor = submitit.AutoExecutor(folder=folder / LOGS / "%j", cluster=options.executor)
    parameters: dict[str, Any] = {"name": name, "timeout_min": options.timeout_min,
                                  "gpus_per_node": options.gpus_per_job}
    if options.executor == "slurm":
        parameters["slurm_array_parallelism"] = options.max_jobs
        if options.partition:
            parameters["slurm_partition"] = options.partition
    executor.update_parameters(**parameters)
    return executor


def submit(plan: Plan, folder: Path, jobs: list[tuple[str, ...]], options: JobOptions,
           say: Callable[[str], None] = print) -> list[str]:
    """Run ``jobs`` and wait for them; the failures, each with its log's path."""
    plan.save(folder)
    if not jobs:
        say(f"every section already has a valid partial result in {folder / PARTS}")
        return []
    executor = _executor(options, folder, f"sandboxes-{plan.chapter}")
    failures = []
    # Slurm limits how many run at once itself; local processes are started max_jobs at a time
    batches = [jobs] if options.executor == "slurm" else [jobs[i:i + options.max_jobs]
                                                          for i in range(0, len(jobs), options.max_jobs)]
    for batch in batches:
        submitted = executor.map_array(run_job, [plan] * len(batch), batch, [str(folder)] * len(batch))
        for job, sections in zip(submitted, batch):
            say(f"job {job.job_id}: {', '.join(sections)}")
        for job, sections in zip(submitted, batch):
            try:
                job.result()
            except Exception as err:  # noqa: BLE001 - a failed job is reported, whatever it raised
                first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                failures.append(f"{', '.join(sections)}: job {job.job_id} failed ({first_line}); log {job.paths.stderr}")
    return failures
