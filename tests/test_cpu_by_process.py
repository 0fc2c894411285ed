"""scripts/cpu_by_process.py: the CPU of a command's descendants, summed by kind of process."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT

SPIN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.8:\n    pass\n"


def test_a_grandchilds_cpu_is_counted_under_its_kind(tmp_path):
    parent = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {SPIN!r}])"
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "cpu_by_process.py"), "--every", "0.1",
                          "--json", str(tmp_path / "cpu.json"), "--", sys.executable, "-c", parent],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    figures = json.loads((tmp_path / "cpu.json").read_text())
    seconds, processes = figures["kinds"]["python"]
    assert processes == 2 and 0.6 <= seconds <= 3.0, figures      # the parent and the spinning grandchild
    assert "CPU by kind of process" in out.stdout and "total" in out.stdout


def test_kinds_are_read_from_the_command_line():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from cpu_by_process import kind
    finally:
        sys.path.pop(0)
    assert kind("/usr/bin/bwrap --unshare-pid -- python -m autograder.warm_kernel torch") == "warm_kernel"
    assert kind("python -m autograder.checks --serve torch") == "autograder.checks"
    assert kind("/usr/bin/g++ -O2 x.cpp") == "g++"
