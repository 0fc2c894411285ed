"""The autograder's sandbox (``autograder/sandbox.py``) against real bubblewrap, cgroups and rlimits.

Every test runs real processes.  Tests skip only where this machine lacks the
facility: no usable bwrap, or (for cgroup tests) not root / no writable cgroup.
"""



import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from autograder import sandbox
from autograder.sandbox import Sandbox, SandboxUnavailable

from sandbox_tools import BWRAP_PROBLEM, course, needs_bwrap, outside, run  # noqa: F401 - course, outside: fixtures


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
