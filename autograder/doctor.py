"""``autograder doctor``: can this node grade?  Every ingredient of grading, checked for real, in one table.

Run it on each runner before a class is sent there (``autograder doctor``, or
``autograder doctor --gpu`` on a GPU runner, where a missing GPU is then a
failure).  Each line is one check with its verdict:

* ``OK`` -- works as grading needs it;
* ``WARN`` -- grading works, but weaker than it should be (say which);
* ``FAIL`` -- grading cannot work, or would be wrong, here;
* ``NO GPU`` -- the check needs a GPU and the node has none (a failure with ``--gpu``);
* ``N/A`` -- does not apply to this node (NCCL with fewer than two GPUs), or
  was not run because something it needs failed (said which).

The checks, in order: the Python stack (torch, nbgrader, Dask, ... importable,
with their versions); the sandbox (bubblewrap and its namespaces,
:func:`autograder.sandbox.check_available`); the limits in force (a memory hog
and a fork loop run in a real sandbox with small limits, and must be stopped);
the processes that run student code for the hidden checks
(:class:`autograder.trusted.Student`, started here, and reported again from
inside each reference grade's check run, where the zygote forks them); the GPUs
(``nvidia-smi`` and torch); CUDA inside a sandbox as the student's kernel sees
it; ``CUDA_VISIBLE_DEVICES`` of the engine's local Dask workers (one per GPU);
NCCL between two processes (where there are two GPUs); the gradebook (SQLite
writable, PostgreSQL reachable); and a timed grade of the reference solution of
every exercise by the class autograder's own runner
(:func:`autograder.runner.grade`, jobs made by :func:`autograder.engine.make_jobs`,
scored by nbgrader's rules), which must get full marks.

The exit status is 0 when the node can grade (on CPU only, when it has no GPU
and ``--gpu`` was not given: the verdict says what that means), 1 when it cannot.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import course

OK, WARN, FAIL, NO_GPU, NA = "OK", "WARN", "FAIL", "NO GPU", "N/A"

# What grading imports (the distribution names whose versions the table shows).
STACK = ("torch", "numpy", "nbgrader", "nbclient", "jupyter_client", "ipykernel", "distributed", "dask-jobqueue",
         "SQLAlchemy")


@dataclass
class Line:
    """One check: its name, verdict (``OK``, ``WARN``, ``FAIL``, ``NO GPU``, ``N/A``), what it found, how long."""

    check: str
    verdict: str
    detail: str
    seconds: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Report:
    """Every line, and what they mean together."""

    lines: list[Line]
    gpus: int
    gpu_required: bool
    host: str = field(default_factory=socket.gethostname)

    @property
    def can_grade(self) -> bool:
        return not any(line.verdict == FAIL for line in self.lines)

    def verdict(self) -> str:
        """One paragraph: can this node grade, and what."""
        failed = [line.check for line in self.lines if line.verdict == FAIL]
        if failed:
            return f"CANNOT GRADE on {self.host}: {', '.join(failed)} failed (see those lines)."
        warned = [line.check for line in self.lines if line.verdict == WARN]
        caveat = f" With warnings: {', '.join(warned)}." if warned else ""
        if self.gpus:
            return (f"CAN GRADE on {self.host}, GPU exercises included: {self.gpus} GPU(s), one grading worker "
                    f"each.{caveat}")
        gpu_ids = [line.data["assignment"] for line in self.lines if line.data.get("requires_gpu")]
        which = f" ({', '.join(gpu_ids)})" if gpu_ids else ""
        return (f"CAN GRADE on {self.host} on CPU only: no GPU here. Exercises that need a GPU{which} are graded "
                "here only when asked for with --cpu (and marked in every record); without --cpu they are recorded "
                f"as infrastructure failures, to be graded on a GPU runner.{caveat}")

    def table(self, width: int = 110) -> str:
        """The report as text: a table of the lines, then the verdict."""
        name_w = max(len(line.check) for line in self.lines)
        head = f"{'check':<{name_w}}  {'verdict':<7}  {'seconds':>7}  detail"
        out = [head, "-" * len(head)]
        indent = name_w + 2 + 7 + 2 + 7 + 2
        for line in self.lines:
            wrapped = [w for part in line.detail.split("\n")    # a detail's own lines stay lines
                       for w in textwrap.wrap(part, max(40, width - indent), break_on_hyphens=False)] or [""]
            out.append(f"{line.check:<{name_w}}  {line.verdict:<7}  {line.seconds:>7.1f}  {wrapped[0]}")
            out += [" " * indent + rest for rest in wrapped[1:]]
        out += ["", *textwrap.wrap("verdict: " + self.verdict(), width, subsequent_indent="         ")]
        return "\n".join(out)

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "gpus": self.gpus, "gpu_required": self.gpu_required, "can_grade": self.can_grade,
                "verdict": self.verdict(), "lines": [asdict(line) for line in self.lines]}


@contextlib.contextmanager
def _timed(lines: list[Line], check: str) -> Iterator[dict[str, Any]]:
    """Run one check: the body fills ``slot`` (verdict, detail, data); an exception is a FAIL that says what."""
    slot: dict[str, Any] = {"verdict": FAIL, "detail": "", "data": {}}
    start = time.monotonic()
    try:
        yield slot
    except Exception as exc:  # noqa: BLE001 - a check that breaks is a failed check, said in its line
        slot.update(verdict=FAIL, detail=f"{slot['detail']} {type(exc).__name__}: {exc}".strip())
    lines.append(Line(check, slot["verdict"], slot["detail"], time.monotonic() - start, slot["data"]))


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


# ---------------------------------------------------------------------------------------------
# The checks
# ---------------------------------------------------------------------------------------------


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
    from .sandbox import bwrap_path, check_available

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
    from .sandbox import Limits

    repo = course.REPO
    return {"workdir": workdir, "limits": Limits(memory_bytes=memory, processes=processes),
            "hide": [repo, Path.home()], "expose": [repo / "dlperf", repo / "autograder", Path(sys.prefix)],
            "gpu_devices": gpu}


def check_limits(slot: dict[str, Any]) -> None:
    """A real sandbox with small limits: a fork loop and a 512 MiB allocation must both be stopped."""
    from .sandbox import Sandbox

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
    from .trusted import Student

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


def gpu_inventory() -> dict[str, Any]:
    """What ``nvidia-smi`` and torch say about the GPUs (no CUDA context is created)."""
    info: dict[str, Any] = {"smi": [], "driver": None, "torch_count": 0, "torch_names": [], "error": None}
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30)
            rows = [[c.strip() for c in line.split(",")] for line in out.stdout.splitlines() if line.strip()]
            info["smi"] = [{"name": r[0], "driver": r[1], "memory": r[2]} for r in rows if len(r) == 3]
            info["driver"] = info["smi"][0]["driver"] if info["smi"] else None
            if out.returncode != 0:
                info["error"] = f"nvidia-smi exited {out.returncode}: {(out.stderr or out.stdout).strip()[-200:]}"
        except (OSError, subprocess.SubprocessError) as exc:
            info["error"] = f"nvidia-smi failed: {exc}"
    import torch

    try:
        if torch.cuda.is_available():
            info["torch_count"] = torch.cuda.device_count()
            info["torch_names"] = [torch.cuda.get_device_name(i) for i in range(info["torch_count"])]
    except Exception as exc:  # noqa: BLE001 - a broken driver is reported
        info["error"] = f"torch.cuda: {type(exc).__name__}: {exc}"
    return info


def check_gpus(slot: dict[str, Any], info: dict[str, Any], required: bool) -> None:
    import torch

    slot["data"] = info
    smi, count = info["smi"], info["torch_count"]
    if not smi and not count:
        why = "nvidia-smi not found" if shutil.which("nvidia-smi") is None else "nvidia-smi lists none"
        slot.update(verdict=FAIL if required else NO_GPU,
                    detail=f"no GPU ({why}; torch {torch.__version__} sees none)"
                    + (": --gpu asks for one" if required else ""))
        return
    names = ", ".join(f"{g['name']} ({g['memory']})" for g in smi) or ", ".join(info["torch_names"])
    detail = (f"{len(smi) or count} GPU(s): {names}; driver {info['driver'] or '?'}; torch {torch.__version__} "
              f"(CUDA {torch.version.cuda}) sees {count}")
    if count == 0:
        build = "a CPU-only build of torch" if not torch.version.cuda else "torch cannot use them"
        slot.update(verdict=FAIL, detail=f"{detail}: {build}{' (' + info['error'] + ')' if info['error'] else ''}")
    elif smi and count != len(smi) and os.environ.get("CUDA_VISIBLE_DEVICES") is None:
        slot.update(verdict=WARN, detail=f"{detail}: nvidia-smi and torch disagree")
    else:
        slot.update(verdict=OK, detail=detail)


_CUDA_PROBE = """
import json, os
# First the process that runs a student's code for the hidden checks (a host, forked from a zygote that
# was forked from this process before it touched CUDA, as a check run does), then this process itself.
from autograder.trusted import Student, zygote
zygote.set_zygote(zygote.Zygote.fork())
SOURCE = "import torch\\ndef f():\\n    x = torch.ones(256, 256, device='cuda')\\n    return float((x @ x).sum().item())\\n"
try:
    with Student(parts=[("<doctor>", SOURCE)], timeout=120) as s:
        host = {"ok": s.call("f") == 256.0 ** 3, "isolation": s.process.isolation,
                "pid_namespace": s.process.pid_namespace}
