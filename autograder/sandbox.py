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
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .cgroups import (  # noqa: F401  (sweep_stale_* and the cgroup helpers are used through this module too)
    CGROUP_ROOT, KILL_TIMEOUT_S, PROC_SELF_CGROUP, _Cgroups, _kill_trees, _read, _stat_fields, _v1_parents,
    _v2_parent, sweep_stale_cgroups, sweep_stale_folders,
)

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
        """A clean environment; nothing comes from ``os.environ``.

        ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``: malloc's heap asks for transparent huge pages (where the
        kernel gives them only to who asks, ``madvise``).  The check run and the kernel server fork a
        process per host and per submission from a parent holding ~220 MB of torch's memory, half of it
        malloc's heap; in huge pages its page tables are 512 times smaller, so each fork copies and each
        exit frees that much less (fork + exit of a torch process here: 9.7 -> 6.0 ms of system time).
        """
        return {
            "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1",
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

