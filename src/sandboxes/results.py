"""Result files: a run's config, claims, curves and provenance in one small JSON file."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from .claims import Claim, Verdict

REPO_ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = REPO_ROOT / "results"


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def current_commit() -> tuple[str, bool | None]:
    """The commit the code runs from and whether tracked files outside ``results/`` differ from it (a run reads it
    when it starts, so that commits made while it runs do not pass for its code; result files are what runs write,
    e.g. the file ``--into`` merges into, never what they read); in a copied tree without ``.git``, the commit the
    copier names in ``SANDBOXES_GIT_COMMIT`` (dirtiness then unknown: ``None``)."""
    head = _git("rev-parse", "HEAD")
    if head == "unknown":
        return os.environ.get("SANDBOXES_GIT_COMMIT", "unknown"), None
    return head, _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results") != ""


def provenance(
    device_type: str, device_name: str, wall_time: float, commit: tuple[str, bool | None] | None = None
) -> dict[str, Any]:
    """Where and how a result was made: commit (``commit``, or now's), versions, hardware, wall time, date."""
    commit, dirty = commit or current_commit()
    return {
        "git_commit": commit,
        "git_dirty": dirty,
        "versions": {p: _version(p) for p in ("torch", "numpy", "scipy", "sandboxes")},
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device_type": device_type,
        "device_name": device_name,
        "wall_time_s": round(wall_time, 2),
        "created": utc_now(),
    }


def utc_now() -> str:
    """Now, in UTC, as result files record when something was made."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating, np.integer, np.bool_)):
        return value.item()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


@dataclass
class Result:
    """Everything one chapter run produced that a reader or a later run needs."""

    chapter: str
    profile: str
    config: dict[str, Any]
    seeds: list[int]
    claims: list[Claim]
    data: dict[str, Any]  # per section, in reading order
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)  # per section: params read, wall time
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> Verdict:
        return Verdict(self.claims)

    @property
    def from_gpu(self) -> bool:
        return self.provenance.get("device_type") == "cuda"

    def to_json(self) -> str:
        body = {
            "chapter": self.chapter,
            "profile": self.profile,
            "config": self.config,
            "seeds": self.seeds,
            "claims": [c.to_dict() for c in self.claims],
            "sections": self.sections,
            "provenance": self.provenance,
            "data": self.data,
        }
        return json.dumps(_jsonable(body), indent=1)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_json() + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> Result:
        body = json.loads(Path(path).read_text())
        return cls(
            chapter=body["chapter"],
            profile=body["profile"],
            config=body["config"],
            seeds=body["seeds"],
            claims=[Claim(**c) for c in body["claims"]],
            data=body["data"],
            sections=body.get("sections", {}),  # files written before sections existed have none
            provenance=body["provenance"],
        )


def merge(into: Result | None, new: Result, order: list[str]) -> Result:
    """``into`` with ``new``'s sections added or replaced, in the chapter's reading ``order``.

    Sections of one file may come from different runs (each section's entry keeps its own provenance
    and the values it read), but they share chapter, profile and seeds; the file's config and
    provenance are the newest run's, its wall time the sum over its sections.
    """
    if into is None:
        return new
    for key in ("chapter", "profile", "seeds"):
        if getattr(into, key) != getattr(new, key):
            raise ValueError(
                f"cannot merge: {key} {getattr(new, key)!r} differs from the file's {getattr(into, key)!r}"
            )
    sections = {**into.sections, **new.sections}
    names = [name for name in order if name in sections]
    claims = {
        name: [c for c in source.claims if c.section == name] for source in (into, new) for name in source.sections
    }
    data = {**into.data, **new.data}
    return Result(
        chapter=new.chapter,
        profile=new.profile,
        config=new.config,
        seeds=new.seeds,
        claims=[c for name in names for c in claims[name]],
        data={name: data[name] for name in names},
        sections={name: sections[name] for name in names},
        provenance={**new.provenance, "wall_time_s": round(sum(sections[n].get("wall_time_s", 0.0) for n in names), 2)},
    )


def reference_result_path(chapter: str, variant: str = "") -> Path:
    """Where the committed reference-profile result of ``chapter`` (or of one of its variants) lives."""
    return RESULTS_DIR / f"{chapter}-reference{'-' + variant if variant else ''}.json"


def load_reference_result(chapter: str, variant: str = "") -> Result | None:
    """The committed reference-profile result of ``chapter`` (or of one of its variants), if one is committed."""
    path = reference_result_path(chapter, variant)
    return Result.load(path) if path.exists() else None


def full_result_path(chapter: str) -> Path:
    """Where the committed full-profile result of ``chapter`` lives."""
    return RESULTS_DIR / f"{chapter}-full.json"


def load_full_result(chapter: str) -> Result | None:
    """The committed full-profile result, only if it exists and a GPU really produced it."""
    path = full_result_path(chapter)
    if not path.exists():
        return None
    result = Result.load(path)
    return result if result.from_gpu and result.profile == "full" else None
