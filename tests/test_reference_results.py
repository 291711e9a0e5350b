"""Committed reference results: checked without rerunning, and the check fails on a file that lies."""

import dataclasses
import json
import re
from pathlib import Path

import pytest

from sandboxes import notebook
from sandboxes.chapters import all_chapters, get_chapter
from sandboxes.claims import Claim, ClaimFailed
from sandboxes.profiles import Param, at_least, with_reference
from sandboxes.reference import commit_in_history, problems, rejudge, variant_of
from sandboxes.results import RESULTS_DIR, Result, merge
from sandboxes.sections import Chapter, RunContext, Section

COMMITTED = sorted(RESULTS_DIR.glob("*-reference*.json"))


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.name)
def test_a_committed_reference_result_is_what_the_current_reference_profile_makes(path):
    result = Result.load(path)
    chapter, variant = variant_of(path)
    assert chapter == result.chapter
    assert problems(result, get_chapter(result.chapter), variant=variant) == []
    assert result.verdict.failures() == [] and result.verdict.undecided() == []


def test_a_file_name_says_which_reference_run_it_holds():
    assert variant_of(RESULTS_DIR / "hmm-reference.json") == ("hmm", "")
    assert variant_of(RESULTS_DIR / "hmm-reference-k4.json") == ("hmm", "k4")


@pytest.mark.parametrize("path", COMMITTED[:1], ids=lambda p: p.name)
def test_flipping_one_claim_of_a_committed_file_makes_the_check_fail(path, tmp_path):
    body = json.loads(path.read_text())
    body["claims"][-1]["holds"] = False
    copy = tmp_path / path.name
    copy.write_text(json.dumps(body))
    result = Result.load(copy)
    assert any("fails" in problem for problem in problems(result, get_chapter(result.chapter)))


def _shortcuts_copy(tmp_path: Path, change) -> list[str]:
    """The check's problems with a copy of the committed shortcuts file that ``change`` edited."""
    path = RESULTS_DIR / "shortcuts-reference.json"
    body = json.loads(path.read_text())
    change(body)
    copy = tmp_path / path.name
    copy.write_text(json.dumps(body))
    return problems(Result.load(copy), get_chapter("shortcuts"))


def test_rows_the_current_rules_make_otherwise_from_the_file_s_data_make_the_check_fail(tmp_path):
    def untrained_lstm(body):  # the file's LSTM accuracies replaced by chance: the stored row still says it holds
        lstm = body["data"]["brittleness"]["lstm"]
        for view in lstm:
            lstm[view] = [[0.5] * len(scores) for scores in lstm[view]]

    def solved_a5(body):  # the hard section's A5 runs replaced by solved ones: its stored row still says it holds
        hard = body["data"]["hard"]
        hard["accuracy"] = [[[0.99] * len(seeds) for seeds in depths] for depths in hard["accuracy"]]

    def reworded(body):
        body["claims"][0]["reason"] += " (edited)"

    def silenced(body):
        body["sections"]["brittleness"]["silent"] = ["a row the rules do not leave out"]

    assert _shortcuts_copy(tmp_path, lambda body: None) == []
    assert any(
        "'parity LSTM" in p and "is now fails, the file says holds" in p
        for p in _shortcuts_copy(tmp_path, untrained_lstm)
    )
    assert any(
        "'A5 (non-solvable)" in p and "is now fails, the file says holds" in p
        for p in _shortcuts_copy(tmp_path, solved_a5)
    )
    assert any("a row's text differs" in p for p in _shortcuts_copy(tmp_path, reworded))
    assert any("reasons for missing rows differ" in p for p in _shortcuts_copy(tmp_path, silenced))


def _shortcuts_result(tmp_path: Path, change) -> Result:
    """A copy of the committed shortcuts file that ``change`` edited, read back."""
    path = RESULTS_DIR / "shortcuts-reference.json"
    body = json.loads(path.read_text())
    change(body)
    copy = tmp_path / path.name
    copy.write_text(json.dumps(body))
    return Result.load(copy)


