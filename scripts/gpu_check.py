"""``make gpu-check``: the whole project's GPU check, in one command, with a report.

On a machine with a CUDA GPU it runs, one after the other, each step timed and
its output kept in a log beside the report:

1. ``tests``   -- the test suite's ``gpu``-marked tests (``pytest -m gpu``);
2. ``doctor``  -- ``autograder doctor --gpu`` (sandbox, limits, CUDA in the sandbox,
   one worker per GPU, NCCL with two GPUs, the gradebook, a timed grade of each
   exercise's reference solution on the GPU);
3. ``sample``  -- the sample class graded on the GPU (``autograder sample``, as
   ``make sample-class`` does, without ``--cpu``);
4. ``book``    -- the book built with every chapter executed on the GPU
   (``scripts/build_book.py --fresh``), which records the chapters' GPU reference
   outputs into ``_build/gpu_reference/``; they are validated here and listed in
   the report with the command that commits them;
5. ``references`` -- not by default: only the chapters that record GPU references, executed one by
   one (``scripts/gpu_references.py``: each executed notebook kept, with what its cells printed), for a
   lent GPU window too short for the whole book (``--chapters`` names some);
6. ``ncu`` -- not by default: the course's traffic counts of its Triton kernels beside Nsight Compute's DRAM
   and L2 counters (``scripts/ncu_traffic.py``, into ``ncu/``);
7. ``throughput`` -- not by default: every exercise's honest class (reference, stub, fixtures; the first
   ``--throughput-limit`` of them) graded on the GPU workers, its scores checked against the fixtures', with
   the planning figures per exercise (``scripts/bench_grading.py --throughput --gpu``, into
   ``throughput.json``): submissions per hour per GPU, the median submission, a class of 100's wait.

The report, ``_build/gpu-check/report.md`` (``--out``), names the machine, the
GPU(s), the driver, torch and CUDA, and each step's result and time; it is written
again after every step, so a check cut short (a lent machine's time running out)
still leaves what it found.  The steps run in the order ``--steps`` names them;
``--time-limit SECONDS`` bounds the whole check (a step still running then is
stopped and reported so).  The tracebacks of chapters that failed to execute
(``_build/html/reports/``) are copied beside the report and named in it.  Where
there is no GPU it says so, checks nothing, and exits with status 2: a GPU
check without a GPU would only pretend.  Exit status 1 when a step failed.

Usage: ``python scripts/gpu_check.py [--out DIR] [--steps tests,doctor,sample,book] [--time-limit SECONDS]
[--doctor-exercises IDS] [--sample-assignment ID]``.  On the first GPU run (an H200, 2026-11-26) the steps took:
tests 23 s, the book about 4 min 20 s, the sample class 1.3 to 10 s per submission and the doctor 16 s for
its first reference (both while every hidden test failed there): for a short lease, name fewer exercises
and a smaller sample class.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("tests", "doctor", "sample", "book", "references", "ncu", "throughput")
NO_GPU_EXIT = 2


@dataclass
class Step:
    """One step of the check: what ran, how it ended, how long it took, where its output is."""

    name: str
    command: list[str]
    returncode: int | None = None
    seconds: float = 0.0
    log: Path | None = None
    note: str = ""
    stopped: bool = False       # stopped at the check's time limit

    @property
    def result(self) -> str:
        if self.stopped:
            return "STOPPED at the time limit"
        if self.returncode is None:
            return "not run"
        return "passed" if self.returncode == 0 else f"FAILED (exit {self.returncode})"


def machine() -> dict[str, object]:
    """The GPU(s), driver, torch and CUDA of this machine, asked of the course's Python (a fresh process)."""
    code = ("import json, platform, torch; n = torch.cuda.device_count() if torch.cuda.is_available() else 0; "
            "print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, "
            "'python': platform.python_version(), 'gpus': [torch.cuda.get_device_name(i) for i in range(n)]}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    info: dict[str, object] = json.loads(out.stdout) if out.returncode == 0 else {
        "torch": f"cannot import torch: {out.stderr.strip()[-300:]}", "cuda": None, "gpus": []}
    info["driver"] = None
    smi = shutil.which("nvidia-smi")
    if smi:
        q = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                           capture_output=True, text=True)
        rows = [line.strip() for line in q.stdout.splitlines() if line.strip()]
        info["smi"] = rows
        info["driver"] = rows[0].split(",")[1].strip() if rows and len(rows[0].split(",")) > 1 else None
    info["host"] = socket.gethostname()
    info["os"] = platform.platform()
    info["cores"] = os.cpu_count()
    git = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"], capture_output=True, text=True,
                         cwd=ROOT)
    info["commit"] = git.stdout.strip() or "unknown"
    return info


