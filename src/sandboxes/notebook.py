"""What chapter pages share: a :class:`Page` that runs one section at a time and shows its verdict.

A page reads like a lecture: each section computes, draws its figure, and shows *its* verdict
rows right under the figure, with the command that remakes that figure; the chapter's summary
table comes at the end; then the committed reference result (made once on a 2-core CPU, drawn
with the same figure functions, beside the paper's reported numbers), and the full-profile result
if a GPU made one.
"""

from __future__ import annotations

import ast
import hashlib
import html
import importlib
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import nbformat
from IPython.display import HTML, display
from matplotlib.figure import Figure

from .claims import ClaimFailed, Verdict
from .profiles import check_profile, resolve
from .results import (
    RESULTS_DIR,
    Result,
    full_result_path,
    load_full_result,
    load_reference_result,
    reference_result_path,
)
from .sections import Chapter, Run


def profile() -> str:
    """The profile the book is built with: ``SANDBOXES_PROFILE``, ``quick`` by default."""
    return check_profile(os.environ.get("SANDBOXES_PROFILE", "quick"))


class Page:
    """One chapter page: its run (profile from the environment unless given) and the sections done so far.

    At the quick profile with the chapter's own values, the sections the chapter names in
    ``quick_page_from_reference`` come from its committed reference run (judged there, checked by the tests without
    rerunning) instead of being trained: the rest of the page trains in a few minutes. Given a reader's values or
    seeds, or at another profile, the page trains every section.
    """

    def __init__(
        self,
        chapter: Chapter,
        profile_name: str | None = None,
        overrides: Mapping[str, Any] | None = None,
        seeds: int | None = None,
    ) -> None:
        self.chapter = chapter
        self.run: Run = chapter.start(profile_name or profile(), overrides, seeds)
        shown = chapter.quick_page_from_reference if self.run.profile == "quick" and not overrides else ()
        self.reference = load_reference_result(chapter.name) if shown and seeds is None else None
        stored = self.reference.data if self.reference is not None else {}
        self.from_reference = tuple(name for name in shown if name in stored)
        attempts = chapter.quick_page_attempts if shown and seeds is None else {}
        self.from_attempts = {  # sections the reference run has not made yet, shown from a committed attempt
            name: (file, attempt_result(file)) for name, file in attempts.items() if name not in stored
        }
        self.announced: set[str] = set()

    def _stored(self, name: str) -> tuple[Result, str] | None:
        """The committed run a quick page shows section ``name`` from, and what it is; None if it trains it."""
        if name in self.from_reference:
            return self.reference, "the committed reference run (its values are at the foot of the page)"
        if name in self.from_attempts:
            file, result = self.from_attempts[name]
            return (
                result,
                f"the committed reference attempt `results/attempts/{file}` (a reference result's rows must all "
                "hold and be decided, and its do not)",
            )
        return None

    @property
    def config(self) -> dict[str, Any]:
        """The values this page runs with."""
        return self.run.config

    def section(self, name: str) -> Any:
        """Run section ``name`` (and what it needs), or read it from the reference run, and return its data, for its
        figures."""
        stored = self._stored(name)
        if stored is None:
            return self.run.section(name).data
        result, what = stored
        if name not in self.announced:
            self.announced.add(name)
            display(
                note(
                    f"This quick page shows section {name} from {what} without training it, to keep the page within "
                    f"its few minutes. `python -m sandboxes run {self.chapter.name} --section {name}` trains it at "
                    "the quick values; a page given a reader's values trains every section."
                )
            )
        return result.data[name]

    def verdict(self, name: str) -> None:
        """Show section ``name``'s verdict rows and the commands that remake it; raise if a row fails.

        An undecided row (its budget ran out first) shows as such and does not raise, and neither does a failed row
        of a reference attempt shown in the section's place: it is a measurement kept beside the chapter, as
        :func:`attempt` shows one, not a row of the book's run.
        """
        stored = self._stored(name)
        if stored is not None:
            reference_verdict(stored[0], name, raises=name not in self.from_attempts)
            return
        done = self.run.section(name)
        display(HTML(done.verdict._repr_html_() + self._commands(name)))
        failed = done.verdict.failures()
        if failed:
            raise ClaimFailed(f"section {name}: claims that failed:\n" + Verdict(failed).text())

    def _commands(self, name: str) -> str:
        """The rerun command at this page's values, the full profile's where it differs, and the values read."""
        params = self.run.section(name).params
        full = resolve(self.chapter.params, "full", {})
        values = ", ".join(
            f"{key} = {self.config[key]}" + (f" (full: {full[key]})" if full[key] != self.config[key] else "")
            for key in params
        )
        lines = [f"Rerun this section: <code>{html.escape(self.run.command(name))}</code>"]
        if self.run.profile != "full" and any(full[key] != self.config[key] for key in params):
            lines.append(f"At the full profile: <code>{html.escape(self.run.command(name, 'full'))}</code>")
        if values:
            lines.append(f"Parameters it reads: {html.escape(values)}")
        return _footer(self.run.section(name).silent, lines)

    def result(self) -> Result:
        """Every section run so far, as one result, with the sections read from the reference run, whose rows are
        named as such (their data and records are the reference run's); not those shown from an attempt."""
        run = self.run.result()
        # an attempt's rows are shown under its section, not counted among the chapter's (they are not all decided)
        stored = {name: self.reference for name in self.from_reference}
        if not stored:
            return run
        order = [s.name for s in self.chapter.sections if s.name in run.data or s.name in stored]
        shown = {
            name: [replace(c, name=f"{c.name} (reference run)") for c in result.claims if c.section == name]
            for name, result in stored.items()
        }
        return replace(
            run,
            claims=[c for name in order for c in shown.get(name, [c for c in run.claims if c.section == name])],
            data={name: stored.get(name, run).data[name] for name in order},
            sections={name: stored.get(name, run).sections[name] for name in order},
        )

    def summary(self) -> None:
        """Show every verdict row of the chapter in one table (measured values: not compared by nbval)."""
        display(self.result().verdict)

    def check(self) -> None:
        """Print the machine-independent summary of every row; raise if any fails."""
        self.result().verdict.check()