except Exception as exc:
    host = {"ok": False, "error": (type(exc).__name__ + ": " + str(exc))[:600]}
import torch
torch.cuda.init()
x = torch.ones(1024, 1024, device="cuda")
total = (x @ x).sum().item()
torch.cuda.synchronize()
print(json.dumps({"count": torch.cuda.device_count(), "name": torch.cuda.get_device_name(0),
                  "visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "matmul_ok": total == 1024.0 ** 3,
                  "host": host}))
"""


def first_gpu() -> str:
    """The GPU a grading worker of this node would get first (``CUDA_VISIBLE_DEVICES`` as the engine pins it)."""
    from .engine import local_gpus

    gpus = local_gpus()
    return gpus[0] if gpus else "0"


def check_cuda_in_sandbox(slot: dict[str, Any], memory: int, processes: int) -> None:
    """torch.cuda inside a sandbox made as the runner makes the student's (GPU device nodes bound in)."""
    from .sandbox import Sandbox, gpu_device_nodes

    gpu = first_gpu()
    with tempfile.TemporaryDirectory(prefix="doctor-cuda-") as tmp:
        with Sandbox(**_sandbox_args(memory, processes, gpu, Path(tmp)), name="doctor-cuda") as box:
            env = {**box.base_env(), "PYTHONPATH": str(course.REPO)}
            out = subprocess.run(box.command([sys.executable, "-c", _CUDA_PROBE], env),
                                 capture_output=True, text=True, timeout=300, cwd=tmp)
            describe = box.describe()
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        slot.update(verdict=FAIL, detail=f"torch.cuda.init() failed in the sandbox (exit {out.returncode}; "
                    f"{len(gpu_device_nodes())} device nodes bound): {out.stderr.strip()[-400:]}")
        return
    got = json.loads(lines[-1])
    slot["data"] = got
    host = got.get("host") or {}
    if got["count"] != 1 or not got["matmul_ok"]:
        slot.update(verdict=FAIL, detail=f"the sandbox saw {got['count']} GPU(s) with CUDA_VISIBLE_DEVICES="
                    f"{got['visible']} (expected 1), matmul correct: {got['matmul_ok']}")
    elif not host.get("ok"):
        slot.update(verdict=FAIL, detail=f"CUDA works in the sandbox but not in the process that runs a student's code "
                    f"for the hidden checks ({host.get('error') or 'wrong result'}): every hidden test that uses the "
                    "GPU would fail")
    else:
        slot.update(verdict=OK, detail=f"CUDA_VISIBLE_DEVICES={gpu} in the sandbox: torch.cuda.init() and a 1024x1024 "
                    f"matmul on {got['name']} worked, 1 device visible, and a matmul in the process that runs a "
                    f"student's code ({host.get('isolation')}, "
                    f"{'its own' if host.get('pid_namespace') else 'no'} PID namespace). Sandbox: {describe}")


