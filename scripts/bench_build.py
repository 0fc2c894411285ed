"""Measure the book's cold build time and its unchanged-rebuild time, side by side.

Clones the committed tree into a temporary folder (so nothing is cached), reuses
this checkout's .venv, builds once (cold: every chapter executed) and again
(unchanged: Sphinx and the execution cache do the work), and prints both.

Usage: ``.venv/bin/python scripts/bench_build.py``
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed_build(where: Path) -> float:
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "scripts/build_book.py"], cwd=where, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if out.returncode != 0:
        sys.exit(f"build failed in {where}:\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}")
    return elapsed


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="dlperf-bench-") as tmp:
        clone = Path(tmp) / "book"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        (clone / ".venv").symlink_to(ROOT / ".venv")
        cold = timed_build(clone)
        print(f"cold build:        {cold:7.1f} s", flush=True)
        warm = timed_build(clone)
        print(f"unchanged rebuild: {warm:7.1f} s")
        print(f"ratio cold/rebuild: {cold / warm:.1f}x  (machine: {subprocess.getoutput('nproc')} cores)")


if __name__ == "__main__":
    main()
