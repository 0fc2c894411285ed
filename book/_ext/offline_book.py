"""Sphinx extension: keep every page's script list clean.

sphinx-thebe (always loaded by Jupyter Book 1) registers its inline
configuration script each time documents are read, so a page can end up with
``const THEBE_JS_URL = ...`` twice, a JavaScript ``SyntaxError`` in every
reader's console.  This drops repeated script entries, keeping the first.
"""

from __future__ import annotations

from typing import Any


def _dedupe_scripts(app: Any, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen: set[tuple[object, str]] = set()
    unique = []
    for script in scripts:
        # The same script can come once with filename None and once with "".
        key = (getattr(script, "filename", None) or "", repr(sorted(getattr(script, "attributes", {}).items())))
        if key in seen:
            continue
        seen.add(key)
        unique.append(script)
    context["script_files"] = unique


def setup(app: Any) -> dict:
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