def _worker_view() -> dict[str, Any]:
    """On a Dask worker: its CUDA_VISIBLE_DEVICES and, where it names a GPU, what torch sees."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    view: dict[str, Any] = {"visible": visible, "count": 0, "names": []}
    if visible and visible.strip() not in ("", "-1"):
        import torch

        view["count"] = torch.cuda.device_count()
        view["names"] = [torch.cuda.get_device_name(i) for i in range(view["count"])]
    return view


def check_worker_pinning(slot: dict[str, Any], gpus: int) -> None:
    """The engine's local Dask cluster: one worker per GPU, each seeing its own GPU only."""
    from .engine import ClusterChoice, connect

    with connect(ClusterChoice()) as (client, what):
        views = client.run(_worker_view)
    seen = {str(client_addr): view for client_addr, view in views.items()}
    pins = sorted(str(v["visible"]) for v in seen.values())
    slot["data"] = {"workers": list(seen.values()), "cluster": what}
    if not gpus:
        if all(v["visible"] == "" for v in seen.values()):
            slot.update(verdict=NO_GPU, detail=f"no GPU: {what}, each with CUDA_VISIBLE_DEVICES='' (they cannot "
                        "see a GPU)")
        else:
            slot.update(verdict=FAIL, detail=f"{what}, but CUDA_VISIBLE_DEVICES is {pins}: a CPU worker must see none")
        return
    each_one = all(v["count"] == 1 for v in seen.values())
    distinct = len(set(pins)) == len(pins)
    detail = (f"{what}: CUDA_VISIBLE_DEVICES " + ", ".join(pins) + "; each worker's torch sees "
              + ", ".join(f"{v['count']} ({', '.join(v['names'])})" for v in seen.values()))
    if len(seen) != gpus or not each_one or not distinct:
        slot.update(verdict=FAIL, detail=f"{detail}: expected {gpus} worker(s), each with its own single GPU")
    else:
        slot.update(verdict=OK, detail=detail)


