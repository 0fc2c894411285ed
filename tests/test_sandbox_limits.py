"""The sandbox's limits and lifecycle (``autograder/sandbox.py``) against real bubblewrap, cgroups and rlimits:
memory, processes, files, killing what is left, sweeping what a killed grader left, GPUs, kernels over IPC.

Every test runs real processes; tests skip only where this machine lacks the facility.
"""


import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from autograder import cgroups, sandbox
from autograder.sandbox import Limits, Sandbox

from sandbox_tools import (MiB, course, marker_pids, needs_bwrap, no_cgroups, outside, require_cgroups,  # noqa: F401
                           run, wait_for)


# ---------------------------------------------------------------------------------------------
# Limits
# ---------------------------------------------------------------------------------------------

HOG = """
try:
    data = b"x" * (1 << 30)   # 1 GiB, every page touched
    print("allocated")
except MemoryError:
    print("MemoryError")
"""


@needs_bwrap
def test_memory_hog_is_killed_by_the_cgroup(tmp_path: Path) -> None:
    with Sandbox(tmp_path / "job", limits=Limits(memory_bytes=256 * MiB)) as box:
        require_cgroups(box)
        out = run(box, HOG)
        stats = box.stats()
    assert "allocated" not in out.stdout
    assert out.returncode == 137 or "MemoryError" in out.stdout, (out.returncode, out.stdout, out.stderr)
    assert stats["oom_killed"] is True or "MemoryError" in out.stdout, stats
    assert stats["peak_memory_bytes"] is not None and stats["peak_memory_bytes"] <= 256 * MiB
    assert box.stats() == stats  # kept after the cgroup is gone


@needs_bwrap
def test_memory_hog_gets_memory_error_from_rlimit(tmp_path: Path, no_cgroups: None) -> None:
    with Sandbox(tmp_path / "job", limits=Limits(memory_bytes=256 * MiB)) as box:
        out = run(box, HOG)
        assert box.stats() == {"peak_memory_bytes": None, "oom_killed": False, "pids_limit_hit": None,
                               "limits": "rlimit"}
        assert "rlimit fallback" in box.describe() and "address space 256 MiB" in box.describe()
    assert out.stdout.strip() == "MemoryError", (out.returncode, out.stdout, out.stderr)


