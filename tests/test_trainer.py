"""The trainer: reproducible, batched equals looped, NaN is an error, schedules are right."""

import copy
import ctypes
import ctypes.util
import math
import platform
import time
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.func import vmap

from sandboxes import attention, members, runtime
from sandboxes.calibration import CALIBRATION_EVAL, ChunkedCall, calibrated_map, calibrating, count_chunks
from sandboxes.curves import still_descending
from sandboxes.data.flipflop import FlipFlop
from sandboxes.data.markov import MarkovChain, symmetric_kernel
from sandboxes.memory import activation_bytes, plan
from sandboxes.model import GPT, GPTConfig
from sandboxes.runtime import cpu_model, device_name, keep_freed_memory, seed_everything, usable_cores
from sandboxes.theory.markov import binary_config
from sandboxes.trainer import (
    Ensemble,
    TrainConfig,
    TrainingDiverged,
    TrainResult,
    _check_finite,
    _held_out_loss,
    sample_members,
    train,
)

TASK = MarkovChain.binary(0.5, 0.8, 16)
CONFIG = TrainConfig(steps=12, batch_size=4, eval_every=4, eval_size=16)


def make_model():
    return GPT(binary_config(4, 16, tied=True))


def test_same_seed_gives_the_same_numbers_twice():
    a = train(make_model, TASK, CONFIG, seeds=[3], batched=False)
    b = train(make_model, TASK, CONFIG, seeds=[3], batched=False)
    assert np.array_equal(a.train_loss, b.train_loss)
    assert np.array_equal(a.eval_loss, b.eval_loss)


def test_a_calibrated_call_runs_few_steps_records_its_plan_and_leaves_later_calls_alone():
    with calibrating(3) as calls:
        short = train(make_model, TASK, CONFIG, seeds=[0, 1], batched=True)
    assert short.train_loss.shape == (2, 3) and len(calls) == 1
    call = calls[0]
    # the first step and the evaluation at step 0 warm up, untimed
    assert (call.planned_steps, call.timing.steps, call.timing.evals, call.timing.groups) == (12, 2, 1, 1)
    assert call.step_bytes > 0 and call.estimated_s > 0
    assert train(make_model, TASK, CONFIG, seeds=[0], batched=False).train_loss.shape == (1, 12)


def test_a_slow_first_evaluation_is_not_scaled_to_the_whole_run(monkeypatch):
    # a kernel loaded on first use once made a 300-step call plan 37 s for its evaluations instead of 0.2
    first = []

    def slow_first_held_out_loss(runner, loss, x, y, chunk):
        if not first:
            first.append(time.sleep(0.5))
        return np.zeros(x.shape[0])

    monkeypatch.setattr("sandboxes.trainer._held_out_loss", slow_first_held_out_loss)
    with calibrating(3) as calls:
        train(make_model, TASK, replace(CONFIG, eval_size=4 * CALIBRATION_EVAL), seeds=[0, 1], batched=True)
    (call,) = calls
    assert call.timing.heldout_s < 0.1 and call.estimated_s < call.wall_time + 0.5
    assert call.estimated_s > 0.5  # the one-off cost still counts, once


def test_a_calibration_reads_a_few_held_out_sequences_and_scales_their_time(monkeypatch):
    # at full size one held-out evaluation can take minutes on the planning machine: a plan reads CALIBRATION_EVAL
    read = []

    def slow_held_out_loss(runner, loss, x, y, chunk):
        read.append(x.shape[1])
        time.sleep(0.02)
        return np.zeros(x.shape[0])

    monkeypatch.setattr("sandboxes.trainer._held_out_loss", slow_held_out_loss)
    config = replace(CONFIG, eval_size=4 * CALIBRATION_EVAL)
    with calibrating(2) as calls:
        train(make_model, TASK, config, seeds=[0, 1], batched=True)
    timing = calls[0].timing
    assert read == [CALIBRATION_EVAL] * 2 and timing.eval_scale == 4
    # the held-out part of each evaluation counts four times: 0.02 s read, 0.08 s planned
    assert timing.planned_eval_s - timing.eval_s == pytest.approx(3 * timing.heldout_s)
    assert 0.02 <= timing.heldout_s < 2 * 0.02  # the evaluation at step 0 warms up, untimed
    read.clear()
    train(make_model, TASK, replace(config, steps=2), seeds=[0, 1])
    assert read == [4 * CALIBRATION_EVAL] * 2  # outside a plan every held-out sequence is read


