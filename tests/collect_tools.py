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
