"""What the sandbox tests share: bwrap's availability, running code in a box, finding processes, fixtures."""


import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from autograder import cgroups, sandbox
from autograder.sandbox import Sandbox, SandboxUnavailable

MiB = 2**20


def _bwrap_problem() -> str | None:
    try:
        sandbox.check_available()
    except SandboxUnavailable as exc:
        return str(exc)
    return None


BWRAP_PROBLEM = _bwrap_problem()
needs_bwrap = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"no usable bwrap: {BWRAP_PROBLEM}")




def run(box: Sandbox, code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -c code args`` in the sandbox, as the grader would launch it."""
    argv = box.command([sys.executable, "-c", textwrap.dedent(code), *args], box.base_env())
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def marker_pids(marker: str, *, python_only: bool = False) -> list[int]:
    """Live processes whose command line contains ``marker`` (zombies have none); with
    ``python_only``, only those that run this Python (not bwrap, whose arguments hold it too)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline and (not python_only or cmdline.startswith(sys.executable.encode() + b"\0")):
                found.append(int(entry))
    return found


def wait_for(condition, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return bool(condition())


@pytest.fixture
def outside() -> Iterator[Path]:
    """A world-readable directory that is not under /tmp (the sandbox's /tmp is private anyway)."""
    base = Path(tempfile.mkdtemp(prefix="sandbox-test-", dir="/var/tmp" if os.access("/var/tmp", os.W_OK) else None))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def course(outside: Path) -> Path:
    """``course/secret.txt`` (to hide), ``course/pkg/ok.txt`` (to expose), ``course/pkg/tests`` (to hide
    again), ``private/key`` (to hide)."""
    (outside / "course" / "pkg").mkdir(parents=True)
    (outside / "course" / "secret.txt").write_text("hidden tests\n")
    (outside / "course" / "pkg" / "ok.txt").write_text("exposed\n")
    (outside / "course" / "pkg" / "tests").mkdir()
    (outside / "course" / "pkg" / "tests" / "hidden.py").write_text("answers\n")
    (outside / "private").mkdir()
    (outside / "private" / "key").write_text("key\n")
    for path in [outside / "course", outside / "course" / "pkg", outside / "course" / "pkg" / "tests",
                 outside / "private"]:
        path.chmod(0o755)
    return outside


@pytest.fixture
def no_cgroups(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Pretend this machine has no cgroup file system: the rlimit fallback."""
    monkeypatch.setattr(cgroups, "CGROUP_ROOT", tmp_path / "no-cgroup-here")


def require_cgroups(box: Sandbox) -> None:
    if os.geteuid() != 0:
        pytest.skip("cgroup limits need root here (no delegated cgroup)")
    if box.stats()["limits"] == "rlimit":
        pytest.skip("no writable cgroup (v1 or v2) on this machine")
