"""The package's layers and the one list of chapters, as CONTRIBUTING.md states them."""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sandboxes import notebook as notebook_module
from sandboxes.chapters import all_chapters
from sandboxes.notebook import figure_code_digest

from conftest import FULL_SHRUNK, TINY

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "sandboxes"
CHAPTERS = [chapter.name for chapter in all_chapters()]

# What each layer may import from the package (CONTRIBUTING.md, "Package layout").
# A layer is a top-level module or a subpackage; imports under ``if TYPE_CHECKING:`` are annotations only.
ALLOWED = {
    "claims": set(),
    "profiles": set(),
    "runtime": set(),
    "losses": set(),
    "heldout": set(),
    "plotting": set(),
    "attention": {"runtime"},
    "model": {"attention"},
    "probes": set(),
    "results": {"claims"},
    "members": set(),
    "curves": set(),
    "calibration": set(),
    "memory": {"runtime"},
    "trainer": {"calibration", "heldout", "losses", "members", "memory", "runtime"},
    "workers": {"calibration", "members", "model", "runtime", "trainer"},
    "data": {"data", "losses"},
    "theory": {"theory", "data", "model"},
    "sections": {"calibration", "claims", "profiles", "results", "runtime", "trainer"},
    "chapters": {
        "calibration",
        "chapters",
        "claims",
        "curves",
        "data",
        "heldout",
        "losses",
        "model",
        "plotting",
        "probes",
        "profiles",
        "runtime",
        "sections",
        "theory",
        "trainer",
        "workers",
    },
    "notebook": {"claims", "profiles", "results", "sections"},
    "catalogue": {"results", "sections"},
    "reference": {"profiles", "results", "sections"},
    "bench": {"calibration", "data", "model", "performance", "results", "runtime", "theory", "trainer"},
    "kernel_paths": {"claims", "results"},
    "cluster": {"calibration", "chapters", "members", "profiles", "results", "runtime"},
    "performance": {"attention", "calibration", "chapters", "memory", "results", "runtime", "sections"},
    "cli": {
        "bench",
        "chapters",
        "cluster",
        "kernel_paths",
        "performance",
        "profiles",
        "reference",
        "results",
        "runtime",
    },
    "__main__": {"cli"},
    "__init__": set(),
}


