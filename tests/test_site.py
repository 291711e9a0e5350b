"""The built website as a reader's browser shows it: headless Chromium opens every page of ``_build/html``.

Run by ``make site-test`` after ``make book`` (``.ci/run`` does both; SANDBOXES_SITE=required turns a missing
browser or build into a failure). Elsewhere, without Chromium, Playwright or a built site, the tests skip.
"""

import functools
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandboxes.chapters import all_chapters

pytestmark = pytest.mark.slow  # the built site in a browser: make check leaves it out

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # make site-test installs it
    sync_playwright = None

ROOT = Path(__file__).resolve().parents[1]
SITE = Path(os.environ.get("SANDBOXES_SITE_DIR", ROOT / "_build" / "html"))
BROKEN = Path(__file__).parent / "fixtures" / "broken_site"
REQUIRED = os.environ.get("SANDBOXES_SITE") == "required"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Chromium's own background connections would be refused by a machine without network and logged as errors
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
RAW_MATHS = ("\\(", "\\[", "$$")
# _static and _sources hold the theme's templates and the pages' sources, not pages
PAGES = (
    sorted(p for p in SITE.rglob("*.html") if p.relative_to(SITE).parts[0] not in ("_static", "_sources"))
    if SITE.is_dir()
    else []
)


def _skip_or_fail(reason: str) -> None:
    if REQUIRED:
        pytest.fail(reason)
    pytest.skip(reason)


@functools.cache
def _server(folder: Path) -> str:
    """Serve ``folder`` on a free localhost port for the whole session (file:// would block the search index)."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        """No request log on the test's output."""


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if sync_playwright is None or CHROMIUM is None:
        _skip_or_fail("no playwright or no chromium on this machine (make site-test installs both)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def page_problems(browser: object, url: str, chapter: bool, color_scheme: str = "light") -> list[str]:
    """What a reader would see broken on the page at ``url``: console errors, failed loads, raw maths, images that
    did not load; on a chapter page also a missing verdict table or theorem block."""
    problems: list[str] = []
    page = browser.new_page(color_scheme=color_scheme)
    page.on(
        "console",
        lambda message: (
            message.type == "error" and problems.append(f"console: {message.text} ({message.location.get('url')})")
        ),
    )
    page.on("pageerror", lambda error: problems.append(f"script error: {error}"))
    page.on("requestfailed", lambda request: problems.append(f"failed to load {request.url}"))
    page.on(
        "response",
        lambda response: response.status >= 400 and problems.append(f"HTTP {response.status} for {response.url}"),
    )
    page.goto(url, wait_until="load")
    page.wait_for_load_state("networkidle")  # a redirecting page (the site's index.html) has reached its target
    page.evaluate("() => window.MathJax?.startup?.promise")  # typesetting finished, where the page has maths
    text = page.inner_text("body")
    problems += [f"raw maths {raw!r} in the text" for raw in RAW_MATHS if raw in text]
    broken_images = page.evaluate(
        "() => [...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)"
    )
    problems += [f"image did not load: {src}" for src in broken_images]
    if chapter:
        if page.locator("td[class^=verdict-]").count() == 0:
            problems.append("no verdict table")
        if page.locator("div.proof").count() == 0:
            problems.append("no theorem block")
    page.close()
    return problems


def test_the_check_finds_each_fault_of_a_broken_page(browser):
    problems = page_problems(browser, f"{_server(BROKEN)}/index.html", chapter=True)
    for expected in (
        "console: ",
        "script error",
        "raw maths '\\\\('",
        "raw maths '$$'",
        "image did not load",
        "HTTP 404",
        "no verdict table",
        "no theorem block",
    ):
        assert any(problem.startswith(expected) for problem in problems), (expected, problems)


def test_the_check_passes_the_broken_pages_sound_twin(browser):
    assert page_problems(browser, f"{_server(BROKEN)}/sound.html", chapter=True) == []


@pytest.mark.parametrize("path", PAGES or [None], ids=lambda p: str(p.relative_to(SITE)) if p else "no-site")
def test_every_page_of_the_built_site_shows_without_faults(browser, path):
    if path is None:
        _skip_or_fail(f"no built site at {SITE} (make book)")
    chapters = {f"{chapter.name}.html" for chapter in all_chapters()}
    chapter = path.parent.name == "book" and path.name in chapters
    assert page_problems(browser, f"{_server(SITE)}/{path.relative_to(SITE).as_posix()}", chapter) == []


def test_every_chapter_page_was_built():
    if not PAGES:
        _skip_or_fail(f"no built site at {SITE} (make book)")
    assert {f"{chapter.name}.html" for chapter in all_chapters()} <= {page.name for page in PAGES}


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_verdict_row_reads_on_one_line_and_opens_its_reasons_with_a_click(browser, scheme):
    # item 5 of issue 41: the mark, the claim and the numbers in a row; the tolerance and why, one click away
    path = SITE / "book" / "markov.html"
    if not path.is_file():
        _skip_or_fail(f"no built chapter at {path} (make book)")
    page = browser.new_page(color_scheme=scheme)
    page.goto(f"{_server(SITE)}/book/markov.html", wait_until="load")
    mark = page.locator("td[class^=verdict-]").first
    row = mark.locator("xpath=..")
    assert row.locator("td").count() == 4 and row.locator("details").count() == 1
    line, content = page.evaluate(
        "cell => { const range = document.createRange(); range.selectNodeContents(cell); "
        "return [parseFloat(getComputedStyle(cell).lineHeight) || 24, "
        "range.getBoundingClientRect().height]; }",
        mark.element_handle(),
    )
    assert content < 1.8 * line, (content, line)  # the mark and its word stay on one line
    why = row.locator("details p").last
    assert not why.is_visible()
    row.locator("details summary").click()
    assert why.is_visible() and why.inner_text().strip()
    colours = page.evaluate(
        "el => [getComputedStyle(el).color, getComputedStyle(document.body).backgroundColor]", why.element_handle()
    )
    assert colours[0] != colours[1], colours  # the opened text is not drawn in the background's colour
    page.close()
