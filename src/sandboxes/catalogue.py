"""The book's runs page: every chapter's parameters and every committed result file, built from the code.

The parameter tables come from the declarations the command line checks (:mod:`sandboxes.profiles`), so the page
cannot disagree with ``python -m sandboxes list``; the result tables from the files under ``results/`` and the
provenance each run recorded in them. The site serves those files beside its pages (``html_extra_path``), so
each row links to its file.
"""

from __future__ import annotations

import html
import json
from datetime import datetime
from pathlib import Path

from .results import RESULTS_DIR, Result
from .sections import Chapter

PROFILE_NAMES = ("quick", "reference", "full")
SITE_RESULTS = "../"  # from a page under book/ to the site root, where html_extra_path puts results/'s files


def _cell(value: object) -> str:
    return f"<td>{html.escape(str(value))}</td>"


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(name)}</th>" for name in header)
    body = "".join(f"<tr>{''.join(row)}</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def parameter_table(chapter: Chapter) -> str:
    """Each parameter of ``chapter``: its meaning, what it accepts, and its value in each profile (HTML)."""
    rows = [
        [
            f"<td><code>{html.escape(p.name)}</code></td>",
            _cell(p.help),
            _cell(p.domain.describe()),
            *(_cell(p.default(profile)) for profile in PROFILE_NAMES),
        ]
        for p in chapter.params
    ]
    first = chapter.params[0]
    seeds = ", ".join(f"{profile} {chapter.seeds[profile]}" for profile in PROFILE_NAMES)
    return (
        _table(["parameter", "meaning", "accepts", *PROFILE_NAMES], rows)
        + f"<p>Seeds: {html.escape(seeds)}. Change a value with <code>python -m sandboxes run {chapter.name} "
        f"--set {first.name}={html.escape(str(first.quick))}</code>; a value outside its domain stops the run "
        f"before any work.</p>"
    )


def result_files(folder: Path = RESULTS_DIR) -> list[Path]:
    """The committed result files in ``folder``, by name."""
    return sorted(folder.glob("*.json"))


RESULT_COLUMNS = ["file", "section", "rows", "wall time", "machine", "versions", "commit"]


def _section_rows(path: Path, link: str) -> list[list[str]]:
    """Two table rows per section of the file at ``path``: what it is and how it was made, then the command that
    makes it again across the table's width (in a column of its own it would wrap a word per line)."""
    result = Result.load(path)
    rows = []
    for name, record in result.sections.items():
        made = record["provenance"]
        claims = [c for c in result.claims if c.section == name]
        holding = sum(c.holds is True for c in claims)
        rows.append(
            [
                f'<td><a href="{html.escape(link)}" download><code>{html.escape(path.name)}</code></a></td>',
                _cell(name),
                _cell(f"{holding} of {len(claims)} hold"),
                _cell(f"{record['wall_time_s'] / 60:.1f} min"),
                _cell(f"{made['device_name']} ({made['device_type']})"),
                _cell(f"torch {made['versions']['torch']}, python {made['python']}"),
                f"<td><code>{html.escape(made['git_commit'][:7])}</code></td>",
            ]
        )
        rows.append([f'<td colspan="{len(RESULT_COLUMNS)}">made by <code>{html.escape(record["command"])}</code></td>'])
    return rows


def results_table(folder: Path = RESULTS_DIR, link_prefix: str = SITE_RESULTS) -> str:
    """Per section of every committed result file in ``folder``: its verdict, wall time, machine, versions, commit
    and, under them, the command that made it, with a link to download the file (HTML)."""
    rows = [row for path in result_files(folder) for row in _section_rows(path, link_prefix + path.name)]
    if not rows:
        return "<p>No result file is committed here.</p>"
    return _table(RESULT_COLUMNS, rows)


def stored_runs_table(pages: list[Path]) -> str:
    """When the outputs stored in each chapter notebook were made and how long that execution took, from the cell
    timestamps the executor recorded (HTML): what a site built from the stored outputs shows."""
    rows = []
    for page in pages:
        cells = [cell for cell in json.loads(page.read_text())["cells"] if cell["cell_type"] == "code"]
        times = [cell["metadata"].get("execution", {}) for cell in cells]
        if not all("iopub.execute_input" in t and "shell.execute_reply" in t for t in times):
            rows.append([f"<td><code>{html.escape(page.name)}</code></td>", _cell("no timing stored"), _cell("")])
            continue
        start = datetime.fromisoformat(times[0]["iopub.execute_input"])
        end = datetime.fromisoformat(times[-1]["shell.execute_reply"])
        rows.append(
            [
                f"<td><code>{html.escape(page.name)}</code></td>",
                _cell(f"{start:%Y-%m-%d %H:%M} UTC"),
                _cell(f"{(end - start).total_seconds():.0f} s"),
            ]
        )
    return _table(["notebook", "executed", "execution time"], rows)