def _layer(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return parts[0]


def _run_time_imports(source: str) -> list[ast.Import | ast.ImportFrom]:
    """A module's import statements outside ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(source)
    skipped = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and ast.unparse(block.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        for node in ast.walk(block)
    }
    return [
        node for node in ast.walk(tree) if id(node) not in skipped and isinstance(node, ast.ImportFrom | ast.Import)
    ]


def _imported_layers(source: str, inside: tuple[str, ...]) -> set[str]:
    """Package layers a module imports at run time (relative or ``sandboxes.`` imports, outside TYPE_CHECKING);
    ``inside`` is the module's folder under the package."""
    layers = set()
    for node in _run_time_imports(source):
        if isinstance(node, ast.Import):
            names = [a.name.split(".") for a in node.names if a.name.startswith("sandboxes")]
            layers |= {n[1] for n in names if len(n) > 1}
            continue
        if node.level == 0:
            if node.module and node.module.startswith("sandboxes."):
                layers.add(node.module.split(".")[1])
            elif node.module == "sandboxes":
                layers |= {a.name for a in node.names}
            continue
        base = inside[: len(inside) - (node.level - 1)]
        target = [*base, *(node.module.split(".") if node.module else [])]
        layers |= {target[0]} if target else {a.name for a in node.names}
    return layers


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_module_imports_only_the_layers_its_layer_may_use(path):
    layer = _layer(path)
    assert layer in ALLOWED, f"{layer} is not in the layer table"
    imported = _imported_layers(path.read_text(), path.relative_to(PACKAGE).parts[:-1])
    assert imported <= ALLOWED[layer] | ({layer} if path.parent != PACKAGE else set())


# A chapter package's rows are judged again from stored data (the reference check), so its judge and paper modules
# may not train: they import no trainer, model, worker, calibration or memory planning, at any depth, nor its
# measurements; a sibling module they import is held to the same rule.
TRAINING = {"trainer", "model", "workers", "calibration", "memory", "attention"}
JUDGING = sorted(path for name in ("judge", "paper") for path in (PACKAGE / "chapters").glob(f"*/{name}.py"))


def _training_imports(path: Path, seen: frozenset[str] = frozenset()) -> set[str]:
    """What of TRAINING, or of the chapter's ``measure``, ``path`` imports at run time, itself or through the
    sibling modules of its chapter package that it imports."""
    source = path.read_text()
    found = _imported_layers(source, path.relative_to(PACKAGE).parts[:-1]) & TRAINING
    for node in _run_time_imports(source):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module not in seen:
            found |= {"measure"} if node.module == "measure" else set()
            found |= _training_imports(path.parent / f"{node.module}.py", seen | {node.module})
    return found


@pytest.mark.parametrize("path", JUDGING, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_chapters_judge_and_paper_import_nothing_that_trains(path):
    assert not _training_imports(path)


def test_a_module_that_imports_the_measurements_is_caught():
    # the chapter's own package module imports its measurements (and through them the trainer): the rule above sees it
    assert {"measure", "trainer"} <= _training_imports(PACKAGE / "chapters" / "induction" / "__init__.py")


# A chapter's figures draw stored data alone: the page draws the committed reference run with them.
FIGURE_MODULES = sorted((PACKAGE / "chapters").glob("*/figures.py"))


@pytest.mark.parametrize("path", FIGURE_MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_chapters_figures_import_only_plotting_theory_and_data(path):
    imported = _imported_layers(path.read_text(), path.relative_to(PACKAGE).parts[:-1])
    assert imported <= {"plotting", "theory", "data"}, imported


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_chapter_draws_its_figures_in_its_own_figures_module(chapter):
    path = PACKAGE / "chapters" / chapter / "figures.py"
    assert path in FIGURE_MODULES, (
        f"chapter {chapter} has no figures module: add src/sandboxes/chapters/{chapter}/figures.py with one function "
        "per figure (one section's data in, a Figure out) and name them in Section(figures=...)"
    )


def test_the_judging_test_finds_the_modules_and_sees_an_import_that_trains():
    assert PACKAGE / "chapters" / "markov" / "judge.py" in JUDGING
    assert "trainer" in _imported_layers("from ...trainer import train", ("chapters", "markov"))
    assert [node.module for node in _run_time_imports("from .measure import training")] == ["measure"]
    annotation = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .measure import TrainingData\n"
    assert [node.module for node in _run_time_imports(annotation)] == ["typing"]


@pytest.mark.parametrize(
    "source",
    [
        "from ..trainer import train",
        "from sandboxes.trainer import train",
        "import sandboxes.trainer",
        "from .. import trainer",
    ],
)
def test_the_layer_test_sees_a_data_module_import_the_trainer(source):
    assert "trainer" in _imported_layers(source, ("data",))


def test_the_layer_test_lets_annotations_import_anything():
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ...trainer import TrainResult\n"
    assert _imported_layers(source, ("chapters", "markov")) == set()
    assert _imported_layers("from .measure import BasinData", ("chapters", "markov")) == {"chapters"}


def test_importing_theory_or_data_does_not_load_the_trainer():
    code = (
        "import sys, sandboxes.theory.markov, sandboxes.data.flipflop, sandboxes.data.automata, "
        "sandboxes.data.hmm; print('sandboxes.trainer' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# ---------------------------------------------------------------- one list of chapters
def _toc_files() -> list[str]:
    return re.findall(r"file:\s*(\S+)", (ROOT / "_toc.yml").read_text())


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_registered_chapter_has_a_page_a_toc_entry_test_settings_and_a_readme_row(chapter):
    assert (ROOT / "book" / f"{chapter}.ipynb").exists()
    assert f"book/{chapter}" in _toc_files()
    assert TINY[chapter] and FULL_SHRUNK[chapter], "declare Chapter(..., unit_scale=..., full_shrunk=...) for the tests"
    assert re.search(rf"^\| `{chapter}` \|", (ROOT / "README.md").read_text(), re.MULTILINE)


def test_every_page_and_readme_row_is_a_registered_chapter():
    pages = {path.stem for path in (ROOT / "book").glob("*.ipynb")}
    rows = set(re.findall(r"^\| `(\w+)` \|", (ROOT / "README.md").read_text(), re.MULTILINE))
    assert pages == set(CHAPTERS) and rows == set(CHAPTERS) and set(TINY) == set(CHAPTERS)
    assert [f for f in _toc_files() if f.removeprefix("book/") in pages] == [f"book/{c}" for c in CHAPTERS]


def test_the_makefile_takes_the_chapters_from_the_registry():
    makefile = (ROOT / "Makefile").read_text()
    assert "list --names" in makefile and not any(re.search(rf"\b{c}\b", makefile) for c in CHAPTERS)


@pytest.mark.parametrize("chapter", all_chapters(), ids=lambda c: c.name)
def test_every_section_shows_its_verdict_and_its_code_on_its_page(chapter):
    cells = json.loads((ROOT / "book" / f"{chapter.name}.ipynb").read_text())["cells"]
    text = "\n".join("".join(cell["source"]) for cell in cells)
    verdicts = re.findall(r'page\.verdict\("(\w+)"\)', text)
    included = re.findall(
        rf"literalinclude\}} \.\./src/sandboxes/chapters/{chapter.name}(?:\.py|/\w+\.py)\n:pyobject: "
        r"(\w+)",
        text,
    )
    assert verdicts == [s.name for s in chapter.sections]
    assert set(included) >= {s.compute.__name__ for s in chapter.sections}


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_theorem_block_carries_the_papers_number_only(chapter):
    # sphinx-proof would number the blocks book-wide ("Theorem 6 (... Thm. 11)"), contradicting the paper's number
    cells = json.loads((ROOT / "book" / f"{chapter}.ipynb").read_text())["cells"]
    text = "\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown")
    for kind, options in re.findall(r"^(?:```+|:::+)\{prf:(\w+)\}[^\n]*\n((?::\w+:[^\n]*\n)*)", text, re.MULTILINE):
        assert kind == "proof" or ":nonumber:" in options, kind


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_verdict_cell_keeps_its_measured_numbers_out_of_nbval(chapter):
    # a verdict table shows measured values, which differ between CPUs and thread counts
    cells = json.loads((ROOT / "book" / f"{chapter}.ipynb").read_text())["cells"]
    for cell in cells:
        if re.search(r"page\.(verdict|summary)\(", "".join(cell["source"])):
            assert "nbval-ignore-output" in cell["metadata"].get("tags", []), "".join(cell["source"])


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_code_fold_on_a_page_names_an_object_of_its_module(chapter):
    # a renamed function would otherwise surface only as a warning of the strict book build
    cells = json.loads((ROOT / "book" / f"{chapter}.ipynb").read_text())["cells"]
    text = "\n".join("".join(cell["source"]) for cell in cells)
    for path, name in re.findall(r"literalinclude\} \.\./(src/sandboxes/\S+\.py)\n:pyobject: ([\w.]+)", text):
        body = ast.parse((ROOT / path).read_text()).body
        for part in name.split("."):  # Class.method names a method in the class's body
            named = {node.name: node for node in body if isinstance(node, ast.FunctionDef | ast.ClassDef)}
            assert part in named, name
            body = named[part].body


def test_the_lock_pins_every_requirement_exactly():
    # make installs requirements.lock by default, so a requirement missing from it would go untested
    def name(line: str) -> str:
        return re.split(r"[<>=!~ \[]", line, maxsplit=1)[0].lower().replace("_", "-")

    wanted = [
        line.strip()
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith(("#", "-e"))
    ]
    pinned = [line for line in (ROOT / "requirements.lock").read_text().splitlines() if line and line[0] != "#"]
    assert all(re.fullmatch(r"[\w.\-]+==[\w.\-+]+", line) for line in pinned)
    assert {name(w) for w in wanted} - {"torch"} <= {name(p) for p in pinned}
    assert "torch" not in {name(p) for p in pinned}  # the Makefile's TORCH picks the build


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_reference_to_a_theorem_block_names_it(chapter):
    # the blocks carry no book-wide number, so a bare {prf:ref}`label` would render as "Theorem" alone
    cells = json.loads((ROOT / "book" / f"{chapter}.ipynb").read_text())["cells"]
    text = "\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown")
    assert not re.findall(r"\{prf:ref\}`[^`<]*`", text)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_output_on_a_page_is_html_or_text_not_markdown(chapter):
    # how MyST-NB parses a text/markdown output depends on its settings (nb_render_markdown_format), so the page
    # would not show what the notebook shows; notebook.note() writes HTML for that reason
    cells = json.loads((ROOT / "book" / f"{chapter}.ipynb").read_text())["cells"]
    outputs = [output for cell in cells if cell["cell_type"] == "code" for output in cell.get("outputs", [])]
    assert not [output for output in outputs if "text/markdown" in output.get("data", {})]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_page_stores_outputs_of_a_whole_run_drawn_by_the_current_figure_code(chapter):
    # CI builds the site from the stored outputs (make book OUTPUTS=stored); nbval re-executes every cell but compares
    # text only, so a figure drawn by older figure code would reach the site unnoticed
    notebook = json.loads((ROOT / "book" / f"{chapter}.ipynb").read_text())
    code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    assert [cell["execution_count"] for cell in code] == list(range(1, len(code) + 1)), "make outputs"
    assert not [o for cell in code for o in cell["outputs"] if o["output_type"] == "error"]
    stamped = notebook["metadata"].get("sandboxes", {}).get("figure_code")
    assert stamped == figure_code_digest(chapter), (
        f"older figure code drew them: make outputs NOTEBOOKS=book/{chapter}.ipynb"
    )


def test_the_figure_code_digest_sees_a_change_to_what_the_chapters_figure_module_does_and_to_no_other(
    monkeypatch, tmp_path
):
    before = {chapter: figure_code_digest(chapter) for chapter in CHAPTERS}
    (tmp_path / "plotting.py").write_bytes((PACKAGE / "plotting.py").read_bytes())
    for chapter in CHAPTERS:
        (tmp_path / "chapters" / chapter).mkdir(parents=True)
        (tmp_path / "chapters" / chapter / "figures.py").write_bytes(
            (PACKAGE / "chapters" / chapter / "figures.py").read_bytes()
        )
    changed = tmp_path / "chapters" / "hmm" / "figures.py"
    with changed.open("a") as module:
        module.write("\n\n# a comment and blank lines draw nothing\n")
        module.write("if TYPE_CHECKING:\n    from .measure import Moved  # nor does an annotation\n")
    monkeypatch.setattr(notebook_module, "PACKAGE", tmp_path)
    assert [chapter for chapter in CHAPTERS if figure_code_digest(chapter) != before[chapter]] == []
    with changed.open("a") as module:
        module.write("CHANGED = True\n")
    assert [chapter for chapter in CHAPTERS if figure_code_digest(chapter) != before[chapter]] == ["hmm"]