def test_rows_judged_again_from_the_stored_data_are_the_current_rules_and_record_who_judged_them(tmp_path):
    chapter = get_chapter("shortcuts")

    def reworded(body):  # as if a brittleness row's text had changed in the code since the run
        [c for c in body["claims"] if c["section"] == "brittleness"][-1]["reason"] += " (edited)"

    stale = _shortcuts_result(tmp_path, reworded)
    assert any("a row's text differs" in p for p in problems(stale, chapter))
    judged = rejudge(stale, chapter, "brittleness", commit=("known", False))
    assert problems(judged, chapter, lambda commit: commit != "0" * 40) == []
    assert judged.sections["brittleness"]["judged"]["git_commit"] == "known"
    assert judged.sections["brittleness"]["provenance"] == stale.sections["brittleness"]["provenance"]
    assert [c.section for c in judged.claims] == [c.section for c in stale.claims]
    assert any("judged at commit" in p for p in problems(judged, chapter))  # "known" is not a commit here
    dirty = rejudge(stale, chapter, "brittleness", commit=("known", True))
    assert any("judged from a clean tree" in p for p in problems(dirty, chapter, lambda commit: True))


def test_judging_again_does_not_hide_what_the_data_say(tmp_path):
    chapter = get_chapter("shortcuts")

    def untrained_lstm(body):
        lstm = body["data"]["brittleness"]["lstm"]
        for view in lstm:
            lstm[view] = [[0.5] * len(scores) for scores in lstm[view]]

    judged = rejudge(_shortcuts_result(tmp_path, untrained_lstm), chapter, "brittleness", commit=("known", False))
    assert any("'parity LSTM" in p and "fails" in p for p in problems(judged, chapter, lambda commit: True))


def test_a_section_s_rows_from_its_data_are_those_it_made(tiny_result):
    # the run judges a section's data with Section.rows as it made it; the check above judges the data read back from
    # JSON with the same function: the two agree only if the file keeps all the rows read
    for chapter in all_chapters():
        body = tiny_result(chapter.name)
        for section in chapter.sections:
            claims, silent = section.rows(body["config"], body["data"][section.name])
            made = [Claim(**{**c, "section": ""}) for c in body["claims"] if c["section"] == section.name]
            assert (claims, list(silent)) == (made, body["sections"][section.name]["silent"]), section.name


def _measure(config: dict, ctx: RunContext) -> dict:
    return {"n": config["n"]}


def _measure_rows(config: dict, data: dict) -> tuple[list[Claim], tuple[str, ...]]:
    return [Claim.at_least("n is large enough", 3, data["n"], "r")], ()


def _other(config: dict, ctx: RunContext) -> dict:
    return {"m": config["m"]}


def _other_rows(config: dict, data: dict) -> tuple[list[Claim], tuple[str, ...]]:
    return [Claim.exact("m is m", str(data["m"]), str(data["m"]), "r")], ()


TOY = Chapter(
    "toy",
    "Toy",
    with_reference((Param("n", int, 1, 1, "n", at_least(0)), Param("m", int, 1, 1, "m", at_least(0))), {"n": 4}),
    seeds={"quick": 1, "reference": 2, "full": 3},
    sections=(Section("measure", "Measure", _measure, _measure_rows), Section("other", "Other", _other, _other_rows)),
    reference_variants={"n5": {"n": 5}},
)


def _clean(result: Result) -> Result:
    """``result`` as if made from a clean tree at a known commit (the test's tree may be dirty)."""
    for section in result.sections.values():
        section["provenance"] = {**section["provenance"], "git_dirty": False, "git_commit": "known"}
    return result


def _made(sections: list[str], **overrides) -> Result:
    return _clean(TOY.run("reference", overrides, device="cpu", sections=sections))


def _known(commit: str) -> bool:
    return commit == "known"


def test_a_reference_run_made_one_section_at_a_time_and_merged_passes_the_check():
    merged = merge(_made(["measure"]), _made(["other"]), ["measure", "other"])
    assert list(merged.sections) == ["measure", "other"] and [c.section for c in merged.claims] == ["measure", "other"]
    assert problems(merged, TOY, _known) == []


