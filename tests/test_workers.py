"""Training calls in worker processes: the numbers of one thread in this process, in order, warnings included."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from sandboxes import members
from sandboxes.calibration import calibrating
from sandboxes.chapters.memories import measure
from sandboxes.data.markov import MarkovChain
from sandboxes.model import GPT
from sandboxes.theory.markov import binary_config
from sandboxes.trainer import TrainConfig, TrainingDiverged
from sandboxes.workers import TrainRequest, in_workers, map_each, seed_groups, train_each, train_spread

pytestmark = pytest.mark.slow  # training spread over worker processes: make check leaves it out

TASK = MarkovChain.binary(0.5, 0.8, 16)
CONFIG = TrainConfig(steps=12, batch_size=4, eval_every=4, eval_size=16)
CPU = torch.device("cpu")


def make_model() -> GPT:
    return GPT(binary_config(4, 16, tied=True))


def nan_for_seed_1() -> GPT:
    """The model, with NaN embeddings when built under seed 1: a member whose training diverges at once."""
    model = make_model()
    if torch.initial_seed() == 1:
        with torch.no_grad():
            model.wte.weight.fill_(float("nan"))
    return model


REQUESTS = [
    TrainRequest(make_model, TASK, CONFIG, [3], CPU),
    TrainRequest(nan_for_seed_1, TASK, replace(CONFIG, steps=20), [0, 1], CPU),
    TrainRequest(make_model, TASK, replace(CONFIG, batch_size=8), [4, 5, 6], CPU),
]


def _diverged(caught: list) -> list[str]:
    return [str(w.message) for w in caught if w.category is TrainingDiverged]


def test_workers_give_one_threads_numbers_in_order_and_warn_here_as_training_here_does():
    with pytest.warns(TrainingDiverged) as spread:
        out = train_each(REQUESTS, workers=2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with pytest.warns(TrainingDiverged) as here:
            alone = train_each(REQUESTS, workers=1)
    finally:
        torch.set_num_threads(threads)
    assert _diverged(spread) == _diverged(here) and len(_diverged(here)) == 1 and "seed(s) [1]" in _diverged(here)[0]
    for a, b in zip(out, alone, strict=True):
        assert a.seeds == b.seeds and np.array_equal(a.eval_steps, b.eval_steps)
        assert np.array_equal(a.train_loss, b.train_loss, equal_nan=True)
        assert np.array_equal(a.eval_loss, b.eval_loss, equal_nan=True)
        for model_a, model_b in zip(a.models, b.models, strict=True):
            for (name, x), y in zip(model_a.state_dict().items(), model_b.state_dict().values(), strict=True):
                assert torch.equal(x.nan_to_num(), y.nan_to_num()), name


def test_one_worker_one_request_a_plan_or_a_member_store_stay_in_this_process(tmp_path):
    assert in_workers(REQUESTS, 2) and not in_workers(REQUESTS, 1) and not in_workers(REQUESTS[:1], 2)
    assert not in_workers([replace(REQUESTS[0], device=torch.device("meta"))] + REQUESTS[1:], 2)
    with calibrating(2):
        assert not in_workers(REQUESTS, 2)
    with members.sharing(tmp_path):
        assert not in_workers(REQUESTS, 2)


def test_seed_groups_are_runs_of_two_or_more_members_one_per_worker_at_most():
    assert seed_groups(8, 2) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert seed_groups(5, 8) == [[0, 1, 2], [3, 4]]
    assert seed_groups(3, 2) == [[0, 1, 2]] and seed_groups(1, 4) == [[0]] and seed_groups(6, 1) == [list(range(6))]


def test_a_call_spread_over_workers_is_the_whole_call_at_one_thread():
    request = TrainRequest([make_model] * 5, [TASK] * 5, CONFIG, [7, 3, 9, 4, 8], CPU)
    spread = train_spread(request, workers=2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        whole = request.run(progress=False)
    finally:
        torch.set_num_threads(threads)
    assert spread.seeds == whole.seeds and np.array_equal(spread.eval_steps, whole.eval_steps)
    assert np.array_equal(spread.train_loss, whole.train_loss) and np.array_equal(spread.eval_loss, whole.eval_loss)
    for a, b in zip(spread.models, whole.models, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


SEEN_THREADS: list[int] = []


def counting_threads() -> GPT:
    """The model, noting the thread count it is built under (where the call runs)."""
    SEEN_THREADS.append(torch.get_num_threads())
    return make_model()


def test_one_call_asked_of_two_workers_runs_here_at_one_thread_as_a_worker_would():
    # --workers 2 promises one thread's numbers, also where a section's seeds make a single group
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        SEEN_THREADS.clear()
        train_each([TrainRequest(counting_threads, TASK, CONFIG, [3, 4], CPU)], workers=2)
        assert SEEN_THREADS and set(SEEN_THREADS) == {1} and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)


def test_searches_in_workers_give_one_threads_values_in_order():
    config = {"mlp_steps": 64, "mlp_lr": 3e-2, "mlp_accuracy": 0.99}
    calls = [(config, 6, m, seed, CPU) for m in (3, 24) for seed in (0, 1)]
    spread = map_each(measure.most_memorised, calls, workers=2, cost=[m for _, _, m, _, _ in calls])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        alone = map_each(measure.most_memorised, calls, workers=1)
    finally:
        torch.set_num_threads(threads)
    assert spread == alone and spread[0] < spread[2]  # in the calls' order: the narrow memory stores fewer
