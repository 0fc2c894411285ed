"""The checks of the node itself: the Python stack, the sandbox and its limits, the student processes, the gradebook."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from .. import course
from .report import FAIL, OK, WARN

# What grading imports (the distribution names whose versions the table shows).
STACK = ("torch", "numpy", "nbgrader", "nbclient", "jupyter_client", "ipykernel", "distributed", "dask-jobqueue",
         "SQLAlchemy")


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_stack(slot: dict[str, Any]) -> None:
    """The Python packages grading imports, imported for real, with their versions."""
    found, missing = [], []
    for dist in STACK:
        version = _version(dist)
        module = {"dask-jobqueue": "dask_jobqueue", "SQLAlchemy": "sqlalchemy"}.get(dist, dist)
        try:
            __import__(module)
        except Exception as exc:  # noqa: BLE001 - reported
            missing.append(f"{dist} ({type(exc).__name__}: {exc})")
            continue
        found.append(f"{dist} {version}")
    import torch

    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
    slot["data"] = {"python": platform.python_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda}
    detail = f"Python {platform.python_version()}; " + ", ".join(found) + f" (torch is {build})"
    if missing:
        slot.update(verdict=FAIL, detail=f"cannot import {'; '.join(missing)}. Found: {detail}")
    else:
        slot.update(verdict=OK, detail=detail)


def check_sandbox(slot: dict[str, Any]) -> None:
    """bubblewrap exists and creates its namespaces here."""
    from ..sandbox import bwrap_path, check_available

    check_available()
    path = bwrap_path()
    out = subprocess.run([path or "bwrap", "--version"], capture_output=True, text=True, timeout=20)
    who = ("as root: ipc, pid, net, uts and cgroup namespaces; sandboxed code runs as nobody (setpriv)"
           if os.geteuid() == 0 else "unprivileged: a user namespace besides ipc, pid, net, uts, cgroup")
    slot.update(verdict=OK, detail=f"{path} ({out.stdout.strip() or 'version unknown'}) creates its sandbox {who}")


SANDBOX_PROBE_MEMORY = 128 * 2**20
SANDBOX_PROBE_PROCESSES = 16
_FORKS = """
import os, time
made = 0
for _ in range(64):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(5)
        os._exit(0)
    made += 1
print(made)
"""
_HOG = "data = b'x' * (512 * 2**20)\nprint('allocated')\n"


def _sandbox_args(memory: int, processes: int, gpu: str | None, workdir: Path) -> dict[str, Any]:
    """The arguments of :class:`autograder.sandbox.Sandbox` as the grader makes a submission's sandboxes:
    the repository and the home folder hidden, the course's library and the Python exposed."""
    from ..sandbox import Limits

    repo = course.REPO
    return {"workdir": workdir, "limits": Limits(memory_bytes=memory, processes=processes),
            "hide": [repo, Path.home()], "expose": [repo / "dlperf", repo / "autograder", Path(sys.prefix)],
            "gpu_devices": gpu}


def check_limits(slot: dict[str, Any]) -> None:
    """A real sandbox with small limits: a fork loop and a 512 MiB allocation must both be stopped."""
    from ..sandbox import Sandbox

    with tempfile.TemporaryDirectory(prefix="doctor-limits-") as tmp:
        box = Sandbox(**_sandbox_args(SANDBOX_PROBE_MEMORY, SANDBOX_PROBE_PROCESSES, None, Path(tmp)), name="doctor")
        with box:
            env = box.base_env()
            forks = subprocess.run(box.command([sys.executable, "-c", _FORKS], env), capture_output=True,
                                   text=True, timeout=60, cwd=tmp)
            hog = subprocess.run(box.command([sys.executable, "-c", _HOG], env), capture_output=True, text=True,
                                 timeout=60, cwd=tmp)
        stats = box.stats()
        describe = box.describe()
    made = forks.stdout.strip()
    stopped_memory = "allocated" not in hog.stdout
    how = ("OOM-killed" if stats.get("oom_killed") else
           "MemoryError" if "MemoryError" in hog.stderr else f"exit code {hog.returncode}")
    stopped_forks = made.isdigit() and int(made) < 64
    slot["data"] = {"limits": stats.get("limits"), "forks_made": made, "memory_stopped": stopped_memory}
    detail = (f"{stats.get('limits')}: a sandbox of {SANDBOX_PROBE_MEMORY // 2**20} MiB and "
              f"{SANDBOX_PROBE_PROCESSES} processes stopped a 512 MiB allocation ({how}) "
              f"and a fork loop after {made or '?'} forks. Sandbox: {describe}")
    if not (stopped_memory and stopped_forks):
        what = [w for w, ok in (("the memory limit", stopped_memory), ("the process limit", stopped_forks)) if not ok]
        slot.update(verdict=FAIL, detail=f"{' and '.join(what)} NOT enforced: 512 MiB allocation "
                    f"{'stopped' if stopped_memory else 'succeeded'}, {made or '?'} of 64 forks succeeded "
                    f"(stderr: {(hog.stderr + forks.stderr).strip()[-300:]}). Sandbox: {describe}")
    elif stats.get("limits") == "rlimit":
        slot.update(verdict=WARN, detail=detail + ". No writable cgroup: per-process rlimits instead (a sandbox's "
                    "processes together may use more; with a GPU there is no memory limit at all): run the "
                    "grader as root or with a delegated cgroup")
    else:
        slot.update(verdict=OK, detail=detail)