def run_step(step: Step, out: Path, seconds_left: float | None = None) -> None:
    step.log = out / f"{step.name}.log"
    print(f"gpu-check: {step.name}: {' '.join(step.command)}", flush=True)
    started = time.monotonic()
    with open(step.log, "w") as log:
        process = subprocess.Popen(step.command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            step.returncode = process.wait(timeout=seconds_left)
        except subprocess.TimeoutExpired:
            step.stopped = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            step.returncode = process.wait()
    step.seconds = time.monotonic() - started
    print(f"gpu-check: {step.name}: {step.result} in {step.seconds:.0f} s (log: {step.log})", flush=True)


def chapter_errors(reports: Path, out: Path) -> list[str]:
    """The chapters whose execution failed in the book step (Jupyter Book's ``*.err.log``): each copied into
    ``out/book-errors/`` and named with the last line of its traceback."""
    found = []
    for log in sorted(reports.rglob("*.err.log")) if reports.is_dir() else []:
        target = out / "book-errors" / log.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(log, target)
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
        last = next((line for line in reversed(lines) if "Error" in line or "Exception" in line),
                    lines[-1] if lines else "")
        chapter = log.name[: -len(".err.log")]
        found.append(f"{chapter}: {last[:300]} (book-errors/{log.name})")
    return found


def recorded_references(folder: Path) -> tuple[list[str], str]:
    """The GPU reference files a build recorded, validated; and a sentence about them."""
    if not folder.is_dir() or not any(folder.glob("*.json")):
        return [], f"no GPU reference was recorded in {folder}"
    sys.path.insert(0, str(ROOT))
    from dlperf.gpu_reference import InvalidReference, check_folder

    try:
        refs = check_folder(folder)
    except InvalidReference as exc:
        return [], f"a recorded GPU reference was refused: {exc}"
    lines = [f"{r.path.name}: {', '.join(sorted(r.measurements))} ({r.source()})" for r in refs]
    return lines, (f"{len(refs)} chapter(s) recorded; to commit them after review: "
                   f"`python -m dlperf.gpu_reference promote {folder.relative_to(ROOT)}`, then `make book` "
                   "and commit book/_gpu_reference/")


def report_text(info: dict[str, object], steps: list[Step], references: tuple[list[str], str], when: str,
                errors: list[str] | None = None, finished: bool = True) -> str:
    gpus = info.get("gpus") or []
    lines = ["# GPU check", "",
             f"- when: {when}", f"- machine: {info.get('host')} ({info.get('cores')} cores, {info.get('os')})",
             f"- commit: {info.get('commit')}",
             f"- GPU(s): {', '.join(gpus) if gpus else 'none'}" + (f" (nvidia-smi: {'; '.join(info['smi'])})"
                                                                      if info.get("smi") else ""),
             f"- driver: {info.get('driver') or 'unknown'}",
             f"- torch: {info.get('torch')} (CUDA {info.get('cuda')}), Python {info.get('python')}", ""]
    if not gpus:
        lines += ["**No GPU on this machine: nothing was checked.** `make gpu-check` needs a CUDA GPU that torch "
                  "can use; run it on a GPU runner (see book/gpu-machines.md, *On a GPU machine*). On this machine, "
                  "`make test` and `autograder doctor` check what a CPU can.", ""]
        return "\n".join(lines)
    lines += ["| step | result | seconds | log |", "| --- | --- | --- | --- |"]
    for s in steps:
        log = s.log.relative_to(ROOT) if s.log and s.log.is_relative_to(ROOT) else s.log
        lines.append(f"| {s.name} | {s.result}{' (' + s.note + ')' if s.note else ''} | {s.seconds:.0f} | "
                     f"{log or ''} |")
    if errors:
        lines += ["", "## Chapters that failed to execute", ""] + [f"- {e}" for e in errors]
    files, sentence = references
    lines += ["", "## GPU reference outputs", "", sentence + "."]
    lines += [f"- {f}" for f in files]
    failed = [s.name for s in steps if s.returncode not in (0, None)]
    if not finished:
        lines += ["", "**In progress: the steps not run yet are still to come.**", ""]
    else:
        lines += ["", "**Result: " + (f"FAILED ({', '.join(failed)})" if failed else "every step passed") + ".**", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "gpu-check", help="report and logs folder")
    parser.add_argument("--steps", default=",".join(STEPS[:4]),
                        help=f"which steps, in this order (default: {','.join(STEPS[:4])}; also: references, ncu, "
                             "throughput)")
    parser.add_argument("--time-limit", type=float, default=None, metavar="SECONDS",
                        help="stop the check after this long (the step then running is reported as stopped)")
    parser.add_argument("--doctor-exercises", metavar="IDS", default=None,
                        help="the doctor grades only these references (comma-separated; default: every exercise)")
    parser.add_argument("--sample-assignment", metavar="ID", default=None,
                        help="the sample class of this assignment (default: gradscaler's, 42 submissions)")
    parser.add_argument("--chapters", metavar="NAMES", default=None,
                        help="the references step executes only these chapters (default: every one that records)")
    parser.add_argument("--throughput-limit", type=int, default=8, metavar="N",
                        help="the throughput step grades the first N submissions of each honest class (default 8)")
    args = parser.parse_args(argv)
    wanted = list(dict.fromkeys(s for s in args.steps.split(",") if s))
    unknown = sorted(set(wanted) - set(STEPS))
    if unknown:
        parser.error(f"unknown step(s) {unknown}; the steps are {', '.join(STEPS)}")
    out = args.out.resolve()
    if out.exists() and any(out.iterdir()) and not (out / "report.md").is_file():
        parser.error(f"{out} is not empty and holds no report.md of an earlier check: choose another --out")
    if out.exists():
        shutil.rmtree(out)              # an earlier check's report and logs
    out.mkdir(parents=True)
    when = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    info = machine()
    report = out / "report.md"
    if not info.get("gpus"):
        report.write_text(report_text(info, [], ([], ""), when))
        print(f"gpu-check: no GPU on {info['host']} (torch {info.get('torch')} sees none"
              f"{', nvidia-smi not found' if not shutil.which('nvidia-smi') else ''}): nothing was checked. "
              f"Run it on a GPU runner. Report: {report}", file=sys.stderr)
        return NO_GPU_EXIT
    py = sys.executable
    references = out / "gpu_reference"
    commands = {
        "tests": Step("tests", [py, "-m", "pytest", "-m", "gpu", "-ra", "-p", "no:cacheprovider"]),
        "doctor": Step("doctor", [py, "-m", "autograder", "doctor", "--gpu", "--json", str(out / "doctor.json"),
                                  *(["--exercises", args.doctor_exercises] if args.doctor_exercises is not None else [])]),
        "sample": Step("sample", [py, "-m", "autograder", "sample", "--out", str(out / "sample-class"),
                                  *(["--assignment", args.sample_assignment] if args.sample_assignment else [])]),
        "book": Step("book", [py, "scripts/build_book.py", "--fresh"]),
        "references": Step("references", [py, "scripts/gpu_references.py", "--out", str(out / "references"),
                                          *(["--chapters", args.chapters] if args.chapters else [])]),
        "ncu": Step("ncu", [py, "scripts/ncu_traffic.py", "--out", str(out / "ncu"),
                            *(["--time-limit", str(args.time_limit)] if args.time_limit is not None else [])]),
        "throughput": Step("throughput", [py, "scripts/bench_grading.py", "--throughput", "--gpu",
                                          "--limit", str(args.throughput_limit), "--json", str(out / "throughput.json"),
                                          *(["--time-limit", str(args.time_limit * 0.9)]
                                            if args.time_limit is not None else [])]),
    }
    steps = [commands[name] for name in wanted]
    built = ROOT / "_build" / "gpu_reference"
    reports = ROOT / "_build" / "html" / "reports"
    if "book" in wanted:
        shutil.rmtree(built, ignore_errors=True)   # only what this build records is reported
        shutil.rmtree(reports, ignore_errors=True)
    deadline = None if args.time_limit is None else time.monotonic() + args.time_limit
    found: tuple[list[str], str] = ([], "the book was not built in this check")
    errors: list[str] = []
    for step in steps:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            step.note = "no time left"
            continue
        run_step(step, out, left)
        if step.name == "book":
            if built.is_dir():
                shutil.copytree(built, references, dirs_exist_ok=True)
            found = recorded_references(references)
            errors = chapter_errors(reports, out)
        if step.name == "references":
            executed = out / "references"
            if (executed / "gpu_reference").is_dir():
                shutil.copytree(executed / "gpu_reference", references, dirs_exist_ok=True)
            found = recorded_references(references)
            summary = executed / "summary.json"
            errors += [f"{e['chapter']}: {e['error']} (references/{e['chapter']}.ipynb)"
                       for e in (json.loads(summary.read_text()) if summary.is_file() else []) if not e["executed"]]
        report.write_text(report_text(info, steps, found, when, errors, finished=False))
    report.write_text(report_text(info, steps, found, when, errors))
    print(f"\ngpu-check: report {report}\n")
    print(report.read_text())
    return 0 if all(s.returncode == 0 for s in steps) else 1


if __name__ == "__main__":
    sys.exit(main())
