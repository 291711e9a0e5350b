"""What chapter notebooks share: the profile they run, and the full-profile result beside it."""

from __future__ import annotations

import os

from IPython.display import Markdown, display

from .profiles import check_profile
from .results import Result, full_result_path, load_full_result


def profile() -> str:
    """The profile the book is built with: ``SANDBOXES_PROFILE``, ``quick`` by default."""
    return check_profile(os.environ.get("SANDBOXES_PROFILE", "quick"))


def full_result(chapter: str) -> Result | None:
    """The committed GPU full-profile result of ``chapter``, or a note saying how to make it."""
    result = load_full_result(chapter)
    if result is None:
        command = f"python -m sandboxes run {chapter} --profile full --device cuda --out results/{chapter}-full.json"
        display(Markdown(
            f"```{{note}}\nNo full-profile result made on a GPU is committed for this chapter yet "
            f"(`{full_result_path(chapter).name}`). On a machine with a GPU, run\n\n"
            f"    {command}\n\nand commit the file; this section then shows it beside the quick run.\n```"
        ))
    return result
