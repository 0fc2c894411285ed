"""The cgroups and process trees of sandboxes (:mod:`autograder.sandbox`): limits, accounting, kill, sweep.

A sandbox's processes go into a cgroup of their own where the machine delegates one (v2, or the v1
controllers ``memory``, ``pids`` and ``cpu``): its memory and process limits, its peak memory and CPU time,
and one kill for the whole tree.  Without a cgroup, the process tree is walked through ``/proc`` and
killed one process at a time.  A grader killed mid-run leaves groups and folders behind; the next one
sweeps those whose creator is gone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


log = logging.getLogger("autograder.sandbox")

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")
KILL_TIMEOUT_S = 10.0   # how long a killed sandbox may take to be gone


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
    def create(cls, name: str, limits: Any) -> _Cgroups | None:   # limits: an autograder.sandbox.Limits
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

    def _set_limits(self, limits: Any) -> None:
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
