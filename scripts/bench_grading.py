"""Benchmark: grading one class with plain ``nbgrader autograde`` and with the autograder, side by side.

The class is the honest part of the sample class (``autograder.sample.honest``:
the reference solution, the untouched stub and every wrong-submission fixture
of the exercise; 17 submissions of ``gradscaler``).  Each run makes three
measurements on this machine, one after the other, each from a fresh course root:

1. ``nbgrader autograde <assignment>``: nbgrader's command, as an instructor
   runs it (one process, one submission after the other, no sandbox);
2. ``autograder grade <assignment>`` with ``--workers`` workers (Dask start-up,
   sandboxes, both runs of every submission, the gradebook writes included);
3. bare execution: each submission with its hidden tests put back (what
   nbgrader executes), run by nbclient in a fresh kernel, one after the other,
   nothing else: the work itself.

It prints, for every run and then as median and spread over the runs, the wall
times and two ratios: autograder / nbgrader (target <= 0.5) and autograder /
(bare / workers) (target <= 1.15: the overhead over a perfect split of the bare
work across the workers).  The scores of both graders are compared in every
run: a benchmark of a grader that grades differently would mean nothing.

Then where each submission's time went in the autograder (medians over all
submissions of all runs, from the seconds the gradebook records with each run):
the queue, the wait for its sandboxes, the kernel's start, the setup cells (the
imports), the student's cells, the hidden checks, the gradebook write, and the
overhead left over the submission's own work (its cells, side by side with its
hidden checks).

``--throughput`` grades the honest class of every exercise once with the
autograder and prints submissions per hour per worker, for planning a class.
With ``--gpu`` it grades on the machine's GPU workers (one job per GPU) instead
of CPU workers, checks every submission's score against what its fixture
expects, and estimates the wait of a class of 100 (the run's start, then 100
submissions at the measured rate); ``--time-limit`` stops before an exercise
that would start after it, and ``--json`` writes the rows as they come (a lent
GPU window: ``scripts/gpu_check.py --steps throughput``).

``--class-size N`` grades a class of N submissions with the autograder alone
(the honest class again and again, each copy under a student id of its own,
graded as a new submission), ``--runs`` times, and prints the same breakdown:
how the run's start and end, which do not grow with the class, weigh on a
class of that size.

    .venv/bin/python scripts/bench_grading.py [--runs 3] [--workers 2] [--assignment gradscaler] [--limit N]
    .venv/bin/python scripts/bench_grading.py --throughput [--workers 2]
    .venv/bin/python scripts/bench_grading.py --throughput --gpu [--limit 6] [--time-limit 300] [--json FILE]
    .venv/bin/python scripts/bench_grading.py --class-size 100 [--runs 3] [--workers 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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

#: The phases of a submission, as ``autograder.runner`` and the gradebook record them, in the order they happen.
PHASES = [("queued", "waiting for a worker"), ("sandbox", "waiting for its sandboxes (0 when warm)"),
          ("kernel start", "the student's kernel starting"), ("setup", "setup cells (the imports)"),
          ("cells", "the student's cells and the rest of the notebook"),
          ("tests", "test cells in the kernel (nbgrader mode)"),
          ("checks", "hidden checks (trusted mode, beside the kernel)"),
          ("gradebook", "the gradebook write"), ("total", "the submission on its worker")]


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


def run_autograder(base: Path, assignment: str, samples: list[sample.Sample], workers: int, gpu: bool = False
                   ) -> tuple[float, dict[str, float], list[dict[str, Any]]]:
    """Grade ``samples`` with ``autograder grade``: on ``workers`` CPU workers, or (``gpu``) on the machine's
    GPU workers, one job per GPU."""
    root = base / "autograder"
    root.mkdir()
    sample.place(samples, root, assignment, "2026-11-21 12:00:00.000000 UTC")
    start = time.perf_counter()
    where = [] if gpu else ["--cpu", f"--workers={workers}"]
    result = subprocess.run([sys.executable, "-m", "autograder", "--course", str(root), "grade", assignment,
                             *where], cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        print(result.stdout[-3000:], result.stderr[-3000:])
        raise SystemExit("autograder grade failed")
    with Writer(f"sqlite:///{root / 'gradebook.db'}", root) as writer:
        records = writer.records(assignment)
    for r in records:
        if r["outcome"] != "graded":
            print(f"    {r['student']}: {r['outcome']}: {r['reason'][:300]}")
    return seconds, {r["student"]: r["score"] for r in records}, records


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


def _spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.median(values):.2f} (min {min(values):.2f}, max {max(values):.2f})"


def start_and_end(wall: float, median: float, submissions: float, workers: int) -> float:
    """The part of a class's wall time that does not grow with the class: the wall less the median submission's
    time on its worker times the submissions per worker."""
    return wall - median * submissions / workers


def breakdown(records: list[dict[str, Any]], workers: int, wall: float, runs: int = 1) -> None:
    """Medians of each phase over ``records`` (their recorded seconds, of ``runs`` gradings of the class),
    and the overhead left; ``wall``: the class's wall time (the median over the runs)."""
    secs = [r["seconds"] for r in records if r["outcome"] == "graded"]
    if not secs:
        return
    print(f"\nwhere a submission's time goes (median over {len(secs)} graded submissions; seconds):")
    for key, what in PHASES:
        values = [float(s.get(key, 0.0)) for s in secs]
        if any(values):
            print(f"  {key:<13} {statistics.median(values):6.2f}   {what}")
    # The submission's own work: its notebook's cells (setup, the student's, tests in the kernel) and, side
    # by side with them, the hidden checks; everything else on the worker is overhead.
    own = [max(float(s.get("setup", 0)) + float(s.get("cells", 0)) + float(s.get("tests", 0)),
               float(s.get("checks", 0))) for s in secs]
    over = [float(s["total"]) - o for s, o in zip(secs, own)]
    per_run = len(records) / runs
    per_worker = wall * workers / per_run
    print(f"  own work      {statistics.median(own):6.2f}   cells, or the hidden checks where they take longer")
    print(f"  overhead      {statistics.median(over):6.2f}   total minus own work, per submission on its worker "
          "(target <= 0.5 s)")
    print(f"  wall / submission per worker: {per_worker:.2f} s (class wall {wall:.1f} s x {workers} workers "
          f"/ {per_run:g} submissions): {per_worker / statistics.median(own):.2f}x the median own work "
          "(target <= 1.3x)")
    # What does not grow with the class: the class wall less what its submissions took on their workers.
    fixed = start_and_end(wall, statistics.median(float(s["total"]) for s in secs), per_run, workers)
    print(f"  the run's start and end: about {fixed:.1f} s of the {wall:.1f} s (the class wall less the median "
          f"submission's total times {per_run:g} / {workers})")