def nccl_sum() -> dict[str, Any]:
    """Worker of the NCCL check (run by :func:`dlperf.launch.launch`): all-reduce the ranks on the GPUs."""
    import torch
    import torch.distributed as dist

    from dlperf.launch import init_from_env

    rank, world, device = init_from_env()
    t = torch.full((1024,), float(rank + 1), device=device)
    dist.all_reduce(t)
    torch.cuda.synchronize(device)
    return {"rank": rank, "backend": dist.get_backend(), "value": float(t[0].item()), "device": str(device)}


def check_nccl(slot: dict[str, Any], gpus: int) -> None:
    if gpus < 2:
        slot.update(verdict=NO_GPU if gpus == 0 else NA,
                    detail="no GPU" if gpus == 0 else "one GPU: NCCL between two processes needs two")
        return
    from dlperf.launch import launch

    results = launch("autograder.doctor:nccl_sum", 2, backend="nccl", timeout=180, verbose=False)
    slot["data"] = {"results": results}
    if all(r["value"] == 3.0 and r["backend"] == "nccl" for r in results):
        slot.update(verdict=OK, detail="2 processes, one GPU each (" + ", ".join(r["device"] for r in results)
                    + "): an NCCL all_reduce of 1+2 gave 3 on both")
    else:
        slot.update(verdict=FAIL, detail=f"NCCL all_reduce of 1+2 gave {results}")


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