def test_the_check_names_each_way_a_reference_result_can_be_stale_or_wrong():
    assert any("n = 5" in p for p in problems(_made(["measure"], n=5), TOY, _known))  # not the profile's value
    assert any("fails" in p for p in problems(_made(["measure"], n=2), TOY, _known))  # a failed row
    good = _made(["measure"])
    assert problems(good, TOY, lambda commit: False)  # a commit not in the history
    good.sections["measure"]["provenance"]["git_dirty"] = True
    assert any("clean tree" in p for p in problems(good, TOY, _known))
    fewer = dataclasses.replace(_made(["measure"]), seeds=[0])
    assert any("seeds" in p for p in problems(fewer, TOY, _known))
    old = _made(["measure"])
    del old.sections["measure"]["values"]  # a file written before sections kept their values
    assert any("lacks values" in p for p in problems(old, TOY, _known))
    quick = _clean(TOY.run("quick", {"n": 4}, device="cpu", sections=["measure"]))
    assert any("profile" in p for p in problems(quick, TOY, _known))


def test_merging_refuses_results_of_another_profile():
    quick = TOY.run("quick", {"n": 4}, device="cpu", sections=["measure"])
    with pytest.raises(ValueError, match="profile"):
        merge(_made(["measure"]), quick, ["measure", "other"])


def test_head_is_in_history_and_a_made_up_commit_is_not():
    assert commit_in_history("HEAD") and not commit_in_history("0" * 40)


def test_a_page_shows_a_reference_section_and_fails_on_its_failed_row(capsys):
    from matplotlib.figure import Figure

    drawn = []

    def figure(data: dict) -> Figure:
        drawn.append(data)
        return Figure()

    notebook.reference_section(_made(["measure"]), "measure", figure)
    notebook.reference_section(_made(["measure"]), "other", figure)  # not in the file: nothing shown
    assert drawn == [{"n": 4}]
    with pytest.raises(ClaimFailed, match="n is large enough"):
        notebook.reference_verdict(_made(["measure"], n=2), "measure")


def test_the_reference_and_full_cells_draw_each_section_with_the_figures_it_names(monkeypatch):
    from matplotlib.figure import Figure

    drawn = []
    monkeypatch.setattr(
        notebook, "section_figures", lambda chapter, name: [lambda data, name=name: drawn.append(name) or Figure()]
    )
    trained = dataclasses.replace(TOY.sections[0], trains=True, reference=True, paper=lambda data: [])
    chapter = dataclasses.replace(TOY, sections=(trained, TOY.sections[1]))
    notebook.reference_sections(chapter, _made(["measure", "other"]))
    assert drawn == ["measure"]  # the other section is no reference section
    drawn.clear()
    monkeypatch.setattr(notebook, "load_full_result", lambda name: _made(["measure", "other"]))
    notebook.full_result(chapter)
    assert drawn == ["measure", "other"]


def test_a_variant_is_checked_against_the_reference_profile_with_its_own_changes():
    assert problems(_made(["measure"], n=5), TOY, _known, variant="n5") == []
    assert any("n = 4" in p for p in problems(_made(["measure"]), TOY, _known, variant="n5"))
    assert any("not a reference variant" in p for p in problems(_made(["measure"]), TOY, _known, variant="n6"))


def test_a_variant_the_chapter_check_refuses_is_an_error_when_the_chapter_is_declared():
    def positive_n(config: dict, n_seeds: int) -> None:
        if config["n"] < 1:
            raise ValueError("n must be at least 1")

    with pytest.raises(ValueError, match="at least 1"):
        dataclasses.replace(TOY, check=positive_n, reference_variants={"zero": {"n": 0}})
    with pytest.raises(ValueError, match="file-name suffix"):
        dataclasses.replace(TOY, reference_variants={"n 5": {"n": 5}})


def test_a_page_note_is_html_with_its_code_spans_and_escapes_the_rest():
    box = notebook.note("run `make reference` if a < b").data
    assert box.startswith('<div class="admonition note">') and "<code>make reference</code>" in box
    assert "a &lt; b" in box and "```" not in box


def test_an_attempt_shown_on_a_page_exists_and_its_failed_or_undecided_rows_do_not_raise():
    root = Path(__file__).resolve().parents[1]
    for page in (root / "book").glob("*.ipynb"):
        text = "".join("".join(c["source"]) for c in json.loads(page.read_text())["cells"])
        for name in re.findall(r'notebook\.attempt\("([^"]+)"\)', text):
            shown = notebook.attempt(name)  # an attempt's failed rows are reported, not raised
            assert shown.verdict.failures() or shown.verdict.undecided(), (
                f"{name} holds every row: commit it as a reference result instead"
            )


