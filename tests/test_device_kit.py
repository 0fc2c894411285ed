"""The device kit (scripts/device_kit.py) and the prepared script of a GPU window (scripts/device_check.sh).

The kit's real build downloads from the package index (about two minutes); here its parts are tested on
wheels made on the spot, and the prepared script's CPU part runs end to end on this machine (no GPU:
every check says so), with what it leaves under $OUT checked.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import device_kit as K  # noqa: E402


def make_wheel(folder: Path, name: str, requires: list[str] = (), files: dict[str, bytes] | None = None) -> Path:
    dist = f"{name.replace('-', '_')}-1.0.dist-info"
    path = folder / f"{name.replace('-', '_')}-1.0-py3-none-any.whl"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"{dist}/METADATA", meta + "\nA description: Requires-Dist: not-a-header\n")
        for member, data in (files or {}).items():
            z.writestr(member, data)
    return path


def test_reachable_follows_requirements_markers_and_extras_but_not_blocked_or_image(tmp_path):
    wheels = {n: make_wheel(tmp_path, n, reqs) for n, reqs in {
        "app": ["lib", "ui", "old; python_version < '3.8'", "win; sys_platform == 'win32'", "opt[fast]"],
        "lib": ["dep", "imaged"],
        "ui": ["only-ui"],                # blocked: only-ui goes with it
        "only-ui": [],
        "dep": [],
        "old": [], "win": [],
        "opt": ["speed; extra == 'fast'", "slow; extra == 'slowly'"],
        "speed": [], "slow": [],
    }.items()}
    got = K.reachable(["app"], wheels, "3.12", blocked={"ui"})
    assert got == {"app", "lib", "dep", "opt", "speed"}      # imaged: no wheel here (the image has it)


def test_a_stored_wheel_has_the_same_members_uncompressed(tmp_path):
    src = make_wheel(tmp_path, "pkg", files={"pkg/__init__.py": b"x = 1\n" * 1000})
    dest = tmp_path / "stored" / src.name
    dest.parent.mkdir()
    K.store(src, dest)
    with zipfile.ZipFile(src) as a, zipfile.ZipFile(dest) as b:
        assert [i.filename for i in a.infolist()] == [i.filename for i in b.infolist()]
        assert all(i.compress_type == zipfile.ZIP_STORED for i in b.infolist())
        assert all(a.read(n) == b.read(n) for n in a.namelist())


def test_the_image_list_pins_what_the_first_gpu_run_saw():
    image = K.image_packages()
    assert image["torch"] == "2.11.0" and image["triton"] == "3.6.0" and image["numpy"] == "2.5.2"
    assert "jupyter-book" not in image and "nbgrader" not in image    # what the kit must bring
    assert set(K.NOT_ON_A_GPU_RUNNER).isdisjoint(image)


def test_a_kit_built_from_a_wheelhouse_holds_what_the_course_reaches(tmp_path, monkeypatch):
    house = tmp_path / "house"
    house.mkdir()
    for n, reqs in {"jupyter-book": ["sphinx", "numpy"], "sphinx": [], "nbgrader": ["jupyterlab", "alembic"],
                    "jupyterlab": ["only-lab"], "only-lab": [], "alembic": [], "selenium": ["trio"], "trio": [],
                    "numpy": [], "d2l": [], "big": []}.items():
        make_wheel(house, n, reqs, files={"blob": os.urandom(K.LARGE_BYTES + 1)} if n == "big" else None)
    image = tmp_path / "image.txt"
    # numpy: torch's stack, left to the image; sphinx: small, travels (shadows the image's); big: large, left
    image.write_text("# the image\nnumpy==2.5.2\nsphinx==7.0\nbig\n")
    monkeypatch.setattr(K.W, "course_requirements", lambda: K.W.Wanted(
        ["jupyter-book>=1", "nbgrader", "selenium>=4", "numpy", "big"], ["d2l==1.0"]))
    monkeypatch.setattr(K, "bubblewrap_deb", lambda dest: None)
    m = K.build(tmp_path / "out", "3.12", image=image, wheelhouse=house)
    names = sorted(K.W.wheel_name(w) for w in m["wheels"])
    assert names == ["alembic", "d2l", "jupyter-book", "nbgrader", "sphinx"]
    assert m["left_to_the_image"] == ["big", "numpy"] and "only-lab" in m["left_out_with_them"]
    assert m["shadowing_the_image"] == ["sphinx"]
    with tarfile.open(tmp_path / "out" / K.KIT_NAME) as tar:
        members = {Path(n).name for n in tar.getnames()}
        assert K.MANIFEST in members and {Path(w).name for w in m["wheels"]} <= members
    with pytest.raises(K.KitError, match="over 0.0001 MB"):
        K.build(tmp_path / "out2", "3.12", max_mb=0.0001, image=image, wheelhouse=house)


@pytest.mark.timeout(600)
def test_the_prepared_script_runs_its_cpu_part_end_to_end(tmp_path):
    """No GPU here: it records the machine, runs every step (each says there is no GPU), and leaves at
    most 8 files under $OUT, the packed reports among them."""
    if os.path.exists("/dev/nvidiactl"):
        pytest.skip("a GPU machine: the script would run the whole check")
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "KIT": str(tmp_path / "no-kit.tar.xz"), "PYTHON": str(ROOT / ".venv/bin/python")}
    run = subprocess.run(["bash", "scripts/device_check.sh", "300"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=500)
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-3000:]
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and {"device.log", "image-freeze.txt", "api-names.json", "gpu-check.tar.gz"} <= set(files), files
    assert "no kit at" in log and "probe:" in log and "done" in log
    with tarfile.open(out / "gpu-check.tar.gz") as tar:
        reports = {n: tar.extractfile(n).read().decode() for n in tar.getnames() if n.endswith("report.md")}
    assert {Path(n).parent.name for n in reports} >= {"references", "grading", "triton-fixtures", "gradscaler-class"}
    assert all("No GPU on this machine: nothing was checked" in text for text in reports.values())
