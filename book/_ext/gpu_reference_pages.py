"""Sphinx extension: a chapter is read and executed again when its GPU reference file changes.

A chapter shows the committed GPU reference of its measurements
(``book/_gpu_reference/<chapter>.json``, see :mod:`dlperf.gpu_reference`) from a
hidden cell.  Neither Sphinx nor the execution cache (which keys on the cells'
code) knows that the cell's output depends on that file, so after a reference
is committed, an unchanged chapter would keep showing "no GPU reference is
available yet".  This extension remembers each chapter's reference file (its
SHA-256, or its absence) in Sphinx's environment; when it changes, the chapter
is marked for reading again and its execution-cache record is dropped, so the
chapter executes again and shows what is committed now.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

# The folder of the committed references, relative to the book's root (dlperf.gpu_reference.FOLDER).
FOLDER = Path("book") / "_gpu_reference"


def _state(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "absent"


def drop_cache_records(cache_path: str | Path, sources: list[Path]) -> int:
    """Remove the execution-cache records of ``sources`` (notebook files); how many were removed."""
    if not Path(cache_path).is_dir():
        return 0
    from jupyter_cache import get_cache

    cache = get_cache(str(cache_path))
    wanted = {p.resolve() for p in sources}
    removed = 0
    for record in cache.list_cache_records():
        if record.uri and Path(record.uri).resolve() in wanted:
            cache.remove_cache(record.pk)
            removed += 1
    return removed


def outdated_by_reference(app: Any, env: Any, added: set[str], changed: set[str], removed: set[str]) -> list[str]:
    """``env-get-outdated``: the chapters whose reference file changed since the last build."""
    root = Path(app.srcdir)
    old: dict[str, str] = getattr(env, "dlperf_gpu_reference", {})
    now = {doc: _state(root / FOLDER / f"{Path(doc).name}.json") for doc in env.found_docs}
    env.dlperf_gpu_reference = now
    stale = sorted(doc for doc, state in now.items() if doc in old and old[doc] != state)
    if stale:
        sources = [Path(env.doc2path(doc)) for doc in stale]
        if getattr(app.config, "nb_execution_mode", None) == "cache":
            drop_cache_records(app.config.nb_execution_cache_path or ".jupyter_cache", sources)
        from sphinx.util import logging

        logging.getLogger(__name__).info(f"GPU reference changed: executing again {', '.join(stale)}")
    return [doc for doc in stale if doc not in added and doc not in changed]


def setup(app: Any) -> dict:
    app.connect("env-get-outdated", outdated_by_reference)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "env_version": 1}
