"""Where a reference run's training time goes, against what the machine can do.

For each trained reference section the survey runs the section at the reference profile under
:func:`calibration.calibrating` (every training call shortened to a few steps and timed), with the
PyTorch profiler on, and keeps for every training call its setting (model, sequence length, batch,
members trained at once), its measured step time and tokens per second, the bytes one step keeps
(counted, :mod:`memory`), and one member-step's work counted on the ``meta`` device: the
multiply-adds of its products, the exponentials of its softmaxes and the bytes its operators read
and write. The machine's own peaks (a large matrix product, an exponential, a copy) are measured by
the same command, so each step's time sets beside an estimate of the least time its work takes
there (the three parts one after another, all traffic at the copy rate; not a strict bound): the
fraction of the machine's limit it reached. ``python -m sandboxes bench --survey`` writes the
file the book's performance page shows.
"""

from __future__ import annotations

import copy
import html
import json
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile
from torch.utils import flop_counter
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from . import attention
from .calibration import ChunkedCall, TrainCall, calibrating
from .chapters import all_chapters, get_chapter
from .memory import meta_batch
from .results import RESULTS_DIR, current_commit, provenance
from .runtime import counting_for, device_name
from .sections import Chapter

SURVEY_FILE = RESULTS_DIR / "performance" / "reference-sections-cpu.json"
TARGET_SPEEDUP = 2.0  # issue 43: every section's training throughput twice what it was before the compiled kernel

SURVEY_STEPS = 6  # steps per training call: the first warms up, the other five are timed
TOP_OPERATORS = 6  # operators listed per section, by their share of its profiled time
PEAK_REPEATS = 5  # a microbenchmark's best of this many timings
MAX_SETTINGS = 6  # shapes of one section's calls the tables list one by one (more: a search's runs, by model)

aten = torch.ops.aten
_FLASH = (aten._scaled_dot_product_flash_attention_for_cpu, aten._scaled_dot_product_flash_attention_for_cpu_backward)
_NARROW = attention.NARROW_OPS
_EXPONENTIALS = {
    aten.exp.default,
    aten.exp_.default,
    aten.exp2.default,
    aten.exp2_.default,
    aten._softmax.default,
    aten._log_softmax.default,
}


@dataclass(frozen=True)
class Peaks:
    """What this machine does at best with the threads PyTorch uses: multiply-adds (as two flops each) in a large
    float32 matrix product, float32 exponentials, and bytes moved by a large copy (read and write), per second."""

    machine: str
    threads: int
    flops_per_s: float
    exps_per_s: float
    bytes_per_s: float


def _best_time(work: Callable[[], Any]) -> float:
    """The shortest of ``PEAK_REPEATS`` timings of ``work`` after one warm-up run."""
    work()
    times = []
    for _ in range(PEAK_REPEATS):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)


def measure_peaks(size: int = 1024, elements: int = 1 << 22, copied: int = 1 << 25) -> Peaks:
    """The machine's peaks: a ``size``-square matrix product, ``exp`` of ``elements`` floats, a copy of ``copied``
    floats (far more than a cache holds)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    x, y = torch.randn(elements), torch.empty(elements)
    big, target = torch.randn(copied), torch.empty(copied)
    return Peaks(
        device_name(torch.device("cpu")),
        torch.get_num_threads(),
        2 * size**3 / _best_time(lambda: torch.mm(a, b)),
        elements / _best_time(lambda: torch.exp(x, out=y)),
        2 * 4 * copied / _best_time(lambda: target.copy_(big)),
    )


class _Traffic(TorchDispatchMode):
    """Counts the exponentials and the bytes read and written by every operator that computes (views move nothing);
    a fused kernel's intermediate values never reach memory, so this is the traffic without further fusion."""

    def __init__(self) -> None:
        super().__init__()
        self.exps = 0
        self.bytes = 0
        self.narrow = False

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if not func.is_view:
            tensors = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
            self.bytes += sum(t.numel() * t.element_size() for t in tensors)
        if func in _EXPONENTIALS:
            self.exps += tree_flatten(out)[0][0].numel()
        elif func in _NARROW:  # an exponential per causal pair and pass: the backward pass computes them again
            self.narrow = True
            q = args[1] if func is _NARROW[1] else args[0]
            self.exps += _causal_pairs(q.shape)
        elif func.overloadpacket in _FLASH:
            q, k = args[1:3] if func.overloadpacket is _FLASH[1] else args[:2]
            self.exps += q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2]  # one per score, computed once a pass
        return out


