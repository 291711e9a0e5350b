"""The book's chapters, looked up by name: the registry below is the one list of chapters.

The Makefile, the tests, the table of contents and the README are checked against it
(``tests/test_layout.py``), so a chapter registered here cannot go untested.
"""

from __future__ import annotations

from ..sections import Chapter


def _registry() -> dict[str, Chapter]:
    from . import dilution, hmm, induction, markov, memories, onelayer, shortcuts

    return {
        chapter.name: chapter
        for chapter in (
            markov.CHAPTER,
            shortcuts.CHAPTER,
            dilution.CHAPTER,
            hmm.CHAPTER,
            induction.CHAPTER,
            memories.CHAPTER,
            onelayer.CHAPTER,
        )
    }


def get_chapter(name: str) -> Chapter:
    """The chapter called ``name``; an unknown name is an error that lists the known ones."""
    chapters = _registry()
    if name not in chapters:
        raise ValueError(f"unknown chapter {name!r}; choose one of {', '.join(chapters)}")
    return chapters[name]


def all_chapters() -> list[Chapter]:
    """Every registered chapter, in reading order."""
    return list(_registry().values())