def test_a_calibration_on_a_cpu_trains_an_ensemble_too_big_for_this_machine_in_groups(monkeypatch):
    # a full profile sized for GPUs is planned on the machine at hand: its ensembles must fit that machine's memory
    one_member = activation_bytes(make_model(), TASK, CONFIG.batch_size) + 4 * 4 * sum(
        p.numel() for p in make_model().parameters()
    )
    monkeypatch.setattr("sandboxes.memory.host_budget", lambda: one_member + 1)
    with calibrating(2) as calls:
        short = train(make_model, TASK, CONFIG, seeds=[0, 1, 2], batched=True)
    # three groups of one: the first trains, the others hand on its copies, and its time counts three times
    assert (calls[0].groups, calls[0].timing.groups) == (3, 1)
    assert len(short.models) == 3 and short.train_loss.shape == (3, 2) and short.eval_loss.shape[0] == 3
    assert short.models[1] is not short.models[0]
    assert calls[0].estimated_s > 3 * (calls[0].timing.step_s / calls[0].timing.steps) * 12

    def unasked() -> int:
        raise AssertionError("a run outside a calibration must not depend on this machine's free memory")

    monkeypatch.setattr("sandboxes.memory.host_budget", unasked)
    train(make_model, TASK, replace(CONFIG, steps=2), seeds=[0, 1, 2])


def test_a_probe_reads_every_member_at_every_evaluation_without_changing_the_run():
    def norms(model):
        return [float(p.detach().norm()) for p in list(model.parameters())[:2]]

    plain = train(make_model, TASK, CONFIG, seeds=[0, 1], batched=True)
    probed = train(make_model, TASK, CONFIG, seeds=[0, 1], batched=True, probe=norms)
    assert np.array_equal(plain.train_loss, probed.train_loss) and plain.probes is None
    assert probed.probes.shape == (2, len(probed.eval_steps), 2)
    assert probed.probes[1, -1].tolist() == norms(probed.models[1])


def test_plain_gradient_descent_takes_the_step_minus_lr_times_the_gradient():
    config = TrainConfig(steps=1, batch_size=4, lr=0.5, optimizer="sgd", eval_every=1, eval_size=16)
    result = train(make_model, TASK, config, seeds=[0], batched=False)
    seed_everything(0)
    model = make_model()
    x, y = TASK.sample(4, torch.Generator().manual_seed(0))
    TASK.loss(model(x), y).backward()
    for trained, (name, start) in zip(result.models[0].parameters(), model.named_parameters()):
        assert torch.allclose(trained, start - 0.5 * start.grad, atol=1e-6), name


def test_momentum_takes_the_heavy_ball_steps_and_a_batched_member_takes_its_own():
    config = TrainConfig(
        steps=2, batch_size=4, lr=0.5, schedule="constant", optimizer="sgd", momentum=0.9, eval_every=1, eval_size=16
    )
    result = train(make_model, TASK, config, seeds=[0], batched=False)
    seed_everything(0)
    model = make_model()
    velocity = [torch.zeros_like(p) for p in model.parameters()]
    stream = torch.Generator().manual_seed(0)
    for _ in range(2):  # v <- 0.9 v + g, w <- w - lr v (PyTorch's SGD; the first v is g)
        model.zero_grad()
        x, y = TASK.sample(4, stream)
        TASK.loss(model(x), y).backward()
        with torch.no_grad():
            for v, p in zip(velocity, model.parameters()):
                v.mul_(0.9).add_(p.grad)
                p.sub_(0.5 * v)
    for trained, (name, want) in zip(result.models[0].parameters(), model.named_parameters()):
        assert torch.allclose(trained, want, atol=1e-5), name
    batched = train(make_model, TASK, config, seeds=[1, 0], batched=True)
    for a, b in zip(batched.models[1].parameters(), result.models[0].parameters()):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)


def test_different_seeds_give_different_runs():
    result = train(make_model, TASK, CONFIG, seeds=[0, 1], batched=False)
    assert not np.array_equal(result.train_loss[0], result.train_loss[1])


