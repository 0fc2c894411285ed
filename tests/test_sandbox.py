"""The autograder's sandbox (``autograder/sandbox.py``) against real bubblewrap, cgroups and rlimits.

Every test runs real processes.  Tests skip only where this machine lacks the
facility: no usable bwrap, or (for cgroup tests) not root / no writable cgroup.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from autograder import cgroups, sandbox
from autograder.sandbox import Limits, Sandbox, SandboxUnavailable

MiB = 2**20


def _bwrap_problem() -> str | None:
    try:
        sandbox.check_available()
    except SandboxUnavailable as exc:
        return str(exc)
    return None


BWRAP_PROBLEM = _bwrap_problem()
needs_bwrap = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"no usable bwrap: {BWRAP_PROBLEM}")


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# Availability
# ---------------------------------------------------------------------------------------------


def test_check_available_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: str(tmp_path / "missing" / "bwrap"))
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap") as info:
        sandbox.check_available()
    assert "--no-sandbox" in str(info.value)
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        Sandbox(tmp_path / "job")
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        sandbox.check_available()
    Sandbox(tmp_path / "job", enabled=False)  # --no-sandbox needs no bwrap


# ---------------------------------------------------------------------------------------------
# Isolation
# ---------------------------------------------------------------------------------------------

READ = """
import json, os, sys
def read(path):
    try:
        return open(path).read()
    except OSError as exc:
        return type(exc).__name__
def listing(path):
    try:
        return sorted(os.listdir(path))
    except OSError as exc:
        return type(exc).__name__
root = sys.argv[1]
print(json.dumps({"secret": read(f"{root}/course/secret.txt"), "ok": read(f"{root}/course/pkg/ok.txt"),
                  "key": read(f"{root}/private/key"), "course": listing(f"{root}/course"),
                  "tests": listing(f"{root}/course/pkg/tests"), "private": listing(f"{root}/private"),
                  "top": listing("/"), "uid": os.getuid()}))
