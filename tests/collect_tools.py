"""What the collection tests share: the notebooks, zips and folders they hand in, and nbgrader run as a user."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from datetime import datetime, timezone
from pathlib import Path

from autograder import course
from autograder.collect import Collected

AID = "allreduce"
BIN = Path(sys.executable).parent
UTC = timezone.utc
DETECTED = "(detected: other notebooks of this export match it)"
NOON = (2026, 11, 21, 12, 0, 0)  # a zip member's date_time
AT_NOON = datetime(2026, 11, 21, 12, tzinfo=UTC)


def notebook(student: str) -> bytes:
    """The book's student notebook with one markdown cell naming ``student`` (a valid notebook, distinct bytes)."""
    nb = json.loads(course.release_notebook(AID).read_text())
    nb["cells"].append({"cell_type": "markdown", "metadata": {}, "source": f"handed in by {student}"})
    return (json.dumps(nb, indent=1) + "\n").encode()


def make_zip(path: Path, members: list[tuple[str, bytes, tuple[int, ...]]]) -> Path:
    """A zip file with exactly these member names (written raw, '..' and '/' included), data and times."""
    with zipfile.ZipFile(path, "w") as archive:
        for name, data, when in members:
            archive.writestr(zipfile.ZipInfo(name, date_time=when), data)
    return path


def make_files(root: Path, files: dict[str, tuple[bytes, datetime]]) -> Path:
    """A folder export: each relative path with its content and modification time."""
    for name, (data, when) in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, (when.timestamp(), when.timestamp()))
    return root


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes), hidden ones included."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def stored(root: Path, student: str, data: bytes, stamp: str) -> dict[str, bytes]:
    """What ``submitted/`` must hold for one student: the notebook under the assignment's name and its time."""
    folder = f"submitted/{student}/{AID}"
    return {f"{folder}/{AID}.ipynb": data, f"{folder}/timestamp.txt": stamp.encode()}


def c(root: Path, student: str, when: datetime, origin: str) -> Collected:
    return Collected(student, AID, root / "submitted" / student / AID / f"{AID}.ipynb", when, origin)


def _env(home: Path) -> dict[str, str]:
    env = dict(os.environ, PATH=str(BIN) + os.pathsep + os.environ.get("PATH", ""))
    for var, sub in (("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                     ("JUPYTER_RUNTIME_DIR", "runtime"), ("IPYTHONDIR", "ipython")):
        env[var] = str(home / sub)
    env.pop("JUPYTER_PATH", None)
    return env


def nbgrader(cwd: Path, *args: str) -> str:
    out = subprocess.run([str(BIN / "nbgrader"), *args], cwd=cwd, env=_env(cwd), capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, f"`nbgrader {' '.join(args)}` exited {out.returncode}:\n{out.stdout}{out.stderr}"
    return out.stdout + out.stderr


def exchange_course(tmp: Path) -> tuple[Path, Path, Path]:
    """An exchange and an instructor's course root under ``tmp`` with AID released: (exchange, instructor, inbound)."""
    exchange, instructor = tmp / "exchange", tmp / "instructor"
    exchange.mkdir()
    exchange.chmod(0o777)
    instructor.mkdir()
    (instructor / "nbgrader_config.py").write_text(f'''c = get_config()  # noqa: F821
load_subconfig("nbgrader_config.py", path={str(course.COURSE)!r})  # noqa: F821
c.CourseDirectory.root = {str(instructor)!r}
c.CourseDirectory.source_directory = {str(course.SOLUTIONS)!r}
c.CourseDirectory.release_directory = {str(course.EXERCISES)!r}
c.CourseDirectory.db_url = {f"sqlite:///{instructor / 'gradebook.db'}"!r}
c.Exchange.root = {str(exchange)!r}
''')
    nbgrader(instructor, "release_assignment", AID)
    return exchange, instructor, exchange / "dlperf" / "inbound"


def student_home(tmp: Path, exchange: Path, student: str) -> Path:
    """``tmp/<student>``: a student's home with their nbgrader configuration for ``exchange`` and an AID folder."""
    home = tmp / student
    (home / AID).mkdir(parents=True, exist_ok=True)
    (home / "nbgrader_config.py").write_text(f'''c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "dlperf"
c.CourseDirectory.student_id = {student!r}
c.Exchange.root = {str(exchange)!r}
c.Exchange.cache = {str(home / ".nbgrader_cache")!r}
''')
    return home


def submit_cut_off(home: Path) -> subprocess.CompletedProcess:
    """``nbgrader submit AID`` as ``home``'s student, killed (SIGKILL) right after it copied its first file into
    the exchange: what a student's server that dies during the submission leaves behind."""
    cut = ("import os, shutil, signal, sys\n"
           "copy = shutil.copyfile\n"
           "def copy_then_die(*args, **kwargs):\n"
           "    copy(*args, **kwargs)\n"
           "    os.kill(os.getpid(), signal.SIGKILL)\n"
           "shutil.copyfile = copy_then_die\n"
           "from nbgrader.apps.nbgraderapp import main\n"
           "sys.argv = ['nbgrader', 'submit', sys.argv[1]]\n"
           "main()\n")
    return subprocess.run([sys.executable, "-c", cut, AID], cwd=home, env=_env(home), capture_output=True,
                          text=True, timeout=120, check=False)


def submit_at_once(homes: list[Path]) -> None:
    """``nbgrader submit AID`` in every home of ``homes`` at the same time (each must succeed)."""
    procs = [subprocess.Popen([str(BIN / "nbgrader"), "submit", AID], cwd=home, env=_env(home),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for home in homes]
    for home, proc in zip(homes, procs):
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"{home.name}'s `nbgrader submit {AID}` exited {proc.returncode}:\n{out}"
