"""Shared test settings: the threads OMP_NUM_THREADS names (make test: one per pytest worker, two workers on the
CI machine's two cores; two otherwise), and tiny overrides of every chapter."""

import json
import os

import pytest
import torch

from sandboxes.chapters import get_chapter
from sandboxes.cli import main

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))

# Settings that run each chapter end to end in a few seconds: every section, every claim, tiny scale.
TINY: dict[str, dict[str, object]] = {
    "markov": {"length": 8, "sweep_length": 8, "depth_length": 8, "steps": 3, "depth_steps": 3, "depth_seeds": 1,
               "grid": 2, "init_scales": "0.02", "switch_probs": "0.5", "flow_points": 2},
    "shortcuts": {"sweep": "C2,A5", "easy": "C2", "hard": "A5", "depths": "1", "depth": 1, "shallow_depth": 1,
                  "T": 4, "steps": 2, "hard_steps": 2, "parity_steps": 2, "scratchpad_steps": 2, "lstm_steps": 2,
                  "parity_length": 4, "eval_size": 8, "construct": "C2", "construct_lengths": "3",
                  "construct_samples": 4, "d_model": 8, "n_head": 2, "shift_probs": "0.3,0.5"},
    "dilution": {"T": 8, "n_sparse": 8, "n_dense": 8, "n_in_distribution": 8, "steps": 2, "start_steps": 2,
                 "finetune_steps": 2, "lstm_steps": 2, "d_model": 8, "n_construction": 4},
    "hmm": {"candidates": 60, "shapes": "3x2", "random_hmms": 1, "samples": "200,400", "steps": 2, "batch_size": 16,
            "ghmm_starts": 1, "ghmm_points": 20},
    "induction": {"T": 8, "level_samples": 64, "chi2_kernels": 16, "chi2_positions": 8, "construct_T": 4,
                  "construct_k": 2, "grad_samples": 64, "d_model": 8, "steps": 3, "batch_size": 8, "eval_size": 16,
                  "trigger_T": 8, "trigger_steps": 3, "stage_steps": 3, "memory_T": 16, "memory_d": 16,
                  "memory_steps": 3},
}

# The full profile with only its scale shrunk (steps, widths, sample counts): every full-only structure stays,
# such as S5, Grid9 and Dyck, depths up to 8, layer norm, 8 heads and 10 x 8 HMMs, so a crash that would end a long
# GPU run after hours shows up here in seconds.
FULL_SHRUNK: dict[str, dict[str, object]] = {
    "markov": {"length": 16, "sweep_length": 16, "depth_length": 16, "steps": 2, "depth_steps": 2, "grid_seeds": 1,
               "flow_points": 4},
    "shortcuts": {"steps": 2, "hard_steps": 2, "parity_steps": 2, "scratchpad_steps": 2, "lstm_steps": 2,
                  "eval_size": 8, "construct_samples": 2, "d_model": 16, "batch_size": 4},
    "dilution": {"T": 16, "steps": 2, "start_steps": 2, "finetune_steps": 2, "lstm_steps": 2, "n_sparse": 8,
                 "n_dense": 8, "n_in_distribution": 8, "n_construction": 4, "d_model": 16},
    "hmm": {"candidates": 60, "random_hmms": 1, "samples": "200,400", "steps": 2, "batch_size": 16, "ghmm_starts": 1,
            "ghmm_points": 20},
    "induction": {"T": 16, "level_samples": 64, "chi2_kernels": 16, "chi2_positions": 16, "grad_samples": 64,
                  "steps": 2, "batch_size": 8, "eval_size": 16, "d_model": 16, "trigger_T": 16, "trigger_steps": 2,
                  "stage_steps": 2, "memory_T": 16, "memory_d": 64, "memory_steps": 2},
}


# The chapters' quick runs, costliest first (one thread, default kernel path, 2-core AMD EPYC at a3d7ca2: induction
# 349 s, dilution 189, markov 175, shortcuts 129, hmm 16; each page under nbval takes about as long natively).
BY_COST = ("induction", "dilution", "markov", "shortcuts", "hmm")


def _chapter_run(item: pytest.Item) -> tuple[str, int] | None:
    """The chapter a whole-chapter item runs and which of its two runs it is (0: the default kernel path's claims,
    1: a cell of its page under nbval), or None for any other item."""
    if item.path.suffix == ".ipynb":
        return item.path.stem, 1
    if getattr(item, "originalname", None) == "test_the_default_kernel_path_gives_the_stored_page_its_verdicts":
        return item.callspec.params["chapter"], 0
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The chapters' whole runs first, costliest first, each chapter's two runs side by side, so that the two
    workers of make test's second step (nbval and the default path in one session) end about together; a test that
    reads ``tiny_result`` marked slow (make check leaves it out)."""
    def rank(item: pytest.Item) -> int:
        run = _chapter_run(item)
        return 2 * len(BY_COST) if run is None or run[0] not in BY_COST else 2 * BY_COST.index(run[0]) + run[1]

    items.sort(key=rank)
    for item in items:
        if "tiny_result" in getattr(item, "fixturenames", ()):  # each chapter run whole from the command line
            item.add_marker(pytest.mark.slow)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """Under ``--dist loadscope``: a page's cells are one unit of work (they share its kernel), every other test is
    one of its own, handed out in collection order with ``--no-loadscope-reorder`` (xdist's own scopes would put
    every chapter's default-path test, one module, on one worker)."""
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