def compare(args: argparse.Namespace) -> int:
    samples = sample.honest(args.assignment)[: args.limit]
    print(f"{len(samples)} submissions of {args.assignment}, {args.runs} run(s); {os.cpu_count()} cores, "
          f"{platform.node()}, {dt.date.today()}, load average {os.getloadavg()[0]:.2f} at the start")
    rows: list[tuple[float, float, float]] = []
    records: list[dict[str, Any]] = []
    differ: dict[str, Any] = {}
    for run in range(1, args.runs + 1):
        base = Path(tempfile.mkdtemp(prefix="dlperf-bench-grading-"))
        try:
            nbg, nbg_scores = run_nbgrader(base, args.assignment, samples)
            ours, our_scores, recs = run_autograder(base, args.assignment, samples, args.workers)
            bare = run_bare(args.assignment, samples)
        finally:
            shutil.rmtree(base, ignore_errors=True)
        records += recs
        rows.append((nbg, ours, bare))
        differ.update({f"run {run}: {s}": (nbg_scores[s], our_scores.get(s)) for s in nbg_scores
                       if nbg_scores[s] != our_scores.get(s)})
        print(f"run {run}: nbgrader {nbg:6.1f} s, autograder {ours:6.1f} s, bare {bare:6.1f} s "
              f"(/ {args.workers} = {bare / args.workers:5.1f} s): {ours / nbg:.2f}x nbgrader, "
              f"{ours / (bare / args.workers):.2f}x bare; load {os.getloadavg()[0]:.2f}")
    print(f"\nscores: {'identical for every submission in every run' if not differ else f'DIFFER: {differ}'}")
    print(f"nbgrader autograde (sequential, no sandbox):   {_spread([r[0] for r in rows])} s")
    print(f"autograder grade, {args.workers} workers (sandboxed):      {_spread([r[1] for r in rows])} s")
    print(f"bare execution / {args.workers} workers:                  {_spread([r[2] / args.workers for r in rows])} s")
    print(f"autograder / nbgrader:                         {_spread([r[1] / r[0] for r in rows])}x  (target <= 0.5)")
    print(f"autograder / (bare / {args.workers} workers):               "
          f"{_spread([r[1] / (r[2] / args.workers) for r in rows])}x  (target <= 1.15)")
    breakdown(records, args.workers, statistics.median(r[1] for r in rows), runs=len(rows))
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    return 1 if differ else 0


