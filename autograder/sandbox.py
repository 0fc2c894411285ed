"""Run untrusted code (a student's notebook kernel) in a bubblewrap sandbox with resource limits.

The autograder executes every submitted notebook: code written by a student,
running as whatever the grader runs as (often root on a course machine).
:class:`Sandbox` wraps the command that starts it -- a Jupyter kernel that
``jupyter_client`` launches with its own ``Popen``, or a plain ``python -m
...`` -- so that it runs inside ``bwrap`` (bubblewrap), with limits.

Threat model: what a submission must not be able to do, and what stops it.

* **Read what it must not see** (hidden tests, solutions, the gradebook, other
  submissions, another clone of the course, the grader's home): the sandbox's
  root starts **empty** and only an allowlist is bound into it, read-only: the
  operating system (:data:`SYSTEM_PATHS`: ``/usr``, ``/etc``, ``/lib*``,
  ``/bin``, ``/sbin``, ``/sys``), the grader's Python (its environment and base
  installation) and the ``expose`` paths.  Nothing else of the machine exists
  inside (``/home``, ``/root``, ``/srv``, ``/opt``, ``/var``, ``/mnt``, ``/run``
  with its unix sockets).  A ``hide`` path *inside* an allowed one (the course
  folder inside the repository whose packages are exposed) is an empty
  read-only tmpfs (a hidden file reads as ``/dev/null``).  Keep course
  material and credentials out of the system folders.  When the caller is **root**, the code runs as the real user ``nobody``
  (65534): bwrap does the mounts as root, then ``setpriv`` drops uid, groups
  and every capability (bounding set included) and sets ``no_new_privs``.
  Measured: bwrap's own ``--unshare-user --uid 65534`` is *not* enough for a
  root caller -- it maps the sandbox uid to uid 0 outside, and a process with
  no capability but kernel uid 0 still owns root's files (it read a ``0600``
  file of root's, and ``/etc/shadow``).  A non-root caller gets a user
  namespace instead (65534 inside, the caller outside).  The folders bwrap
  makes on the way to a bound path are empty and searchable, so a Python
  installed under ``/root`` (mode 0700) is reachable, and nothing else there.
* **Write outside its job**: the root is read-only; the only writable places
  are the job's ``workdir`` (bound read-write at the same path) and a private,
  size-limited tmpfs ``/tmp`` and ``/dev/shm`` (torch's DataLoader workers
  need it).  ``RLIMIT_FSIZE`` bounds each file; ``RLIMIT_CORE`` is 0.
* **Use the network**: a fresh network namespace has only its own loopback.
  A kernel uses ``transport="ipc"`` with its connection file in ``workdir``:
  the unix socket files it binds there are reachable from outside.  IPC, PID,
  UTS and cgroup namespaces are private too (no process of the machine is
  visible), and ``--new-session`` stops terminal injection (``TIOCSTI``).
* **Exhaust the machine or outlive its job**: a cgroup per job (v1 or v2)
  limits the memory of the whole sandbox (swap included where accounted) and
  its number of processes (a fork bomb hits ``pids.max``); :meth:`Sandbox.kill`
  and the end of the ``with`` block kill every process in it, whatever it did
  (double forks, ignoring ``SIGTERM``).  Without a writable cgroup (a
  developer's laptop) the limits fall back to rlimits set with ``prlimit``
  (``RLIMIT_AS`` per process, ``RLIMIT_NPROC`` per user, which binds no root
  process -- sandboxed code never runs as root) and the process tree is
  killed; :meth:`Sandbox.describe` says which.  With a GPU there is never an
  ``RLIMIT_AS``: CUDA reserves huge virtual address ranges.

Not covered: kernel exploits (no seccomp filter; in the root setup the code
may create user namespaces of its own), CPU time (the caller's timeout, then
:meth:`Sandbox.kill`), GPU memory, the number of files in ``workdir``, and
what the caller does with ``workdir`` afterwards: the submission wrote it,
so a file there may be a symlink to a secret of the grader's -- do not follow
links when reading results back.  ``enabled=False`` (the instructor's
explicit ``--no-sandbox``) keeps the limits and none of the isolation.

The wrapped command is a plain argument list::

    /bin/sh -c '<join the cgroups>; exec "$@"' dlperf-sandbox \\
        bwrap <namespaces, mounts, env> -- prlimit <rlimits> -- setpriv <drop to nobody> -- ARGV...

The shell joins the job's cgroups before anything else runs (and exits 125
if it cannot); every process started later inherits them.  With
``jupyter_client`` (measured with ipykernel): override
``KernelManager.format_kernel_cmd`` to return ``box.command(super()...,
box.base_env())`` -- the connection file is written by then, and
:meth:`Sandbox.command` hands ``workdir`` with it to ``nobody`` (it is mode
0600) -- and set the kernel spec's ``interrupt_mode = "message"``: in the
default ``"signal"`` mode the SIGINT goes to the launched process, which is
bwrap, not the kernel: bwrap exits and the kernel dies with it.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import itertools
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Limits",
    "Sandbox",
    "SandboxUnavailable",
    "bwrap_path",
    "check_available",
    "gpu_device_nodes",
]

log = logging.getLogger(__name__)

INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap), or grade with --no-sandbox "
                "if you trust the submissions")

SANDBOX_UID = 65534  # "nobody": the uid sandboxed code runs as (outside when the caller is root)
SANDBOX_GID = 65534

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")

# The device nodes bound into a sandbox that may use the GPU.
GPU_DEVICE_GLOBS: tuple[str, ...] = ("/dev/nvidia*", "/dev/dri")

# Places that are an empty tmpfs inside (besides the hidden paths): the sandbox's own /tmp and /dev/shm.
PRIVATE_TMPFS = (Path("/tmp"), Path("/dev/shm"))

# What a sandbox sees of the machine besides the grader's Python and the exposed paths: the operating
# system (programs, libraries, their configuration, fonts, locales) and the read-only kernel views a
# GPU runtime reads.  Everything else -- /home, /root, /srv, /opt, /var, /mnt, /run (the machine's unix
# sockets), another clone of the course -- does not exist inside.
SYSTEM_PATHS = tuple(Path(p) for p in ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
                                       "/sys"))

KILL_TIMEOUT_S = 10.0

_counter = itertools.count()


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create namespaces here (the message says what to do)."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandbox."""

    memory_bytes: int = 4 * 2**30
    """The whole sandbox (cgroup); per process ``RLIMIT_AS`` when there is no cgroup and no GPU."""
    processes: int = 256
    """Processes (and threads) in the sandbox: cgroup ``pids.max``; ``RLIMIT_NPROC`` without a cgroup."""
    file_bytes: int = 256 * 2**20
    """``RLIMIT_FSIZE``: the largest file a sandboxed process may write."""
    open_files: int = 1024
    """``RLIMIT_NOFILE``."""


