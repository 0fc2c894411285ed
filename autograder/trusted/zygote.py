"""The zygote: starts the processes that run student code, each in namespaces of its own.

A hidden check must never run student code in its own process (the student
could forge its verdict, patch its comparisons or read its source), and must
not *fork* a student process from itself either: a fork would copy the hidden
check's memory into the student's process.  So the check run (or, under plain
``nbgrader autograde``, the kernel) keeps a **zygote**: a process that holds no
secret -- a fork of the check run taken before its job was read
(:meth:`Zygote.fork`), or a fresh interpreter (:meth:`Zygote.spawn`) -- that
has already imported torch and forks a *host* (:mod:`dlperf.grading.host`) in a
few milliseconds whenever a check asks for one.

Each host, where the kernel allows unprivileged user namespaces, gets:

* its own **PID namespace**: it sees no process of the checker's (it cannot
  signal, trace or read the memory of the check run, of the zygote or of
  another host: the ranks of a process group cannot talk around the relay) --
  except where a CUDA device is visible: CUDA cannot start in a new PID
  namespace whose ``/proc`` is the parent's (``cudaGetDeviceCount`` fails with
  error 304, "OS call failed or operation not supported on this OS"; seen on an
  H200, driver 580.159.04, 2026-11-26, where every hidden test of the sample
  class failed so).  There the host shares the check run's PID namespace (the
  sandbox's own): non-dumpable, the check run and the zygote still cannot be
  traced or read, but they can be signalled, which is reported as a crash;
  :meth:`HostProcess.kill` then kills the host's descendants one by one;
* its own **network and IPC namespaces**: no loopback shared with anyone, no
  shared memory segment or abstract socket of anyone else's;
* its own **mount namespace** with private, empty ``/tmp``, ``/dev/shm`` and
  checker's working folders (no writable path is shared with the checker or
  another host; what the interpreter needs of a covered folder -- a checkout or
  a virtual environment under ``/tmp`` -- is bound back, read-only where the
  kernel allows), and the source files of the library objects an exercise
  forbids hidden (read as empty);
* an empty ``/proc`` where it has a PID namespace of its own (the sandbox's ``/proc`` would list the
  other processes, other ranks included, with their names and arguments);
* **no capability** (bounding set cleared, ``no_new_privs``), so it cannot
  undo those mounts;
* the out-of-memory killer's first choice (``oom_score_adj`` 1000): a host that fills the sandbox's
  memory is killed, not the check run.

The checker talks to the host only through the socket(s) it hands over; the
host inherits no other file descriptor.  Where namespaces cannot be made (a
kernel or container that forbids user namespaces) the host is a plain child
process and :attr:`HostProcess.isolation` says why; the check run then stays
out of its reach by being non-dumpable (no ``ptrace``, no ``/proc/<pid>/mem``
for a process of the same user) -- it can still be signalled, which the
autograder reports as a crash of the submission.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dlperf.grading import wire

__all__ = ["HostProcess", "Zygote", "get", "make_non_dumpable", "preload", "set_zygote"]

_libc = ctypes.CDLL(None, use_errno=True)

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_LAST_CAP = 63

# What a host's mount namespace covers with an empty tmpfs, besides the checker's folders.
PRIVATE = ("/tmp", "/dev/shm", "/var/tmp")


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def make_non_dumpable() -> None:
    """No core dump, no ``ptrace`` and no ``/proc/<pid>/{mem,fd,environ}`` for processes of the same user."""
    _check(_libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")


def _die_with_parent() -> None:
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def gpu_visible() -> bool:
    """Whether a host here may use a CUDA device (then it gets no PID namespace of its own: CUDA fails in one)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1", "none", "NoDevFiles"):
        return False
    return os.path.exists("/dev/nvidiactl")