def class_of(assignment: str, size: int) -> dict[str, sample.Sample]:
    """``size`` submissions by student id: the honest class of ``assignment`` repeated, copy ``k`` of each
    under ``<student>-copy<k>`` (the originals under their own ids)."""
    honest = sample.honest(assignment)
    out: dict[str, sample.Sample] = {}
    for i, s in zip(range(size), itertools.cycle(honest)):
        student = s.student if i < len(honest) else f"{s.student}-copy{i // len(honest)}"
        out[student] = dataclasses.replace(s, student=student, filename="")
    return out


def large_class(args: argparse.Namespace) -> int:
    copies = class_of(args.assignment, args.class_size)
    samples = list(copies.values())
    print(f"a class of {len(samples)} submissions of {args.assignment} (its honest class repeated), autograder "
          f"only, {args.runs} run(s); {os.cpu_count()} cores, {platform.node()}, {dt.date.today()}, "
          f"load average {os.getloadavg()[0]:.2f} at the start")
    original = {student: student.split("-copy")[0] for student in copies}
    walls: list[float] = []
    records: list[dict[str, Any]] = []
    differ: set[str] = set()
    for run in range(1, args.runs + 1):
        base = Path(tempfile.mkdtemp(prefix="dlperf-bench-class-"))
        try:
            wall, scores, recs = run_autograder(base, args.assignment, samples, args.workers)
        finally:
            shutil.rmtree(base, ignore_errors=True)
        # every copy scores what its original scores
        differ |= {student for student in copies if scores.get(student) != scores.get(original[student])}
        walls.append(wall)
        records += recs
        print(f"run {run}: autograder {wall:6.1f} s for {len(samples)} submissions"
              f"{'; copies score as their originals' if not differ else f'; copies DIFFER: {sorted(differ)}'}"
              f"; load {os.getloadavg()[0]:.2f}")
    breakdown(records, args.workers, statistics.median(walls), runs=len(walls))
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    return 1 if differ else 0


def gpu_count() -> int:
    """The GPUs this machine's autograder grades on, one worker each (``autograder.engine.local_gpus``)."""
    from autograder.engine import local_gpus

    return len(local_gpus())


