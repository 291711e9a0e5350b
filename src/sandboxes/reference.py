"""Committed reference results: what CI checks of them without rerunning anything.

A reference result (``results/<chapter>-reference.json``) is made once, one section at a time
(``run --profile reference --section S --into ...``), and shown by the book. It stays valid only
while it is what the current code's reference profile would make: every row holds, every section
read the values the profile gives now, it has the profile's seeds, each section was made from a
clean tree at a commit in this repository's history, and a section that can recompute its rows from
its data (``Section.rows``) gives the rows and silences the file holds.
"""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Callable
from pathlib import Path

from .results import REPO_ROOT, Result
from .sections import Chapter


def commit_in_history(commit: str) -> bool:
    """Whether ``commit`` is an ancestor of (or is) HEAD in this repository."""
    try:
        out = subprocess.run(["git", "merge-base", "--is-ancestor", commit, "HEAD"], cwd=REPO_ROOT,
                             capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0


def variant_of(path: Path) -> tuple[str, str]:
    """The chapter and the reference variant (empty: the plain profile) a result file's name says it holds."""
    chapter, _, variant = path.stem.partition("-reference")
    return chapter, variant.removeprefix("-")


def problems(result: Result, chapter: Chapter, known_commit: Callable[[str], bool] = commit_in_history,
             variant: str = "") -> list[str]:
    """Every reason ``result`` is not a valid committed reference result of ``chapter`` (empty: valid).

    ``variant`` names one of the chapter's ``reference_variants``: the profile's values with that variant's changes.
    """
    if variant and variant not in chapter.reference_variants:
        return [f"{variant!r} is not a reference variant of {chapter.name}"]
    found = []
    if (result.chapter, result.profile) != (chapter.name, "reference"):
        found.append(f"holds {result.chapter} at the {result.profile} profile, not {chapter.name} at reference")
    if result.seeds != list(range(chapter.seeds["reference"])):
        found.append(f"seeds {result.seeds} are not the reference profile's {chapter.seeds['reference']}")
    for claim in result.claims:
        if claim.holds is not True:
            found.append(f"row {claim.name!r} ({claim.section}) {claim.mark}")
    profile = chapter.reference_config(variant)
    known = {s.name for s in chapter.sections}
    for name, section in result.sections.items():
        if name not in known:
            found.append(f"section {name} is not a section of {chapter.name}")
            continue
        lacking = [key for key in ("params", "values", "provenance") if key not in section]
        if lacking:
            found.append(f"section {name} lacks {', '.join(lacking)}: remake it with `run --into`")
            continue
        values = section["values"]
        for key in section["params"]:
            if key not in profile:
                found.append(f"section {name} read {key}, no longer a parameter of {chapter.name}")
            elif values.get(key) != profile[key]:
                found.append(f"section {name} ran with {key} = {values.get(key)!r}; the reference profile now "
                             f"gives {profile[key]!r}: rerun it")
        found += _stale_rows(result, chapter, name, {**profile, **values})
        made = section["provenance"]
        if made.get("git_dirty") is not False:
            found.append(f"section {name} was not made from a clean tree (git_dirty = {made.get('git_dirty')})")
        if not known_commit(str(made.get("git_commit"))):
            found.append(f"section {name} names commit {made.get('git_commit')}, which is not in this history")
    return found


def _stale_rows(result: Result, chapter: Chapter, name: str, config: dict) -> list[str]:
    """Where ``chapter``'s section ``name`` recomputes its rows from its data: each way the file's rows or
    silences differ from what the current rules make of the same data (a rule changed since the run)."""
    rows = chapter.section(name).rows
    if rows is None:
        return []
    claims, silent = rows(config, result.data[name])
    stored = [dataclasses.replace(c, section="") for c in result.claims if c.section == name]
    found = [f"section {name}: row {new.name!r} is now {new.mark}, the file says {old.mark}: rerun it"
             for old, new in zip(stored, claims) if old.name == new.name and old.holds != new.holds]
    if [c.name for c in stored] != [c.name for c in claims]:
        found.append(f"section {name}: the current rules make rows {[c.name for c in claims]}, the file holds "
                     f"{[c.name for c in stored]}: rerun it")
    elif not found and stored != claims:
        found.append(f"section {name}: a row's text differs from what the current rules make: rerun it")
    if list(silent) != list(result.sections[name].get("silent", [])):
        found.append(f"section {name}: the reasons for missing rows differ from what the current rules give: rerun it")
    return found