def _size(n: int) -> str:
    """``4 GiB``, ``256 MiB``, ``1000 B``: the largest binary unit that divides ``n``, else one decimal."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n // scale} {unit}" if n % scale == 0 else f"{n / scale:.1f} {unit}"
    return f"{n} B"


# ---------------------------------------------------------------------------------------------
# bubblewrap
# ---------------------------------------------------------------------------------------------


def bwrap_path() -> str | None:
    """The ``bwrap`` executable on ``PATH``, or ``None``."""
    return shutil.which("bwrap")


def _namespace_flags(userns: bool) -> list[str]:
    """Every namespace bwrap supports; a user namespace only when the caller is not root (see the module doc)."""
    if userns:
        return ["--unshare-all", "--unshare-user"]
    return ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]


@functools.cache
def _probe(path: str, userns: bool) -> str | None:
    """Run a trivial sandbox once; ``None`` if it works, else why not."""
    argv = [path, *_namespace_flags(userns), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true"]
    try:
        out = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{path} cannot be run: {exc}"
    if out.returncode != 0:
        return f"{' '.join(argv)} failed ({out.returncode}): {out.stderr.strip()[-400:]}"
    return None


@functools.cache
def _bwrap_options(path: str) -> frozenset[str]:
    """The options this bwrap knows (older ones lack ``--size`` and ``--disable-userns``)."""
    out = subprocess.run([path, "--help"], check=False, capture_output=True, text=True, timeout=30)
    return frozenset(re.findall(r"^\s+(--[a-z-]+)", out.stdout + out.stderr, flags=re.MULTILINE))


def check_available() -> None:
    """Raise :class:`SandboxUnavailable` unless bwrap exists and can create its namespaces (tried once)."""
    path = bwrap_path()
    if path is None:
        raise SandboxUnavailable(f"bwrap is not installed: {INSTALL_HINT}")
    if not os.access(path, os.X_OK):
        raise SandboxUnavailable(f"{path} is not an executable: {INSTALL_HINT}")
    why = _probe(path, userns=os.geteuid() != 0)
    if why is not None:
        raise SandboxUnavailable(f"bwrap cannot create a sandbox here ({why}); unprivileged user namespaces "
                                 "may be disabled (sysctl kernel.unprivileged_userns_clone=1), or "
                                 f"{INSTALL_HINT}")


def _tool(name: str) -> str:
    """Absolute path of a util-linux tool the wrapper needs (``prlimit``, ``setpriv``)."""
    path = shutil.which(name) or shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin")
    if path is None:
        raise SandboxUnavailable(f"{name} is not installed (Debian/Ubuntu: apt-get install util-linux)")
    return path


def gpu_device_nodes() -> list[Path]:
    """The GPU device nodes of this machine (:data:`GPU_DEVICE_GLOBS`), bound into a sandbox with a GPU."""
    return sorted({Path(p) for pattern in GPU_DEVICE_GLOBS for p in glob.glob(pattern)})


# ---------------------------------------------------------------------------------------------
# cgroups
# ---------------------------------------------------------------------------------------------


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
    except OSError:
        return False
    return True


def _keyed(path: Path, key: str) -> int | None:
    """The value of ``key`` in a flat-keyed cgroup file (``memory.events``, ``pids.events``, ``memory.oom_control``)."""
    for line in (_read(path) or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key:
            return int(parts[1])
    return None


def _number(path: Path) -> int | None:
    text = (_read(path) or "").strip()
    return int(text) if text.isdigit() else None


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup per v1 controller (``memory``, ``pids``, ...) and ``""`` for v2."""
    found: dict[str, str] = {}
    for line in (_read(PROC_SELF_CGROUP) or "").splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            found[controller] = path
    return found