def plan_row(assignment: str, samples: list[sample.Sample], wall: float, scores: dict[str, float],
             records: list[dict[str, Any]], workers: int) -> dict[str, Any]:
    """One exercise's planning figures: its rate per worker, the median submission on its worker, the run's
    start and end (what does not grow with the class), a class of 100's wait, and the scores that differ
    from what the fixtures expect."""
    secs = [r["seconds"] for r in records if r["outcome"] == "graded"]
    median = statistics.median(float(s["total"]) for s in secs) if secs else float("nan")
    fixed = max(0.0, start_and_end(wall, median, len(samples), workers)) if secs else float("nan")
    per_hour = len(samples) / wall * 3600
    return {"exercise": assignment, "submissions": len(samples), "wall_s": round(wall, 2),
            "per_hour_per_worker": round(per_hour / workers), "median_submission_s": round(median, 2),
            "start_and_end_s": round(fixed, 1),
            "class_of_100_minutes": round((fixed + 100 * median / workers) / 60, 1),
            "wrong_scores": {s.student: [scores.get(s.student), s.score] for s in samples
                             if s.score is not None and scores.get(s.student) != s.score}}


def throughput(args: argparse.Namespace) -> int:
    workers = gpu_count() if args.gpu else args.workers
    if args.gpu and not workers:
        print("bench: --gpu needs a CUDA GPU, and torch sees none here", file=sys.stderr)
        return 2
    kind = "GPU" if args.gpu else "CPU"
    print(f"throughput of the autograder, {workers} {kind} workers; {os.cpu_count()} cores, {platform.node()}, "
          f"{dt.date.today()}, load average {os.getloadavg()[0]:.2f} at the start")
    print(f"{'exercise':<18} {'subs':>4} {'wall s':>7} {'per hour per ' + kind:>18} {'median s':>8} "
          f"{'start+end s':>11} {'class of 100, min':>17}  scores")
    deadline = None if args.time_limit is None else time.monotonic() + args.time_limit
    rows: list[dict[str, Any]] = []
    order = args.exercises.split(",") if args.exercises else course.assignments()
    for assignment in order:
        if deadline is not None and rows and time.monotonic() + rows[-1]["wall_s"] > deadline:
            print(f"{assignment}: not started (the time limit would be reached)")
            continue
        samples = sample.honest(assignment)[: args.limit]
        base = Path(tempfile.mkdtemp(prefix="dlperf-bench-throughput-"))
        try:
            wall, scores, records = run_autograder(base, assignment, samples, workers, gpu=args.gpu)
        finally:
            shutil.rmtree(base, ignore_errors=True)
        row = plan_row(assignment, samples, wall, scores, records, workers)
        rows.append(row)
        wrong = row["wrong_scores"]
        print(f"{assignment:<18} {len(samples):>4} {wall:>7.1f} {row['per_hour_per_worker']:>18} "
              f"{row['median_submission_s']:>8.2f} {row['start_and_end_s']:>11.1f} "
              f"{row['class_of_100_minutes']:>17.1f}  "
              + ("as the fixtures expect" if not wrong else f"DIFFER: {wrong}"), flush=True)
        if args.json:
            args.json.write_text(json.dumps({"kind": kind, "workers": workers, "host": platform.node(),
                                             "date": dt.date.today().isoformat(), "rows": rows}, indent=1) + "\n")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    return 1 if any(r["wrong_scores"] for r in rows) else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--assignment", default="gradscaler")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--runs", type=int, default=3, help="runs of the three measurements (default 3)")
    p.add_argument("--limit", type=int, help="only the first N submissions (a quick run)")
    p.add_argument("--throughput", action="store_true", help="submissions per hour per worker, every exercise")
    p.add_argument("--class-size", type=int, help="grade a class of N submissions with the autograder alone")
    p.add_argument("--gpu", action="store_true", help="with --throughput: grade on the GPU workers, one job per GPU")
    p.add_argument("--exercises", help="with --throughput: these exercises, in this order (default: every one)")
    p.add_argument("--time-limit", type=float, metavar="SECONDS",
                   help="with --throughput: start no exercise that would end after this")
    p.add_argument("--json", type=Path, help="with --throughput: write the rows here as they come")
    args = p.parse_args()
    if args.class_size:
        return large_class(args)
    return throughput(args) if args.throughput else compare(args)


if __name__ == "__main__":
    sys.exit(main())
