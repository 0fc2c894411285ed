"""Benchmark: grading one class with plain ``nbgrader autograde`` and with the autograder, side by side.

The class is the honest part of the sample class (``autograder.sample.honest``:
the reference solution, the untouched stub and every wrong-submission fixture
of the exercise; 17 submissions of ``gradscaler``).  Three measurements on
this machine, one after the other, each from a fresh course root:

1. ``nbgrader autograde <assignment>``: nbgrader's command, as an instructor
   runs it (one process, one submission after the other, no sandbox);
2. ``autograder grade <assignment>`` with ``--workers`` workers (Dask start-up,
   sandboxes, both runs of every submission, the gradebook writes included);
3. bare execution: each submission with its hidden tests put back (what
   nbgrader executes), run by nbclient in a fresh kernel, one after the other,
   nothing else: the work itself.

It prints the wall times and two ratios: autograder / nbgrader (target <= 0.5)
and autograder / (bare / workers) (target <= 1.15: the overhead over a perfect
split of the bare work across the workers).  Both graders' scores are compared
too: a benchmark of a grader that grades differently would mean nothing.

    .venv/bin/python scripts/bench_grading.py [--workers 2] [--assignment gradscaler] [--limit N]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import nbformat  # noqa: E402

from autograder import course, notebook, sample  # noqa: E402
from autograder.gradebook import Writer  # noqa: E402

NBGRADER_CONFIG = """\
c = get_config()
load_subconfig({course_config!r})
c.CourseDirectory.root = {root!r}
c.CourseDirectory.source_directory = {solutions!r}
c.CourseDirectory.release_directory = {release!r}
c.CourseDirectory.db_url = {db!r}
"""


def run_nbgrader(base: Path, assignment: str, samples: list[sample.Sample]) -> tuple[float, dict[str, float]]:
    root = base / "nbgrader"
    root.mkdir()
    (root / "nbgrader_config.py").write_text(NBGRADER_CONFIG.format(
        course_config=str(course.COURSE / "nbgrader_config.py"), root=str(root), solutions=str(course.SOLUTIONS),
        release=str(root / "release"), db=f"sqlite:///{root / 'gradebook.db'}"))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    nbgrader = [sys.executable, "-m", "nbgrader"]
    subprocess.run([*nbgrader, "generate_assignment", assignment, "--force"], cwd=root, env=env, check=True,
                   capture_output=True)
    sample.place(samples, root, assignment, "2026-11-21 12:00:00.000000 UTC")
    start = time.perf_counter()
    result = subprocess.run([*nbgrader, "autograde", assignment, "--create"], cwd=root, env=env,
                            capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        print(result.stdout[-3000:], result.stderr[-3000:])
        raise SystemExit("nbgrader autograde failed")
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        scores = {s.student: gb.find_submission(assignment, s.student).score for s in samples}
    return seconds, scores


def run_autograder(base: Path, assignment: str, samples: list[sample.Sample], workers: int) -> tuple[float, dict]:
    root = base / "autograder"
    root.mkdir()
    sample.place(samples, root, assignment, "2026-11-21 12:00:00.000000 UTC")
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "autograder", "--course", str(root), "grade", assignment,
                             "--cpu", f"--workers={workers}"], cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        print(result.stdout[-3000:], result.stderr[-3000:])
        raise SystemExit("autograder grade failed")
    with Writer(f"sqlite:///{root / 'gradebook.db'}", root) as writer:
        scores = {r["student"]: r["score"] for r in writer.records(assignment)}
    return seconds, scores


def run_bare(assignment: str, samples: list[sample.Sample]) -> float:
    from nbclient import NotebookClient

    source = nbformat.read(course.source_notebook(assignment), as_version=4)
    release = nbformat.read(course.release_notebook(assignment), as_version=4)
    total = 0.0
    for s in samples:
        nb = notebook.prepare(s.data, source, release, assignment).notebook   # hidden tests put back
        with tempfile.TemporaryDirectory() as cwd:
            start = time.perf_counter()
            NotebookClient(nb, timeout=600, allow_errors=True, kernel_name="python3",
                           resources={"metadata": {"path": cwd}}).execute()
            total += time.perf_counter() - start
    return total


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--assignment", default="gradscaler")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--limit", type=int, help="only the first N submissions (a quick run)")
    args = p.parse_args()
    samples = sample.honest(args.assignment)[: args.limit]
    load = os.getloadavg()[0]
    print(f"{len(samples)} submissions of {args.assignment}; {os.cpu_count()} cores, {platform.node()}, "
          f"load average {load:.2f} at the start")
    base = Path(tempfile.mkdtemp(prefix="dlperf-bench-grading-"))
    try:
        nbg, nbg_scores = run_nbgrader(base, args.assignment, samples)
        print(f"  nbgrader autograde (sequential, no sandbox)    {nbg:7.1f} s")
        ours, our_scores = run_autograder(base, args.assignment, samples, args.workers)
        print(f"  autograder grade, {args.workers} workers (sandboxed)     {ours:7.1f} s")
        bare = run_bare(args.assignment, samples)
        print(f"  bare execution, sequential                   {bare:7.1f} s  (/ {args.workers} workers = "
              f"{bare / args.workers:.1f} s)")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    differ = {s: (nbg_scores[s], our_scores.get(s)) for s in nbg_scores if nbg_scores[s] != our_scores.get(s)}
    print(f"  scores: {'identical for every submission' if not differ else f'DIFFER: {differ}'}")
    print(f"autograder / nbgrader:                {ours / nbg:.2f}x  (target <= 0.5)")
    print(f"autograder / (bare / {args.workers} workers):      {ours / (bare / args.workers):.2f}x  (target <= 1.15)")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
