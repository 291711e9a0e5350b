"""Committed reference results: what CI checks of them without rerunning anything.

A reference result (``results/<chapter>-reference.json``) is made once, one section at a time
(``run --profile reference --section S --into ...``), and shown by the book. It stays valid only
while it is what the current code's reference profile would make: every row holds, every section
read the values the profile gives now, it has the profile's seeds, each section was made from a
clean tree at a commit in this repository's history, and a section that can recompute its rows from
its data (``Section.rows``) gives the rows and silences the file holds. When a rule or a row's text changes
after a run, such a section's rows are judged again from its stored data (``rejudge``, which records the
commit that judged them) instead of training its models again.
"""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .results import REPO_ROOT, Result, current_commit, utc_now
from .sections import Chapter

if TYPE_CHECKING:
    from .claims import Claim


def commit_in_history(commit: str) -> bool:
    """Whether ``commit`` is an ancestor of (or is) HEAD in this repository."""
    try:
        out = subprocess.run(
            ["git", "merge-base", "--is-ancestor", commit, "HEAD"], cwd=REPO_ROOT, capture_output=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0


def variant_of(path: Path) -> tuple[str, str]:
    """The chapter and the reference variant (empty: the plain profile) a result file's name says it holds."""
    chapter, _, variant = path.stem.partition("-reference")
    return chapter, variant.removeprefix("-")


def problems(
    result: Result, chapter: Chapter, known_commit: Callable[[str], bool] = commit_in_history, variant: str = ""
) -> list[str]:
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
                found.append(
                    f"section {name} ran with {key} = {values.get(key)!r}; the reference profile now "
                    f"gives {profile[key]!r}: rerun it"
                )
        found += _stale_rows(result, name, _current_rows(result, chapter, name, variant))
        for what, made in (("made", section["provenance"]), ("judged", section.get("judged"))):
            if made is None:
                continue
            if made.get("git_dirty") is not False:
                found.append(f"section {name} was not {what} from a clean tree (git_dirty = {made.get('git_dirty')})")
            if not known_commit(str(made.get("git_commit"))):
                found.append(
                    f"section {name} was {what} at commit {made.get('git_commit')}, which is not in this history"
                )
    return found


def rejudge(
    result: Result, chapter: Chapter, name: str, variant: str = "", commit: tuple[str, bool | None] | None = None
) -> Result:
    """``result`` with section ``name``'s rows and silences made again by the current rules from its stored data
    and the values it ran with, and the commit that judged them (``commit``, or now's) recorded beside the run's.

    The rows of such a section are a function of its data and values, the same one its run calls last, so a rule
    or a row's text changed since the run needs no new training. A section with undecided rows is refused: a run
    that diverged leaves every row undecided whatever its data say, and that only a new run can change.
    """
    if name not in result.sections:
        raise ValueError(f"the result holds no section {name}")
    if any(c.holds is None for c in result.claims if c.section == name):
        raise ValueError(f"section {name} has undecided rows (a diverged or unsettled run): rerun it")
    claims, silent = _current_rows(result, chapter, name, variant)
    judged_at, dirty = commit or current_commit()
    record = {
        **result.sections[name],
        "silent": list(silent),
        "judged": {"git_commit": judged_at, "git_dirty": dirty, "created": utc_now()},
    }
    new = [dataclasses.replace(c, section=name) for c in claims]
    return dataclasses.replace(
        result,
        claims=[
            c for n in result.sections for c in (new if n == name else [c for c in result.claims if c.section == n])
        ],
        sections={**result.sections, name: record},
    )


def _current_rows(
    result: Result, chapter: Chapter, name: str, variant: str = ""
) -> tuple[list[Claim], tuple[str, ...]]:
    """The rows and silences the current rules make of section ``name``'s stored data and the values it ran with."""
    return chapter.section(name).rows(
        {**chapter.reference_config(variant), **result.sections[name]["values"]}, result.data[name]
    )


def _stale_rows(result: Result, name: str, current: tuple[list[Claim], tuple[str, ...]]) -> list[str]:
    """Each way the file's rows or silences of section ``name`` differ from ``current``, what the current rules
    make of the same data (a rule changed since the run: ``rejudge`` mends it)."""
    claims, silent = current
    stored = [dataclasses.replace(c, section="") for c in result.claims if c.section == name]
    found = [
        f"section {name}: row {new.name!r} is now {new.mark}, the file says {old.mark}: judge it again"
        for old, new in zip(stored, claims)
        if old.name == new.name and old.holds != new.holds
    ]
    if [c.name for c in stored] != [c.name for c in claims]:
        found.append(
            f"section {name}: the current rules make rows {[c.name for c in claims]}, the file holds "
            f"{[c.name for c in stored]}: judge it again"
        )
    elif not found and stored != claims:
        found.append(f"section {name}: a row's text differs from what the current rules make: judge it again")
    if list(silent) != list(result.sections[name].get("silent", [])):
        found.append(
            f"section {name}: the reasons for missing rows differ from what the current rules give: judge it again"
        )
    return found
