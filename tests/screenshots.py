"""Screenshots of one chapter of the built site in the theme's light and dark modes, for the README.

python tests/screenshots.py [page] (after make book; page defaults to book/markov.html), writes
book/screenshots/<name>-{top,verdict}-{light,dark}.png: the top of the page and its first verdict table.
"""

import sys
from pathlib import Path

from PIL import Image
from playwright.sync_api import sync_playwright

from test_site import CHROMIUM, CHROMIUM_ARGS, ROOT, SITE, _server

OUT = ROOT / "book" / "screenshots"
VIEWPORT = {"width": 1280, "height": 800}
COLOURS = 64  # a palette this small keeps text and marks legible and a screenshot near 40 KB


def shoot(page_path: str) -> list[Path]:
    """Each colour scheme's screenshot of ``page_path``: its first screen, and its first verdict table in view."""
    OUT.mkdir(exist_ok=True)
    written = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for scheme in ("light", "dark"):
            page = browser.new_page(color_scheme=scheme, viewport=VIEWPORT, device_scale_factor=0.75)
            page.goto(f"{_server(SITE)}/{page_path}", wait_until="load")
            page.evaluate("() => window.MathJax?.startup?.promise")
            stem = Path(page_path).stem
            for part, locator in (("top", None), ("verdict", page.locator("td[class^=verdict-]").first)):
                if locator is not None:
                    locator.evaluate("cell => cell.closest('table').scrollIntoView({block: 'end'})")
                path = OUT / f"{stem}-{part}-{scheme}.png"
                page.screenshot(path=path)
                Image.open(path).quantize(colors=COLOURS).save(path, optimize=True)
                written.append(path)
            page.close()
        browser.close()
    return written


if __name__ == "__main__":
    for path in shoot(sys.argv[1] if len(sys.argv) > 1 else "book/markov.html"):
        print(path.relative_to(ROOT), f"{path.stat().st_size // 1024} KB")
