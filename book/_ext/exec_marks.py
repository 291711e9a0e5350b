"""Sphinx extension: the execution table (``{nb-exec-table}``) says in words whether a page ran.

myst-nb marks each notebook's execution with an emoji (U+2705 or U+274C) that the book theme's fonts lack, so the
runs page showed an empty box; a word reads the same in every font and colour scheme.
"""

from typing import Any

from docutils import nodes

WORDS = {"\u2705": "succeeded", "\u274c": "failed"}


def _words_for_marks(app: Any, doctree: nodes.document, docname: str) -> None:
    """Replace each table cell's execution mark by its word."""
    for table in doctree.findall(nodes.table):
        for text in list(table.findall(nodes.Text)):
            if str(text) in WORDS:
                text.parent.replace(text, nodes.Text(WORDS[str(text)]))


def setup(app: Any) -> dict[str, Any]:
    app.connect("doctree-resolved", _words_for_marks)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