def _procs(directory: Path) -> set[int]:
    return {int(p) for p in (_read(directory / "cgroup.procs") or "").split()}


def _own_dir(mount: Path, relative: str) -> Path | None:
    """The directory of this process's cgroup under ``mount`` (which may be mounted at a sub-group)."""
    parts = [p for p in relative.split("/") if p]
    for start in range(len(parts) + 1):
        candidate = mount.joinpath(*parts[start:])
        if os.getpid() in _procs(candidate):
            return candidate
    return None


def _writable_dir(directory: Path | None) -> bool:
    return directory is not None and os.access(directory, os.W_OK | os.X_OK)


def _v2_parent() -> Path | None:
    """Where this process may create a v2 cgroup with the memory and pids controllers, or ``None``."""
    own = _own_dir(CGROUP_ROOT, _own_cgroups().get("", "/"))
    if own is None:
        return None
    wanted = {"memory", "pids"}

    def delegates(group: Path) -> bool:
        return wanted <= set((_read(group / "cgroup.subtree_control") or "").split())

    if _writable_dir(own) and (delegates(own) or _write(own / "cgroup.subtree_control", "+memory +pids")):
        return own  # a child of our own group (possible where our group may hold processes and children)
    parent = own.parent
    if own != CGROUP_ROOT and _writable_dir(parent) and delegates(parent):
        return parent  # a sibling of our own group
    return None


