"""Sections: declared data shapes, dependencies in signatures, figures drawn from one section's JSON data."""

import functools
import importlib
import inspect
import json
import re
import types
import typing
import warnings
from pathlib import Path

import matplotlib
import numpy as np
import pytest
from matplotlib.figure import Figure

from sandboxes.chapters import all_chapters
from sandboxes.claims import Claim
from sandboxes.profiles import Custom, Param, at_least
from sandboxes.sections import Chapter, RunContext, Section
from sandboxes.trainer import TrainConfig, TrainingDiverged, TrainResult

from test_kernel_paths import stored_verdicts

matplotlib.use("Agg")
NAMES = Custom(lambda text: None, "any text", lambda rng, near: near)
CHAPTERS = all_chapters()
ROOT = Path(__file__).resolve().parents[1]


def _matches(data: object, shape: object, where: str) -> None:
    """``data`` has the keys ``shape`` declares, down through nested TypedDicts, lists, dicts and optionals."""
    origin, args = typing.get_origin(shape), typing.get_args(shape)
    if typing.is_typeddict(shape):
        hints = typing.get_type_hints(shape)
        assert set(data) == set(hints), where
        for key, hint in hints.items():
            _matches(data[key], hint, f"{where}.{key}")
    elif origin is list:
        for i, item in enumerate(data):
            _matches(item, args[0], f"{where}[{i}]")
    elif origin is dict:
        for key, item in data.items():
            _matches(item, args[1], f"{where}[{key!r}]")
    elif origin in (typing.Union, types.UnionType) and data is not None:
        _matches(data, next(arg for arg in args if arg is not type(None)), where)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.name)
def test_every_section_returns_exactly_the_keys_its_data_type_declares(chapter, tiny_result):
    data = tiny_result(chapter.name)["data"]
    for section in chapter.sections:
        _matches(data[section.name], section.data_type, section.name)


def test_the_shape_check_sees_a_missing_nested_key():
    class Inner(typing.TypedDict):
        a: int

    class Outer(typing.TypedDict):
        runs: list[Inner]

    _matches({"runs": [{"a": 1}]}, Outer, "ok")
    with pytest.raises(AssertionError, match=r"bad.runs\[1\]"):
        _matches({"runs": [{"a": 1}, {"b": 2}]}, Outer, "bad")


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.name)
def test_a_section_needs_only_sections_that_come_before_it(chapter):
    names = [section.name for section in chapter.sections]
    for i, section in enumerate(chapter.sections):
        assert list(inspect.signature(section.compute).parameters)[:2] == ["config", "ctx"], section.name
        assert set(section.needs) <= set(names[:i]), section.name


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.name)
def test_every_figure_draws_from_one_sections_data_loaded_from_json(chapter, tiny_result):
    data = tiny_result(chapter.name)["data"]
    by_type = {section.data_type.__name__: section.name for section in chapter.sections}
    figures = importlib.import_module(f"sandboxes.chapters.{chapter.name}.figures")
    drawn = 0
    for name, function in inspect.getmembers(figures, inspect.isfunction):
        if function.__module__ != figures.__name__ or name.startswith("_"):
            continue
        parameters = list(inspect.signature(function).parameters.values())
        assert len(parameters) == 1, f"{name} takes more than its section's data"
        section = by_type[parameters[0].annotation]
        figure = function(data[section])
        assert isinstance(figure, Figure), name
        matplotlib.pyplot.close(figure)
        drawn += 1
    assert drawn >= 1


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.name)
def test_each_section_names_every_figure_that_draws_its_data(chapter):
    # the reference and full-profile cells draw each section with the figures it names, so a figure function left
    # unnamed would be missing there, and a name with no function would fail on the page
    figures = importlib.import_module(f"sandboxes.chapters.{chapter.name}.figures")
    takes = {
        name: next(iter(inspect.signature(function).parameters.values())).annotation
        for name, function in inspect.getmembers(figures, inspect.isfunction)
        if function.__module__ == figures.__name__ and not name.startswith("_")
    }
    for section in chapter.sections:
        drawing = sorted(name for name, annotation in takes.items() if annotation == section.data_type.__name__)
        assert sorted(section.figures) == drawing, f"{chapter.name}/{section.name}: name figures={tuple(drawing)}"