def grade_reference(assignment: str, settings: Any, gpu: str | None) -> tuple[Any, float, float, dict[str, Any]]:
    """Grade the reference solution of ``assignment`` with the class autograder's runner, here, in its sandboxes.

    Returns the runner's :class:`~autograder.runner.Result`, the score and the maximum score
    (nbgrader's ``determine_grade`` on the graded notebook, as the gradebook scores it), and the
    per-cell scores.
    """
    import nbformat
    from nbgrader import utils

    from .engine import Submission, make_jobs
    from .runner import grade

    with tempfile.TemporaryDirectory(prefix="doctor-grade-") as tmp:
        root = Path(tmp)
        path = root / f"{assignment}.ipynb"
        nbformat.write(course.reference_submission(assignment), path)
        job = make_jobs(assignment, [Submission("doctor-reference", path, None)], settings, course_root=root)[0]
        saved = os.environ.get("CUDA_VISIBLE_DEVICES")
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu if gpu is not None else ""   # as the engine pins a worker
        try:
            result = grade(job, worker="doctor")
        finally:
            if saved is None:
                os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            else:
                os.environ["CUDA_VISIBLE_DEVICES"] = saved
    cells: dict[str, Any] = {}
    failures: dict[str, str] = {}
    if result.notebook:
        for cell in nbformat.reads(result.notebook, as_version=4).cells:
            if utils.is_grade(cell):
                grade_id = cell.metadata.nbgrader.grade_id
                cells[grade_id] = utils.determine_grade(cell)
                got, most = cells[grade_id]
                if (got or 0.0) < most:
                    failures[grade_id] = why_lost(cell)
    result.stats["failures"] = failures
    score = sum(s or 0.0 for s, _ in cells.values())
    top = sum(m for _, m in cells.values())
    return result, score, top, cells


def why_lost(cell: Any, limit: int = 400) -> str:
    """What a graded cell that lost points printed: its error (``CheckFailed: ...``), else its last output line."""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"[:limit]
    text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream").strip()
    return (text.splitlines()[-1] if text else "no error output (no points recorded)")[:limit]


def check_reference(slot: dict[str, Any], assignment: str, settings: Any, gpus: int) -> None:
    from dataclasses import replace

    from .engine import requires_gpu

    needs_gpu = requires_gpu(assignment)
    cpu = needs_gpu and not gpus
    run_settings = replace(settings, cpu=True) if cpu else settings
    result, score, top, cells = grade_reference(assignment, run_settings, first_gpu() if gpus else None)
    secs = result.seconds
    isolation = ", ".join(result.stats.get("isolation", [])) or "no student process started"
    slot["data"] = {"assignment": assignment, "requires_gpu": needs_gpu, "score": score, "max_score": top,
                    "outcome": result.outcome, "seconds": secs, "device": result.device, "isolation": isolation,
                    "cpu_only": result.cpu_only, "failures": result.stats.get("failures", {})}
    where = (f"on {result.device}" + (" (needs a GPU: graded on CPU here, as --cpu would)" if cpu else ""))
    timing = f"{secs.get('total', 0):.1f} s (student run {secs.get('student', 0):.1f} s, checks {secs.get('checks', 0):.1f} s)"
    if result.outcome != "graded" or not cells or score != top:
        per_cell = ", ".join(f"{k} {s:g}/{m:g}" for k, (s, m) in cells.items())
        lost = "".join(f"\n{k}: {why}" for k, why in result.stats.get("failures", {}).items())
        slot.update(verdict=FAIL, detail=f"reference solution {result.outcome} {where}: {score:g}/{top:g} "
                    f"({per_cell or 'no graded cell'}){'; ' + result.reason if result.reason else ''}; {timing}"
                    f"{lost}")
    else:
        slot.update(verdict=OK, detail=f"reference solution: full marks {score:g}/{top:g} {where} in {timing}; "
                    f"student processes of its checks: {isolation}")


# ---------------------------------------------------------------------------------------------
# The doctor
# ---------------------------------------------------------------------------------------------


