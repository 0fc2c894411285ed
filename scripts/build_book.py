"""Build the whole book into _build/html, executing every chapter.

Warnings are errors (``-W -n``), every page is executed with the per-cell
timeout of ``_config.yml``, and execution is cached in ``_build/.jupyter_cache``
so that an unchanged rebuild re-executes nothing.  When a page fails to
execute, the execution report (the traceback) is printed, and kept under
``_build/html/reports/``.

Usage: ``python scripts/build_book.py [--output DIR]`` (the README's ``make book``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build(output: Path | None = None) -> int:
    """Run ``jupyter-book build`` and return its exit status."""
    # --all: Sphinx writes every page again (from the execution cache, nothing re-executes), so
    # that the navigation of unchanged pages shows pages added since the last build.
    cmd = [str(Path(sys.executable).parent / "jupyter-book"), "build", "--all", "-W", "-n", "--keep-going"]
    if output is not None:
        cmd += ["--path-output", str(output)]
    cmd.append(str(ROOT))
    # Inductor's compiled kernels are cached beside the execution cache, so that a
    # rebuild reuses them and a cold build (fresh clone) really is cold.
    build_dir = (output or ROOT) / "_build"
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(build_dir / ".inductor_cache")}
    started = time.perf_counter()
    status = subprocess.call(cmd, cwd=ROOT, env=env)
    elapsed = time.perf_counter() - started
    html = (output or ROOT) / "_build" / "html"
    reports = sorted((html / "reports").glob("**/*.err.log")) if (html / "reports").exists() else []
    for report in reports:
        print(f"\n--- execution report {report.relative_to(ROOT) if report.is_relative_to(ROOT) else report} ---")
        print(report.read_text(errors="replace")[-6000:])
    if status == 0:
        print(f"\nBook built in {elapsed:.0f} s: {html / 'index.html'}")
    else:
        print(f"\nBook build FAILED after {elapsed:.0f} s (exit {status}); see the messages above.", file=sys.stderr)
    return status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=None, help="build into DIR/_build instead of ./_build")
    args = parser.parse_args()
    sys.exit(build(args.output))


if __name__ == "__main__":
    main()
