"""The command line: list, runs of whole chapters and of single sections, JSON to stdout, one-line errors."""

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from sandboxes.chapters import all_chapters, get_chapter
from sandboxes.claims import Claim
from sandboxes.cli import _overrides, _parser, main
from sandboxes.results import RESULTS_DIR

from conftest import FULL_SHRUNK
from conftest import tiny_flags as tiny
from reader import is_trained_row

pytestmark = pytest.mark.slow  # whole chapters from the command line: make check leaves it out

CHAPTERS = [chapter.name for chapter in all_chapters()]
SECTIONS = [(chapter.name, section.name) for chapter in all_chapters() for section in chapter.sections]
TINY = tiny("markov")


def test_list_names_chapters_sections_and_parameters(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "markov" in out and "init_scales" in out and "sections: global_minimum" in out
    assert main(["list", "--names"]) == 0
    assert capsys.readouterr().out.split() == CHAPTERS


def test_run_with_overrides_writes_json_to_stdout(capsys):
    assert (
        main(
            [
                "run",
                "markov",
                "--set",
                "p=0.7",
                "--set",
                "q=0.6",
                "--set",
                "depths=2",
                *TINY,
                "--device",
                "cpu",
                "--out",
                "-",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    body = json.loads(captured.out)
    assert body["config"]["p"] == 0.7 and body["config"]["depths"] == "2"
    assert body["provenance"]["device_type"] == "cpu"
    assert "claims hold" in captured.err


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_chapter_runs_from_the_command_line_with_every_section(chapter, tiny_result):
    body = tiny_result(chapter)
    sections = [section.name for section in next(c for c in all_chapters() if c.name == chapter).sections]
    assert body["chapter"] == chapter and body["profile"] == "quick" and body["seeds"][0] == 0
    assert body["provenance"]["device_type"] == "cpu"
    assert list(body["data"]) == list(body["sections"]) == sections
    assert {claim["section"] for claim in body["claims"]} <= set(sections)


@pytest.mark.parametrize("chapter, section", SECTIONS)
def test_each_section_runs_alone_and_gives_what_it_gives_in_the_whole_chapter(chapter, section, tiny_result, capsys):
    assert main(["run", chapter, "--section", section, *tiny(chapter), "--device", "cpu", "--out", "-"]) == 0
    alone, whole = json.loads(capsys.readouterr().out), tiny_result(chapter)
    assert section in alone["data"] and set(alone["data"]) <= set(whole["data"])
    assert alone["data"][section] == whole["data"][section]
    assert alone["sections"][section]["params"] == whole["sections"][section]["params"]
    mine = [claim for claim in whole["claims"] if claim["section"] == section]
    assert [claim for claim in alone["claims"] if claim["section"] == section] == mine


def test_a_section_run_names_its_file_after_the_section(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "markov", "--section", "global_minimum", *TINY, "--device", "cpu"]) == 0
    assert json.loads((tmp_path / "runs" / "markov-quick-global_minimum.json").read_text())["claims"]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_full_profile_runs_every_section_at_a_shrunk_scale_and_its_exact_rows_hold(chapter, tiny_result, capsys):
    shrunk = [arg for key, value in FULL_SHRUNK[chapter].items() for arg in ("--set", f"{key}={value}")]
    assert main(["run", chapter, "--profile", "full", *shrunk, "--seeds", "2", "--device", "cpu", "--out", "-"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert list(result["data"]) == list(tiny_result(chapter)["data"])
    claims = [Claim(**c) for c in result["claims"]]
    assert [c.name for c in claims if not is_trained_row(chapter, c) and c.holds is not True] == []


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_chapter_runs_when_memory_allows_one_member_and_one_sequence_at_a_time(chapter, monkeypatch, capsys):
    # what a GPU too small for a whole ensemble gets: every model and task of the chapter goes through the
    # trainer's memory planner (counted on the meta device), trains member by member, evaluates in chunks
    monkeypatch.setattr("sandboxes.memory.memory_budget", lambda device: 1)
    assert main(["run", chapter, *tiny(chapter), "--device", "cpu", "--out", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["chapter"] == chapter


def test_run_writes_the_result_file(tmp_path, capsys):
    out = tmp_path / "markov.json"
    assert main(["run", "markov", *TINY, "--device", "cpu", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["chapter"] == "markov"


@pytest.mark.parametrize("flag, shown", [("--progress", True), ("--no-progress", False)])
def test_progress_bars_can_be_asked_for_when_stderr_is_a_file(flag, shown, capsys):
    assert main(["run", "markov", *TINY, "--device", "cpu", "--out", "-", flag]) == 0
    assert ("it/s]" in capsys.readouterr().err) == shown


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "markov", "--set", "p=1.5"], "bad value for p: must be a number strictly between 0 and 1"),
        (["run", "markov", "--set", "colour=red"], "unknown parameter 'colour'"),
        (["run", "nope"], "unknown chapter 'nope'"),
        (["run", "markov", "--profile", "huge"], "unknown profile 'huge'"),
        (["run", "markov", "--device", "tpu"], "unknown device 'tpu'"),
        (["run", "dilution", "--set", "layer_norm=maybe"], "expected true or false"),
        (["run", "markov", "--set", "switch_probs=0.5,2"], "strictly between 0 and 1"),
        (["run", "markov", "--set", "p"], "KEY=VALUE"),
        (["run", "markov", "--section", "nope"], "unknown section 'nope' of markov"),
        (["run", "shortcuts", "--set", "automaton=Z9"], "automaton"),
        (["run", "shortcuts", "--set", "depths=1,x"], "integers"),
        (["run", "shortcuts", "--set", "bal_weights=0.1,0.1"], "bad value for bal_weights: repeats a value"),
        (["run", "dilution", "--set", "T=7"], "even number"),
        (["run", "dilution", "--set", "p_i=1"], "strictly between 0 and 1"),
        (["run", "hmm", "--set", "k=2"], "3..8"),
        (["run", "hmm", "--set", "d=3", "--set", "k=4"], "d >= k"),
        (["run", "shortcuts", "--workers", "0"], "--workers must be at least 1"),
    ],
)
def test_bad_input_exits_non_zero_with_a_one_line_message(args, message, capsys):
    try:
        code = main(args)
    except SystemExit as exit_:  # the parser's own refusals
        code = exit_.code
    assert code not in (0, None)
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]


def test_a_bad_value_from_a_fresh_process_prints_one_line_and_nothing_else():
    """The in-process refusals above cannot see what importing the package prints (a warning would be a second
    line): one refusal from a fresh interpreter."""
    proc = subprocess.run(
        [sys.executable, "-m", "sandboxes", "run", "markov", "--set", "p=1.5"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and proc.stdout == ""
    refusal = "error: bad value for p: must be a number strictly between 0 and 1, got 1.5"
    assert proc.stderr.strip().splitlines() == [refusal]


def test_rejudge_makes_a_section_s_rows_again_in_the_file_it_is_given(tmp_path, capsys):
    copy = tmp_path / "shortcuts-reference.json"
    body = json.loads((RESULTS_DIR / "shortcuts-reference.json").read_text())
    row = [c for c in body["claims"] if c["section"] == "brittleness"][-1]
    row["reason"] = "a text the rules do not make"
    copy.write_text(json.dumps(body))
    assert main(["rejudge", "shortcuts", "--section", "brittleness", "--file", str(copy)]) == 0
    judged = json.loads(copy.read_text())
    assert [c for c in judged["claims"] if c["section"] == "brittleness"][-1]["reason"] != row["reason"]
    assert "judged" in judged["sections"]["brittleness"] and "judged again" in capsys.readouterr().out


def test_bench_reports_all_three_modes_and_the_ratio(capsys):
    assert main(["bench", "--k", "2", "--steps", "2", "--batch-size", "2", "--sizes", "markov", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    for mode in ("single", "loop", "batched"):
        assert f"markov    {mode}" in out
    assert "batched / loop throughput" in out


def test_bench_refuses_an_unknown_size(capsys):
    assert main(["bench", "--sizes", "huge", "--steps", "1", "--device", "cpu"]) == 2
    assert "unknown model size" in capsys.readouterr().err


# A stand-in for the Markov paper's Markov-LLM/src (written here, not theirs): the names and call signatures the
# side-by-side comparison uses, a model far smaller than theirs.
PAPER_STAND_IN = {
    "models/base.py": """
import torch
from torch import nn


class AddBeta:
    def __init__(self, beta, shape, device):
        self.counts = torch.zeros(shape)

    def train(self, x):
        self.counts[0, 0] += x.numel()


class GPTBase(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size)

    def forward(self, idx, targets=None):
        logits = self.lm_head(self.wte(idx))
        return {"loss": nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())}

    def get_parameter_group_specs(self):
        return [{"params": [name for name, _ in self.named_parameters()], "weight_decay": 0.0}]
""",
    "optim/utils.py": """
import torch


def get_batch(P, seq_length, batch_size, generator, extra_args, device="cpu"):
    data = torch.randint(0, 2, (batch_size, seq_length + 1), generator=generator)
    return data[:, :-1], data[:, 1:]
""",
}


def test_bench_sets_our_step_beside_the_papers_loop_imported_from_a_checkout(tmp_path, capsys):
    for name, text in PAPER_STAND_IN.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    record = tmp_path / "rounds.json"
    assert (
        main(["bench", "--against-authors", str(tmp_path), "--rounds", "2", "--steps", "5", "--out", str(record)]) == 0
    )
    out = capsys.readouterr().out
    assert "round 2: theirs" in out and "times faster" in out and "ratio per round: median" in out
    profiled = json.loads(record.read_text())["ours_profiled"]
    assert profiled["least_ms"] > 0 and profiled["operators"]  # what holds our step, for the performance page
    assert "tiktoken" not in sys.modules or sys.modules["tiktoken"].__spec__ is not None  # no stand-in left behind
    assert main(["bench", "--against-authors", str(tmp_path / "models")]) == 2
    assert "is not Markov-LLM/src" in capsys.readouterr().err
    assert main(["bench", "--against-authors", str(tmp_path), "--rounds", "1000", "--steps", "20"]) == 2
    assert "at most 9000 of their steps" in capsys.readouterr().err


@pytest.mark.parametrize("chapter", all_chapters(), ids=lambda c: c.name)
@pytest.mark.parametrize("profile", ["quick", "full"])
def test_every_profile_value_of_every_chapter_passes_its_own_check(chapter, profile):
    for param in chapter.params:
        assert param.parse(param.default(profile)) == param.default(profile), param.name


def test_full_profile_on_a_cpu_warns_before_it_starts():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sandboxes",
            "run",
            "markov",
            "--profile",
            "full",
            "--device",
            "cpu",
            "--set",
            "length=0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "meant for a GPU" in proc.stderr


def test_strict_fails_on_a_failed_row_but_not_on_an_undecided_one(capsys):
    # three steps of a depth-2 run: it cannot have escaped its plateau yet, so its rows are undecided
    assert main(["run", "markov", "--section", "depth", *TINY, "--device", "cpu", "--out", "-", "--strict"]) == 0
    captured = capsys.readouterr()
    assert "[UNDECIDED] depth 2" in captured.err and "undecided" in captured.err and "--strict:" in captured.err
    assert json.loads(captured.out)["claims"][0]["holds"] is None


def test_into_merges_sections_run_one_at_a_time_into_one_reference_file(tmp_path, capsys):
    into = str(tmp_path / "hmm-reference.json")
    for section in ("powers", "paper_example"):
        assert (
            main(["run", "hmm", "--profile", "reference", "--section", section, "--device", "cpu", "--into", into]) == 0
        )
    result = json.loads((tmp_path / "hmm-reference.json").read_text())
    assert list(result["sections"]) == ["paper_example", "powers"]  # the chapter's reading order
    assert {c["section"] for c in result["claims"]} == {"paper_example", "powers"}
    assert result["sections"]["powers"]["command"] == "python -m sandboxes run hmm --section powers --profile reference"
    assert main(["run", "hmm", "--section", "powers", "--device", "cpu", "--into", into]) == 2  # a quick run
    assert "not hmm at quick" in capsys.readouterr().err


def test_list_reference_names_one_command_per_section_sized_for_it(capsys):
    assert main(["list", "--reference"]) == 0
    lines = capsys.readouterr().out.splitlines()
    runs = [
        (c.name, s, variant, changes)
        for c in all_chapters()
        for variant, changes in {"": {}, **c.reference_variants}.items()
        for s in c.reference_sections
    ]
    assert len(lines) == len(runs) >= 2 and any(variant for _, _, variant, _ in runs)
    for (c, s, variant, changes), line in zip(runs, lines):
        sets = "".join(f" --set {key}={value}" for key, value in changes.items())
        sets += f" --workers {get_chapter(c).reference_workers}" if get_chapter(c).reference_workers > 1 else ""
        file = f"{c}-reference-{variant}.json" if variant else f"{c}-reference.json"
        assert f"run {c} --profile reference --section {s}{sets} --into results/{file}" in line


def _documented_commands() -> list[str]:
    """Every ``python -m sandboxes run ...`` a reader can copy from the docs or a chapter's own text (no placeholders)."""  # noqa: E501
    root = Path(__file__).resolve().parents[1]
    texts = [
        path.read_text()
        for path in [
            root / "README.md",
            root / "CONTRIBUTING.md",
            root / "results" / "README.md",
            *sorted((root / "book").glob("*.md")),
        ]
    ]
    texts += [
        "".join(cell["source"])
        for path in sorted((root / "book").glob("*.ipynb"))
        for cell in json.loads(path.read_text())["cells"]
    ]
    found = re.findall(r"python -m sandboxes run ([^`\n\"#\\]*)", "\n".join(texts))
    return sorted({command.strip().rstrip(";.,") for command in found if "<" not in command})


@pytest.mark.parametrize("command", _documented_commands())
def test_every_documented_run_command_is_accepted(command):
    # each command's chapter, profile, sections and --set values pass the checks that run before any work
    args = _parser().parse_args(["run", *shlex.split(command)])
    chapter = get_chapter(args.chapter)
    chapter.closure(args.sections)
    chapter.start(args.profile, _overrides(args.overrides), args.seeds, device="cpu")