def test_member_of_a_batched_run_is_the_single_run_with_its_seed():
    batched = train(make_model, TASK, CONFIG, seeds=[0, 1, 2], batched=True)
    single = train(make_model, TASK, CONFIG, seeds=[1], batched=False)
    # float32 with a different reduction order (bmm against mm): agree to about 1e-6 relative
    assert np.allclose(batched.train_loss[1], single.train_loss[0], rtol=1e-5, atol=1e-6)
    for a, b in zip(batched.models[1].state_dict().values(), single.models[0].state_dict().values()):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("length", [16, 160], ids=["explicit softmax", "blocked kernel"])
def test_a_member_trains_bit_for_bit_alike_in_any_ensemble_of_two_or_more(length):
    # what lets a cluster run train a section's seeds in separate jobs and compute what one process computes
    task, factory = MarkovChain.binary(0.5, 0.8, length), lambda: GPT(binary_config(4, length, tied=True))
    whole = train(factory, task, CONFIG, seeds=[0, 1, 2, 3])
    part = train(factory, task, CONFIG, seeds=[3, 1])
    assert np.array_equal(part.train_loss, whole.train_loss[[3, 1]])
    assert np.array_equal(part.eval_loss, whole.eval_loss[[3, 1]])
    for a, b in zip(part.models, [whole.models[3], whole.models[1]]):
        assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_under_sharing_a_stored_member_is_served_and_any_change_to_its_run_trains_it_anew(tmp_path):
    with members.sharing(tmp_path) as shared:
        first = train(make_model, TASK, CONFIG, seeds=[0, 1, 2])
        again = train(make_model, TASK, CONFIG, seeds=[2, 0])
    assert (shared.trained, shared.served) == (3, 2)
    assert np.array_equal(again.train_loss, first.train_loss[[2, 0]])
    assert np.array_equal(again.eval_loss, first.eval_loss[[2, 0]])
    assert np.array_equal(again.eval_steps, first.eval_steps)
    for a, b in zip(again.models, [first.models[2], first.models[0]]):
        assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    with members.sharing(tmp_path) as shared:
        train(make_model, MarkovChain.binary(0.2, 0.3, 16), CONFIG, seeds=[0, 1])  # another task
        train(make_model, TASK, replace(CONFIG, lr=1e-3), seeds=[0, 1])  # another schedule
        train(lambda: GPT(binary_config(4, 16, tied=False)), TASK, CONFIG, seeds=[0, 1])  # another model
        train(make_model, TASK, CONFIG, seeds=[0], batched=False)  # not vmapped
        start = first.models[1]
        train(lambda: copy.deepcopy(start), TASK, CONFIG, seeds=[0, 1])  # other initial weights: a second phase
    assert (shared.trained, shared.served) == (9, 0)


def test_held_out_loss_in_chunks_is_the_mean_over_scored_targets_not_over_sequences():
    task = FlipFlop.with_ignore(16, 0.5)  # reads, the only scored targets, vary in number per sequence
    models = [GPT(GPTConfig(vocab_size=5, block_size=15, n_layer=1, n_head=1, d_model=8)) for _ in range(2)]
    for parameter in (p for m in models for p in m.parameters()):
        torch.nn.init.normal_(parameter, std=2.0)  # large weights: the loss differs much between sequences
    x, y = sample_members([task, task], 10, [torch.Generator().manual_seed(s) for s in (0, 1)])
    loss, runner = vmap(task.loss), Ensemble(models)
    whole = _held_out_loss(runner, loss, x, y, chunk=10)
    assert np.allclose(_held_out_loss(runner, loss, x, y, chunk=3), whole, rtol=1e-5)


def test_activation_count_grows_with_the_batch_and_with_the_length_as_the_kernel_keeps(monkeypatch):
    def count(n: int, length: int) -> int:
        return activation_bytes(GPT(binary_config(4, length, True)), MarkovChain.binary(0.5, 0.8, length), n)

    # linear in the batch on top of what does not depend on it (weights that matmuls keep)
    assert count(8, 64) - count(4, 64) == count(12, 64) - count(8, 64) > 0
    # the compiled kernel of narrow heads keeps two numbers per query, so the count is at most linear in T
    assert count(4, 256) <= 2 * count(4, 128)
    # the blocked kernel that stands in without a compiler keeps about T^2 / 2 exponentials per sequence
    monkeypatch.setattr(attention, "narrow_kernels", lambda: None)
    assert count(4, 256) > 2 * count(4, 128)