@dataclass
class _Cgroups:
    """The job's cgroup(s): one v2 group, or one group per v1 controller (memory, pids, freezer if mounted)."""

    version: str  # "cgroup-v1" or "cgroup-v2"
    dirs: dict[str, Path]  # v2: {"unified": ...}; v1: {"memory": ..., "pids": ..., "freezer": ...}
    final_stats: dict[str, Any] | None = field(default=None, repr=False)

    @classmethod
    def create(cls, name: str, limits: Limits) -> _Cgroups | None:
        """Make the job's groups with its limits; ``None`` where cgroups cannot be written here."""
        if (CGROUP_ROOT / "cgroup.controllers").is_file():
            parent = _v2_parent()
            parents = {"unified": parent} if parent is not None else None
            version = "cgroup-v2"
        else:
            parents = _v1_parents()
            version = "cgroup-v1"
        if not parents:
            return None
        made: dict[str, Path] = {}
        try:
            for controller, parent in parents.items():
                made[controller] = parent / name
                made[controller].mkdir()
            groups = cls(version, made)
            groups._set_limits(limits)
        except OSError as exc:
            log.info("no cgroup for %s (%s): rlimits instead", name, exc)
            for directory in made.values():
                with contextlib.suppress(OSError):
                    directory.rmdir()
            return None
        return groups

    def _set_limits(self, limits: Limits) -> None:
        memory = str(limits.memory_bytes)
        if self.version == "cgroup-v2":
            group = self.dirs["unified"]
            (group / "memory.max").write_text(memory)
            _write(group / "memory.swap.max", "0")  # absent without swap accounting
            (group / "pids.max").write_text(str(limits.processes))
        else:
            (self.dirs["memory"] / "memory.limit_in_bytes").write_text(memory)
            _write(self.dirs["memory"] / "memory.memsw.limit_in_bytes", memory)  # absent without swap accounting
            (self.dirs["pids"] / "pids.max").write_text(str(limits.processes))

    @property
    def procs_files(self) -> list[Path]:
        return [d / "cgroup.procs" for d in self.dirs.values()]

    def pids(self) -> set[int]:
        return set().union(*(_procs(d) for d in self.dirs.values()))

    def kill(self) -> None:
        """SIGKILL every process in the groups until they are empty (a fork bomb cannot outrun it)."""
        if self.version == "cgroup-v2" and _write(self.dirs["unified"] / "cgroup.kill", "1"):
            _wait_until(lambda: not self.pids(), KILL_TIMEOUT_S)  # kernel >= 5.14: kills it all at once
        if not self.pids():
            return
        frozen = self._freeze(True)  # nothing forks while the list is read and killed
        deadline = time.monotonic() + KILL_TIMEOUT_S
        try:
            while (pids := self.pids()) and time.monotonic() < deadline:
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                if frozen:
                    frozen = not self._freeze(False)  # killed tasks die once thawed
                time.sleep(0.005)
        finally:
            if frozen:
                self._freeze(False)
        if self.pids():
            log.warning("processes left in %s after SIGKILL: %s", self, sorted(self.pids()))

    def _freeze(self, freeze: bool) -> bool:
        """Freeze (or thaw) the groups so that nothing forks while being killed; ``False`` if there is no freezer."""
        if self.version == "cgroup-v2":
            return _write(self.dirs["unified"] / "cgroup.freeze", "1" if freeze else "0")
        freezer = self.dirs.get("freezer")
        if freezer is None or not _write(freezer / "freezer.state", "FROZEN" if freeze else "THAWED"):
            return False
        if freeze:
            _wait_until(lambda: (_read(freezer / "freezer.state") or "").strip() == "FROZEN", 1.0)
        return True

    def stats(self) -> dict[str, Any]:
        if self.final_stats is not None:
            return dict(self.final_stats)
        if self.version == "cgroup-v2":
            group = self.dirs["unified"]
            peak = _number(group / "memory.peak")  # kernel >= 5.19
            oom = _keyed(group / "memory.events", "oom_kill")
            pids_max = _keyed(group / "pids.events", "max")
        else:
            peak = _number(self.dirs["memory"] / "memory.max_usage_in_bytes")
            oom = _keyed(self.dirs["memory"] / "memory.oom_control", "oom_kill")
            pids_max = _keyed(self.dirs["pids"] / "pids.events", "max")
        return {"peak_memory_bytes": peak, "oom_killed": bool(oom), "pids_limit_hit": None if pids_max is None
                else pids_max > 0, "limits": self.version}

    def remove(self) -> None:
        """Kill what is left, keep the final statistics, remove the directories (retried while they empty)."""
        self.kill()
        self.final_stats = self.stats()
        for directory in self.dirs.values():
            if not _wait_until(lambda d=directory: _rmdir(d), 2.0):
                log.warning("cannot remove cgroup %s", directory)


def _rmdir(directory: Path) -> bool:
    try:
        directory.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _v1_parents() -> dict[str, Path] | None:
    """Where this process may create v1 groups: its own memory, pids (required) and freezer (optional) groups."""
    own = _own_cgroups()
    parents: dict[str, Path] = {}
    for controller in ("memory", "pids", "freezer"):
        mount = CGROUP_ROOT / controller
        directory = _own_dir(mount, own[controller]) if controller in own and mount.is_dir() else None
        if _writable_dir(directory):
            parents[controller] = directory  # type: ignore[assignment]
        elif controller != "freezer":
            return None
    return parents


def sweep_stale_cgroups() -> list[Path]:
    """Remove the empty cgroups of sandboxes whose creator is gone (a grader killed with SIGKILL).

    A sandbox's groups are named ``dlperf-<name>-<creator pid>-<n>``; one whose creator no longer
    runs and that holds no process is removed.  Returns what was removed.  Safe to call any time.
    """
    parents: list[Path] = list((_v1_parents() or {}).values())
    v2 = _v2_parent()
    if v2 is not None:
        parents.append(v2)
    removed = []
    for parent in parents:
        for group in parent.glob("dlperf-*-*-*"):
            match = re.fullmatch(r"dlperf-.*-(\d+)-\d+", group.name)
            if not match or not group.is_dir():
                continue
            if _creator_gone(int(match.group(1))) and not _procs(group) and _rmdir(group):
                removed.append(group)
    return removed


