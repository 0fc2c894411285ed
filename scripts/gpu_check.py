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
   the report with the command that commits them.

The report, ``_build/gpu-check/report.md`` (``--out``), names the machine, the
GPU(s), the driver, torch and CUDA, and each step's result and time.  Where
there is no GPU it says so, checks nothing, and exits with status 2: a GPU
check without a GPU would only pretend.  Exit status 1 when a step failed.

Usage: ``python scripts/gpu_check.py [--out DIR] [--steps tests,doctor,sample,book]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("tests", "doctor", "sample", "book")
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

    @property
    def result(self) -> str:
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


def run_step(step: Step, out: Path) -> None:
    step.log = out / f"{step.name}.log"
    print(f"gpu-check: {step.name}: {' '.join(step.command)}", flush=True)
    started = time.monotonic()
    with open(step.log, "w") as log:
        step.returncode = subprocess.call(step.command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    step.seconds = time.monotonic() - started
    print(f"gpu-check: {step.name}: {step.result} in {step.seconds:.0f} s (log: {step.log})", flush=True)


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


def report_text(info: dict[str, object], steps: list[Step], references: tuple[list[str], str], when: str) -> str:
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
                  "can use; run it on a GPU runner (see README, *On a GPU machine*). On this machine, "
                  "`make test` and `autograder doctor` check what a CPU can.", ""]
        return "\n".join(lines)
    lines += ["| step | result | seconds | log |", "| --- | --- | --- | --- |"]
    for s in steps:
        log = s.log.relative_to(ROOT) if s.log and s.log.is_relative_to(ROOT) else s.log
        lines.append(f"| {s.name} | {s.result}{' (' + s.note + ')' if s.note else ''} | {s.seconds:.0f} | "
                     f"{log or ''} |")
    files, sentence = references
    lines += ["", "## GPU reference outputs", "", sentence + "."]
    lines += [f"- {f}" for f in files]
    failed = [s.name for s in steps if s.returncode not in (0, None)]
    lines += ["", "**Result: " + (f"FAILED ({', '.join(failed)})" if failed else "every step passed") + ".**", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "gpu-check", help="report and logs folder")
    parser.add_argument("--steps", default=",".join(STEPS), help=f"which steps (default: {','.join(STEPS)})")
    args = parser.parse_args(argv)
    wanted = [s for s in args.steps.split(",") if s]
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
        "doctor": Step("doctor", [py, "-m", "autograder", "doctor", "--gpu", "--json", str(out / "doctor.json")]),
        "sample": Step("sample", [py, "-m", "autograder", "sample", "--out", str(out / "sample-class")]),
        "book": Step("book", [py, "scripts/build_book.py", "--fresh"]),
    }
    steps = [commands[name] for name in STEPS if name in wanted]
    built = ROOT / "_build" / "gpu_reference"
    if "book" in wanted:
        shutil.rmtree(built, ignore_errors=True)   # only what this build records is reported
    for step in steps:
        run_step(step, out)
    found: tuple[list[str], str] = ([], "the book was not built in this check")
    if "book" in wanted:
        if built.is_dir():
            shutil.copytree(built, references)
        found = recorded_references(references)
    report.write_text(report_text(info, steps, found, when))
    print(f"\ngpu-check: report {report}\n")
    print(report.read_text())
    return 0 if all(s.returncode == 0 for s in steps) else 1


if __name__ == "__main__":
    sys.exit(main())
