"""Chapters as lists of sections: each section computes its claims and its data, and can run alone.

A section is one function ``section(config, ctx, *needed) -> Data``: ``config`` is the chapter's
resolved parameters, ``ctx`` says how to run, and every further parameter is named after an
earlier section whose data it reads (so the dependency is in the signature). ``Data`` is the
section's declared shape, a ``TypedDict`` that its figure functions read (a ``list`` in it may
hold a NumPy array until the result is written to JSON). The section's ``rows`` judge that data,
as the run makes it and as a committed result file holds it, so both are judged alike: every
row is a function of a section's config and stored data.

:class:`Run` runs sections one at a time, each after the sections it needs, and records which
parameters each one read, so that a page can print the exact command that remakes one figure.
"""

from __future__ import annotations

import inspect
import re
import shlex
import time
import warnings
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, get_type_hints

import torch

from .calibration import is_calibrating
from .claims import Claim, Verdict
from .profiles import Param, check_profile, resolve
from .results import Result, current_commit, provenance
from .runtime import device_name, pick_device
from .trainer import TrainingDiverged, TrainResult, warn_diverged


@dataclass(frozen=True)
class RunContext:
    """How to run: the profile, the device, the seeds, whether to show progress bars, and how many worker processes
    a section that trains many independent ensembles may spread them over (``workers.train_each``)."""

    profile: str
    device: torch.device
    seeds: list[int]
    progress: bool | None = None
    workers: int = 1
    trained: dict[Hashable, TrainResult] = field(default_factory=dict, compare=False, repr=False)

    def train_once(self, key: Hashable, train: Callable[[], TrainResult]) -> TrainResult:
        """``train()`` the first time a section of this run asks for ``key``, the same result when another asks
        again (with the divergence warnings its training gave, which make that section's rows undecided too): two
        sections that continue from one first phase train it once. Not while planning, whose calls are shortened.

        The run's values are fixed, so ``key`` need only tell apart the calls one run makes; the models are shared,
        so a section copies one before it trains it further.
        """
        if is_calibrating():
            return train()
        if key in self.trained:
            warn_diverged(self.trained[key])
        else:
            self.trained[key] = train()
        return self.trained[key]


Rows = Callable[[dict[str, Any], Any], tuple[list[Claim], tuple[str, ...]]]
Row = tuple[str, str, str]  # a quantity, what the paper reports of it, what a run measured


@dataclass(frozen=True)
class Section:
    """One figure's worth of a chapter: a name for ``--section``, a title, the function that computes its data, and
    the one that judges it."""

    name: str
    title: str
    compute: Callable[..., Any]  # returns the section's data
    # its rows and silences from the values it read and its data alone: the run judges the data ``compute`` returns
    # with it, and the check of a committed reference result judges the file's data with it, so a row whose rule
    # changed since the run shows
    rows: Rows
    min_seeds: int = 1  # a section that compares seeds with each other needs several
    trains: bool = False  # it trains models: its rows may be undecided, and a reference run must make it
    by_seed: bool = True  # its training runs one member per seed of the run's seeds: a cluster run may split them
    shareable: bool = False  # its training calls' members train alike in any vmapped ensemble of two or more (tested
    # for the model it trains): a cluster run may split each call's members into share jobs
    # the names of the rows judged from data without the models (a closed form beside the runs), which a diverged
    # training leaves as they are
    theory: Callable[[Any], tuple[str, ...]] | None = None
    figures: tuple[str, ...] = ()  # the functions of its chapter's ``figures`` module that draw its data, in order
    exact_rows: str = ""  # in a section that trains, a pattern of the names of its rows that are theorems about any
    # weights all the same: they hold whatever the budget
    sampled_rows: str = ""  # in one that does not, a pattern of the names of its rows that a Monte Carlo sample
    # decides: a small sample may leave them undecided
    reference: bool = False  # its reference values were sized by measurement: ``make reference`` runs it, and the
    # page shows the committed run (a section that trains without it is listed as waiting for a reference run)
    paper: Callable[[Any], list[Row]] | None = None  # its data beside what the paper reports, for the page's table

    def __post_init__(self) -> None:
        if self.exact_rows and not self.trains or self.sampled_rows and self.trains:
            raise ValueError(
                f"section {self.name}: exact_rows name rows of a section that trains, sampled_rows of one that does not"
            )
        if self.reference and not (self.trains and self.paper is not None):
            raise ValueError(f"section {self.name}: a reference section trains and sets its data beside the paper's")

    @property
    def needs(self) -> tuple[str, ...]:
        """Earlier sections whose data this one reads: its parameters after ``config`` and ``ctx``."""
        return tuple(inspect.signature(self.compute).parameters)[2:]

    @property
    def data_type(self) -> type:
        """The declared shape of this section's data: the return type of ``compute``."""
        return get_type_hints(self.compute)["return"]

    def may_stay_undecided(self, claim: Claim) -> bool:
        """Whether a small budget may leave ``claim`` undecided: a row about trained models, unless it is an exact
        theorem all the same, or a row of an untrained section that a sample decides."""
        if self.trains:
            return not (self.exact_rows and re.search(self.exact_rows, claim.name))
        return bool(self.sampled_rows and re.search(self.sampled_rows, claim.name))


