"""Sections: declared data shapes, dependencies in signatures, figures drawn from one section's JSON data."""

import importlib
import inspect

import matplotlib
import pytest
from matplotlib.figure import Figure

from sandboxes.chapters import all_chapters
from sandboxes.claims import Claim
from sandboxes.sections import Chapter, Outcome, RunContext, Section

matplotlib.use("Agg")
CHAPTERS = all_chapters()


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.name)
def test_every_section_returns_exactly_the_keys_its_data_type_declares(chapter, tiny_result):
    data = tiny_result(chapter.name)["data"]
    for section in chapter.sections:
        assert set(data[section.name]) == set(section.data_type.__annotations__), section.name


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
    figures = importlib.import_module(f"sandboxes.figures.{chapter.name}")
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


def _section_with_a_need(config: dict, ctx: RunContext, first: dict) -> Outcome[dict]:
    return Outcome([Claim.exact("saw the first section", "1", str(first["value"]), "r")], {"value": config["x"]})


def _first(config: dict, ctx: RunContext) -> Outcome[dict]:
    return Outcome([], {"value": 1})


def test_a_section_runs_the_sections_it_needs_first_and_records_what_it_read():
    from sandboxes.profiles import Param

    chapter = Chapter("toy", "Toy", (Param("x", int, 3, 4, "x"), Param("unused", int, 0, 0, "u")),
                      seeds={"quick": 1, "full": 1},
                      sections=(Section("first", "First", _first), Section("second", "Second", _section_with_a_need)))
    run = chapter.start(device="cpu")
    done = run.section("second")
    assert list(run.done) == ["first", "second"] and done.claims[0].holds and done.claims[0].section == "second"
    assert done.params == ["x"]
    assert run.command("second") == "python -m sandboxes run toy --section second"
    assert chapter.start(overrides={"x": "5"}, device="cpu").command("second").endswith("--set x=5")
    assert run.command("second", "full") == "python -m sandboxes run toy --section second --profile full"


def test_a_chapter_check_stops_bad_values_before_any_section_runs():
    def refuse(config: dict, seeds: int) -> None:
        raise ValueError("no")

    def explode(config: dict, ctx: RunContext) -> Outcome[dict]:
        raise AssertionError("ran")

    chapter = Chapter("toy", "Toy", (), seeds={"quick": 1, "full": 1}, sections=(Section("s", "S", explode),),
                      check=refuse)
    with pytest.raises(ValueError, match="no"):
        chapter.run(device="cpu")

