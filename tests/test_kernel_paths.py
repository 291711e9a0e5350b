"""Every CPU decides alike: the verdicts the stored pages print (``make test`` holds ATen's default kernel path to
them under nbval), and the survey that lines rows up across kernel paths and thread counts."""

import json
import math
from pathlib import Path

import pytest

from sandboxes.claims import Claim
from sandboxes.cli import main
from sandboxes.kernel_paths import Row, Setting, least, line_up, survey, table

ROOT = Path(__file__).resolve().parents[1]
MARKS = {"holds": "holds", "FAILS": "fails", "UNDECIDED": "undecided"}


def stored_verdicts(chapter: str) -> list[tuple[str, str, str]]:
    """Each row's name, prediction and verdict as the chapter's stored page prints them under ``page.check()``,
    sorted."""
    cells = json.loads((ROOT / "book" / f"{chapter}.ipynb").read_text())["cells"]
    check = next(cell for cell in cells if "".join(cell["source"]).strip() == "page.check()")
    text = "".join("".join(output.get("text", "")) for output in check["outputs"])
    rows = [line[1:].split("] ", 1) for line in text.splitlines() if line.startswith("[")]
    return sorted((*rest.rsplit(": predicted ", 1), MARKS[mark]) for mark, rest in rows)


def test_the_stored_verdicts_are_read_from_the_pages_check_cell():
    rows = stored_verdicts("markov")
    assert rows and all(mark in MARKS.values() for _, _, mark in rows)
    assert not any(name.startswith("[") or ": predicted " in name + predicted for name, predicted, _ in rows)


def _claim(name: str, measured: float, bound: float = 1.0) -> Claim:
    return Claim.at_most(name, bound, measured, "r", digits=3)


def test_a_row_whose_verdict_changes_between_settings_is_found():
    rows = line_up([[_claim("a", 0.5), _claim("b", 0.99)], [_claim("a", 0.6), _claim("b", 1.01)]])
    assert [r.agrees for r in rows] == [True, False]
    assert rows[0].least_margin == pytest.approx(0.4) and rows[0].margin_change == pytest.approx(0.1)
    assert rows[0].clearance == pytest.approx(4.0) and rows[1].least_margin == pytest.approx(-0.01)
    assert least(rows).startswith("smallest margin -0.01 (: b); smallest clearance -0.5 (: b); 0 of 2 rows")
    assert "DIFFERS" in table(rows, [Setting("native", 1), Setting("default", 1)]).splitlines()[1]


def test_a_row_that_prints_another_prediction_on_another_setting_is_found():
    assert not line_up([[Claim.at_most("a", 1.0, 0.5, "r")], [Claim.at_most("a", 1.1, 0.5, "r")]])[0].agrees


def test_settings_that_make_other_rows_are_refused():
    with pytest.raises(ValueError, match="different rows"):
        line_up([[_claim("a", 0.5)], [_claim("b", 0.5)]])


def test_a_row_without_a_numeric_bound_has_no_margin_and_one_unchanged_has_infinite_clearance():
    exact = Row("s", "count", ("holds", "holds"), (None, None), ("0", "0"))
    still = Row("s", "bound", ("holds", "holds"), (0.2, 0.2), ("≤ 1", "≤ 1"))
    assert exact.least_margin is None and exact.clearance is None and math.isinf(still.clearance)


@pytest.mark.parametrize("path, threads", [("avx9", 1), ("native", 0)])
def test_a_bad_setting_is_refused(path, threads):
    with pytest.raises(ValueError):
        Setting(path, threads)


def test_a_setting_names_its_path_and_threads_to_the_process_it_starts(monkeypatch):
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    native, default = Setting("native", 2).environment(), Setting("default", 1).environment()
    assert "ATEN_CPU_CAPABILITY" not in native and native["OMP_NUM_THREADS"] == "2"
    assert default["ATEN_CPU_CAPABILITY"] == "default" and default["OMP_NUM_THREADS"] == "1"


def test_a_survey_lines_up_each_chapters_runs_in_the_order_of_its_settings(monkeypatch):
    def made(chapter, setting, profile):  # a row that fails on one thread only
        return [_claim(f"{chapter} row", 1.05 if setting.threads == 1 else 0.5)]

    monkeypatch.setattr("sandboxes.kernel_paths.run_claims", made)
    settings = [Setting("native", 1), Setting("native", 2)]
    rows = survey(["a", "b"], settings, jobs=2)
    assert list(rows) == ["a", "b"] and rows["b"][0].name == "b row"
    assert rows["a"][0].marks == ("fails", "holds") and not rows["a"][0].agrees


@pytest.mark.parametrize(
    "argv",
    [
        ["margins", "nosuch"],
        ["margins", "--paths", "avx9"],
        ["margins", "--threads", "0"],
        ["margins", "--jobs", "0"],
        ["margins", "--profile", "huge"],
    ],
)
def test_the_margins_command_refuses_bad_values_in_one_line_before_any_run(argv, capsys, monkeypatch):
    monkeypatch.setattr("sandboxes.kernel_paths.run_claims", lambda *a: pytest.fail("a run started"))
    assert main(argv) == 2
    assert capsys.readouterr().err.count("\n") == 1
