"""Benchmark: grading throughput against the number of workers (1, 2, 4), with the scaling efficiency.

The work is CPU-bound sample work: the honest part of the sample class
(``autograder.sample.honest``; every submission graded on CPU with ``--cpu``),
graded from a fresh course root for each worker count, by local Dask workers
or, with ``--slurm``, by Dask workers started as Slurm jobs (start a test Slurm
with ``python tests/services.py up slurm`` and export the ``SLURM_CONF`` it
prints).  Throughput is submissions per minute of the ``autograder grade``
command's wall time (cluster start-up included); the efficiency of n workers
is their throughput over n times the throughput of one worker.  On a machine
with fewer cores than workers the efficiency says so: each submission runs two
sandboxed processes (the student's kernel and the checks).

    .venv/bin/python scripts/bench_scaling.py [--workers 1 2 4] [--limit 8] [--slurm --partition grading]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autograder import sample  # noqa: E402
from autograder.gradebook import Writer  # noqa: E402


def grade(assignment: str, samples: list[sample.Sample], workers: int, extra: list[str]) -> tuple[float, dict]:
    base = Path(tempfile.mkdtemp(prefix="dlperf-bench-scaling-"))
    try:
        root = base / "course"
        sample.place(samples, root, assignment)
        start = time.perf_counter()
        result = subprocess.run([sys.executable, "-m", "autograder", "--course", str(root), "grade", assignment,
                                 "--cpu", f"--workers={workers}", *extra], cwd=REPO, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if result.returncode != 0:
            print(result.stdout[-3000:], result.stderr[-3000:])
            raise SystemExit("autograder grade failed")
        with Writer(f"sqlite:///{root / 'gradebook.db'}", root) as writer:
            records = writer.records(assignment)
        scores = {r["student"]: r["score"] for r in records}
        for r in records:
            if r["outcome"] != "graded":
                print(f"  {workers} workers: {r['student']} {r['outcome']}: {r['reason'][:1500]}")
        return seconds, scores
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--assignment", default="gradscaler")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--limit", type=int, default=8, help="submissions (default 8)")
    p.add_argument("--slurm", action="store_true", help="workers as Slurm jobs")
    p.add_argument("--partition", default="grading")
    args = p.parse_args()
    extra = ["--slurm", f"--partition={args.partition}", "--gres=", "--job-memory=2GB"] if args.slurm else \
        ["--cpu-workers"]
    samples = sample.honest(args.assignment)[: args.limit]
    print(f"{len(samples)} submissions of {args.assignment} on {'Slurm' if args.slurm else 'local'} workers; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start")
    print(f"{'workers':>7}  {'wall s':>7}  {'per minute':>10}  {'speed-up':>8}  {'efficiency':>10}")
    base = None
    reference = None
    for n in args.workers:
        seconds, scores = grade(args.assignment, samples, n, extra)
        if reference is None:
            reference = scores
        elif scores != reference:
            print(f"  scores differ with {n} workers: {scores} vs {reference}")
            return 1
        rate = len(samples) / seconds * 60
        base = base or rate / args.workers[0]
        print(f"{n:>7}  {seconds:>7.1f}  {rate:>10.2f}  {rate / base:>8.2f}  {rate / (n * base):>10.0%}")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}; scores identical for every worker count")
    return 0


if __name__ == "__main__":
    sys.exit(main())
