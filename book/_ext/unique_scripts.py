"""Sphinx extension: each script a page loads appears once in its head.

sphinx-thebe and sphinx-togglebutton, which Jupyter Book 1 always loads, register their inline
configuration scripts again on a second read of the sources (once with ``None`` for a file name,
once with ``""``), so every page declared ``const THEBE_JS_URL`` twice and the browser reported
the redeclaration as a script error.
"""

from typing import Any


def _unique_scripts(app: Any, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
    """Drop repeats from the page's script list, keeping the first of each (same file, same attributes)."""
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    unique = []
    for script in context.get("script_files", []):
        key = (str(getattr(script, "filename", script) or ""),
               tuple(sorted((k, str(v)) for k, v in getattr(script, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def setup(app: Any) -> dict[str, Any]:
    app.connect("html-page-context", _unique_scripts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