def test_a_section_says_which_of_its_rows_a_small_budget_may_leave_undecided():
    # trained rows may wait for a budget, but a theorem about any weights may not; an exact section's rows may not,
    # but one that a sample decides may
    trained = Section("t", "T", _first, _no_rows, trains=True, exact_rows=r"obeys")
    exact = Section("e", "E", _first, _no_rows, sampled_rows=r"key lemma")
    row = functools.partial(Claim.exact, predicted="0", measured="0", reason="r")
    assert trained.may_stay_undecided(row("a trained loss is small"))
    assert not trained.may_stay_undecided(row("the attention obeys the bound"))
    assert not exact.may_stay_undecided(row("the construction is exact"))
    assert exact.may_stay_undecided(row("key lemma: the gradient ranks the parents"))
    with pytest.raises(ValueError, match="exact_rows"):
        Section("x", "X", _first, _no_rows, exact_rows=r"obeys")  # an untrained section's rows are exact already


def test_a_chapter_refuses_a_test_scale_that_names_an_unknown_parameter():
    with pytest.raises(ValueError, match=r"unknown parameters \['stpes'\]"):
        Chapter("toy", "Toy", (), seeds={"quick": 1, "full": 1}, sections=(), full_shrunk={"stpes": 2})


def _section_with_a_need(config: dict, ctx: RunContext, first: dict) -> dict:
    return {"value": config["x"], "saw": first["value"]}


def _saw_rows(config: dict, data: dict) -> tuple[list[Claim], tuple[str, ...]]:
    return [Claim.exact("saw the first section", "1", str(data["saw"]), "r")], ()


def _first(config: dict, ctx: RunContext) -> dict:
    return {"value": 1}


def _no_rows(config: dict, data: dict) -> tuple[list[Claim], tuple[str, ...]]:
    return [], ()


def test_a_section_runs_the_sections_it_needs_first_and_records_what_it_read():
    chapter = Chapter(
        "toy",
        "Toy",
        (Param("x", int, 3, 4, "x", at_least(0)), Param("unused", int, 0, 0, "u", at_least(0))),
        seeds={"quick": 1, "full": 1},
        sections=(
            Section("first", "First", _first, _no_rows),
            Section("second", "Second", _section_with_a_need, _saw_rows),
        ),
    )
    run = chapter.start(device="cpu")
    done = run.section("second")
    assert list(run.done) == ["first", "second"] and done.claims[0].holds and done.claims[0].section == "second"
    assert done.params == ["x"]
    assert run.command("second") == "python -m sandboxes run toy --section second"
    changed = chapter.start(overrides={"x": "5"}, device="cpu")
    with pytest.raises(ValueError, match="has not run"):
        changed.command("second")
    changed.section("second")
    assert changed.command("second").endswith("--set x=5")
    assert run.command("second", "full") == "python -m sandboxes run toy --section second --profile full"


def test_a_rerun_command_quotes_values_the_shell_would_split():
    chapter = Chapter(
        "toy",
        "Toy",
        (Param("names", str, "a,b", "a,b", "n", NAMES),),
        seeds={"quick": 1, "full": 1},
        sections=(Section("only", "Only", _reads_names, _no_rows),),
    )
    run = chapter.start(overrides={"names": "C2, C3"}, device="cpu")
    run.section("only")
    assert run.command("only").endswith("--set 'names=C2, C3'")


def _reads_names(config: dict, ctx: RunContext) -> dict:
    return {"names": config["names"]}


def test_a_chapter_check_stops_bad_values_before_any_section_runs():
    def refuse(config: dict, seeds: int) -> None:
        raise ValueError("no")

    def explode(config: dict, ctx: RunContext) -> dict:
        raise AssertionError("ran")

    chapter = Chapter(
        "toy", "Toy", (), seeds={"quick": 1, "full": 1}, sections=(Section("s", "S", explode, _no_rows),), check=refuse
    )
    with pytest.raises(ValueError, match="no"):
        chapter.run(device="cpu")


def _page_rows(chapter: str) -> list[str]:
    """The names of the rows a chapter's stored page shows in its ``page.check()`` summary (quick profile)."""
    return [name for name, _, _ in stored_verdicts(chapter)]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.name)
def test_every_row_on_the_stored_page_has_a_counterfactual(chapter):
    table = importlib.import_module(f"test_{chapter.name}").COUNTERFACTUALS
    keys = list(table) if isinstance(table, dict) else [entry[0] for entry in table]
    rows = _page_rows(chapter.name)
    assert rows and [row for row in rows if not any(_matches_key(key, row) for key in keys)] == []


