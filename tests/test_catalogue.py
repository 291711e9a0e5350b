"""The runs page's tables: built from the parameter declarations and the committed result files."""

import importlib.util
import json
import re
import shutil
from pathlib import Path

import yaml
from docutils import nodes

from sandboxes import catalogue
from sandboxes.chapters import all_chapters, get_chapter
from sandboxes.results import RESULTS_DIR, Result

ROOT = Path(__file__).resolve().parents[1]


def test_each_parameter_row_shows_the_values_the_profiles_resolve_to():
    for chapter in all_chapters():
        table = catalogue.parameter_table(chapter)
        rows = re.findall(r"<tr><td><code>(\w+)</code></td>(.*?)</tr>", table)
        assert [name for name, _ in rows] == [p.name for p in chapter.params]
        for param, (_, cells) in zip(chapter.params, rows):
            values = re.findall(r"<td>(.*?)</td>", cells)[-3:]
            assert values == [str(param.default(profile)) for profile in catalogue.PROFILE_NAMES], param.name


def test_a_changed_reference_value_shows_in_the_table():
    chapter = get_chapter("induction")
    assert "<td>tree</td>" in catalogue.parameter_table(chapter)  # the reference graph; quick and full differ
    assert "python -m sandboxes run induction --set k=3" in catalogue.parameter_table(chapter)


def test_every_section_of_every_committed_file_has_a_row_linking_its_file(tmp_path):
    files = catalogue.result_files()
    table = catalogue.results_table()
    for path in files:
        result = Result.load(path)
        assert table.count(f'href="{catalogue.SITE_RESULTS}{path.name}"') == len(result.sections), path.name
    copied = tmp_path / files[0].name
    shutil.copy(files[0], copied)
    assert catalogue.results_table(tmp_path, "x/").count('href="x/') == len(Result.load(copied).sections)


def test_each_section_s_command_spans_the_table_under_its_row():
    # in a column of its own among eight, a long command wrapped a word per line
    table = catalogue.results_table()
    commands = re.findall(
        r'<tr><td colspan="(\d+)">made by <code>python -m sandboxes run [^<]+</code></td></tr>', table
    )
    assert commands and set(commands) == {str(len(catalogue.RESULT_COLUMNS))}
    assert len(commands) == sum(len(Result.load(path).sections) for path in catalogue.result_files())


def test_the_execution_table_says_in_words_whether_a_page_ran():
    # myst-nb marks a run with an emoji the theme's fonts lack; the book's extension puts a word in its place
    spec = importlib.util.spec_from_file_location("exec_marks", ROOT / "book" / "_ext" / "exec_marks.py")
    exec_marks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(exec_marks)
    table = nodes.table("", nodes.paragraph(text="\u2705"), nodes.paragraph(text="\u274c"))
    document = nodes.document(None, None)
    document += table
    exec_marks._words_for_marks(None, document, "runs")
    assert [p.astext() for p in table.findall(nodes.paragraph)] == ["succeeded", "failed"]
    assert "exec_marks" in yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["local_extensions"]


def test_a_folder_without_results_says_so(tmp_path):
    assert catalogue.results_table(tmp_path) == "<p>No result file is committed here.</p>"


def test_the_site_serves_the_result_files_the_links_point_at():
    # html_extra_path copies results/'s files to the site root, one level above the pages under book/
    extra = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"]["html_extra_path"]
    assert "results" in extra and all((ROOT / folder).is_dir() for folder in extra)
    assert catalogue.SITE_RESULTS == "../" and RESULTS_DIR == ROOT / "results"
    assert "book/runs" in (ROOT / "_toc.yml").read_text()


def test_the_site_needs_no_network_for_its_maths():
    config = (ROOT / "_config.yml").read_text()
    assert "sphinx-mathjax-offline" in config and "mathjax_path: mathjax/tex-chtml.js" in config
    assert "sphinx-mathjax-offline" in (ROOT / "requirements.txt").read_text()


def test_the_stored_runs_table_reads_each_notebooks_cell_timestamps(tmp_path):
    def cell(start: str, end: str) -> dict:
        return {
            "cell_type": "code",
            "metadata": {"execution": {"iopub.execute_input": start, "shell.execute_reply": end}},
        }

    timed, untimed = tmp_path / "timed.ipynb", tmp_path / "untimed.ipynb"
    cells = [
        {"cell_type": "markdown"},
        cell("2026-11-25T12:00:00.5Z", "2026-11-25T12:00:01Z"),
        cell("2026-11-25T12:00:02Z", "2026-11-25T12:01:40.5Z"),
    ]
    timed.write_text(json.dumps({"cells": cells}))
    untimed.write_text(json.dumps({"cells": [{"cell_type": "code", "metadata": {}}]}))
    table = catalogue.stored_runs_table([timed, untimed])
    assert "<td>2026-11-25 12:00 UTC</td><td>100 s</td>" in table
    assert "<td>no timing stored</td>" in table


def test_every_chapter_notebook_stores_its_cell_timestamps():
    # the runs page tells when the outputs a CI-built site shows were made, from these
    pages = [ROOT / "book" / f"{chapter.name}.ipynb" for chapter in all_chapters()]
    assert "no timing stored" not in catalogue.stored_runs_table(pages)
