"""Where the CPU of a command goes: its processes and all their descendants, summed by kind.

    .venv/bin/python scripts/cpu_by_process.py [--every 0.25] [--json out.json] -- COMMAND...

Runs COMMAND and reads ``/proc`` every ``--every`` seconds: each process whose chain of parents leads to
COMMAND is kept with the CPU time (user + system) it had used when last seen, and named by the first of
:data:`KINDS` found in its command line (a sandboxed process counts too: bubblewrap's children are
descendants).  At the end it prints the CPU seconds and the number of processes of each kind, and the total.

What it cannot see: a process that starts and ends between two readings, and the time a process used after
its last reading (at most ``--every`` seconds each).  So the figures are lower bounds, close for processes
that live several readings.  It measures CPU, not wall time: on a busy machine the wall time of a command
says little, its CPU seconds stay about the same.

Example, the fixtures of one exercise graded by the class autograder::

    .venv/bin/python -c "from pathlib import Path; from autograder import sample; \\
        sample.place(sample.honest('allreduce'), Path('/tmp/c/course'), 'allreduce')"
    .venv/bin/python scripts/cpu_by_process.py -- .venv/bin/python -m autograder --course /tmp/c/course \\
        grade --all --cpu --workers=2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter

#: The kinds of process a grading run or a test run starts, most specific first.
KINDS = ("autograder.checks", "warm_kernel", "ipykernel", "dlperf.grading.host", "spawn_main", "nbgrader",
         "-m autograder", "pytest", "jupyter-book", "chrom", "bwrap", "python")


def kind(cmdline: str) -> str:
    """The first of :data:`KINDS` in ``cmdline``, else the program's name.

    >>> kind("/usr/bin/bwrap --unshare-pid ... python -m autograder.warm_kernel torch")
    'warm_kernel'
    >>> kind("/usr/bin/g++ -O2 x.cpp")
    'g++'
    """
    for name in KINDS:
        if name in cmdline:
            return name
    return os.path.basename(cmdline.split(" ")[0]) or "?"


def _table() -> dict[int, tuple[int, int, str]]:
    """``{pid: (parent, cpu ticks, start time)}`` of every process now."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        out[int(entry)] = (int(fields[1]), int(fields[11]) + int(fields[12]), fields[19])
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def measure(argv: list[str], every: float = 0.25) -> tuple[int, dict[str, tuple[float, int]]]:
    """Run ``argv``; its exit status and ``{kind: (CPU seconds, processes)}``."""
    hz = os.sysconf("SC_CLK_TCK")
    proc = subprocess.Popen(argv)
    seen: dict[tuple[int, str], int] = {}
    names: dict[tuple[int, str], str] = {}
    while True:
        done = proc.poll() is not None
        table = _table()
        for pid, (_, ticks, start) in table.items():
            node, hops = pid, 0
            while node and node != proc.pid and hops < 64:
                node, hops = table.get(node, (0,))[0], hops + 1
            if node != proc.pid:
                continue
            key = (pid, start)
            if key not in names:
                names[key] = kind(_cmdline(pid))
            seen[key] = ticks
        if done:
            break
        time.sleep(every)
    seconds: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for key, ticks in seen.items():
        seconds[names[key]] += ticks / hz
        count[names[key]] += 1
    return proc.returncode, {k: (seconds[k], count[k]) for k in sorted(seconds, key=seconds.get, reverse=True)}


def main(args: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--every", type=float, default=0.25, help="seconds between two readings of /proc")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND...")
    opts = parser.parse_args(args)
    command = opts.command[1:] if opts.command[:1] == ["--"] else opts.command
    if not command:
        parser.error("no command: cpu_by_process.py -- COMMAND...")
    code, kinds = measure(command, opts.every)
    total = sum(s for s, _ in kinds.values())
    print(f"\nCPU by kind of process ({' '.join(command)[:100]}):")
    for name, (secs, n) in kinds.items():
        print(f"  {name:<22} {secs:8.1f} s  {100 * secs / total if total else 0:5.1f}%  {n:5d} process(es)")
    print(f"  {'total':<22} {total:8.1f} s")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"command": command, "exit": code, "kinds": kinds, "total": total}, f, indent=1)
    return code


if __name__ == "__main__":
    sys.exit(main())