def _footer(silent: list[str], lines: list[str]) -> str:
    """The paragraphs under a section's verdict: why a row was not made, then ``lines`` (HTML already escaped)."""
    return "".join(f"<p>{line}</p>" for line in [f"No row: {html.escape(note)}" for note in silent] + lines)


def note(text: str) -> HTML:
    """A note box as HTML, with ``code`` spans: no reliance on Markdown outputs being parsed as MyST."""
    body = html.escape(text)
    parts = body.split("`")
    body = "".join(f"<code>{part}</code>" if i % 2 else part for i, part in enumerate(parts))
    return HTML(f'<div class="admonition note"><p class="admonition-title">Note</p><p>{body}</p></div>')


def full_result(chapter: Chapter) -> Result | None:
    """The committed GPU full-profile result of ``chapter``, shown as its verdict table and every section's figures
    that it made; or a note saying how to make it."""
    name = chapter.name
    result = load_full_result(name)
    if result is None:
        command = f"python -m sandboxes run {name} --profile full --device cuda --out results/{name}-full.json"
        display(
            note(
                f"No full-profile result made on a GPU is committed for this chapter yet "
                f"(`{full_result_path(name).name}`). On a machine with a GPU, run `{command}` and commit the "
                f"file; this section then shows it beside the quick run."
            )
        )
        return None
    display(result.verdict)
    for section in chapter.sections:
        if section.name in result.data:
            draw_section(result, section.name, *section_figures(chapter, section.name))
    return result


