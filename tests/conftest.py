"""Shared test settings: the threads OMP_NUM_THREADS names (make test: one per pytest worker, two workers on the
CI machine's two cores; two otherwise), and tiny overrides of every chapter."""

import json
import os
import re

import pytest
import torch

from sandboxes import cluster
from sandboxes.chapters import all_chapters, get_chapter
from sandboxes.cli import main

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))

# Each chapter's scales for the tests, as its package declares them (``Chapter.unit_scale``, ``full_shrunk``).
TINY: dict[str, dict[str, object]] = {chapter.name: dict(chapter.unit_scale) for chapter in all_chapters()}
FULL_SHRUNK: dict[str, dict[str, object]] = {chapter.name: dict(chapter.full_shrunk) for chapter in all_chapters()}


# The pages in the order the two workers of make test's second step take them, each the next free page: the cells' sum
# under nbval on the default kernel path, one thread, two pages at a time on a 2-core AMD EPYC at ef1b218, is induction
# about 165 s, shortcuts 110, onelayer 80, hmm 70, dilution 35; markov about 100 and memories 50 alone since their
# depth and noisy recall sections come from the reference run on the quick page (2026-12-07). This order deals
# induction, onelayer and memories to one worker and the rest to the other.
BY_COST = ("induction", "shortcuts", "markov", "onelayer", "hmm", "memories", "dilution")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The pages first, in the order of ``BY_COST``, so that the two workers of make test's second step end about
    together; a test that reads ``tiny_result`` marked slow (make check leaves it out)."""

    def rank(item: pytest.Item) -> int:
        page = item.path.stem if item.path.suffix == ".ipynb" else None
        return BY_COST.index(page) if page in BY_COST else len(BY_COST)

    items.sort(key=rank)
    for item in items:
        if "tiny_result" in getattr(item, "fixturenames", ()):  # each chapter run whole from the command line
            item.add_marker(pytest.mark.slow)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """Under ``--dist loadscope``: a page's cells are one unit of work (they share its kernel), every other test is
    one of its own, handed out in collection order with ``--no-loadscope-reorder``."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class PagesWhole(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return path if path.endswith(".ipynb") else nodeid

    return PagesWhole(config, log)


def tiny_flags(chapter: str) -> list[str]:
    """Command-line flags that run ``chapter`` at the scale of a unit test."""
    seeds = str(get_chapter(chapter).min_seeds)
    return [arg for key, value in TINY[chapter].items() for arg in ("--set", f"{key}={value}")] + ["--seeds", seeds]


def tiny_plan(chapter: str) -> cluster.Plan:
    """A plan of jobs for ``chapter`` at the scale of a unit test, with the seeds of :func:`tiny_flags`."""
    overrides = {key: str(value) for key, value in TINY[chapter].items()}
    return cluster.Plan.make(chapter, "quick", overrides, get_chapter(chapter).min_seeds, "cpu")


def what_a_run_computed(body: dict) -> dict:
    """A result file without what differs between any two runs of the same code: times, dates, machine."""
    return {
        "chapter": body["chapter"],
        "profile": body["profile"],
        "config": body["config"],
        "seeds": body["seeds"],
        "claims": body["claims"],
        "data": body["data"],
        "sections": {
            name: {k: v for k, v in section.items() if k not in ("wall_time_s", "provenance")}
            for name, section in body["sections"].items()
        },
    }


@pytest.fixture(scope="session")
def tiny_result(tmp_path_factory):
    """Each chapter run once, every section, from the command line at unit-test scale; shared by the tests."""
    made: dict[str, dict] = {}

    def result(chapter: str) -> dict:
        if chapter not in made:
            path = tmp_path_factory.mktemp(chapter) / f"{chapter}.json"
            assert main(["run", chapter, *tiny_flags(chapter), "--device", "cpu", "--out", str(path)]) == 0
            made[chapter] = json.loads(path.read_text())
        return made[chapter]

    return result


def assert_fails_in_its_counterfactual(claims: list, key: str, change: str) -> None:
    """Exactly one of ``claims`` has a name matching ``key``, and it fails: the row's counterfactual ``change``."""
    matching = [c for c in claims if re.search(key, c.name)]
    assert len(matching) == 1, f"{key!r} matches {len(matching)} rows"
    assert matching[0].holds is False, f"{matching[0].name} holds although {change}: {matching[0].measured}"