def _reference_page_chapter() -> Chapter:
    """TOY with its first section a reference section that a quick page shows from the reference run."""
    measure = dataclasses.replace(TOY.sections[0], trains=True, reference=True, paper=lambda data: [])
    return dataclasses.replace(TOY, sections=(measure, TOY.sections[1]), quick_page_from_reference=("measure",))


def test_a_quick_page_shows_a_named_section_from_the_reference_run_and_trains_it_at_a_reader_s_values(monkeypatch):
    chapter = _reference_page_chapter()
    monkeypatch.setattr(notebook, "load_reference_result", lambda name: _made(["measure"], n=7))
    page = notebook.Page(chapter, "quick")
    assert page.section("measure") == {"n": 7} and "measure" not in page.run.done  # read, not trained
    page.section("other")
    merged = page.result()
    assert list(merged.data) == ["measure", "other"] and merged.data["measure"] == {"n": 7}
    assert [c.name for c in merged.claims] == ["n is large enough (reference run)", "m is m"]
    assert notebook.Page(chapter, "quick", overrides={"m": 2}).section("measure") == {"n": 1}  # a reader's values
    assert notebook.Page(chapter, "quick", seeds=2).section("measure") == {"n": 1}
    assert notebook.Page(chapter, "reference").section("measure") == {"n": 4}
    monkeypatch.setattr(notebook, "load_reference_result", lambda name: _made(["measure"], n=2))
    with pytest.raises(ClaimFailed, match="n is large enough"):
        notebook.Page(chapter, "quick").verdict("measure")
    monkeypatch.setattr(notebook, "load_reference_result", lambda name: None)  # none committed: trained
    assert notebook.Page(chapter, "quick").section("measure") == {"n": 1}


def test_a_quick_page_shows_a_section_the_reference_lacks_from_its_attempt_and_the_reference_once_made(monkeypatch):
    chapter = dataclasses.replace(_reference_page_chapter(), quick_page_attempts={"measure": "toy-attempt.json"})
    monkeypatch.setattr(notebook, "attempt_result", lambda name: _made(["measure"], n=9))
    monkeypatch.setattr(notebook, "load_reference_result", lambda name: _made(["other"]))
    page = notebook.Page(chapter, "quick")
    assert page.section("measure") == {"n": 9} and "measure" not in page.run.done
    page.section("other")
    assert [c.name for c in page.result().claims] == ["m is m"]  # an attempt's rows stay under its section
    monkeypatch.setattr(notebook, "load_reference_result", lambda name: _made(["measure"], n=7))
    assert notebook.Page(chapter, "quick").section("measure") == {"n": 7}  # the reference run, once it has it
    assert notebook.Page(chapter, "quick", seeds=2).section("measure") == {"n": 1}  # a reader's seeds: trained
    with pytest.raises(ValueError, match="attempt only for a section"):
        dataclasses.replace(TOY, quick_page_attempts={"other": "toy-attempt.json"})
    monkeypatch.setattr(notebook, "load_reference_result", lambda name: _made(["other"]))
    monkeypatch.setattr(notebook, "attempt_result", lambda name: _made(["measure"], n=2))  # its row fails
    notebook.Page(chapter, "quick").verdict("measure")  # shown as measured: an attempt, not the book's row
    monkeypatch.setattr(notebook, "load_reference_result", lambda name: _made(["measure", "other"], n=2))
    with pytest.raises(ClaimFailed, match="n is large enough"):  # the same row in the reference run raises
        notebook.Page(chapter, "quick").verdict("measure")


def test_a_quick_page_shows_only_reference_sections_that_no_section_it_runs_needs():
    with pytest.raises(ValueError, match="only reference sections"):
        dataclasses.replace(TOY, quick_page_from_reference=("measure",))

    def _needs_measure(config: dict, ctx: RunContext, measure: dict) -> dict:
        return {"m": measure["n"]}

    chapter = _reference_page_chapter()
    other = dataclasses.replace(TOY.sections[1], compute=_needs_measure)
    with pytest.raises(ValueError, match="need"):
        dataclasses.replace(chapter, sections=(chapter.sections[0], other))