@pytest.mark.parametrize(
    "d_model, n_head, compiled",
    [(8, 1, True), (8, 1, False), (64, 2, True)],
    ids=["compiled kernel", "blocked kernel", "flash kernel"],
)
def test_the_count_on_the_meta_device_is_what_a_cpu_step_keeps(d_model, n_head, compiled, monkeypatch):
    if not compiled:
        monkeypatch.setattr(attention, "narrow_kernels", lambda: None)
    length, n = 160, 3
    model = GPT(GPTConfig(vocab_size=5, block_size=length, n_layer=2, n_head=n_head, d_model=d_model))
    task = MarkovChain(symmetric_kernel(5, 0.3), length)
    x, y = task.sample(n, torch.Generator().manual_seed(0))
    kept: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        kept[id(tensor)] = tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        task.loss(model(x), y)
    assert activation_bytes(model, task, n, "cpu") == sum(kept.values())


def test_a_small_memory_budget_splits_the_ensemble_into_groups_without_changing_any_run():
    whole = train(make_model, TASK, CONFIG, seeds=[0, 1, 2])
    one_member = activation_bytes(make_model(), TASK, CONFIG.batch_size) + 4 * 4 * sum(
        p.numel() for p in make_model().parameters()
    )
    group, chunk = plan(make_model, TASK, CONFIG, 3, one_member + 1, torch.device("cpu"))
    assert group == 1 and chunk < CONFIG.eval_size
    split = train(make_model, TASK, CONFIG, seeds=[0, 1, 2], budget=one_member + 1)
    assert np.allclose(split.train_loss, whole.train_loss, rtol=1e-5, atol=1e-6)
    assert np.allclose(split.eval_loss, whole.eval_loss, rtol=1e-5, atol=1e-6)
    assert split.eval_loss.shape == whole.eval_loss.shape


def test_members_may_differ_in_task_and_initialisation():
    tasks = [MarkovChain.binary(0.5, 0.8, 16), MarkovChain.binary(0.2, 0.3, 16)]
    makers = [lambda: GPT(binary_config(4, 16, True)), lambda: GPT(binary_config(4, 16, True))]
    result = train(makers, tasks, CONFIG, seeds=[0, 0])
    assert result.eval_loss.shape == (2, len(result.eval_steps))
    assert not np.array_equal(result.train_loss[0], result.train_loss[1])


def nan_for_seed_1():
    """The model, with NaN embeddings when built under seed 1: a member whose training diverges at once."""
    model = make_model()
    if torch.initial_seed() == 1:
        with torch.no_grad():
            model.wte.weight.fill_(float("nan"))
    return model


def test_a_diverged_member_is_reported_once_and_the_others_train_on():
    with pytest.warns(TrainingDiverged, match=r"NaN/inf at step 0 for seed\(s\) \[1\]") as caught:
        result = train(nan_for_seed_1, TASK, CONFIG, seeds=[0, 1])
    assert len([w for w in caught if w.category is TrainingDiverged]) == 1
    assert np.isfinite(result.eval_loss[0]).all() and not np.isfinite(result.eval_loss[1]).any()


def test_a_served_member_that_diverged_warns_as_it_did_when_it_trained(tmp_path):
    # the warning decides whether a section's failed rows are undecided: a member served from a store must give it too
    with members.sharing(tmp_path) as shared:
        with pytest.warns(TrainingDiverged) as trained:
            train(nan_for_seed_1, TASK, CONFIG, seeds=[0, 1, 2])
        with pytest.warns(TrainingDiverged) as served:
            train(nan_for_seed_1, TASK, CONFIG, seeds=[0, 1, 2])
    assert shared.served == 3
    messages = [[str(w.message) for w in caught if w.category is TrainingDiverged] for caught in (trained, served)]
    assert messages[0] == messages[1] and len(messages[0]) == 1 and "seed(s) [1]" in messages[0][0]