def _matches_key(key: str, row: str) -> bool:
    """A counterfactual's key names its row as a substring (dilution) or a regular expression (the others)."""
    try:
        return key in row or re.search(key, row) is not None
    except re.error:
        return False


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.name)
def test_the_stored_quick_page_has_no_undecided_row(chapter):
    # the quick profile's budgets decide every row; an undecided one means a budget to raise
    cells = json.loads((ROOT / "book" / f"{chapter.name}.ipynb").read_text())["cells"]
    check = next(cell for cell in cells if "".join(cell["source"]).strip() == "page.check()")
    text = "".join("".join(output.get("text", "")) for output in check["outputs"])
    assert "[UNDECIDED]" not in text and text.rstrip().endswith("claims hold")


def _diverges(config: dict, ctx: RunContext) -> dict:
    # no stacklevel: these stand in for warnings given during a section, which sections.py catches and inspects
    # (it reads TrainingDiverged's message and re-emits the others at the file and line they were recorded at)
    warnings.warn("training loss became NaN/inf at step 3 for seed(s) [0] (lr=1e+30)", TrainingDiverged)  # noqa: B028
    warnings.warn("an unrelated warning", RuntimeWarning)  # noqa: B028
    return {"losses": [0.01, float("nan")], "closed_form": 0}


def _diverged_rows(config: dict, data: dict) -> tuple[list[Claim], tuple[str, ...]]:
    losses = np.array(data["losses"])
    return [
        Claim.at_most("a trained loss is small", 0.1, float(losses.max()), "r"),
        Claim.exact("no run above 0.1", "0 of 2", f"{int((losses > 0.1).sum())} of 2", "r"),
        Claim.exact("a closed form", "0", str(data["closed_form"]), "r"),
    ], ()


def test_a_section_whose_training_diverged_leaves_every_row_but_its_theory_undecided_and_passes_warnings_on():
    # the NaN run is left out of the count, which would hold: a diverged run decides no row, failing or holding;
    # a closed form computed beside the runs stands
    section = Section("s", "S", _diverges, trains=True, rows=_diverged_rows, theory=lambda data: ("a closed form",))
    chapter = Chapter("toy", "Toy", (), seeds={"quick": 1, "full": 1}, sections=(section,))
    with pytest.warns(RuntimeWarning, match="unrelated"):
        trained, count, closed_form = chapter.run(device="cpu").claims
    assert trained.holds is None and "step 3 for seed(s) [0]" in trained.reason
    assert count.holds is None and "step 3 for seed(s) [0]" in count.reason
    assert closed_form.holds is True


def _asks_for_one_phase(calls: list[str]):
    """A section that continues from a first phase (seed 0 diverged at step 3) which it asks the run for."""

    def first_phase() -> TrainResult:
        calls.append("trained")
        # no stacklevel: a stand-in for the trainer's warning, which sections.py catches and reads
        warnings.warn("training loss became NaN/inf at step 3 for seed(s) [0] (lr=0.1)", TrainingDiverged)  # noqa: B028
        return TrainResult(
            [0],
            [],
            np.array([[0.5, 0.4, 0.3, np.nan]]),
            np.array([0, 3]),
            np.array([[0.5, np.nan]]),
            0.0,
            TrainConfig(steps=4, batch_size=1, lr=0.1),
        )

    def section(config: dict, ctx: RunContext) -> dict:
        ctx.train_once("first phase", first_phase)
        return {"loss": 0.05}

    return section


def _continued_rows(config: dict, data: dict) -> tuple[list[Claim], tuple[str, ...]]:
    return [Claim.at_most("a continued loss is small", 0.1, data["loss"], "r")], ()


def test_two_sections_that_continue_one_first_phase_train_it_once_and_both_hear_it_diverged():
    calls: list[str] = []
    chapter = Chapter(
        "toy",
        "Toy",
        (),
        seeds={"quick": 1, "full": 1},
        sections=(
            Section("a", "A", _asks_for_one_phase(calls), _continued_rows),
            Section("b", "B", _asks_for_one_phase(calls), _continued_rows),
        ),
    )
    first, second = chapter.run(device="cpu").claims
    assert calls == ["trained"]
    assert first.holds is None and second.holds is None and "step 3 for seed(s) [0]" in second.reason


@pytest.mark.parametrize("chapter", [c for c in CHAPTERS if c.reference_sections], ids=lambda c: c.name)
def test_the_seed_table_has_rows_for_every_reference_section(chapter, tiny_result):
    # the page's paper-versus-ours table covers each section the reference run makes, read back from JSON
    data = tiny_result(chapter.name)["data"]
    for name in chapter.reference_sections:
        rows = chapter.section(name).paper(data[name])
        assert rows and all(len(row) == 3 and all(isinstance(cell, str) and cell for cell in row) for row in rows), name