def _enter_namespaces(private: Sequence[str], hide: Sequence[str], pid_namespace: bool = True,
                      network: bool = True, writable: Sequence[str] = (), readable: Sequence[str] = ()) -> None:
    """Unshare user, mount, PID, network, IPC and UTS namespaces; cover ``private`` folders, hide ``hide`` files.

    Runs in the monitor (the host's parent): the host forked next is PID 1 of
    the new PID namespace (none with ``pid_namespace=False``: see the module's docstring).
    ``network=False`` keeps the caller's network namespace (and its loopback); ``writable``: folders
    under a private one that are bound back read-write (a served kernel's submission folder,
    :mod:`autograder.kernel_serve`), ``readable``: read-only, besides what the interpreter needs.
    """
    uid, gid = os.getuid(), os.getgid()
    _check(_libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")  # to write our own uid_map
    _check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | (CLONE_NEWPID if pid_namespace else 0)
                         | (CLONE_NEWNET if network else 0) | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1")
    _check(_libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")  # the host cannot read us
    _check(_libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    covered = {os.path.realpath(p) for p in private if os.path.isdir(p)}
    # outermost only: a tmpfs over /tmp already covers a working folder under /tmp (which, once /tmp is
    # covered, no longer exists to be mounted on)
    covered = sorted(c for c in covered if not any(c != d and c.startswith(d.rstrip(os.sep) + os.sep) for d in covered))
    # What the host's interpreter needs and a private folder would cover (a checkout or a virtual
    # environment under /tmp): held by a descriptor now, bound back over the empty tmpfs afterwards.
    kept = {os.path.realpath(p) for p in writable}
    extra = sorted({os.path.realpath(p) for p in readable if os.path.isdir(p)} - kept)
    held = {path: os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) for path in [*_needed(), *extra, *sorted(kept)]
            if any(path == c or path.startswith(c.rstrip(os.sep) + os.sep) for c in covered)}
    for path in covered:
        _check(_libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV,
                           b"size=1073741824,mode=1777"), f"mount tmpfs {path}")
    for path, fd in held.items():
        os.makedirs(path, exist_ok=True)
        _check(_libc.mount(f"/proc/self/fd/{fd}".encode(), path.encode(), None, MS_BIND | MS_REC, None),
               f"bind {path} back")
        # read-only for the host where the kernel lets us (a bind from a read-only mount stays read-only)
        if path not in kept:
            _libc.mount(None, path.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
        os.close(fd)
    for path in hide:
        if os.path.isfile(path):
            _check(_libc.mount(b"/dev/null", path.encode(), None, MS_BIND, None), f"hide {path}")
    if pid_namespace:
        # The /proc mounted here is the sandbox's: it lists every process of the check run's PID namespace,
        # other hosts included, with their names and arguments, which a host could read (or set, for the
        # others to read: a channel around the relay).  A fresh /proc for the new PID namespace cannot be
        # mounted inside bubblewrap (it covers parts of its /proc), so /proc is an empty tmpfs here.
        _check(_libc.mount(b"tmpfs", b"/proc", b"tmpfs", MS_NOSUID | MS_NODEV, b"size=4096,mode=555"),
               "mount tmpfs /proc")


def _needed() -> list[str]:
    """The folders a host's interpreter needs: the Python installation, the virtual environment, and
    the ``dlperf`` package (not the checkout around it); outermost only."""
    import dlperf

    paths = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                           os.path.dirname(os.path.realpath(sys.executable)),
                                           os.path.dirname(os.path.realpath(dlperf.__file__))) if os.path.isdir(p)}
    return sorted(p for p in paths if not any(p != q and p.startswith(q.rstrip(os.sep) + os.sep) for q in paths))


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_capabilities() -> None:
    """Clear the bounding, ambient, effective, permitted and inheritable sets; set ``no_new_privs``."""
    for cap in range(_LAST_CAP + 1):
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(0x20080522, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


def _close_other_fds(keep: set[int]) -> None:
    try:
        open_fds = [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        open_fds = list(range(3, 1024))
    for fd in open_fds:
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def _run_host(channel: int, relay: int | None, output: int | None, isolated: bool) -> None:
    """In the host (after the last fork): its own session, clean descriptors, no capability, then serve."""
    _die_with_parent()
    # A session and process group of its own: kill(0) and killpg() from student code reach the host's
    # processes only (the checker's process group spans PID namespaces).
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    out = output if output is not None else devnull
    os.dup2(devnull, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    keep = {0, 1, 2, channel} | ({relay} if relay is not None else set())
    _close_other_fds(keep)
    sys.stdout = open(1, "w", closefd=False, buffering=1)  # noqa: SIM115 - lives as long as the process
    sys.stderr = open(2, "w", closefd=False, buffering=1)  # noqa: SIM115
    if isolated:
        _drop_capabilities()
    with contextlib.suppress(OSError):
        os.chdir("/tmp")
    from dlperf.grading.host import serve

    serve(channel, relay)


def _first_to_die() -> None:
    """Make this process (and what it forks: the host) the out-of-memory killer's first choice.

    Hosts share the check run's sandbox and so its memory limit; a host that fills it must be the one
    killed (the check then fails for that solution), never the check run, which would take every
    later cell of the submission with it.  Raising one's own ``oom_score_adj`` needs no privilege.
    """
    with contextlib.suppress(OSError):
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")


def _monitor(request: dict[str, Any], fds: list[int], report: int) -> None:
    """In the monitor: namespaces (if asked and possible), then fork the host and wait for it."""
    _die_with_parent()
    _first_to_die()
    for module in request.get("preload", []):   # before their source files are hidden
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
    gc.freeze()   # what the modules just made, too (see _zygote_main)
    isolation, why = "process", ""
    pid_namespace = False
    if request.get("isolate", True):
        try:
            pid_namespace = bool(request.get("pid_namespace", not gpu_visible()))
            _enter_namespaces(request.get("private", []), request.get("hide", []), pid_namespace)
            isolation = "namespaces"
        except OSError as exc:
            why = str(exc)
    channel = fds[0]
    relay = fds[1] if request.get("relay") else None
    output = fds[-1] if request.get("capture") else None
    pid = os.fork()
    if pid == 0:
        try:
            os.close(report)
            _run_host(channel, relay, output, isolation == "namespaces")
        finally:
            os._exit(0)
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    os.write(report, json.dumps({"pid": pid, "isolation": isolation, "why": why,
                                 "pid_namespace": pid_namespace and isolation == "namespaces"}).encode())
    os.close(report)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except ChildProcessError:
            status = 0
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        os._exit(128 + os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _zygote_main(sock: socket.socket) -> None:
    """The zygote's loop: one request per host (its sockets come with it), a reply with its pid.

    Every object alive now (torch's and the library's, some 300,000) is moved to the collector's permanent
    generation (``gc.freeze``, Python's advice for a process that forks without exec): a host's
    collections, and the census a probe takes with ``gc.get_objects()``, then walk only what was made
    after the fork (the student's objects, the probe's), not torch's every time (0.15 s per full
    collection, and each walk copies the pages it touches out of the shared memory).
    """
    _die_with_parent()
    from dlperf.grading.host import index_globals

    index_globals()   # where the module globals sit, for the hosts' forbid (a check run's fork has it already)
    gc.freeze()
    chan = wire.Channel(sock)
    chan.send({"op": "ready"})
    statuses: dict[int, int] = {}

    def reap() -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            statuses[pid] = os.waitstatus_to_exitcode(status)

    while True:
        try:
            request, _, fds = chan.recv()
        except (EOFError, OSError, wire.WireError):
            os._exit(0)
        reap()
        op = request.get("op")
        if op == "host":
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:
                try:
                    os.close(read_end)
                    sock.close()
                    _monitor(request, fds, write_end)
                finally:
                    os._exit(1)
            os.close(write_end)
            for fd in fds:
                os.close(fd)
            with os.fdopen(read_end, "rb") as f:
                data = f.read()
            try:
                info = json.loads(data) if data else {"error": "the monitor died before starting the host"}
            except json.JSONDecodeError:
                info = {"error": "the monitor sent no report"}
            chan.send({"op": "host", "monitor": pid, **info})
        elif op == "status":
            pid = int(request.get("monitor", -1))
            deadline = time.monotonic() + float(request.get("wait", 1.0))
            while pid not in statuses and time.monotonic() < deadline:
                reap()
                time.sleep(0.01)
            chan.send({"op": "status", "exitcode": statuses.pop(pid, None)})
        elif op == "exit":
            os._exit(0)


# ---------------------------------------------------------------------------------------------
# The checker's side
# ---------------------------------------------------------------------------------------------


@dataclass
class HostProcess:
    """A started host: its channel socket (and relay socket), pids, and how it is isolated."""

    sock: socket.socket
    relay: socket.socket | None
    output: int | None
    pid: int                # the host (PID 1 of its namespace when isolated), in the checker's PID namespace
    monitor: int            # its parent, which reports its exit status
    isolation: str          # "namespaces" or "process"
    why: str                # why not namespaces, when not
    zygote: Zygote
    pid_namespace: bool = False   # PID 1 of its own PID namespace (not where a CUDA device is visible)

    def kill(self) -> None:
        """SIGKILL the host: everything in its PID namespace dies with it; its monitor reaps it and exits.
        Without a PID namespace of its own, its descendants are killed first, one by one."""
        if not self.pid_namespace:
            with contextlib.suppress(OSError):
                self.signal_all(signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.pid, signal.SIGKILL)

    def exitcode(self, wait: float = 1.0) -> int | None:
        """How the host ended (negative: killed by that signal), or None if not known (yet)."""
        code = self.zygote.status(self.monitor, wait)
        if code is not None and code > 128:
            return -(code - 128)
        return code

    def descendants(self) -> list[int]:
        """The host and every process below it (all of its PID namespace), from ``/proc``."""
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        text = f.read()
                except OSError:
                    continue
                fields = text[text.rindex(")") + 2:].split()
                if fields[0] != "Z":
                    children.setdefault(int(fields[1]), []).append(int(entry))
        found, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            if pid not in found:
                found.append(pid)
                todo.extend(children.get(pid, []))
        return found

    def signal_all(self, sig: int) -> None:
        """Send ``sig`` to the host and everything below it (until no new process appears)."""
        done: set[int] = set()
        for _ in range(20):
            pids = [p for p in self.descendants() if p not in done]
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
                done.add(pid)


class Zygote:
    """The checker's handle on its zygote: :meth:`host` starts one host."""

    def __init__(self, sock: socket.socket, pid: int, how: str, process: subprocess.Popen | None = None):
        self.chan = wire.Channel(sock)
        self.pid = pid
        self.how = how
        self.process = process
        self.lock = threading.Lock()
        header, _, _ = self.chan.recv()
        if header.get("op") != "ready":
            raise RuntimeError("the zygote did not start")

    @classmethod
    def fork(cls) -> Zygote:
        """A fork of this process, taken now: call it before this process holds anything secret."""
        parent, child = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            try:
                parent.close()
                _zygote_main(child)
            finally:
                os._exit(0)
        child.close()
        return cls(parent, pid, "a fork of the check run taken before its job was read")

    @classmethod
    def spawn(cls) -> Zygote:
        """A fresh interpreter that imports torch and the host (about as long as one ``import torch``)."""
        parent, child = socket.socketpair()
        process = subprocess.Popen([sys.executable, "-m", "autograder.trusted.zygote", str(child.fileno())],
                                   pass_fds=[child.fileno()], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True)
        child.close()
        return cls(parent, process.pid, "a fresh interpreter", process)

    def host(self, *, relay: bool = False, capture: bool = False, isolate: bool = True,
             hide: Sequence[str] = (), private: Sequence[str] = (), preload: Sequence[str] = (),
             pid_namespace: bool | None = None) -> HostProcess:
        """Start a host; its channel (and relay) socket are returned, the host ends when they close.
        ``pid_namespace``: whether it gets a PID namespace of its own (default: unless a CUDA device is
        visible, :func:`gpu_visible`)."""
        ours, theirs = socket.socketpair()
        fds = [theirs.fileno()]
        relay_ours = relay_theirs = None
        if relay:
            relay_ours, relay_theirs = socket.socketpair()
            fds.append(relay_theirs.fileno())
        output = None
        if capture:
            output = os.memfd_create("host-output")
            fds.append(output)
        request = {"op": "host", "relay": relay, "capture": capture, "isolate": isolate, "hide": list(hide),
                   "private": sorted(set(PRIVATE) | set(private)), "preload": list(preload)}
        if pid_namespace is not None:
            request["pid_namespace"] = pid_namespace
        with self.lock:
            self.chan.send(request, fds=fds)
            reply, _, _ = self.chan.recv()
        theirs.close()
        if relay_theirs is not None:
            relay_theirs.close()
        if "error" in reply:
            ours.close()
            raise RuntimeError(f"could not start a process for the student's code: {reply['error']}")
        return HostProcess(ours, relay_ours, output, int(reply["pid"]), int(reply["monitor"]),
                           str(reply["isolation"]), str(reply.get("why", "")), self,
                           bool(reply.get("pid_namespace", False)))

    def status(self, monitor: int, wait: float = 1.0) -> int | None:
        with self.lock:
            self.chan.send({"op": "status", "monitor": monitor, "wait": wait})
            reply, _, _ = self.chan.recv()
        return reply.get("exitcode")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.chan.close()
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(self.pid, signal.SIGKILL)
            if self.process is not None:
                self.process.wait(5)
            else:
                os.waitpid(self.pid, 0)


_zygote: Zygote | None = None
_zygote_lock = threading.Lock()


def set_zygote(zygote: Zygote | None) -> None:
    """Make ``zygote`` the one :func:`get` returns (the check run forks its own at warm-up)."""
    global _zygote
    _zygote = zygote


def get() -> Zygote:
    """This process's zygote: the one set by the check run, else a fresh interpreter started once."""
    global _zygote
    with _zygote_lock:
        if _zygote is None:
            _zygote = Zygote.spawn()
        return _zygote


def preload() -> None:
    """Import, once, what every host needs, so that each host (a fork) starts with it.

    ``torch._dynamo`` is what the first ``optimizer.step()`` of a process imports (about a second on
    the 2-core CI machine, paid again by every host that trains a model); importing it starts no thread,
    so forking afterwards is safe.
    """
    import torch
    import torch._dynamo  # noqa: F401

    # The CPU's vector extensions are detected once, from /proc/cpuinfo, at the first call: a host sees an
    # empty /proc, so without this it would run every kernel on the DEFAULT (non-vectorised) path, whose
    # rounding differs in the last bit from the checker's AVX2/AVX-512 results (gradscaler's step test
    # failed so).  Detected here, the answer is inherited by every fork.
    torch.backends.cpu.get_cpu_capability()

    import dlperf.grading.host  # noqa: F401
    import dlperf.grading.relay  # noqa: F401


def _spawned_main(fd: int) -> None:
    """``python -m autograder.trusted.zygote FD``: import what hosts use, then serve on FD."""
    preload()
    _zygote_main(socket.socket(fileno=fd))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m autograder.trusted.zygote FD")
    _spawned_main(int(sys.argv[1]))