def reference_result(chapter: Chapter, variant: str = "") -> Result | None:
    """The committed reference result of ``chapter`` (or of one of its ``reference_variants``), announced with its
    machine, wall time and commit and the sections that train models but have no reference run yet; or a note
    saying how to make it."""
    result = load_reference_result(chapter.name, variant)
    file = reference_result_path(chapter.name, variant).name
    trained = [s.name for s in chapter.sections if s.trains] if not variant else list(chapter.reference_sections)
    missing = [name for name in trained if result is None or name not in result.sections]
    pending = f" Sections that train models and have no reference run yet: {', '.join(missing)}." if missing else ""
    changes = ", ".join(f"{key} = {value}" for key, value in chapter.reference_variants.get(variant, {}).items())
    what = f"The reference run at {changes}" if variant else "Reference run of this chapter"
    if result is None:
        display(
            note(
                f"No reference result {'at ' + changes + ' ' if variant else ''}is committed for this chapter "
                f"yet (`{file}`); `make reference` makes it, one section at a time.{pending}"
            )
        )
        return None
    made = result.provenance
    sections = ", ".join(f"{name} {s['wall_time_s'] / 60:.0f} min" for name, s in result.sections.items())
    commits = sorted({s["provenance"]["git_commit"][:7] for s in result.sections.values()})
    judged = "".join(
        f" The rows of {name} were judged again from its stored data at commit "
        f"{s['judged']['git_commit'][:7]}, after a rule changed."
        for name, s in result.sections.items()
        if "judged" in s
    )
    display(
        HTML(
            "<p>"
            + html.escape(
                f"{what}: {made['wall_time_s'] / 60:.0f} minutes of wall time ({sections}) on "
                f"{made['device_name']} ({made['device_type']}; {made['platform']}), torch "
                f"{made['versions']['torch']}, at commit {', '.join(commits)}, {len(result.seeds)} seeds (a section "
                f"that draws seeds of its own names how many among the parameters it read).{judged} Nothing here "
                "reruns it: the page reads "
            )
            + f"<code>results/{html.escape(file)}</code>.{html.escape(pending)}</p>"
        )
    )
    return result


def attempt_result(name: str) -> Result:
    """A reference attempt kept under ``results/attempts/``, read without showing it."""
    return Result.load(RESULTS_DIR / "attempts" / name)


def attempt(name: str) -> Result:
    """Show the rows of a reference attempt kept under ``results/attempts/`` (one whose rows did not all hold), as
    measured and without raising: what the chapter reports where its reference run has not succeeded yet."""
    result = attempt_result(name)
    made = result.provenance
    display(
        note(
            f"A reference attempt, not a reference result: `results/attempts/{name}`, "
            f"{made['wall_time_s'] / 60:.0f} minutes at commit {made['git_commit'][:7]}, "
            f"{result.verdict.tally()}. Its rows as measured:"
        )
    )
    display(HTML(result.verdict._repr_html_()))
    return result


def attempt_section(name: str, section: str) -> Result:
    """Show one section's rows of a reference attempt kept under ``results/attempts/``, as measured and without
    raising: where a section's reference run has not succeeded yet, its rows without the rest of the chapter's."""
    result = attempt_result(name)
    made = result.sections[section]["provenance"]
    display(
        note(
            f"A reference attempt, not a reference result: section {section} of `results/attempts/{name}`, "
            f"{made['wall_time_s'] / 60:.0f} minutes at commit {made['git_commit'][:7]}. Its rows as measured:"
        )
    )
    display(HTML(Verdict([c for c in result.claims if c.section == section])._repr_html_()))
    return result


def earlier_rule(name: str, section: str, rejudged: bool = False) -> None:
    """Show the row an earlier rule made for ``section`` on a run kept under ``results/attempts/``: a rule changed
    after a run was seen keeps that run's row beside the row that replaced it. ``rejudged``: the run seen was not
    kept, and the file holds later data judged again by the earlier rule."""
    result = attempt_result(name)
    made = result.provenance
    state = " with uncommitted changes" if made.get("git_dirty") else ""
    run = "data made after the rule changed, judged again by it" if rejudged else "the run seen before the rule changed"
    display(
        note(
            f"The earlier rule's row, on {run}: `results/attempts/{name}`, "
            f"{result.profile} profile, commit {made['git_commit'][:7]}{state}:"
        )
    )
    display(HTML(Verdict([c for c in result.claims if c.section == section])._repr_html_()))


def section_figures(chapter: Chapter, section: str) -> list[Callable[[Any], Figure]]:
    """The functions that draw ``section``'s figures: those the section names, from its chapter's ``figures``."""
    names = chapter.section(section).figures
    if not names:
        return []
    module = importlib.import_module(f"{__package__}.chapters.{chapter.name}.figures")
    return [getattr(module, name) for name in names]