def check_student_process(slot: dict[str, Any]) -> None:
    """A process for student code, started as a hidden check starts it, called once."""
    from ..trusted import Student

    with Student(parts=[("<doctor>", "def double(x):\n    return 2 * x\n")], timeout=60) as student:
        got = student.call("double", 21)
        isolation = student.isolation
    slot["data"] = {"isolation": isolation}
    if got != 42:
        slot.update(verdict=FAIL, detail=f"the student process answered double(21) = {got!r}")
    elif isolation == "namespaces":
        slot.update(verdict=OK, detail="isolation 'namespaces' (own PID, network, IPC and mount namespaces, no "
                    "capability); started outside a sandbox, by a fresh zygote; double(21) = 42 came back")
    else:
        slot.update(verdict=WARN, detail=f"isolation {isolation!r}: student code of a hidden check runs as a plain "
                    "child process (the check run stays non-dumpable); the kernel forbids unprivileged user "
                    "namespaces here")


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a URL: shown as given
        return url


def check_gradebook(slot: dict[str, Any], db_url: str) -> None:
    """SQLite: the folder is writable and the database takes a write lock; others: connect and query."""
    import sqlalchemy as sa

    shown = _safe_url(db_url)
    if db_url.startswith("sqlite:///"):
        path = Path(db_url.removeprefix("sqlite:///"))
        folder = path.parent
        if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
            slot.update(verdict=FAIL, detail=f"{shown}: the folder {folder} is missing or not writable")
            return
        if path.exists() and not os.access(path, os.R_OK | os.W_OK):
            slot.update(verdict=FAIL, detail=f"{shown}: the file is not readable and writable")
            return
        existed = path.exists()
        engine = sa.create_engine(db_url)
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql("BEGIN IMMEDIATE")     # takes the write lock, writes nothing
                conn.exec_driver_sql("ROLLBACK")
                tables = sa.inspect(conn).get_table_names()
        finally:
            engine.dispose()
            if not existed:
                path.unlink(missing_ok=True)                # leave no empty gradebook behind
        slot.update(verdict=OK, detail=f"{shown}: writable (a write lock was taken and released); "
                    + (f"{len(tables)} tables" if existed else "a new gradebook will be created there"))
        return
    try:
        engine = sa.create_engine(db_url, connect_args={"connect_timeout": 10} if db_url.startswith("postgres") else {})
    except ModuleNotFoundError as exc:
        hint = (" (SQLAlchemy's default PostgreSQL driver; the course installs psycopg2: write "
                "postgresql+psycopg2://...)" if db_url.startswith("postgresql://") else "")
        slot.update(verdict=FAIL, detail=f"{shown}: its database driver is not installed: {exc}{hint}")
        return
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
            tables = sa.inspect(conn).get_table_names()
    except Exception as exc:  # noqa: BLE001 - reported with the URL (password hidden)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        slot.update(verdict=FAIL, detail=f"cannot connect to {shown}: {first}")
        return
    finally:
        engine.dispose()
    slot.update(verdict=OK, detail=f"{shown}: connected, {len(tables)} tables "
                + ("(nbgrader's schema is there)" if "assignment" in tables else "(nbgrader creates its schema)"))