class _ReadRecorder(dict):
    """A config that remembers which keys were read, to name the parameters a section depends on."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        if key in self:
            self.read.add(key)
        return super().get(key, default)


@dataclass(frozen=True)
class Chapter:
    """A chapter: parameters with profile values, seeds per profile, and its sections in reading order.

    ``check`` sees the whole config and the number of seeds before any work starts, for the
    conditions that tie parameters together (``d >= k``); it raises ``ValueError``.
    ``reference_variants`` names further reference runs of the reference sections, each the
    reference profile with a few values changed (its own result file).
    ``reference_workers``: the worker processes ``make reference`` gives its runs (``--workers``).
    """

    name: str
    title: str
    params: tuple[Param, ...]
    seeds: Mapping[str, int]
    sections: tuple[Section, ...]
    check: Callable[[dict[str, Any], int], None] | None = None
    reference_variants: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    reference_workers: int = 1
    unit_scale: Mapping[str, Any] = field(default_factory=dict)  # values that run every section end to end in
    # seconds: the unit tests' scale
    full_shrunk: Mapping[str, Any] = field(default_factory=dict)  # the full profile with its scale shrunk (steps,
    # widths, samples) and every full-only structure kept: a crash of a long GPU run shows in seconds
    quick_page_from_reference: tuple[str, ...] = ()  # reference sections that a quick page shows from the
    # committed reference run instead of training them, so that the page stays within its few minutes (the CLI and
    # a page given a reader's values train them as any other)
    quick_page_attempts: Mapping[str, str] = field(default_factory=dict)  # section of quick_page_from_reference ->
    # a file under results/attempts/ that a quick page shows it from while the reference run has no result for it
    # (an attempt whose rows are not all decided: a reference result's must be)

    def __post_init__(self) -> None:
        known = {p.name for p in self.params}
        for scale in (self.unit_scale, self.full_shrunk):
            if not set(scale) <= known:
                raise ValueError(f"{self.name}: a test scale names unknown parameters {sorted(set(scale) - known)}")
        shown = set(self.quick_page_from_reference)
        if not shown <= set(self.reference_sections):
            raise ValueError(f"{self.name}: a quick page shows only reference sections, got {sorted(shown)}")
        if not set(self.quick_page_attempts) <= shown:
            raise ValueError(
                f"{self.name}: a quick page shows an attempt only for a section it shows from the reference"
            )
        needed = {need for s in self.sections if s.name not in shown for need in s.needs} & shown
        if needed:
            raise ValueError(f"{self.name}: sections a quick page runs need {sorted(needed)}, which it would not run")
        for variant in self.reference_variants:
            if not variant.isidentifier():
                raise ValueError(f"{self.name}: a reference variant's name is a file-name suffix, got {variant!r}")
            if self.check is not None:
                self.check(self.reference_config(variant), self.seeds["reference"])

    def reference_config(self, variant: str = "") -> dict[str, Any]:
        """The values the reference run (or its ``variant``) reads."""
        return resolve(self.params, "reference", self.reference_variants.get(variant, {}))

    @property
    def reference_sections(self) -> tuple[str, ...]:
        """The sections a reference run makes, in reading order."""
        return tuple(section.name for section in self.sections if section.reference)

    def against_paper(self, data: Mapping[str, Any]) -> list[Row]:
        """The rows of the page's table of what the papers report beside a run's ``data``, section by section."""
        return [
            row
            for section in self.sections
            if section.paper is not None and section.name in data
            for row in section.paper(data[section.name])
        ]

    @property
    def min_seeds(self) -> int:
        """The fewest seeds that run every section: a section that compares seeds with each other needs several."""
        return max(section.min_seeds for section in self.sections)

    def section(self, name: str) -> Section:
        """The section called ``name``; an unknown name is an error that lists the known ones."""
        for section in self.sections:
            if section.name == name:
                return section
        raise ValueError(
            f"unknown section {name!r} of {self.name}; choose one of {', '.join(s.name for s in self.sections)}"
        )

    def closure(self, names: Sequence[str]) -> list[str]:
        """``names`` and every section they need, in reading order."""
        wanted = set(names)
        for section in reversed(self.sections):
            if section.name in wanted:
                wanted |= set(section.needs)
        return [s.name for s in self.sections if s.name in wanted]

    def start(
        self,
        profile: str = "quick",
        overrides: Mapping[str, Any] | None = None,
        seeds: int | None = None,
        device: str = "auto",
        progress: bool | None = None,
        only_seeds: Sequence[int] = (),
        workers: int = 1,
    ) -> Run:
        """Resolve and check the config and the seeds; no section runs yet. ``only_seeds``: run these of the
        seeds alone (a cluster run's group job, which trains some seeds of a section for the job that runs it)."""
        return Run(self, profile, overrides or {}, seeds, device, progress, tuple(only_seeds), workers=workers)

    def run(
        self,
        profile: str = "quick",
        overrides: Mapping[str, Any] | None = None,
        seeds: int | None = None,
        device: str = "auto",
        progress: bool | None = None,
        sections: Sequence[str] | None = None,
        only_seeds: Sequence[int] = (),
        workers: int = 1,
    ) -> Result:
        """Run ``sections`` (default: all) and the sections they need; return one result with provenance."""
        run = self.start(profile, overrides, seeds, device, progress, only_seeds, workers)
        names = [s.name for s in self.sections] if not sections else [self.section(n).name for n in sections]
        for name in self.closure(names):
            run.check_seeds(name)
        for name in names:
            run.section(name)
        return run.result()


@dataclass
class Done:
    """A section that has run: its claims (tagged with its name), data, the parameters it read, its time, and the
    rows it did not make, with why."""

    claims: list[Claim]
    data: Any
    params: list[str]
    wall_time_s: float
    silent: tuple[str, ...] = ()

    @property
    def verdict(self) -> Verdict:
        return Verdict(self.claims)


@dataclass
class Run:
    """One run of a chapter with fixed config, seeds and device; sections run on demand, once each."""

    chapter: Chapter
    profile: str
    overrides: Mapping[str, Any]
    n_seeds: int | None
    device_choice: str
    progress: bool | None
    only_seeds: tuple[int, ...] = ()
    done: dict[str, Done] = field(default_factory=dict)
    workers: int = 1

    def __post_init__(self) -> None:
        check_profile(self.profile)
        self.config = resolve(self.chapter.params, self.profile, self.overrides)
        n_seeds = self.chapter.seeds[self.profile] if self.n_seeds is None else self.n_seeds
        if n_seeds < 1:
            raise ValueError(f"--seeds must be at least 1, got {n_seeds}")
        if self.chapter.check is not None:
            self.chapter.check(self.config, n_seeds)
        if self.only_seeds and not (
            list(self.only_seeds) == sorted(set(self.only_seeds)) and set(self.only_seeds) <= set(range(n_seeds))
        ):
            raise ValueError(f"only_seeds must be distinct seeds of 0 .. {n_seeds - 1} in order, got {self.only_seeds}")
        if self.workers < 1:
            raise ValueError(f"--workers must be at least 1, got {self.workers}")
        device = pick_device(self.device_choice)
        self.context = RunContext(
            self.profile, device, list(self.only_seeds or range(n_seeds)), self.progress, self.workers
        )
        self.commit = current_commit()

    def check_seeds(self, name: str) -> None:
        """Refuse a section that compares seeds when the run has fewer than it needs."""
        section = self.chapter.section(name)
        if len(self.context.seeds) < section.min_seeds:
            raise ValueError(f"section {name} compares seeds: run it with at least {section.min_seeds} seeds")

    def section(self, name: str) -> Done:
        """Run section ``name`` (after the sections it needs) unless it has run; return what it made."""
        if name not in self.done:
            for needed in self.chapter.closure([name]):
                self.check_seeds(needed)
            section = self.chapter.section(name)
            needed = {need: self.section(need).data for need in section.needs}
            config = _ReadRecorder(self.config)
            start = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", TrainingDiverged)
                data = section.compute(config, self.context, **needed)
                made, silent = section.rows(config, data)
                theory = section.theory(data) if section.theory is not None else ()
            elapsed = time.perf_counter() - start
            params = sorted(config.read | {p for need in section.needs for p in self.done[need].params})
            claims = [replace(claim, section=name) for claim in _undecided_if_diverged(made, caught, theory)]
            self.done[name] = Done(claims, data, params, round(elapsed, 2), tuple(silent))
        return self.done[name]

    def result(self) -> Result:
        """Everything run so far as one result, sections in the chapter's reading order."""
        order = [s.name for s in self.chapter.sections if s.name in self.done]
        done = [self.done[name] for name in order]
        return Result(
            chapter=self.chapter.name,
            profile=self.profile,
            config=dict(self.config),
            seeds=self.context.seeds,
            claims=[claim for d in done for claim in d.claims],
            data={name: d.data for name, d in zip(order, done)},
            sections={name: self._section_record(name, d) for name, d in zip(order, done)},
            provenance=provenance(
                self.context.device.type,
                device_name(self.context.device),
                sum(d.wall_time_s for d in done),
                self.commit,
            ),
        )

    def _section_record(self, name: str, done: Done) -> dict[str, Any]:
        """What a result file keeps of one section: the values it read, its time, its silent rows, and
        where and how it was made (so that sections of one file may come from different runs)."""
        return {
            "params": done.params,
            "values": {key: self.config[key] for key in done.params},
            "wall_time_s": done.wall_time_s,
            "silent": list(done.silent),
            "command": self.command(name),
            "provenance": provenance(
                self.context.device.type, device_name(self.context.device), done.wall_time_s, self.commit
            ),
        }

    def command(self, name: str, profile: str | None = None) -> str:
        """The command line that remakes section ``name`` (which has run) with this run's values, or ``profile``'s."""
        if name not in self.done:
            raise ValueError(f"section {name!r} has not run, so the parameters it reads are unknown")
        profile = profile or self.profile
        parts = ["python -m sandboxes run", self.chapter.name, "--section", name]
        if profile != "quick":
            parts += ["--profile", profile]
        if profile == self.profile:
            defaults = resolve(self.chapter.params, profile, {})
            parts += [
                "--set " + shlex.quote(f"{key}={_shown(self.config[key])}")
                for key in self.done[name].params
                if self.config[key] != defaults[key]
            ]
            if self.n_seeds is not None and self.n_seeds != self.chapter.seeds[profile]:
                parts += ["--seeds", str(self.n_seeds)]
            if self.workers > 1:  # one thread per worker: the numbers of any number of workers, not of one process
                parts += ["--workers", str(self.workers)]
        return " ".join(parts)


def _undecided_if_diverged(
    claims: list[Claim], caught: list[warnings.WarningMessage], theory: tuple[str, ...]
) -> list[Claim]:
    """The section's claims, each but its ``theory`` rows undecided if some training diverged; the other warnings
    caught while the section ran are passed on. A diverged run decides nothing, and its NaN can make a row hold as
    easily as fail (a count of runs above a bound leaves it out)."""
    diverged = [str(w.message) for w in caught if issubclass(w.category, TrainingDiverged)]
    for w in caught:
        if not issubclass(w.category, TrainingDiverged):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if not diverged:
        return claims
    why = "; ".join(diverged) + "; a smaller learning rate or initialisation decides it"
    return [claim if claim.holds is None or claim.name in theory else claim.undecided(why) for claim in claims]


def _shown(value: Any) -> str:
    """A parameter value as ``--set`` takes it."""
    return str(value).lower() if isinstance(value, bool) else str(value)