def _uid(pid: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


FORK_BOMB = """
import os, sys, time
print("started", flush=True)
end = time.time() + 30   # guards: the test kills it long before, and without a limit
forks = 0                # the tree stops at 2**8 = 256 processes
while forks < 8 and time.time() < end:
    try:
        os.fork()
        forks += 1
    except OSError:
        time.sleep(0.05)
while time.time() < end:
    time.sleep(0.5)
"""


@needs_bwrap
@pytest.mark.parametrize("mode", ["cgroup", "rlimit"])
def test_fork_bomb_is_bounded_and_killed(tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if mode == "rlimit":
        if os.geteuid() != 0:
            pytest.skip("RLIMIT_NPROC counts all the caller's processes: not tried on a user's machine")
        monkeypatch.setattr(cgroups, "CGROUP_ROOT", tmp_path / "no-cgroup-here")
    marker = f"forkbomb-{uuid.uuid4().hex}"
    limit = 24
    if mode == "rlimit":   # RLIMIT_NPROC counts every process of the sandbox's user (nobody), other graders' too
        limit += sum(1 for pid in os.listdir("/proc") if pid.isdigit() and _uid(pid) == 65534)
    started = time.monotonic()
    with Sandbox(tmp_path / "job", limits=Limits(processes=limit)) as box:
        if mode == "cgroup":
            require_cgroups(box)
        groups = [] if box._cgroups is None else list(box._cgroups.dirs.values())
        argv = box.command([sys.executable, "-c", FORK_BOMB, marker], box.base_env())
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
        time.sleep(1.5)
        running = marker_pids(marker, python_only=True)
        stats = box.stats()
    assert 1 < len(running) <= limit
    if mode == "cgroup":
        assert stats["pids_limit_hit"] is True
        assert not any(g.exists() for g in groups), "cgroup directories left behind"
    assert proc.wait(5) != 0
    assert wait_for(lambda: not marker_pids(marker), 2.0), marker_pids(marker)
    assert time.monotonic() - started < 15


STUBBORN = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:           # a daemon: a new session, its parent gone
    os.setsid()
    if os.fork() == 0:
        while True:
            time.sleep(1)
    os._exit(0)
print("ready", flush=True)
while True:
    time.sleep(1)
"""


@needs_bwrap
@pytest.mark.parametrize("mode", ["cgroup", "rlimit"])
def test_kill_ends_processes_that_ignore_sigterm(tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if mode == "rlimit":
        monkeypatch.setattr(cgroups, "CGROUP_ROOT", tmp_path / "no-cgroup-here")
    marker = f"stubborn-{uuid.uuid4().hex}"
    with Sandbox(tmp_path / "job") as box:
        if mode == "cgroup":
            require_cgroups(box)
        argv = box.command([sys.executable, "-c", STUBBORN, marker], box.base_env())
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        assert wait_for(lambda: len(marker_pids(marker)) >= 2), marker_pids(marker)
        box.kill()
        assert proc.wait(5) != 0
        assert wait_for(lambda: not marker_pids(marker), 2.0), marker_pids(marker)
        box.kill()  # twice is fine


@needs_bwrap
def test_exit_kills_what_is_left(tmp_path: Path) -> None:
    marker = f"leftover-{uuid.uuid4().hex}"
    with Sandbox(tmp_path / "job") as box:
        argv = box.command([sys.executable, "-c", STUBBORN, marker], box.base_env())
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    assert proc.wait(5) != 0
    assert wait_for(lambda: not marker_pids(marker), 2.0), marker_pids(marker)


@needs_bwrap
def test_placement_fails_closed(tmp_path: Path) -> None:
    """If the wrapper cannot join its cgroup, nothing runs."""
    with Sandbox(tmp_path / "job") as box:
        require_cgroups(box)
        assert box._cgroups is not None
        group = next(iter(box._cgroups.dirs.values()))
        group.rmdir()
        out = run(box, "open('ran', 'w').close()")
    assert out.returncode == 125 and "cannot join" in out.stderr
    assert not (tmp_path / "job" / "ran").exists()


@needs_bwrap
def test_file_size_limit(tmp_path: Path) -> None:
    with Sandbox(tmp_path / "job", limits=Limits(file_bytes=64 * MiB)) as box:
        out = run(box, """
            import errno, sys
            chunk = b"\\0" * (1 << 20)
            try:
                with open("big", "wb") as f:
                    for _ in range(600):
                        f.write(chunk)
            except OSError as exc:
                print(errno.errorcode[exc.errno])
                sys.exit(3)
            print("wrote 600 MiB")
        """)
    assert out.returncode == 3 and out.stdout.strip() == "EFBIG", (out.returncode, out.stdout, out.stderr)
    assert (tmp_path / "job" / "big").stat().st_size <= 64 * MiB


def test_disabled_runs_unsandboxed_with_limits(course: Path, tmp_path: Path) -> None:
    limits = Limits(file_bytes=32 * MiB, open_files=200)
    with Sandbox(tmp_path / "job", hide=[course / "course"], enabled=False, limits=limits) as box:
        out = run(box, """
            import json, os, resource, sys
            print(json.dumps({"secret": open(sys.argv[1]).read(), "uid": os.getuid(), "cwd": os.getcwd(),
                              "fsize": resource.getrlimit(resource.RLIMIT_FSIZE),
                              "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)}))
        """, str(course / "course" / "secret.txt"))
        description = box.describe()
        assert not any("bwrap" in arg for arg in box.command(["true"], {}))
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["secret"] == "hidden tests\n" and seen["uid"] == os.getuid() and seen["cwd"] == str(tmp_path / "job")
    assert seen["fsize"] == [32 * MiB, 32 * MiB] and seen["nofile"] == [200, 200]
    assert description.startswith("NOT sandboxed")


@needs_bwrap
def test_gpu_devices_are_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_cgroups: None) -> None:
    monkeypatch.setattr(sandbox, "GPU_DEVICE_GLOBS", ("/dev/nul[l]", "/dev/zero", "/dev/no-such-gpu*"))
    with Sandbox(tmp_path / "job", gpu_devices="1") as box:
        env = box.base_env()
        code = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'], len(open('/dev/zero', 'rb').read(8)))"
        argv = box.command([sys.executable, "-c", code], env)
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert "GPU 1 (2 device nodes)" in box.describe()
    pairs = list(zip(argv, argv[1:], argv[2:]))
    assert ("--dev-bind", "/dev/null", "/dev/null") in pairs and ("--dev-bind", "/dev/zero", "/dev/zero") in pairs
    assert ("--setenv", "CUDA_VISIBLE_DEVICES", "1") in pairs and env["CUDA_VISIBLE_DEVICES"] == "1"
    assert not any(a.startswith("--as=") for a in argv), "RLIMIT_AS breaks CUDA"
    assert out.stdout.split() == ["1", "8"], out.stderr

    with Sandbox(tmp_path / "cpu") as box:
        argv = box.command(["true"], box.base_env())
    assert "--dev-bind" not in argv and any(a.startswith("--as=") for a in argv)


def test_cgroup_v2_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a v2 machine (a fake tree here): the job's group is made beside the grader's, with its limits."""
    root = tmp_path / "cgroup"
    slice_ = root / "grader.slice"
    own = slice_ / "grader.scope"
    own.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu io memory pids\n")
    (slice_ / "cgroup.subtree_control").write_text("memory pids\n")
    (own / "cgroup.procs").write_text(f"{os.getpid()}\n")
    (own / "cgroup.subtree_control").mkdir()  # unwritable, as a group with processes refuses (EBUSY)
    self_cgroup = tmp_path / "self-cgroup"
    self_cgroup.write_text("0::/grader.slice/grader.scope\n")
    monkeypatch.setattr(cgroups, "CGROUP_ROOT", root)
    monkeypatch.setattr(cgroups, "PROC_SELF_CGROUP", self_cgroup)

    groups = sandbox._Cgroups.create("dlperf-t", Limits(memory_bytes=512 * MiB, processes=17))
    assert groups is not None and groups.version == "cgroup-v2"
    group = slice_ / "dlperf-t"
    assert groups.dirs == {"unified": group} and groups.procs_files == [group / "cgroup.procs"]
    assert (group / "memory.max").read_text() == str(512 * MiB)
    assert (group / "pids.max").read_text() == "17" and (group / "memory.swap.max").read_text() == "0"
    (group / "memory.events").write_text("low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n")
    (group / "pids.events").write_text("max 3\n")
    (group / "memory.peak").write_text(f"{300 * MiB}\n")
    assert groups.stats() == {"peak_memory_bytes": 300 * MiB, "oom_killed": True, "pids_limit_hit": True,
                              "limits": "cgroup-v2"}

    (slice_ / "cgroup.subtree_control").write_text("cpu\n")  # memory and pids not delegated: no cgroup
    assert sandbox._Cgroups.create("dlperf-u", Limits()) is None


@needs_bwrap
def test_describe(tmp_path: Path, course: Path) -> None:
    with Sandbox(tmp_path / "job", hide=[course / "course"], limits=Limits(memory_bytes=2 * 2**30)) as box:
        line = box.describe()
    assert line.startswith("bwrap, no network, uid 65534")
    assert "files <= 256 MiB" in line and "1024 open files" in line
    assert ("memory 2 GiB" in line and "256 pids" in line) or "address space 2 GiB" in line


@needs_bwrap
def test_jupyter_kernel_over_ipc(tmp_path: Path) -> None:
    """The grader's use: an ipykernel in the sandbox, ipc transport, interrupted by message."""
    pytest.importorskip("ipykernel")
    from jupyter_client import KernelManager

    workdir = tmp_path / "job"
    with Sandbox(workdir) as box:
        class SandboxedKernelManager(KernelManager):
            def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
                return box.command(super().format_kernel_cmd(extra_arguments), box.base_env())

        km = SandboxedKernelManager(transport="ipc", ip=str(workdir / "ipc"),
                                    connection_file=str(workdir / "kernel.json"))
        km.kernel_spec.interrupt_mode = "message"
        km.start_kernel()
        kc = km.client()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=60)
            outputs: list[str] = []

            def keep(msg: dict) -> None:
                if msg["msg_type"] == "stream":
                    outputs.append(msg["content"]["text"])

            kc.execute_interactive("import os; print(os.getuid())", timeout=30, output_hook=keep)
            assert outputs == [f"{box.uid}\n"]
            timer = threading.Timer(1.0, km.interrupt_kernel)
            timer.start()
            reply = kc.execute_interactive("import time; time.sleep(30)", timeout=20)
            timer.join()
            assert reply["content"]["ename"] == "KeyboardInterrupt" and km.is_alive()
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)


def test_stale_cgroups_of_a_killed_grader_are_swept() -> None:
    """Groups named after a creator that is gone and holding no process are removed; others stay."""
    from autograder import sandbox

    parents = list((sandbox._v1_parents() or {}).values())
    if not parents and sandbox._v2_parent() is None:
        pytest.skip("no writable cgroup here (not root, or no delegation)")
    parent = parents[0] if parents else sandbox._v2_parent()
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = parent / f"dlperf-test-{gone.pid}-0"
    alive = parent / f"dlperf-test-{os.getpid()}-0"
    stale.mkdir()
    alive.mkdir()
    try:
        removed = sandbox.sweep_stale_cgroups()
        assert stale in removed and not stale.exists()
        assert alive.exists() and alive not in removed
    finally:
        for group in (stale, alive):
            if group.exists():
                group.rmdir()


def test_stale_folders_of_a_killed_grader_are_swept(tmp_path: Path) -> None:
    """Temporary folders named after a creator that is gone are removed; ours and others' stay."""
    from autograder import sandbox

    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = [tmp_path / f"dlperf-sub-{gone.pid}-3-ab_12cd", tmp_path / f"dlperf-checks-{gone.pid}-5-x9y8z7w6"]
    alive = tmp_path / f"dlperf-kernel-{os.getpid()}-2-q1w2e3r4"
    other = tmp_path / f"dlperf-release-{gone.pid}"       # not a sandbox's name: left alone
    for folder in (*stale, alive, other):
        (folder / "kernel").mkdir(parents=True)
        (folder / "kernel" / "notebook.ipynb").write_text("{}")
    removed = sandbox.sweep_stale_folders(tmp_path)
    assert sorted(removed) == sorted(stale) and not any(f.exists() for f in stale)
    assert alive.exists() and other.exists()


def test_another_environments_site_packages_on_the_path_are_exposed(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # The GPU images' python3 is itself a virtual environment (/opt/torch/.venv): scripts/setup.sh adds its
    # site-packages to .venv by a .pth file, and the sandbox must bind them (else torch is missing inside).
    # A checkout on the path (an editable install) is not exposed that way.
    other = tmp_path / "opt" / "torch" / ".venv" / "lib" / "python3.12" / "site-packages"
    checkout = tmp_path / "checkout"
    other.mkdir(parents=True)
    checkout.mkdir()
    monkeypatch.setattr(sys, "path", [*sys.path, str(other), str(checkout)])
    runtime = sandbox._python_runtime()
    assert other in runtime
    assert not any(p == checkout or checkout in p.parents for p in runtime)
