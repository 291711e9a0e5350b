"""The same verdicts on every CPU: a chapter run again on another kernel path or thread count, row by row.

Training numbers depend on which of ATen's kernels run (the vector units a CPU has, or none with
``ATEN_CPU_CAPABILITY=default``) and on the thread count, so a row whose measured value sits near its bound can
hold on one machine and not on the next. :func:`survey` runs a chapter's profile in a fresh process per setting
(the kernel path is chosen when torch loads) and lines its rows up: each row's verdict and margin
(:attr:`Claim.margin`) per setting, and how far its smallest margin stands beyond the largest change of margin
between settings.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .claims import Claim
from .results import Result

PATHS = {"native": {}, "default": {"ATEN_CPU_CAPABILITY": "default"}}  # the CPU's own vector kernels, or none


@dataclass(frozen=True)
class Setting:
    """A kernel path (a key of :data:`PATHS`) and a thread count."""

    path: str
    threads: int

    def __post_init__(self) -> None:
        if self.path not in PATHS:
            raise ValueError(f"kernel path {self.path!r} is not one of {', '.join(PATHS)}")
        if self.threads < 1:
            raise ValueError(f"threads must be at least 1, not {self.threads}")

    @property
    def label(self) -> str:
        """How tables name the setting."""
        return f"{self.path}, {self.threads} thread{'s' if self.threads > 1 else ''}"

    def environment(self) -> dict[str, str]:
        """This process's environment with the setting's kernel path and threads (and no inherited path)."""
        env = {key: value for key, value in os.environ.items() if key != "ATEN_CPU_CAPABILITY"}
        # passive waiting: OpenMP threads that spin for work slow every process beside them (runs side by side)
        return {
            **env,
            **PATHS[self.path],
            "OMP_NUM_THREADS": str(self.threads),
            "MKL_NUM_THREADS": str(self.threads),
            "OMP_WAIT_POLICY": "PASSIVE",
        }


def run_claims(chapter: str, setting: Setting, profile: str = "quick") -> list[Claim]:
    """Every row of ``chapter`` at ``profile``, made in a fresh process on ``setting``."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "result.json"
        command = [
            sys.executable,
            "-m",
            "sandboxes",
            "run",
            chapter,
            "--profile",
            profile,
            "--no-progress",
            "--out",
            str(out),
        ]
        done = subprocess.run(command, env=setting.environment(), capture_output=True, text=True)
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(f"{chapter} on {setting.label} exited {done.returncode}:\n{done.stderr[-2000:]}")
        return Result.load(out).claims


@dataclass(frozen=True)
class Row:
    """One row across settings: its verdict, margin and predicted value on each."""

    section: str
    name: str
    marks: tuple[str, ...]
    margins: tuple[float | None, ...]
    predicted: tuple[str, ...]

    @property
    def agrees(self) -> bool:
        """Every setting gives the row the same verdict and prints the same prediction (what nbval compares)."""
        return len(set(self.marks)) == 1 and len(set(self.predicted)) == 1

    @property
    def least_margin(self) -> float | None:
        """The smallest margin over the settings (None: the row has no numeric bound)."""
        known = [m for m in self.margins if m is not None]
        return min(known) if known else None

    @property
    def margin_change(self) -> float | None:
        """The largest change of margin between two settings (None: fewer than two known)."""
        known = [m for m in self.margins if m is not None]
        return max(known) - min(known) if len(known) > 1 else None

    @property
    def clearance(self) -> float | None:
        """The least margin over the largest change between settings: how many such changes the row's verdict
        survives (infinite where no setting changed it; None where the row has no numeric bound)."""
        least, change = self.least_margin, self.margin_change
        if least is None or change is None:
            return None
        return math.inf if change == 0 else least / change


def line_up(runs: Sequence[Sequence[Claim]]) -> list[Row]:
    """The rows of several runs of one chapter side by side; raises if the runs make different rows."""
    names = [[(c.section, c.name) for c in claims] for claims in runs]
    if any(n != names[0] for n in names[1:]):
        raise ValueError(
            "the settings made different rows: "
            + "; ".join(str(sorted(set(n) ^ set(names[0]))) for n in names[1:] if n != names[0])
        )
    return [
        Row(
            section,
            name,
            tuple(run[i].mark for run in runs),
            tuple(run[i].margin for run in runs),
            tuple(run[i].predicted for run in runs),
        )
        for i, (section, name) in enumerate(names[0])
    ]


def survey(
    chapters: Sequence[str], settings: Sequence[Setting], profile: str = "quick", jobs: int = 1
) -> dict[str, list[Row]]:
    """Run each chapter once per setting, ``jobs`` runs at a time (each in its own process, with its setting's
    threads), and line each chapter's rows up."""
    pairs = [(chapter, setting) for chapter in chapters for setting in settings]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        made = list(pool.map(lambda pair: run_claims(pair[0], pair[1], profile), pairs))
    runs = dict(zip(pairs, made))
    return {chapter: line_up([runs[chapter, setting] for setting in settings]) for chapter in chapters}


def table(rows: Sequence[Row], settings: Sequence[Setting]) -> str:
    """A plain-text table: per row its verdicts, margins per setting and clearance, the least margin first."""

    def fmt(value: float | None) -> str:
        return "-" if value is None else "inf" if math.isinf(value) else f"{value:.3g}"

    ordered = sorted(rows, key=lambda r: math.inf if r.least_margin is None else r.least_margin)
    head = " | ".join(s.label for s in settings)
    lines = [f"verdict, margin per setting ({head}) | least margin | clearance | section: row"]
    for row in ordered:
        per = " | ".join(f"{mark} {fmt(margin)}" for mark, margin in zip(row.marks, row.margins))
        flag = "" if row.agrees else f"  <- DIFFERS: {' | '.join(dict.fromkeys(row.predicted))}"
        lines.append(f"{per} | {fmt(row.least_margin)} | {fmt(row.clearance)} | {row.section}: {row.name}{flag}")
    return "\n".join(lines)


def least(rows: Sequence[Row]) -> str:
    """The chapter's smallest margin and smallest clearance, each with its row, and how many rows have no margin."""

    def smallest(what: str, value: Callable[[Row], float | None]) -> str:
        known = [(v, row) for row in rows if (v := value(row)) is not None]
        if not known:
            return f"no {what}"
        v, row = min(known, key=lambda pair: pair[0])
        return f"smallest {what} {v:.3g} ({row.section}: {row.name})"

    unmeasured = sum(row.least_margin is None for row in rows)
    return (
        f"{smallest('margin', lambda r: r.least_margin)}; {smallest('clearance', lambda r: r.clearance)}; "
        f"{unmeasured} of {len(rows)} rows without a numeric bound (verdicts compared only)"
    )
