"""Command line: ``python -m sandboxes run <chapter> [--section S] ...``, ``list``, ``merge``, ``rejudge``, ``bench``
and ``margins``."""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

from . import bench, cluster, kernel_paths, performance, reference
from .chapters import all_chapters, get_chapter
from .profiles import PROFILES, check_profile
from .results import REPO_ROOT, Result, current_commit, merge, provenance, reference_result_path
from .runtime import DEVICES, device_name, pick_device


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sandboxes", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a chapter's experiment and print its verdict table")
    run.add_argument("chapter", help="chapter name (see `list`)")
    run.add_argument(
        "--section",
        dest="sections",
        action="append",
        default=[],
        metavar="SECTION",
        help="run only this section (and the sections it needs); repeatable (default: all)",
    )
    run.add_argument("--profile", default="quick", help=f"one of {', '.join(PROFILES)} (default quick)")
    run.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a chapter parameter; repeatable",
    )
    run.add_argument("--seeds", type=int, default=None, help="number of seeds (default: the profile's)")
    run.add_argument("--device", default="auto", help=f"one of {', '.join(DEVICES)} (default auto)")
    run.add_argument(
        "--out",
        default=None,
        help="result JSON path, or - for stdout (default runs/<chapter>-<profile>[-<sections>].json)",
    )
    run.add_argument(
        "--into",
        default=None,
        metavar="PATH",
        help="merge the sections run into the result file PATH (made if absent), keeping its other "
        "sections: how a chapter's reference result is made one section at a time",
    )
    run.add_argument(
        "--strict",
        action="store_true",
        help="exit with status 1 when a claim fails (an undecided claim, whose budget ran out first, does not)",
    )
    run.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="worker processes of one thread each, for sections that train many independent ensembles "
        "(default 1: this process; other values give the same numbers as one another)",
    )
    run.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bars on stderr (default: when stderr is a terminal)",
    )
    jobs = run.add_argument_group("on a scheduler", "run the sections as jobs (submitit) and merge their results")
    jobs.add_argument(
        "--executor",
        choices=cluster.EXECUTORS,
        default=None,
        help="slurm: one job per section that trains (or per seed group, --seeds-per-job), the theory "
        "sections in one more; "
        "local: the same jobs as processes on this machine",
    )
    jobs.add_argument(
        "--folder",
        default=None,
        help="where the plan, partial results and logs go "
        "(default runs/<chapter>-<profile>-jobs); rerunning into it skips the sections already done",
    )
    jobs.add_argument("--partition", default=None, help="Slurm partition")
    jobs.add_argument("--gpus-per-job", type=int, default=0, help="GPUs each job asks for (default 0)")
    jobs.add_argument("--max-jobs", type=int, default=8, help="jobs running at once (default 8)")
    jobs.add_argument("--timeout-min", type=int, default=600, help="each job's time limit in minutes (default 600)")
    jobs.add_argument(
        "--seeds-per-job",
        type=int,
        default=None,
        metavar="N",
        help="split each section that trains more than N seeds: group jobs of N seeds train and store "
        "their members, then the section's own job computes it from them (default: a section per job)",
    )
    jobs.add_argument(
        "--dry-run",
        action="store_true",
        help="print the jobs and their estimated hours (a short calibration on this machine), submit none",
    )
    jobs.add_argument(
        "--max-hours",
        type=float,
        default=None,
        metavar="H",
        help="split the sections whose job is planned over H hours into seed groups that fit, as --seeds-per-job "
        "would, with the group size chosen from the calibration; a section whose training is not one member per "
        "seed (a grid, a sweep) into share jobs that each train a share of every training call (or say which job "
        "cannot fit)",
    )
    jobs.add_argument(
        "--no-wait",
        action="store_true",
        help="where jobs an earlier command submitted to Slurm are still running, print their states and exit (3) "
        "instead of waiting for them",
    )
    jobs.add_argument(
        "--calibration-steps",
        type=int,
        default=cluster.CALIBRATION_STEPS,
        help="steps each train() call runs when planning; the first warms up and is not timed "
        f"(default {cluster.CALIBRATION_STEPS}; fewer plan a large model sooner, less precisely)",
    )
    merging = commands.add_parser("merge", help="assemble a folder of partial results (run --executor) into one result")
    merging.add_argument("folder", help="the folder `run --executor` wrote")
    merging.add_argument("--out", default=None, help="result JSON path (default <folder>/<chapter>-<profile>.json)")
    judging = commands.add_parser(
        "rejudge",
        help="judge a committed reference section's rows again from its stored "
        "data by the current rules (after a rule or a row's text changed; trains nothing)",
    )
    judging.add_argument("chapter", help="chapter name (see `list`)")
    judging.add_argument(
        "--section",
        dest="sections",
        action="append",
        required=True,
        metavar="SECTION",
        help="a section whose rows are recomputed from its data (repeatable)",
    )
    judging.add_argument("--variant", default="", help="a reference variant of the chapter (default: the plain one)")
    judging.add_argument(
        "--file",
        default=None,
        metavar="PATH",
        help="the result file to judge again in place (default: the committed one)",
    )
    listing = commands.add_parser("list", help="name the chapters, their sections and their parameters")
    listing.add_argument("--names", action="store_true", help="only the chapter names, one per line")
    listing.add_argument(
        "--reference",
        action="store_true",
        help="the commands that make every chapter's reference result, one line per section sized for it",
    )
    bench = commands.add_parser("bench", help="training throughput: single, K in a loop, K batched")
    bench.add_argument("--k", type=int, default=8, help="models per ensemble (default 8)")
    bench.add_argument("--steps", type=int, default=20, help="timed steps (default 20)")
    bench.add_argument("--batch-size", type=int, default=16, help="sequences per step (default 16)")
    bench.add_argument("--device", default="auto", help=f"one of {', '.join(DEVICES)} (default auto)")
    bench.add_argument("--sizes", default=None, help="comma-separated model sizes (default all)")
    bench.add_argument(
        "--against-authors",
        default=None,
        metavar="SRC",
        help="instead: our training step beside the Markov paper's own loop at its setting (T 1024, "
        "batch 16, d 8), alternating in this process; SRC is Markov-LLM/src of a checkout of "
        "github.com/Bond1995/Markov; --k, --sizes, --batch-size and --device are not used",
    )
    bench.add_argument("--rounds", type=int, default=10, help="with --against-authors: rounds (default 10)")
    bench.add_argument(
        "--survey",
        nargs="*",
        default=None,
        metavar="CHAPTER/SECTION",
        help="instead: every reference section (or those named) run short at the reference profile and profiled, "
        "beside this machine's measured peaks; writes the performance page's file (--out)",
    )
    bench.add_argument(
        "--survey-steps", type=int, default=performance.SURVEY_STEPS, help="with --survey: steps per training call"
    )
    bench.add_argument(
        "--out",
        default=None,
        help="with --survey: the file to write (default results/performance/reference-sections-cpu.json); with "
        "--against-authors: a JSON file for the rounds (none by default)",
    )
    margins = commands.add_parser(
        "margins",
        help="each row's verdict and margin on every kernel path and thread "
        "count (a fresh process per setting): which rows a CPU could decide otherwise",
    )
    margins.add_argument("chapters", nargs="*", help="chapter names (default: all)")
    margins.add_argument("--profile", default="quick", help=f"one of {', '.join(PROFILES)} (default quick)")
    margins.add_argument(
        "--paths",
        default=",".join(kernel_paths.PATHS),
        help=f"comma-separated kernel paths among {', '.join(kernel_paths.PATHS)} (default all)",
    )
    margins.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    margins.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="runs at a time, each a process with its setting's "
        "threads (default 1; settings fix the numbers, not how many run beside them)",
    )
    margins.add_argument(
        "--out",
        default=None,
        metavar="FOLDER",
        help="also write each chapter's rows as JSON to FOLDER/<chapter>-<profile>.json",
    )
    return parser