def test_a_loss_that_turns_nan_between_checks_is_reported_at_its_first_step_and_seed():
    losses = torch.ones(3, 6)
    losses[2, 4] = float("inf")
    losses[1, 5] = float("nan")
    diverged: set[int] = set()
    with pytest.warns(TrainingDiverged, match=r"step 14 for seed\(s\) \[12\]"):
        _check_finite(losses, 10, [10, 11, 12], lr=1e-3, diverged=diverged)
    assert diverged == {2}
    with pytest.warns(TrainingDiverged, match=r"step 15 for seed\(s\) \[11\]"):
        _check_finite(losses, 10, [10, 11, 12], lr=1e-3, diverged=diverged)


def test_training_lowers_the_held_out_loss():
    result = train(make_model, TASK, TrainConfig(steps=60, batch_size=8, lr=1e-2, eval_every=59), seeds=[0])
    assert result.eval_loss[0, -1] < result.eval_loss[0, 0] - 0.01


@pytest.mark.parametrize("schedule", ["cosine", "linear", "constant"])
def test_schedule_warms_up_then_decays_to_the_final_fraction(schedule):
    config = TrainConfig(steps=100, batch_size=1, warmup=10, schedule=schedule, final_lr_fraction=0.1)
    assert math.isclose(config.lr_factor(0), 0.1)
    assert math.isclose(config.lr_factor(10), 1.0)
    assert math.isclose(config.lr_factor(100), 1.0 if schedule == "constant" else 0.1)


def _curve(loss, schedule="constant"):
    """A result whose only member's held-out loss at steps 0..len-1 is ``loss``, under ``schedule``."""
    config = TrainConfig(steps=len(loss), batch_size=1, schedule=schedule, final_lr_fraction=0.0, eval_every=1)
    return TrainResult([0], [None], np.zeros((1, len(loss))), np.arange(len(loss)), np.array([loss]), 0.0, config)


def test_a_loss_still_falling_in_its_last_quarter_of_learning_time_has_not_settled():
    falling = np.linspace(1.0, 0.5, 40)
    flattened = 0.5 + 0.5 * np.exp(-np.arange(40) / 3)
    assert still_descending(_curve(falling), 0.005).tolist() == [True]
    assert still_descending(_curve(flattened), 0.005).tolist() == [False]
    assert still_descending(_curve(np.full(40, 0.7)), 0.005).tolist() == [True]  # it never started
    # the same falling curve under a schedule decaying to 0: what counts is learning time, and the
    # last quarter of it lies among the steps where the loss was still falling as fast as before
    assert still_descending(_curve(falling, "cosine"), 0.005).tolist() == [True]
    assert still_descending(_curve(flattened[:7]), 0.005).tolist() == [True]  # too few evaluations to tell


def test_a_continued_run_that_stays_flat_has_settled_and_one_still_recovering_from_a_bump_has_not():
    """A second phase from trained weights: flat means settled; a bump still coming down in its last quarter does not."""  # noqa: E501
    flat = np.full(40, 1e-5)
    bump = 1e-5 + 0.3 * np.exp(-np.arange(40) / 4)  # a jump at the start, then back to where it began
    recovering = np.concatenate([[1e-5], np.linspace(0.3, 0.05, 39)])
    assert still_descending(_curve(flat), 0.005).tolist() == [True]  # from scratch: it never started
    assert still_descending(_curve(flat), 0.005, continued=True).tolist() == [False]
    assert still_descending(_curve(bump), 0.005, continued=True).tolist() == [False]
    assert still_descending(_curve(recovering), 0.005, continued=True).tolist() == [True]
    assert still_descending(_curve(flat + 0.004 * (np.arange(40) < 35)), 0.005, continued=True).tolist() == [False]


def test_a_calibrated_map_runs_every_chunk_except_under_calibration_where_it_times_two_and_keeps_the_shapes():
    chunks = [np.full(3, i) for i in range(9)] + [np.full(1, 9)]  # the last chunk shorter
    ran: list[int] = []

    def double(chunk: np.ndarray) -> np.ndarray:
        ran.append(int(chunk[0]))
        return 2 * chunk

    assert [list(c) for c in calibrated_map(double, chunks)] == [list(2 * c) for c in chunks] and ran == list(range(10))
    ran.clear()
    with calibrating(4) as calls:
        out = calibrated_map(double, chunks)
    assert ran == [0, 9]  # the first chunk and the last
    assert [len(c) for c in out] == [len(c) for c in chunks] and list(out[9]) == [18] and list(out[4]) == [0, 0, 0]
    (call,) = calls
    assert isinstance(call, ChunkedCall) and (call.chunks, call.ran) == (10, 2)
    assert call.estimated_s == pytest.approx(call.ran_in_full_s * 5) and call.step_bytes == 0