"""


@needs_bwrap
def test_an_exposed_folder_under_tmp_is_bound_on_top_of_the_private_tmp(tmp_path: Path) -> None:
    """A clone of the course under /tmp (with its .venv: a fresh clone in CI, a test's clone) is usable inside."""
    root = tmp_path / "clone"
    (root / "course" / "pkg" / "tests").mkdir(parents=True)
    (root / "course" / "secret.txt").write_text("hidden tests\n")
    (root / "course" / "pkg" / "ok.txt").write_text("exposed\n")
    (root / "course" / "pkg" / "tests" / "hidden.py").write_text("answers\n")
    for path in [root, root / "course", root / "course" / "pkg", root / "course" / "pkg" / "tests"]:
        path.chmod(0o755)
    (tmp_path / "beside.txt").write_text("not for the sandbox\n")
    with Sandbox(tmp_path / "job", hide=[root / "course" / "pkg" / "tests"], expose=[root / "course" / "pkg"]) as box:
        out = run(box, READ + "\nprint(json.dumps(read(sys.argv[2])))", str(root), str(tmp_path / "beside.txt"))
        assert Path("/tmp") not in box.visible() and root / "course" / "pkg" in box.visible()
    assert out.returncode == 0, out.stderr
    seen, beside = map(json.loads, out.stdout.splitlines())
    assert seen["ok"] == "exposed\n" and seen["tests"] == []      # exposed, and hidden inside it
    assert seen["secret"] == "FileNotFoundError" and beside == "FileNotFoundError"


@needs_bwrap
def test_only_the_allowlist_exists_inside(course: Path, tmp_path: Path) -> None:
    with Sandbox(tmp_path / "bare") as box:  # nothing of the machine but the system and the Python
        seen = json.loads(run(box, READ, str(course)).stdout)
        visible = box.visible()
    assert seen["secret"] == seen["key"] == "FileNotFoundError" and seen["course"] == "FileNotFoundError"
    assert not {"home", "srv", "opt", "mnt", "run", "var", "media"} & set(seen["top"]), seen["top"]
    assert Path("/usr") in visible and Path("/etc") in visible and not any(p == course for p in visible)

    with Sandbox(tmp_path / "job", hide=[course / "course" / "pkg" / "tests"], expose=[course / "course" / "pkg"]) as box:
        out = run(box, READ, str(course))
        assert box.hidden() == [course / "course" / "pkg" / "tests"]
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["secret"] == "FileNotFoundError"      # beside the exposed folder: not there
    assert seen["key"] == "FileNotFoundError" and seen["private"] == "FileNotFoundError"
    assert seen["course"] == ["pkg"]
    assert seen["tests"] == []  # hidden inside the exposed path
    assert seen["ok"] == "exposed\n"
    assert seen["uid"] == 65534


WRITE = """
import errno, json, os, sys
workdir, root, marker = sys.argv[1:4]
def write(path):
    try:
        with open(path, "w") as f:
            f.write("x")
        return "ok"
    except OSError as exc:
        return errno.errorcode[exc.errno]
print(json.dumps({p: write(p) for p in [f"{workdir}/w", f"/tmp/{marker}", f"/dev/shm/{marker}",
                  f"{root}/course/new", f"{root}/course/pkg/new", f"{root}/new", "/var/tmp/" + marker,
                  "/etc/" + marker, os.path.expanduser("~/.profile")]}))
"""


@needs_bwrap
def test_writes_only_in_workdir_and_private_tmp(course: Path, tmp_path: Path) -> None:
    marker = f"sandbox-{uuid.uuid4().hex}"
    workdir = tmp_path / "job"
    (course / "course" / "pkg").chmod(0o777)  # only the read-only bind stops a write there
    with Sandbox(workdir, hide=[course / "course"], expose=[course / "course" / "pkg"]) as box:
        out = run(box, WRITE, str(workdir), str(course), marker)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result[f"{course}/course/pkg/new"] == "EROFS" and result[f"/etc/{marker}"] == "EROFS"
    assert result[f"/var/tmp/{marker}"] in ("ENOENT", "EACCES")   # only the folders on the way to an exposed path
    allowed = {f"{workdir}/w", f"/tmp/{marker}", f"/dev/shm/{marker}", str(workdir / ".profile")}
    assert {p for p, r in result.items() if r == "ok"} == allowed, result
    assert (workdir / "w").read_text() == "x"
    assert not Path(f"/tmp/{marker}").exists() and not Path(f"/dev/shm/{marker}").exists()
    assert not (course / "new").exists() and not Path(f"/var/tmp/{marker}").exists()


@needs_bwrap
def test_files_written_inside_stay_the_callers(tmp_path: Path) -> None:
    workdir = tmp_path / "job"
    with Sandbox(workdir) as box:
        out = run(box, """
            import os
            os.makedirs("d/e", mode=0o700)
            with open(os.open("d/e/f", os.O_CREAT | os.O_WRONLY, 0o600), "w") as f:
                f.write("result")
            os.chmod("d", 0o500)
        """)
    assert out.returncode == 0, out.stderr
    assert (workdir / "d" / "e" / "f").read_text() == "result"
    if os.geteuid() != 0:
        (workdir / "d").chmod(0o700)  # the caller owns it (user namespace): it may open it up
    shutil.rmtree(workdir)
    assert not workdir.exists()


@needs_bwrap
def test_workdir_is_handed_over_without_following_links(tmp_path: Path, outside: Path) -> None:
    """What the caller puts in workdir (a 0600 connection file) is the sandbox's; links are not followed."""
    workdir = tmp_path / "job"
    precious = outside / "precious"
    precious.write_text("grader's")
    precious.chmod(0o600)
    with Sandbox(workdir) as box:
        (workdir / "sub").mkdir()
        connection = workdir / "sub" / "kernel.json"
        connection.write_text("{}")
        connection.chmod(0o600)
        (workdir / "link").symlink_to(precious)
        out = run(box, "import sys; print(open(sys.argv[1]).read()); open('sub/new', 'w').close()", str(connection))
    assert out.returncode == 0 and out.stdout.strip() == "{}", out.stderr
    assert precious.stat().st_uid == os.getuid() and precious.read_text() == "grader's"
    assert (workdir / "sub" / "kernel.json").stat().st_uid == box.uid


@needs_bwrap
def test_working_directory(tmp_path: Path) -> None:
    """The launcher's cwd where it lies in workdir (nbclient's ``path``), else workdir."""
    workdir = tmp_path / "job"
    (workdir / "home").mkdir(parents=True)
    with Sandbox(workdir) as box:
        argv = box.command([sys.executable, "-c", "import os; print(os.getcwd())"], box.base_env())
        inside = subprocess.run(argv, cwd=workdir / "home", capture_output=True, text=True, check=False)
        elsewhere = subprocess.run(argv, cwd="/", capture_output=True, text=True, check=False)
    assert inside.stdout.strip() == str(workdir / "home"), inside.stderr
    assert elsewhere.stdout.strip() == str(workdir), elsewhere.stderr


@needs_bwrap
def test_environment_is_exactly_the_clean_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SECRET_TEST_VAR", "leaked")
    with Sandbox(tmp_path / "job") as box:
        env = box.base_env()
        out = run(box, "import json, os; print(json.dumps(dict(os.environ)))")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {**env, "PWD": str(tmp_path / "job")}
    assert "SECRET_TEST_VAR" not in env
    assert env["PATH"].split(":")[0] == os.path.dirname(sys.executable)
    assert env["HOME"] == str(tmp_path / "job") and env["CUDA_VISIBLE_DEVICES"] == ""


CONNECT = """
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=3).sendall(b"hello")
    print("connected")
except OSError as exc:
    print(type(exc).__name__)
"""


@pytest.mark.parametrize("enabled", [False, True], ids=["no-sandbox-control", "sandbox"])
def test_no_network(tmp_path: Path, enabled: bool) -> None:
    if enabled and BWRAP_PROBLEM:
        pytest.skip(f"no usable bwrap: {BWRAP_PROBLEM}")
    with socket.create_server(("127.0.0.1", 0)) as server:  # the backlog accepts before accept()
        with Sandbox(tmp_path / "job", enabled=enabled) as box:
            out = run(box, CONNECT, str(server.getsockname()[1]))
        server.settimeout(0.2 if enabled else 5)
        try:
            conn, _ = server.accept()
            with conn:
                received = conn.recv(16)
        except TimeoutError:
            received = None
    if enabled:
        assert out.stdout.strip() == "ConnectionRefusedError", out.stdout + out.stderr
        assert received is None
    else:
        assert out.stdout.strip() == "connected" and received == b"hello"


@pytest.mark.parametrize("enabled", [False, True], ids=["no-sandbox-control", "sandbox"])
def test_machine_sockets_in_run_are_hidden(tmp_path: Path, enabled: bool) -> None:
    """A read-only mount does not stop connect() on a socket file: /run (the machine's sockets) is hidden."""
    if enabled and BWRAP_PROBLEM:
        pytest.skip(f"no usable bwrap: {BWRAP_PROBLEM}")
    if not os.access("/run", os.W_OK):
        pytest.skip("cannot create a socket in /run here")
    path = Path(f"/run/dlperf-sandbox-test-{uuid.uuid4().hex}.sock")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        try:
            path.chmod(0o777)  # anyone may connect: only hiding stops it
            server.listen(1)
            with Sandbox(tmp_path / "job", enabled=enabled) as box:
                out = run(box, """
                    import socket, sys
                    try:
                        socket.socket(socket.AF_UNIX).connect(sys.argv[1])
                        print("connected")
                    except OSError as exc:
                        print(type(exc).__name__)
                """, str(path))
        finally:
            path.unlink()
    assert out.stdout.strip() == ("FileNotFoundError" if enabled else "connected"), out.stdout + out.stderr


@needs_bwrap
def test_unix_socket_in_workdir_reachable_from_outside(tmp_path: Path) -> None:
    """How the kernel's ipc transport works: the kernel binds sockets in workdir, the grader connects."""
    workdir = tmp_path / "job"
    path = workdir / "kernel-1.sock"
    with Sandbox(workdir) as box:
        argv = box.command([sys.executable, "-c", textwrap.dedent("""
            import socket, sys
            server = socket.socket(socket.AF_UNIX)
            server.bind(sys.argv[1])
            server.listen(1)
            print("ready", flush=True)
            conn, _ = server.accept()
            conn.sendall(b"echo:" + conn.recv(16))
        """), str(path)], box.base_env())
        with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as proc:
            try:
                assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
                with socket.socket(socket.AF_UNIX) as client:
                    client.settimeout(10)
                    client.connect(str(path))
                    client.sendall(b"ping")
                    assert client.recv(32) == b"echo:ping"
                assert proc.wait(10) == 0
            finally:
                box.kill()


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