def _overrides(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--set expects KEY=VALUE, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def _list(names_only: bool, reference: bool) -> None:
    for chapter in all_chapters():
        if reference:
            for variant, values in {"": {}, **chapter.reference_variants}.items():
                changes = "".join(f" --set {key}={value}" for key, value in values.items())
                if chapter.reference_workers > 1:
                    changes += f" --workers {chapter.reference_workers}"
                for section in chapter.reference_sections:
                    print(
                        f"python -m sandboxes run {chapter.name} --profile reference --section {section}{changes} "
                        f"--into {reference_result_path(chapter.name, variant).relative_to(REPO_ROOT)} --progress"
                    )
            continue
        if names_only:
            print(chapter.name)
            continue
        seeds = ", ".join(f"{name} {chapter.seeds[name]}" for name in PROFILES)
        print(f"{chapter.name}: {chapter.title} (seeds: {seeds})")
        print(f"  sections: {', '.join(s.name for s in chapter.sections)}")
        for p in chapter.params:
            values = " ".join(f"{name}={p.default(name)!s:<10}" for name in PROFILES)
            print(f"  {p.name:<14} {p.kind.__name__:<5} {values} {p.help}")
            print(f"  {'':<14} {'':<5} accepts {p.domain.describe()}")
        if chapter.check is not None:
            print(f"  and: {inspect.getdoc(chapter.check).splitlines()[0]}")


def _report(result: Result, report: object) -> None:
    """The verdict table, the rows not made and the tally, as every run prints them."""
    verdict = result.verdict
    print(verdict.text(), file=report)
    for name, section in result.sections.items():
        for note in section["silent"]:
            print(f"[no row] {name}: {note}", file=report)
    print(
        f"{verdict.tally()}; wall time {result.provenance['wall_time_s']} s on {result.provenance['device_name']}",
        file=report,
    )


def _on_scheduler(args: argparse.Namespace) -> int:
    """``run --executor``: plan (checks and a calibration), submit the pending jobs, wait, merge."""
    if args.into or args.out == "-":
        raise ValueError("--executor writes its result into --folder (or --out PATH): not --into, not --out -")
    options = cluster.JobOptions(args.executor, args.partition, args.gpus_per_job, args.max_jobs, args.timeout_min)
    if args.max_hours is not None and (args.seeds_per_job is not None or not args.max_hours > 0):
        raise ValueError("--max-hours is positive and chooses the group size: not with --seeds-per-job")
    cluster.check_partition(options)
    plan = cluster.Plan.make(
        args.chapter,
        args.profile,
        _overrides(args.overrides),
        args.seeds,
        args.device,
        args.sections,
        args.seeds_per_job,
    )
    folder = Path(args.folder or f"runs/{plan.chapter}-{plan.profile}-jobs")
    # how many seeds a job takes changes no result: a rerun may split what is left differently
    if (folder / cluster.PLAN_FILE).exists() and replace(
        cluster.Plan.load(folder), seeds_per_job=plan.seeds_per_job, shares=plan.shares
    ) != plan:
        raise ValueError(f"{folder} holds another plan ({cluster.PLAN_FILE}); give a new --folder")
    pending = cluster.pending_jobs(plan, folder)
    attached = cluster.still_running(plan, folder, pending, options)  # submitted by an earlier command, not ended
    if attached and args.no_wait:
        for job, handle, state in attached:
            print(f"job {handle.job_id}: {job.name}, {state}")
        print(f"{len(attached)} jobs of this run are still running; the same command without --no-wait waits for them")
        return 3
    jobs = [job for job in pending if job not in {job for job, _, _ in attached}]
    estimates, measured_on = cluster.estimate(plan, jobs, steps=args.calibration_steps)  # this machine's device
    if args.max_hours is not None:
        plan, jobs, estimates, attached = _fit_hours(args, plan, folder, options, attached, estimates)
    print(cluster.plan_report(plan, estimates, measured_on, args.gpus_per_job, args.calibration_steps))
    if args.max_hours is not None:
        for row in (row for row in estimates if row.seconds > args.max_hours * 3600):
            print(f"  {row.job.name}: planned over --max-hours {args.max_hours:g} and cannot be split further")
    if args.dry_run:
        return 0
    cluster.save_estimates(folder, estimates, measured_on)
    failures = cluster.submit(plan, folder, jobs, options, attached=attached)
    for failure in failures:
        print(f"failed: {failure}", file=sys.stderr)
    if failures:
        print(f"{len(failures)} jobs failed; the same command reruns only them", file=sys.stderr)
        return 1
    return _merge(folder, args.out)


def _fit_hours(
    args: argparse.Namespace,
    plan: cluster.Plan,
    folder: Path,
    options: cluster.JobOptions,
    attached: list,
    estimates: list,
) -> tuple[cluster.Plan, list[cluster.Job], list, list]:
    """``--max-hours``: where a section job is planned over it, the plan split into seed groups that fit (the group
    size from the calibration) or, for a section whose training is not one member per seed, into share jobs, its
    jobs, their estimates and the jobs of it an earlier command left running made again; else the plan as it
    was."""
    size = cluster.seeds_per_job_for(plan, estimates, args.max_hours)
    shares = cluster.shares_for(plan, estimates, args.max_hours)
    if size is None and not shares:
        return plan, [row.job for row in estimates], estimates, attached
    if size is not None:
        print(f"--max-hours {args.max_hours:g}: sections split into groups of {size} seeds")
    for name, n in shares.items():
        print(f"--max-hours {args.max_hours:g}: {name} split into {n} share jobs")
    plan = cluster.Plan.make(
        plan.chapter, plan.profile, plan.overrides, plan.seeds, plan.device, plan.sections, size, shares
    )
    pending = cluster.pending_jobs(plan, folder)
    attached = cluster.still_running(plan, folder, pending, options)  # the split plan's jobs an earlier command left
    running = {job for job, _, _ in attached}
    jobs = [job for job in pending if job not in running]
    return plan, jobs, cluster.estimate(plan, jobs, steps=args.calibration_steps)[0], attached


def _merge(folder: Path, out: str | None) -> int:
    result = cluster.merge_folder(folder)
    _report(result, sys.stdout)
    compared = cluster.estimates_against_runs(folder)
    for name, planned, took in compared:
        print(f"job {name}: planned {planned:.1f} s, took {took:.1f} s (planned / took {planned / took:.2f})")
    if compared:
        print(f"planned against taken, with the machines: {cluster.save_comparison(folder, result, compared)}")
    path = result.save(Path(out or folder / f"{result.chapter}-{result.profile}.json"))
    print(f"result written to {path}")
    return 0


def _run(args: argparse.Namespace) -> int:
    if args.executor:
        return _on_scheduler(args)
    if (
        args.folder
        or args.partition
        or args.gpus_per_job
        or args.dry_run
        or args.no_wait
        or args.max_hours is not None
        or args.seeds_per_job is not None
        or args.calibration_steps != cluster.CALIBRATION_STEPS
    ):
        raise ValueError(
            "--folder, --partition, --gpus-per-job, --seeds-per-job, --max-hours, --dry-run, --no-wait and "
            "--calibration-steps go with --executor local or slurm"
        )
    chapter = get_chapter(args.chapter)
    if args.into and args.out:
        raise ValueError("give --out or --into, not both")
    kept = Result.load(args.into) if args.into and Path(args.into).exists() else None
    if kept is not None:
        if (kept.chapter, kept.profile) != (chapter.name, args.profile):
            raise ValueError(
                f"{args.into} holds {kept.chapter} at the {kept.profile} profile, not {chapter.name} at {args.profile}"
            )
    if args.profile == "full" and pick_device(args.device).type == "cpu":
        print("warning: the full profile is meant for a GPU; on this CPU it may take many hours", file=sys.stderr)
    result = chapter.run(
        args.profile,
        _overrides(args.overrides),
        args.seeds,
        args.device,
        args.progress,
        args.sections,
        workers=args.workers,
    )
    verdict = result.verdict
    report = sys.stderr if args.out == "-" else sys.stdout
    _report(result, report)
    if args.into:
        order = [s.name for s in chapter.sections]
        path = merge(kept, result, order).save(args.into)
        print(f"sections {', '.join(result.sections)} merged into {path}", file=report)
    elif args.out == "-":
        print(result.to_json())
    else:
        suffix = "".join(f"-{name}" for name in args.sections)
        path = result.save(Path(args.out or f"runs/{chapter.name}-{args.profile}{suffix}.json"))
        print(f"result written to {path}", file=report)
    if args.strict and verdict.undecided():
        print(
            "--strict: undecided claims do not fail the run; rerun with the budget each names to decide them",
            file=report,
        )
    return 1 if verdict.failures() and args.strict else 0


def _rejudge(args: argparse.Namespace) -> int:
    chapter = get_chapter(args.chapter)
    path = Path(args.file) if args.file else reference_result_path(chapter.name, args.variant)
    if not path.exists():
        raise ValueError(f"no committed reference result at {path}")
    result = Result.load(path)
    for name in args.sections:
        result = reference.rejudge(result, chapter, name, args.variant)
    _report(result, sys.stdout)
    print(f"rows of {', '.join(args.sections)} judged again in {result.save(path)}")
    return 0


def _bench(args: argparse.Namespace) -> int:
    if args.k < 1 or args.steps < 1 or args.batch_size < 1 or args.rounds < 1:
        raise ValueError("--k, --steps, --batch-size and --rounds must be at least 1")
    if args.survey is not None:
        return _survey(args)
    # with --against-authors, bench.against_authors checks the steps and rounds it can time
    if args.against_authors:
        src = Path(args.against_authors)
        if not (src / "models" / "base.py").is_file() or not (src / "optim" / "utils.py").is_file():
            raise ValueError(f"{src} is not Markov-LLM/src of the paper's code (no models/base.py and optim/utils.py)")
        print(f"their loop and ours on the CPU, {args.rounds} rounds of {args.steps} steps")
        start = time.perf_counter()
        rounds = bench.against_authors(src, args.rounds, args.steps)
        print(bench.against_report(rounds))
        if args.out is not None:
            profiled = bench.our_step_profiled(args.steps)
            record = bench.against_record(rounds, args.steps, profiled, time.perf_counter() - start)
            print(f"written to {performance.save(record, Path(args.out))}")
        return 0
    device = pick_device(args.device)
    sizes = args.sizes.split(",") if args.sizes else None
    print(f"device: {device_name(device)} ({device.type}), K = {args.k}, {args.steps} steps, batch {args.batch_size}")
    print(bench.report(bench.run(args.k, args.steps, args.batch_size, device, sizes)))
    return 0


def _survey(args: argparse.Namespace) -> int:
    """``bench --survey``: check the names before any work, then survey and write the file."""
    if args.survey_steps < 2:
        raise ValueError("--survey-steps must be at least 2 (the first step warms up, untimed)")
    wanted = []
    for name in args.survey:
        chapter, _, section = name.partition("/")
        if section not in get_chapter(chapter).reference_sections:
            raise ValueError(f"{name} is no reference section; choose CHAPTER/SECTION of `list --reference`")
        wanted.append((chapter, section))
    out = Path(args.out) if args.out is not None else performance.SURVEY_FILE
    performance.survey(wanted or None, args.survey_steps, out)
    print(f"surveyed {len(wanted) or 'every'} reference section(s) into {out}")
    return 0


def _margins(args: argparse.Namespace) -> int:
    names = args.chapters or [chapter.name for chapter in all_chapters()]
    for name in names:
        get_chapter(name)  # an unknown name fails here, before any run
    check_profile(args.profile)
    try:
        settings = [
            kernel_paths.Setting(path, int(threads))
            for path in args.paths.split(",")
            for threads in args.threads.split(",")
        ]
    except ValueError as err:
        raise ValueError(f"--paths and --threads: {err}") from None
    if args.jobs < 1:
        raise ValueError("--jobs must be at least 1")
    differ = []
    for name in names:  # a file per chapter as soon as its runs are done
        start, commit = time.perf_counter(), current_commit()  # the code the runs start from
        rows = kernel_paths.survey([name], settings, args.profile, args.jobs)[name]
        print(
            f"{name} ({args.profile}):\n{kernel_paths.table(rows, settings)}\n{kernel_paths.least(rows)}\n", flush=True
        )
        differ += [f"{name}: {row.name}" for row in rows if not row.agrees]
        if args.out:
            record = {
                "chapter": name,
                "profile": args.profile,
                "settings": [s.label for s in settings],
                "least": kernel_paths.least(rows),
                "rows": [asdict(row) for row in rows],
                "provenance": provenance("cpu", device_name(pick_device("cpu")), time.perf_counter() - start, commit),
            }
            path = Path(args.out) / f"{name}-{args.profile}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
            print(f"rows written to {path}", flush=True)
    for row in differ:
        print(f"the verdict or the printed prediction differs between settings: {row}", file=sys.stderr)
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "list":
            _list(args.names, args.reference)
            return 0
        if args.command == "bench":
            return _bench(args)
        if args.command == "merge":
            return _merge(Path(args.folder), args.out)
        if args.command == "rejudge":
            return _rejudge(args)
        if args.command == "margins":
            return _margins(args)
        return _run(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