def reference_sections(chapter: Chapter, result: Result, shown_above: tuple[str, ...] = ()) -> None:
    """Every reference section the run made, in reading order: its figures, then its verdict rows under them; those
    a quick page has ``shown_above`` (:attr:`Page.from_reference`) are named, not drawn twice."""
    if shown_above:
        display(note(f"Shown above from this run, in their sections: {', '.join(shown_above)}."))
    for section in chapter.sections:
        if section.name in chapter.reference_sections and section.name not in shown_above:
            reference_section(result, section.name, *section_figures(chapter, section.name))


def reference_section(result: Result, section: str, *draws: Callable[[Any], Figure]) -> None:
    """If the reference run made ``section``: its figures (the quick run's figure functions on its data),
    then its verdict rows under them."""
    if section not in result.data:
        return
    draw_section(result, section, *draws)
    reference_verdict(result, section)


def draw_section(result: Result, section: str, *draws: Callable[[Any], Figure]) -> None:
    """The figures of ``section`` in ``result``, drawn by the quick run's figure functions (an attempt's rows are
    shown by :func:`attempt`)."""
    for draw in draws:
        fig = draw(result.data[section])
        display(fig)
        plt.close(fig)


def reference_verdict(result: Result, section: str, raises: bool = True) -> None:
    """Show the rows the reference run made for ``section``, with the command that remade it; raise if one fails
    (unless not ``raises``: a reference attempt's rows, shown as measured)."""
    claims = [c for c in result.claims if c.section == section]
    record = result.sections[section]
    values = ", ".join(f"{key} = {value}" for key, value in record["values"].items())
    display(
        HTML(
            Verdict(claims)._repr_html_()
            + _footer(
                record["silent"],
                [
                    f"Made by: <code>{html.escape(record['command'])}</code> ({record['wall_time_s'] / 60:.0f} min)",
                    f"Parameters it read: {html.escape(values)}",
                ],
            )
        )
    )
    failed = Verdict(claims).failures()
    if failed and raises:
        raise ClaimFailed(f"reference section {section}: claims that failed:\n" + Verdict(failed).text())


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """A table of text cells under ``header``."""
    head = "".join(f"<th>{html.escape(name)}</th>" for name in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    display(HTML(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"))


def against_paper(chapter: Chapter, data: Mapping[str, Any]) -> None:
    """A table of what the papers report beside what a run measured, one quantity per row, section by section."""
    table(("quantity", "the paper reports", "this reference run"), chapter.against_paper(data))


PACKAGE = Path(__file__).parent


def figure_code(chapter: str) -> list[Path]:
    """The modules that draw ``chapter``'s figures: the shared plotting style and the chapter's figure module."""
    return [PACKAGE / "plotting.py", PACKAGE / "chapters" / chapter / "figures.py"]


def figure_code_digest(chapter: str) -> str:
    """A digest of the code that draws ``chapter``'s figures: the book's CI build shows the figures stored in the
    notebooks, and nbval compares text only, so a test checks that they were drawn by this code. It digests each
    module's syntax tree without its ``if TYPE_CHECKING:`` blocks, so that comments, layout (a formatter's changes)
    and imports for annotations only (a data type that moved) leave the stored figures current."""
    digest = hashlib.sha256()
    for path in figure_code(chapter):
        tree = ast.parse(path.read_text())
        tree.body = [node for node in tree.body if not _annotations_only(node)]
        digest.update(path.relative_to(PACKAGE).as_posix().encode() + b"\0" + ast.dump(tree).encode())
    return digest.hexdigest()[:16]


def _annotations_only(node: ast.stmt) -> bool:
    """Whether ``node`` is an ``if TYPE_CHECKING:`` block, which runs only under a type checker."""
    return isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def stamp(path: Path) -> None:
    """Record in notebook ``path``'s metadata which figure code drew its stored outputs (after executing it); the
    notebook's name is its chapter's."""
    notebook = nbformat.read(path, as_version=4)
    notebook.metadata["sandboxes"] = {"figure_code": figure_code_digest(path.stem)}
    nbformat.write(notebook, path)


if __name__ == "__main__":
    for name in sys.argv[1:]:
        stamp(Path(name))