def _creator_gone(pid: int) -> bool:
    """True where no process ``pid`` runs (one we may not signal counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def sweep_stale_folders(root: Path | None = None) -> list[Path]:
    """Remove the temporary folders of sandboxes and slots whose creator is gone (a grader killed with
    SIGKILL cannot clean up): ``dlperf-<name>-<creator pid>-<n>-*`` in the temporary folder, owned by
    this user.  Returns what was removed.  Safe to call any time."""
    root = Path(root or tempfile.gettempdir())
    removed = []
    for folder in root.glob("dlperf-*-*-*"):
        match = re.fullmatch(r"dlperf-.+-(\d+)-\d+-[a-z0-9_]+", folder.name)
        try:
            mine = folder.is_dir() and not folder.is_symlink() and folder.stat().st_uid == os.geteuid()
        except OSError:
            continue
        if match and mine and _creator_gone(int(match.group(1))):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _wait_until(done: Callable[[], object], timeout: float) -> bool:
    """Poll ``done()`` until true or ``timeout`` seconds; its last value."""
    deadline = time.monotonic() + timeout
    while not (ok := done()) and time.monotonic() < deadline:
        time.sleep(0.01)
    return bool(ok)


# ---------------------------------------------------------------------------------------------
# Processes without a cgroup
# ---------------------------------------------------------------------------------------------


def _stat_fields(text: str) -> list[str]:
    """The fields of a ``/proc/PID/stat`` line after the command name: state, ppid, ... (field 3 on)."""
    return text[text.rindex(")") + 2:].split()


def _stat(pid: int) -> tuple[str, int, int] | None:
    """``(state, parent pid, start time)`` of a process, or ``None`` if it is gone."""
    text = _read(Path(f"/proc/{pid}/stat"))
    if text is None:
        return None
    fields = _stat_fields(text)
    return fields[0], int(fields[1]), int(fields[19])


def _descendants(roots: Iterable[int]) -> set[int]:
    """``roots`` and every process below them that is still alive (not a zombie)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None and stat[0] != "Z":
            children.setdefault(stat[1], []).append(int(entry))
    found: set[int] = set()
    todo = [pid for pid in roots if (stat := _stat(pid)) is not None and stat[0] != "Z"]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found


def _kill_trees(started: Mapping[int, int]) -> None:
    """SIGKILL the process trees under the processes ``{pid: start time}`` until none is left (a pid
    whose start time differs was reused by another process and is left alone)."""
    roots = [pid for pid, start in started.items() if (stat := _stat(pid)) is not None and stat[2] == start]
    deadline = time.monotonic() + KILL_TIMEOUT_S
    while (pids := _descendants(roots)) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)


# ---------------------------------------------------------------------------------------------
# Mounts
# ---------------------------------------------------------------------------------------------


def _normal(paths: Iterable[Path | str]) -> list[Path]:
    """Absolute, resolved, existing, without duplicates, in the given order."""
    found: list[Path] = []
    for p in paths:
        path = Path(p).resolve()
        if path.exists() and path not in found:
            found.append(path)
    return found


def _outermost(paths: Iterable[Path]) -> list[Path]:
    """``paths`` without those inside another one, shallowest first."""
    ordered = sorted(set(paths), key=lambda p: len(p.parts))
    kept: list[Path] = []
    for path in ordered:
        if not any(path.is_relative_to(k) for k in kept):
            kept.append(path)
    return kept


def _under(path: Path, roots: Iterable[Path], *, strictly: bool = False) -> bool:
    return any(path.is_relative_to(r) and not (strictly and path == r) for r in roots)


def _plan_mounts(workdir: Path, hide: Sequence[Path], expose: Sequence[Path], runtime: Sequence[Path],
                 system: Sequence[Path] = ()) -> list[tuple[str, Path, str]]:
    """The mounts of a root that starts **empty** (after ``/dev``, ``/proc``, ``/tmp`` and ``/dev/shm``), in order:

    1. ``symlink`` for each system path that is a symbolic link (``/bin -> usr/bin`` on a merged ``/usr``);
    2. ``ro-bind`` for each outermost allowed path: the ``system`` paths (:data:`SYSTEM_PATHS`), the
       interpreter's ``runtime`` and the ``expose`` paths -- nothing else of the machine exists inside;
    3. ``tmpfs`` (a directory) or ``null`` (a file) for each ``hide`` path inside an allowed one;
    4. ``bind`` (read-write) for the workdir, then ``remount-ro`` for each hidden tmpfs.

    Each step is ``(kind, path, link target)`` (the target only for ``symlink``).  Directories that
    bwrap creates on the way to a bound path are empty and searchable, so a path under a folder the
    sandbox user could not pass (``/root``, mode 0700) is reachable, and nothing else in that folder.
    """
    private = list(PRIVATE_TMPFS)
    steps: list[tuple[str, Path, str]] = []
    links = [p for p in system if p.is_symlink()]
    for link in links:
        steps.append(("symlink", link, os.readlink(link)))
    allowed = _outermost(_normal([*(p for p in system if not p.is_symlink()), *runtime, *expose]))
    # A path under a private folder (a clone of the course and its .venv under /tmp: CI's fresh clone) is
    # bound on top of the private tmpfs, as the workdir is; the private folders themselves and the folders
    # that contain them are never bound (that would undo them).
    allowed = [p for p in allowed if p not in links and not any(r.is_relative_to(p) for r in private)]
    made: set[Path] = {Path("/"), *private}

    def reach(path: Path) -> None:
        # bwrap would make the folders on the way with mode 0700 (nobody could not pass): make them 0755.
        for parent in reversed(path.parents):
            if parent not in made and not _under(parent, allowed):
                steps.append(("dir", parent, ""))
                made.add(parent)

    for path in allowed:
        reach(path)
        steps.append(("ro-bind", path, ""))
    inner = _outermost(h for h in hide if _under(h, allowed))
    for path in inner:
        steps.append(("tmpfs" if path.is_dir() else "null", path, ""))
    reach(workdir)
    steps.append(("bind", workdir, ""))
    steps += [("remount-ro", h, "") for h in inner if h.is_dir()]
    return steps