def _causal_pairs(shape: Any) -> int:
    """The (query, key) pairs of causal attention on queries of shape ``(N, T, d)``."""
    N, T = shape[:2]
    return N * T * (T + 1) // 2


def _narrow_flops(q: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    # per causal pair, a score and its share of the output: two products of d multiply-adds (the counter passes shapes)
    return 4 * q[-1] * _causal_pairs(q)


def _narrow_backward_flops(grad: Any, q: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    # per causal pair, the score again, its gradient, and the gradients of the value, the key and the query
    return 10 * q[-1] * _causal_pairs(q)


def _flash_flops(query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    return flop_counter.sdpa_flop_count(query, key, value)


def _flash_backward_flops(
    grad: Any, query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None, **kwargs: Any
) -> int:
    return flop_counter.sdpa_backward_flop_count(grad, query, key, value)


@dataclass(frozen=True)
class StepWork:
    """One member's training step, forward and backward, counted: flops of its products (causal attention counted
    dense), exponentials, and bytes its operators read and write, and whether the compiled kernel of narrow heads
    ran. The optimizer's update is left out."""

    flops: int
    exps: int
    bytes: int
    compiled_attention: bool


def count_step(model: nn.Module, task: Any, batch_size: int) -> StepWork:
    """The work of one forward and backward pass of ``model`` on ``batch_size`` samples of ``task``, counted on the
    ``meta`` device with the kernels a CPU runs."""
    x, y = meta_batch(task, batch_size)
    flops = flop_counter.FlopCounterMode(
        display=False,
        custom_mapping={
            _FLASH[0]: _flash_flops,
            _FLASH[1]: _flash_backward_flops,
            # the counter looks operators up by their packet, not their overload
            _NARROW[0].overloadpacket: _narrow_flops,
            _NARROW[1].overloadpacket: _narrow_backward_flops,
        },
    )
    traffic = _Traffic()
    with counting_for("cpu"), flops, traffic:
        task.loss(copy.deepcopy(model).to("meta")(x), y).backward()
    return StepWork(flops.get_total_flops(), traffic.exps, traffic.bytes, traffic.narrow)


def least_time(work: StepWork, peaks: Peaks) -> float:
    """Seconds ``work`` takes at the machine's peaks, its products, exponentials and traffic one after another."""
    return work.flops / peaks.flops_per_s + work.exps / peaks.exps_per_s + work.bytes / peaks.bytes_per_s


def _trained(calls: list[TrainCall | ChunkedCall]) -> Iterator[TrainCall]:
    """The training calls a calibration recorded, those inside chunked counts included."""
    for call in calls:
        yield from (call,) if isinstance(call, TrainCall) else call.inner


def describe(model: nn.Module) -> str:
    """A model in a few words: its class and, for a transformer, its layers, heads and width."""
    config = getattr(model, "config", None)
    shape = f" {config.n_layer}L {config.n_head}H d={config.d_model}" if config is not None else ""
    return f"{type(model).__name__}{shape} ({sum(p.numel() for p in model.parameters())} weights)"


def positions(inputs: torch.Tensor) -> int:
    """Positions per sample of a task's ``inputs``: a sequence of token ids ``(n, T)`` or of vectors ``(n, T, d)``
    has ``T``; one vector of features ``(n, d)`` (the HMM's one-hot token) is one position."""
    if inputs.is_floating_point():
        return inputs.shape[1] if inputs.dim() == 3 else 1
    return inputs.shape[-1]


def call_record(call: TrainCall, peaks: Peaks) -> dict[str, Any]:
    """One training call of a surveyed section: its setting, measured step time, tokens per second, counted work
    and the fraction of the machine's limit its steps reached (the time that work takes at the machine's peaks,
    its products, exponentials and memory traffic one after another, over the measured step, which also samples
    the data and updates the weights; an estimate, not a bound: overlap or cached traffic can pass 100 %)."""
    model = call.make_model()
    length = positions(call.task.sample(1, torch.Generator().manual_seed(0))[0])
    work = count_step(model, call.task, call.batch_size)
    step_s = call.timing.step_s / max(1, call.timing.steps)
    least = call.members * least_time(work, peaks)
    return {
        "model": describe(model),
        "length": int(length),
        "batch_size": call.batch_size,
        "members": call.members,
        "groups": call.groups,
        "planned_steps": call.planned_steps,
        "step_s": step_s,
        "tokens_per_s": call.members * call.batch_size * length / step_s,
        "step_bytes": call.step_bytes,
        "member_step": asdict(work),
        "limit_fraction": least / step_s,
        "estimated_s": call.estimated_s,
    }


def survey_section(chapter: Chapter, section: str, peaks: Peaks, steps: int = SURVEY_STEPS) -> dict[str, Any]:
    """The reference section ``section`` of ``chapter`` run short and profiled: its training calls and the
    operators that took most of its time (the sections it reads run first, unprofiled)."""
    with calibrating(steps) as calls:
        run = chapter.start("reference", device="cpu", progress=False)
        for needed in chapter.closure([section])[:-1]:
            run.section(needed)
        del calls[:]
        start = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU]) as profiled:
            run.section(section)
        wall = time.perf_counter() - start
    return {
        "chapter": chapter.name,
        "section": section,
        "wall_s": wall,
        "calls": [call_record(call, peaks) for call in _trained(calls) if call.timing.steps],
        "untimed_calls": sum(not call.timing.steps for call in _trained(calls)),  # a step or none: nothing timed
        "operators": top_operators(profiled),
    }


def top_operators(profiled: profile) -> list[list[Any]]:
    """The operators that took most of a profile's time, each with its share of the self CPU time."""
    averages = sorted(profiled.key_averages(), key=lambda event: event.self_cpu_time_total, reverse=True)
    total = sum(event.self_cpu_time_total for event in averages) or 1.0
    return [[event.key, event.self_cpu_time_total / total] for event in averages[:TOP_OPERATORS]]


def survey_paired(chapter: str, section: str, peaks: Peaks, steps: int = SURVEY_STEPS) -> dict[str, Any]:
    """:func:`survey_section` of ``chapter``'s ``section`` and, where its steps ran the compiled kernel, the same
    section just after on the blocked kernel (``blocked``)."""
    entry = survey_section(get_chapter(chapter), section, peaks, steps)
    if any(call["member_step"]["compiled_attention"] for call in entry["calls"]):
        # attention.narrow_kernels reads this at every call
        with mock.patch.dict(os.environ, {"SANDBOXES_ATTENTION": "blocked"}):
            entry["blocked"] = survey_section(get_chapter(chapter), section, peaks, steps)
    return entry


def survey(
    sections: list[tuple[str, str]] | None = None,
    steps: int = SURVEY_STEPS,
    path: Path | None = None,
    isolated: bool = True,
) -> dict[str, Any]:
    """The machine's peaks and every reference section (or ``sections``, as (chapter, section) pairs) surveyed,
    with the commit, versions and machine that made it; written to ``path`` after each section, if given, so that
    a long survey stopped midway keeps what it made. ``isolated``: each section in a process of its own, which
    returns its memory when it ends (one process for every section grew past 24 GB under the profiler)."""
    start, commit = time.perf_counter(), current_commit()
    peaks = measure_peaks()
    wanted = sections or [(c.name, s) for c in all_chapters() for s in c.reference_sections]
    surveyed: dict[str, Any] = {
        "peaks": asdict(peaks),
        "capability": torch.backends.cpu.get_cpu_capability(),
        "steps": steps,
        "sections": [],
    }
    for chapter, section in wanted:
        if isolated:
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
                entry = pool.submit(survey_paired, chapter, section, peaks, steps).result()
        else:
            entry = survey_paired(chapter, section, peaks, steps)
        surveyed["sections"].append(entry)
        surveyed["provenance"] = provenance("cpu", peaks.machine, time.perf_counter() - start, commit)
        if path is not None:
            save(surveyed, path)
    return surveyed


def save(surveyed: dict[str, Any], path: Path = SURVEY_FILE) -> Path:
    """Write a survey as JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(surveyed, indent=1) + "\n")
    return path


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    pad = ' style="padding: 0.2em 0.6em"'
    head = "".join(f"<th{pad}>{html.escape(cell)}</th>" for cell in header)
    body = "".join("<tr>" + "".join(f"<td{pad}>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def machine_table(surveyed: dict[str, Any]) -> str:
    """The machine a survey ran on and its measured peaks, as HTML."""
    peaks, made = surveyed["peaks"], surveyed["provenance"]
    rows = [
        ["machine", f"{peaks['machine']}; {peaks['threads']} threads; kernels: {surveyed['capability']}"],
        ["float32 matrix product", f"{peaks['flops_per_s'] / 1e9:.1f} GFLOP/s"],
        ["float32 exponential", f"{peaks['exps_per_s'] / 1e9:.2f} G/s"],
        ["copy (read and write)", f"{peaks['bytes_per_s'] / 1e9:.1f} GB/s"],
        [
            "made",
            f"commit {made['git_commit'][:7]}, torch {made['versions']['torch']}, {made['created']}, "
            f"in {made['wall_time_s'] / 60:.0f} min",
        ],
    ]
    return _html_table(["", "measured"], rows)


def _shape(call: dict[str, Any]) -> tuple:
    """What makes two training calls alike for the table: the model's shape (not its exact weight count, which a
    vocabulary or a task changes a little), the length, the batch, the members trained at once and the counted
    work of a member-step."""
    work = call["member_step"]
    return (
        call["model"].split(" (")[0],
        call["length"],
        call["batch_size"],
        call["members"],
        work["flops"],
        work["exps"],
        work["bytes"],
    )


def _median(calls: list[dict[str, Any]], key: str) -> float:
    return statistics.median(call[key] for call in calls)


def _count(calls: list[dict[str, Any]]) -> str:
    return f" ({len(calls)} calls)" * (len(calls) > 1)


def _settings(
    calls: list[dict[str, Any]], key: Callable[[dict[str, Any]], tuple] = _shape
) -> list[tuple[str, list[dict[str, Any]]]]:
    """A section's training calls as the tables' rows, each with its label: one row per shape (``key``), or, where
    a section's calls come in more than ``MAX_SETTINGS`` shapes and none ran the compiled kernel (a capacity search's
    runs, each at its own size), one row per model and length with the range of batches, whose numbers are medians."""
    shapes: dict[tuple, list[dict[str, Any]]] = {}
    for call in calls:
        shapes.setdefault(key(call), []).append(call)
    if len(shapes) <= MAX_SETTINGS or any(call["member_step"]["compiled_attention"] for call in calls):
        return [
            (f"{model}, T {length}, batch {batch}, {members} at once" + _count(alike), alike)
            for (model, length, batch, members, *_), alike in shapes.items()
        ]
    models: dict[tuple, list[dict[str, Any]]] = {}
    for call in calls:
        models.setdefault((call["model"].split(" (")[0], call["length"], call["members"]), []).append(call)
    rows = []
    for (model, length, members), alike in models.items():
        batches = sorted(call["batch_size"] for call in alike)
        sizes = f"{batches[0]:,}" if batches[0] == batches[-1] else f"{batches[0]:,} to {batches[-1]:,}"
        label = f"{model}, T {length}, batch {sizes}, {members} at once"
        rows.append((label + f" ({len(alike)} runs of their own sizes: medians)", alike))
    return rows


def sections_table(surveyed: dict[str, Any]) -> str:
    """One row per setting of every surveyed section (its training calls of one shape together, the median over
    them; a search's runs of many sizes together, see :func:`_settings`): step time, tokens per second, counted work
    and bytes, and the fraction of the machine's limit it reached, as HTML."""
    rows = []
    for section in surveyed["sections"]:
        for label, calls in _settings(section["calls"]):
            rows.append(
                [
                    f"{section['chapter']}/{section['section']}",
                    label,
                    f"{1e3 * _median(calls, 'step_s'):.1f}",
                    f"{_median(calls, 'tokens_per_s') / 1e3:,.0f}",
                    " / ".join(
                        f"{statistics.median(c['member_step'][key] for c in calls) / 1e6:,.{digits}f}"
                        for key, digits in (("flops", 0), ("exps", 2), ("bytes", 0))
                    ),
                    f"{max(c['step_bytes'] for c in calls) / 2**20:,.0f}",
                    f"{100 * _median(calls, 'limit_fraction'):.0f} %",
                ]
            )
    surveyed_names = {(section["chapter"], section["section"]) for section in surveyed["sections"]}
    rows += [
        [f"{chapter.name}/{name}", "not surveyed yet: python -m sandboxes bench --survey", *[""] * 5]
        for chapter in all_chapters()
        for name in chapter.reference_sections
        if (chapter.name, name) not in surveyed_names
    ]
    header = [
        "section",
        "model and setting",
        "ms a step",
        "k tokens/s",
        "a member-step: MFLOP / M exp / MB moved",
        "MiB kept",
        "of the limit",
    ]
    return _html_table(header, rows)


def operators_table(surveyed: dict[str, Any]) -> str:
    """Per surveyed section, the operators that took most of its profiled time, with their shares, as HTML."""
    rows = [
        [
            f"{section['chapter']}/{section['section']} ({section['wall_s']:.0f} s shortened"
            + (f"; {section['untimed_calls']} calls of a single step, untimed)" if section["untimed_calls"] else ")"),
            "; ".join(f"{name} {100 * share:.0f} %" for name, share in section["operators"]),
        ]
        for section in surveyed["sections"]
    ]
    return _html_table(["section", "operators by share of the profiled time (self CPU time)"], rows)


def _setting(call: dict[str, Any]) -> tuple:
    """What makes two training calls alike for the speedup table: the model's shape, length, batch and members at
    once (not the counted work, which differs between the two attention kernels)."""
    return _shape(call)[:4]


def speedup_table(surveyed: dict[str, Any], target: float = TARGET_SPEEDUP) -> str:
    """Tokens per second of every setting with the compiled kernel beside the blocked one (surveyed just after in
    the same process, where a section has narrow heads), their ratio against ``target``, and where a setting falls
    short or has no narrow heads, what holds it: the fraction of the machine's limit it reached and the operator
    that took most of the section's time, as HTML."""
    rows = []
    for entry in surveyed["sections"]:
        operator, share = entry["operators"][0] if entry["operators"] else ("", 0.0)
        blocked: dict[tuple, list[dict[str, Any]]] = {}
        for call in entry.get("blocked", {}).get("calls", []):
            blocked.setdefault(_setting(call), []).append(call)
        for setting, calls in _settings(entry["calls"], _setting):
            held = f"{100 * _median(calls, 'limit_fraction'):.0f} % of the limit; {operator} takes "
            held += f"{100 * share:.0f} % of the section's time"
            before = blocked.get(_setting(calls[0]))
            if before and any(call["member_step"]["compiled_attention"] for call in calls):
                ratio = _median(calls, "tokens_per_s") / _median(before, "tokens_per_s")
                cells = [f"{_median(before, 'tokens_per_s') / 1e3:,.0f}", f"{ratio:.2f}"]
                verdict = "met" if ratio >= target else f"not met: {held}"
            else:
                cells, verdict = ["", ""], f"kernels unchanged: {held}"
            speed = f"{_median(calls, 'tokens_per_s') / 1e3:,.0f}"
            rows.append([f"{entry['chapter']}/{entry['section']}", setting, cells[0], speed, cells[1], verdict])
    header = ["section", "setting", "k tokens/s, blocked kernel", "compiled kernel", "ratio", f"{target:g} times"]
    return _html_table(header, rows)


def against_table(records: list[dict[str, Any]], target: float) -> str:
    """Side-by-side rounds of the authors' Markov loop and ours (``bench --against-authors --out``), one row per
    file: the machine, each round's ratio, the slowest, whether every round reached ``target``, and what holds our
    step (the least time its counted work takes at the machine's peaks, the operators that take its time), as HTML."""
    rows = []
    for record in records:
        ratios = [r["theirs_ms"] / r["ours_ms"] for r in record["rounds"]]
        ours_ms = statistics.median(r["ours_ms"] for r in record["rounds"])
        made, ours = record["provenance"], record["ours_profiled"]
        rows.append(
            [
                f"{made['device_name']}; kernels: {record['capability']}; {record['threads']} threads",
                f"{statistics.median(r['theirs_ms'] for r in record['rounds']):.1f} / {ours_ms:.1f}",
                ", ".join(f"{ratio:.2f}" for ratio in ratios),
                f"{min(ratios):.2f}",
                "yes" if min(ratios) >= target else "no",
                f"{ours['least_ms']:.1f} ms, {100 * ours['least_ms'] / ours_ms:.0f} % of the limit; "
                + "; ".join(f"{name} {100 * share:.0f} %" for name, share in ours["operators"][:3]),
                f"commit {made['git_commit'][:7]}, {made['created']}",
            ]
        )
    header = [
        "machine",
        "ms a step, medians: theirs / ours",
        "ratio per round",
        "slowest",
        f"all {target:g}x",
        "ours: least time at the peaks; operators by share of its profiled time",
        "made",
    ]
    return _html_table(header, rows)