def diagnose(*, db_url: str, settings: Any, gpu_required: bool = False, exercises: list[str] | None = None,
             progress: Callable[[Line], None] | None = None) -> Report:
    """Run every check (the references of ``exercises``; all by default, none with ``[]``)."""
    lines: list[Line] = []
    say = progress or (lambda line: None)

    def run(check: str, fn: Callable[..., None], *args: Any) -> Line:
        with _timed(lines, check) as slot:
            fn(slot, *args)
        say(lines[-1])
        return lines[-1]

    def put(check: str, verdict: str, why: str) -> None:       # a line decided without running anything
        lines.append(Line(check, verdict, why))
        say(lines[-1])

    stack = run("python stack", check_stack)
    # The grades run as the class would: in sandboxes, or without them where --no-sandbox says so.
    sandbox_ok = True
    if not settings.sandbox:
        put("sandbox (bubblewrap)", WARN, "--no-sandbox: student code would run NOT sandboxed, with the grader's "
            "view of the machine and the network")
        put("limits in force", NA, "not checked: --no-sandbox")
    else:
        sandbox_ok = run("sandbox (bubblewrap)", check_sandbox).verdict == OK
        if sandbox_ok:
            run("limits in force", check_limits)
        else:
            put("limits in force", NA, "not checked: no sandbox")
    if stack.verdict != OK:
        put("student processes", NA, "not checked: the Python stack is broken")
    else:
        run("student processes", check_student_process)
    info = gpu_inventory() if stack.verdict == OK else {"smi": [], "torch_count": 0, "driver": None, "error": None}
    gpus = info["torch_count"]
    run("GPUs", check_gpus, info, gpu_required)
    if not gpus:
        put("CUDA in the sandbox", FAIL if gpu_required else NO_GPU, "no GPU")
    elif not settings.sandbox or not sandbox_ok:
        put("CUDA in the sandbox", NA, "not checked: no sandbox")
    else:
        run("CUDA in the sandbox", check_cuda_in_sandbox, settings.memory_bytes, settings.processes)
    run("worker GPU pinning", check_worker_pinning, gpus)
    if gpu_required and not gpus:
        put("NCCL (2 GPUs)", FAIL, "no GPU: --gpu asks for one")
    else:
        run("NCCL (2 GPUs)", check_nccl, gpus)
    run("gradebook", check_gradebook, db_url)
    for assignment in course.assignments() if exercises is None else exercises:
        if stack.verdict != OK or not sandbox_ok:
            put(f"grade {assignment}", NA, "not graded: " + ("the Python stack is broken" if stack.verdict != OK
                                                             else "no sandbox"))
        else:
            run(f"grade {assignment}", check_reference, assignment, settings, gpus)
    return Report(lines, gpus, gpu_required)


def run_doctor(args: argparse.Namespace) -> int:
    """``autograder doctor`` (options resolved by :func:`autograder.options.resolve`)."""
    from .options import db_url as _db_url
    from .options import settings as _settings

    settings = _settings(args)
    exercises = None if args.exercises is None else [e for e in args.exercises.split(",") if e]
    unknown = sorted(set(exercises or []) - set(course.assignments()))
    if unknown:
        raise ValueError(f"no exercise {', '.join(unknown)} (there are: {', '.join(course.assignments())})")
    print(f"autograder doctor on {socket.gethostname()} ({os.cpu_count()} cores, {platform.platform()}): "
          f"can this node grade?{' (--gpu: a GPU is required)' if args.gpu else ''}", flush=True)

    def progress(line: Line) -> None:
        print(f"  {line.check}: {line.verdict} ({line.seconds:.1f} s)", flush=True)

    report = diagnose(db_url=_db_url(args), settings=settings, gpu_required=args.gpu, exercises=exercises,
                      progress=progress)
    print()
    print(report.table())
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report.as_dict(), indent=1, default=str) + "\n")
    return 0 if report.can_grade else 1


__all__ = ["Line", "Report", "diagnose", "gpu_inventory", "grade_reference", "nccl_sum", "run_doctor"]