def _python_runtime() -> list[Path]:
    """What the grader's Python needs: its environment, the installation it was made from, and
    the site-packages folders on its path outside both (another environment's, added by a
    ``.pth`` file: scripts/setup.sh does so where the machine's python3 is itself a virtual
    environment, as on the GPU images).  Only folders named site-packages or dist-packages: a
    checkout on the path (an editable install) is never exposed this way."""
    sites = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    return _normal({sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
                    os.path.dirname(os.path.realpath(sys.executable)), *sites})


# ---------------------------------------------------------------------------------------------
# The sandbox
# ---------------------------------------------------------------------------------------------


class Sandbox:
    """One sandbox for one job (one submission); a context manager.

    ::

        with Sandbox(job_dir, hide=[REPO, Path.home()], expose=[REPO / ".venv"]) as box:
            argv = box.command([sys.executable, "-m", "ipykernel_launcher", "-f", conn], box.base_env())
            ...                       # launch argv (Popen, jupyter_client), run, box.kill() on a timeout
        print(box.describe(), box.stats())

    ``workdir`` is created if missing and bound read-write at the same path: the
    only writable place besides a private ``/tmp`` and ``/dev/shm``.  ``hide``
    paths become an empty read-only tmpfs (a hidden file reads as empty);
    ``expose`` paths under them are bound back read-only.  The grader's own
    Python (its virtual environment and base installation) is always exposed.
    Paths that do not exist are ignored.  ``gpu_devices`` is the value of
    ``CUDA_VISIBLE_DEVICES`` (``None``: no GPU); with it every GPU device node
    is bound in.  ``enabled=False`` runs without bwrap (``--no-sandbox``) but
    keeps the limits.
    """

    def __init__(self, workdir: Path, *, limits: Limits = Limits(), hide: Sequence[Path] = (),
                 expose: Sequence[Path] = (), gpu_devices: str | None = None, enabled: bool = True,
                 name: str = "job"):
        self.workdir = Path(workdir).resolve()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.limits = limits
        self.hide = _normal(hide)
        self.expose = _normal(expose)
        self.gpu_devices = gpu_devices
        self.enabled = enabled
        self.name = f"dlperf-{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}-{os.getpid()}-{next(_counter)}"
        self._root = os.geteuid() == 0
        self._prlimit = _tool("prlimit")
        if enabled:
            check_available()
            self._bwrap = bwrap_path() or "bwrap"
            self._setpriv = _tool("setpriv") if self._root else None
        self._cgroups: _Cgroups | None = None
        self._state: Path | None = None
        self._entered = False

    # -- lifetime ---------------------------------------------------------------------------

    def __enter__(self) -> Sandbox:  # noqa: PYI034 - Self is Python 3.11+
        if self._entered:
            raise RuntimeError("a Sandbox is entered once (one sandbox per job)")
        self._entered = True
        self._state = Path(tempfile.mkdtemp(prefix=f"{self.name}-"))
        (self._state / "wrappers").touch()
        self._cgroups = _Cgroups.create(self.name, self.limits)
        self.hand_over()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
        if self._cgroups is not None:
            self._cgroups.remove()
        if self._state is not None:
            shutil.rmtree(self._state, ignore_errors=True)

    def kill(self) -> None:
        """Kill every process of the sandbox now (timeouts, leaving the block); safe to call again."""
        if self._cgroups is not None:
            if self._cgroups.final_stats is None:
                self._cgroups.kill()
            return
        # Without a cgroup: the process trees under the wrapper shells (after exec: bwrap, whose pid
        # namespace dies with it; without bwrap, orphans of a dead process escape).
        _kill_trees(self._wrappers())

    def _wrappers(self) -> dict[int, int]:
        """``{pid: start time}`` of each wrapper shell that :meth:`command` started (it wrote its stat line)."""
        lines = (_read(self._state / "wrappers") or "").splitlines() if self._state is not None else []
        return {int(fields[0]): int(_stat_fields(fields[1])[19]) for line in lines
                if len(fields := line.split(" ", 1)) == 2}

    # -- who runs inside ----------------------------------------------------------------------

    @property
    def drops_privileges(self) -> bool:
        """True where the caller is root and the sandboxed code runs as the real user ``nobody`` (65534)."""
        return self.enabled and self._root

    @property
    def uid(self) -> int:
        """The uid that owns the sandboxed processes and the files they write, outside the sandbox."""
        return SANDBOX_UID if self.drops_privileges else os.geteuid()

    def hand_over(self) -> None:
        """Give ``workdir`` and everything in it to the sandbox user (root's case; else nothing to do).

        Done on entering and by each :meth:`command`: what the caller put there for the sandboxed
        code (a notebook, a kernel's connection file, which ``jupyter_client`` writes with mode 0600,
        the folder for its sockets) becomes readable and writable for ``nobody``.  The walk never
        follows a link (``os.fwalk`` with descriptors), so a running sandbox that swaps a folder for
        a symlink cannot make it change files outside ``workdir``.
        """
        if not self.drops_privileges:
            return
        os.chown(self.workdir, SANDBOX_UID, SANDBOX_GID, follow_symlinks=False)
        for _, dirs, files, fd in os.fwalk(self.workdir):
            for name in dirs + files:
                with contextlib.suppress(FileNotFoundError):
                    os.chown(name, SANDBOX_UID, SANDBOX_GID, dir_fd=fd, follow_symlinks=False)

    # -- the command --------------------------------------------------------------------------

    def base_env(self) -> dict[str, str]:
        """A clean environment; nothing comes from ``os.environ``."""
        return {
            "PATH": os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"]),
            "HOME": str(self.workdir),
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "PYTHONNOUSERSITE": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "MPLBACKEND": "Agg",
            "CUDA_VISIBLE_DEVICES": self.gpu_devices if self.gpu_devices is not None else "",
        }

    def command(self, argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
        """``argv`` wrapped: [cgroup placement] + bwrap ... + [prlimit ...] + argv; ``env`` is the
        COMPLETE environment inside (bwrap ``--clearenv`` + ``--setenv`` each), plus ``PWD``, which
        bwrap always sets.  The working directory is the launcher's (``Popen(cwd=...)``) where it
        lies in ``workdir``, else ``workdir``.  Hands ``workdir`` over first (:meth:`hand_over`)."""
        if not self._entered or self._state is None:
            raise RuntimeError("Sandbox.command() inside `with Sandbox(...) as box:` only")
        if not argv:
            raise ValueError("empty command")
        self.hand_over()
        inner = [*self._rlimit_args(), "--", *self._drop_args(), *argv]
        if self.enabled:
            wrapped = [self._bwrap, *self._bwrap_args(env), "--", *inner]
        else:
            wrapped = ["/usr/bin/env", "-i", *(f"{k}={v}" for k, v in env.items()), *inner]
        return [*self._placement(), *wrapped]

    def _placement(self) -> list[str]:
        """``sh -c`` that joins the cgroups and records its pid and stat line, then execs the rest
        (which keeps its pid).  It fails (125) before running anything if it cannot join."""
        assert self._state is not None
        workdir = shlex.quote(str(self.workdir))
        steps = ["umask 022", f'case "$(pwd -P)/" in {workdir}/*) ;; *) cd {workdir} || exit 125 ;; esac']
        for target in self._cgroups.procs_files if self._cgroups else []:
            steps.append(f"echo $$ > {shlex.quote(str(target))} || "
                         f"{{ echo 'sandbox: cannot join {target}' >&2; exit 125; }}")
        wrappers = shlex.quote(str(self._state / "wrappers"))
        steps.append(f'read -r stat < /proc/$$/stat && echo "$$ $stat" >> {wrappers} || exit 125')
        script = "; ".join(steps) + '; exec "$@"'
        return ["/bin/sh", "-c", script, "dlperf-sandbox"]

    def _rlimit_args(self) -> list[str]:
        limits = self.limits
        args = [self._prlimit, f"--nofile={limits.open_files}:{limits.open_files}",
                f"--fsize={limits.file_bytes}:{limits.file_bytes}", "--core=0:0"]
        if self._cgroups is None:
            if self.gpu_devices is None:
                args.append(f"--as={limits.memory_bytes}:{limits.memory_bytes}")
            args.append(f"--nproc={limits.processes}:{limits.processes}")
        return args

    def _drop_args(self) -> list[str]:
        if not self.drops_privileges:
            return []
        assert self._setpriv is not None
        return [self._setpriv, f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_GID}", "--clear-groups",
                "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]

    def _bwrap_args(self, env: Mapping[str, str]) -> list[str]:
        options = _bwrap_options(self._bwrap)
        args = [*_namespace_flags(userns=not self._root)]
        if not self._root:
            args += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID)]
            if "--disable-userns" in options:
                args.append("--disable-userns")
        # No "--ro-bind / /": the root starts empty and only the allowed paths are bound into it.
        args += ["--die-with-parent", "--new-session", "--dev", "/dev", "--proc", "/proc"]
        args += self._mount_args(options)
        for node in gpu_device_nodes() if self.gpu_devices is not None else []:
            args += ["--dev-bind", str(node), str(node)]
        args += ["--clearenv"]  # no --chdir: bwrap keeps the working directory the wrapper chose
        for key, value in env.items():
            args += ["--setenv", key, value]
        return args

    def hidden(self) -> list[Path]:
        """Paths inside a visible one that are replaced by an empty read-only tmpfs (or, for a file, ``/dev/null``)."""
        return [path for step, path, _ in self._plan() if step in ("tmpfs", "null")]

    def visible(self) -> list[Path]:
        """Every path of the machine the sandbox sees (read-only), besides its workdir and private folders."""
        return [path for step, path, _ in self._plan() if step == "ro-bind"]

    def _plan(self) -> list[tuple[str, Path, str]]:
        return _plan_mounts(self.workdir, self.hide, self.expose, _python_runtime(), SYSTEM_PATHS)

    def _mount_args(self, options: frozenset[str]) -> list[str]:
        """The mount steps of :func:`_plan_mounts` as bwrap options (``--size``/``--perms`` where known)."""
        def sized(n: int) -> list[str]:
            return ["--size", str(n)] if "--size" in options else []

        def perms(mode: str) -> list[str]:
            return ["--perms", mode] if "--perms" in options else []

        args: list[str] = []
        for tmp in PRIVATE_TMPFS:
            args += [*perms("1777"), *sized(self.limits.memory_bytes), "--tmpfs", str(tmp)]
        for step, path, target in self._plan():
            args += {"tmpfs": [*perms("0755"), *sized(2**20), "--tmpfs", str(path)],
                     "null": ["--ro-bind", "/dev/null", str(path)],
                     "symlink": ["--symlink", target, str(path)],
                     "dir": [*perms("0755"), "--dir", str(path)],
                     "ro-bind": ["--ro-bind", str(path), str(path)],
                     "bind": ["--bind", str(path), str(path)],
                     "remount-ro": ["--remount-ro", str(path)]}[step]
        return args

    # -- reports ------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """``peak_memory_bytes``, ``oom_killed``, ``pids_limit_hit`` (``None``: unknown) and ``limits``
        (``cgroup-v1``, ``cgroup-v2`` or ``rlimit``); still valid after the ``with`` block."""
        if self._cgroups is not None:
            return self._cgroups.stats()
        return {"peak_memory_bytes": None, "oom_killed": False, "pids_limit_hit": None, "limits": "rlimit"}

    def describe(self) -> str:
        """One line for logs and grade records: isolation, then limits."""
        parts = []
        if self.enabled:
            user = (f"uid {SANDBOX_UID} (nobody, dropped from root)" if self.drops_privileges
                    else f"uid {SANDBOX_UID} in a user namespace (uid {os.geteuid()} outside)")
            parts += ["bwrap", "no network", user,
                      f"allowlist: {len(self.visible())} paths visible read-only (the system, the Python, "
                      f"{len(self.expose)} exposed)"]
            if self.gpu_devices is not None:
                parts.append(f"GPU {self.gpu_devices or 'none'} ({len(gpu_device_nodes())} device nodes)")
        else:
            parts.append("NOT sandboxed (--no-sandbox): full view of the machine and the network")
        limits = self.limits
        if self._cgroups is not None:
            parts += [f"{self._cgroups.version} memory {_size(limits.memory_bytes)}", f"{limits.processes} pids"]
        elif not self._entered:
            parts.append(f"memory {_size(limits.memory_bytes)}, {limits.processes} processes "
                         "(cgroup or rlimit: decided on entering)")
        else:
            memory = ("no memory limit (GPU: no address-space limit)" if self.gpu_devices is not None
                      else f"address space {_size(limits.memory_bytes)} per process")
            parts += ["rlimit fallback: no writable cgroup", memory,
                      f"{limits.processes} processes per user"]
        parts += [f"files <= {_size(limits.file_bytes)}", f"{limits.open_files} open files"]
        return ", ".join(parts)

    def __repr__(self) -> str:
        return f"Sandbox({str(self.workdir)!r}, name={self.name!r})"