def test_a_count_reads_short_chunks_only_under_calibration():
    seq = torch.arange(10 * CALIBRATION_EVAL)[:, None]
    assert [len(c) for c in count_chunks(seq, 4 * CALIBRATION_EVAL)] == [4 * CALIBRATION_EVAL] * 2 + [
        2 * CALIBRATION_EVAL
    ]
    with calibrating(3):  # a plan times two chunks of CALIBRATION_EVAL and scales them to the ten
        assert [len(c) for c in count_chunks(seq, 4 * CALIBRATION_EVAL)] == [CALIBRATION_EVAL] * 10
        assert [len(c) for c in count_chunks(seq, 2)] == [2] * (5 * CALIBRATION_EVAL)


def test_a_calibrated_map_inside_another_is_scaled_once():
    # each of 4 outer chunks maps 6 inner ones; a full inner map costs 6 inner chunks, so the outer costs 4 x that
    def inner(_: int) -> int:
        time.sleep(0.01)
        return 1

    with calibrating(3) as calls:
        calibrated_map(lambda _: sum(calibrated_map(inner, range(6))), range(4))
    (call,) = calls
    assert call.step_bytes == 0 and call.wall_time == pytest.approx(4 * 0.01, rel=0.5)
    assert call.estimated_s == pytest.approx(4 * 6 * 0.01, rel=0.5)


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (2.33 on): ``hblks`` counts the blocks mapped on their own."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


@pytest.mark.skipif(platform.system() != "Linux", reason="glibc's allocator")
def test_after_keep_freed_memory_a_block_larger_than_any_mmap_threshold_comes_from_the_heap():
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    if not hasattr(libc, "mallinfo2"):
        pytest.skip("glibc before 2.33 has no mallinfo2")
    libc.mallinfo2.restype = _MallInfo2
    assert keep_freed_memory()
    mapped = libc.mallinfo2().hblks
    block = torch.empty(48 << 20, dtype=torch.uint8)  # 48 MiB: over glibc's largest threshold, 32 MiB
    assert libc.mallinfo2().hblks == mapped
    del block


def test_a_cpu_is_named_by_its_model_and_the_cores_this_process_may_use(monkeypatch):
    # provenance names the machine a reference ran on: "x86_64" said neither which CPU nor how many cores
    assert device_name(torch.device("cpu")) == f"{cpu_model()}, {usable_cores()} cores"
    info = "processor\t: 0\nmodel name\t: Some CPU 9000\nprocessor\t: 1\nmodel name\t: Some CPU 9000\n"
    monkeypatch.setattr(runtime, "Path", lambda path: SimpleNamespace(read_text=lambda: info))
    monkeypatch.setattr(runtime.os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert device_name(torch.device("cpu")) == "Some CPU 9000, 3 cores"


def test_a_lone_missing_member_trains_beside_another_as_in_the_whole_ensemble(tmp_path):
    # a share or group job rerun after it stored all but one member of a call: that one must not train alone
    whole = train(make_model, TASK, CONFIG, seeds=[0, 1, 2, 3])
    with members.sharing(tmp_path) as shared:
        train(make_model, TASK, CONFIG, seeds=[0, 1, 2])
        again = train(make_model, TASK, CONFIG, seeds=[0, 1, 2, 3])
    assert (shared.trained, shared.served) == (4, 3)
    assert np.array_equal(again.train_loss[3], whole.train_loss[3])
    assert all(
        torch.equal(x, y) for x, y in zip(again.models[3].state_dict().values(), whole.models[3].state_dict().values())
    )


def test_the_first_steps_are_evaluated_one_by_one_then_every_eval_every_without_changing_the_run():
    every = replace(CONFIG, steps=20, eval_every=5)
    early = train(make_model, TASK, replace(every, eval_first=3), seeds=[0])
    assert early.eval_steps.tolist() == [0, 1, 2, 5, 10, 15, 19]
    assert np.array_equal(early.train_loss, train(make_model, TASK, every, seeds=[0]).train_loss)
