"""Build the device kit: one file with every wheel a lent GPU machine lacks, to install there offline.

The lent GPU machines (the device tool) have no network, carry at most 64 MiB of files per call, and
ship an image whose Python (3.12, ``/opt/torch/.venv``) already holds torch, triton, numpy and some 200
common packages (``scripts/gpu_image.txt``).  The first GPU run spent much of its 15 minutes moving two
35 MB tarballs in two calls.  This script makes one file, ``.kit/device-kit.tar.xz`` (at most 50 MB), that
travels with the working tree in the same call as the check itself (``scripts/device_check.sh``):

1. the course is resolved for CPython 3.12 on manylinux_2_28 x86-64 against the image's pinned
   versions (``scripts/wheelhouse.py``: ``pip download`` for the target, never for this machine);
2. torch's stack (torch, triton, numpy) is the image's: the course is resolved against its versions
   and never ships them; what else the image ships is left to it where its wheel is large (scipy,
   pandas, matplotlib...: the image's own is used); a small package the image has travels as resolved
   here, installed into ``.venv`` where it shadows the image's for the course alone (the image of
   2026-11-27 has markdown-it-py 4.2, and the book's myst-parser wants 3: resolved against every
   version the image has, the course would not resolve at all).  What a GPU check never runs is left
   out too
   (``NOT_ON_A_GPU_RUNNER``: the browser tests' selenium, JupyterLab and Notebook's user interfaces
   that nbgrader depends on but grading never imports, the PostgreSQL driver, the debugger and
   completion of IPython): the kit holds the wheels that the course's requirements reach without
   passing through those, by the wheels' own ``Requires-Dist`` (markers evaluated for the target);
3. the wheels are stored uncompressed inside their zips and the whole is compressed with xz, which
   finds what the wheels share (about half the size of the wheels as published); a stored wheel is
   still a valid wheel (pip checks its RECORD hashes of the files, not of the zip);
4. ``bubblewrap`` (the autograder's sandbox) travels as its Debian package, unpacked there only if
   the image lacks ``bwrap``.

Because the kit is resolved here, ``scripts/setup.sh`` installs a kit (``WHEELHOUSE=<kit folder>``, a
folder holding ``device-kit.json``) with ``--no-deps``, every wheel as it is.  Usage::

    make device-kit                     # .kit/device-kit.tar.xz (about 2 minutes, from the package index)
    python scripts/device_kit.py --python-version 3.12 --out .kit [--max-mb 50]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import wheelhouse as W  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
IMAGE = ROOT / "scripts" / "gpu_image.txt"
KIT_NAME = "device-kit.tar.xz"
MANIFEST = "device-kit.json"
LARGE_BYTES = 2_000_000   # an image package above this is left to the image (its version trusted)
# What the course resolves against the image's own versions and never shadows: torch's stack.
TORCH_STACK = {"torch", "triton", "numpy"}
# Never run by the GPU check (tests -m gpu, doctor, sample class, book): left out with what only they need.
NOT_ON_A_GPU_RUNNER = {
    "selenium": "the browser tests (tests/test_browser.py) are not GPU tests",
    "jupyterlab": "nbgrader's JupyterLab extension: grading never imports it",
    "notebook": "nbgrader's Notebook extension: grading never imports it",
    "psycopg2-binary": "a PostgreSQL gradebook; the GPU check grades into SQLite",
    "debugpy": "ipykernel's debugger (optional there): nothing is debugged",
    "jedi": "IPython's tab completion (optional there)",
}


class KitError(RuntimeError):
    """The kit cannot be built as asked (the message says why)."""


def image_packages(path: Path = IMAGE) -> dict[str, str | None]:
    """``{canonical name: version or None}`` of the GPU image, from ``scripts/gpu_image.txt``."""
    found: dict[str, str | None] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            found[W.canonical(name)] = version or None
    return found


def target_environment(python_version: str) -> dict[str, str]:
    """The marker environment of CPython ``python_version`` on Linux x86-64 (PEP 508)."""
    return {"python_version": python_version, "python_full_version": f"{python_version}.0", "os_name": "posix",
            "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
            "platform_python_implementation": "CPython", "implementation_name": "cpython",
            "platform_release": "", "platform_version": "", "implementation_version": f"{python_version}.0"}


def wheel_requirements(path: Path) -> list[str]:
    """The ``Requires-Dist`` lines of a wheel's METADATA."""
    with zipfile.ZipFile(path) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        text = z.read(meta).decode("utf-8", "replace")
    head = text.split("\n\n", 1)[0]
    return [line.split(":", 1)[1].strip() for line in head.splitlines() if line.startswith("Requires-Dist:")]


def reachable(roots: list[str], wheels: dict[str, Path], python_version: str, blocked: set[str]) -> set[str]:
    """The wheels (canonical names) that ``roots`` need, following each wheel's requirements (and the
    extras asked of it), never into ``blocked`` nor into names without a wheel here (the image's)."""
    from packaging.requirements import Requirement

    env = target_environment(python_version)
    needed: set[str] = set()
    extras_seen: set[tuple[str, str]] = set()
    todo: list[tuple[str, frozenset[str]]] = []

    def want(spec: str, extra: str = "") -> None:
        req = Requirement(spec)
        if req.marker is not None and not req.marker.evaluate({**env, "extra": extra}):
            return
        name = W.canonical(req.name)
        if name in blocked or name not in wheels:
            return
        todo.append((name, frozenset(req.extras)))

    for spec in roots:
        want(spec)
    while todo:
        name, extras = todo.pop()
        new_extras = {e for e in extras if (name, e) not in extras_seen}
        if name in needed and not new_extras:
            continue
        first = name not in needed
        needed.add(name)
        extras_seen.update((name, e) for e in new_extras)
        for spec in wheel_requirements(wheels[name]):
            if first:
                want(spec)
            for extra in new_extras:
                want(spec, extra)
    return needed


def store(src: Path, dest: Path) -> None:
    """Copy a wheel with every member stored uncompressed (for xz to compress the whole kit)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info)
            info.compress_type = zipfile.ZIP_STORED
            zout.writestr(info, data)


def bubblewrap_deb(dest: Path) -> str | None:
    """Download Debian's bubblewrap package into ``dest`` (``apt-get download``); its file name, or None."""
    if shutil.which("apt-get") is None:
        return None
    out = subprocess.run(["apt-get", "download", "-qq", "bubblewrap"], cwd=dest, capture_output=True, text=True)
    debs = sorted(dest.glob("bubblewrap_*.deb"))
    return debs[0].name if out.returncode == 0 and debs else None


def build(out: Path, python_version: str = "3.12", max_mb: float = 50.0, image: Path = IMAGE,
          wheelhouse: Path | None = None) -> dict:
    """Build ``out/device-kit.tar.xz``; its manifest.  ``wheelhouse``: an already built wheelhouse for the
    same target (else one is built)."""
    have = image_packages(image)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="device-kit-") as tmp:
        tmp_path = Path(tmp)
        if wheelhouse is None:
            wheelhouse = tmp_path / "wheelhouse"
            pins = " ".join(f"{n}=={v}" for n, v in have.items() if v and n in TORCH_STACK and n != "torch")
            W.build(wheelhouse, python_version, have=pins)
        wheels = {W.wheel_name(p.name): p for p in sorted(wheelhouse.glob("*.whl"))}
        wanted = W.course_requirements()
        roots = [s for s in wanted.requirements if W.requirement_name(s) not in NOT_ON_A_GPU_RUNNER]
        # Left to the image: what it has at a version given here (the resolution used it), and what it has
        # that is large; a small package it has at a version nobody recorded travels as resolved here
        # (installed into .venv, it shadows the image's there alone: torch's own stack is always the image's).
        image_side = {n for n in have if n in wheels and (n in TORCH_STACK or wheels[n].stat().st_size > LARGE_BYTES)}
        blocked = set(NOT_ON_A_GPU_RUNNER) | image_side
        needed = reachable(roots, wheels, python_version, blocked)
        needed |= {W.requirement_name(s) for s in wanted.no_deps}          # d2l, installed without its pins
        kit = tmp_path / "kit"
        kit.mkdir()
        for name in sorted(needed):
            store(wheels[name], kit / wheels[name].name)
        deb = bubblewrap_deb(kit)
        manifest = {
            "kind": "device-kit", "python_version": python_version, "platforms": W.expand_platform(W.DEFAULT_PLATFORM),
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "wheels": sorted(p.name for p in kit.glob("*.whl")),
            "left_to_the_image": sorted(image_side),
            "shadowing_the_image": sorted(n for n in needed if n in have),
            "not_on_a_gpu_runner": NOT_ON_A_GPU_RUNNER,
            "left_out_with_them": sorted(set(wheels) - needed - image_side - set(NOT_ON_A_GPU_RUNNER)),
            "bubblewrap": deb,
            "install": "scripts/device_check.sh unpacks it; or: WHEELHOUSE=<unpacked folder> make setup "
                       "(installs every wheel with --no-deps: the kit is resolved already)",
        }
        (kit / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        target = out / KIT_NAME
        partial = out / (KIT_NAME + ".partial")
        with open(partial, "wb") as f:
            tar = subprocess.Popen(["tar", "-C", str(kit), "-cf", "-", "."], stdout=subprocess.PIPE)
            xz = subprocess.run(["xz", "-9", "-T0", "-c"], stdin=tar.stdout, stdout=f)
            tar.stdout.close()
            if tar.wait() or xz.returncode:
                raise KitError("tar | xz failed")
        size = partial.stat().st_size / 1e6
        if size > max_mb:
            partial.unlink()
            raise KitError(f"the kit is {size:.1f} MB, over {max_mb:g} MB: leave more to the image "
                           f"(scripts/gpu_image.txt) or out of a GPU check (NOT_ON_A_GPU_RUNNER)")
        partial.replace(target)
        (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        manifest["size_mb"] = round(size, 1)
        return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--python-version", default="3.12", help="the GPU image's Python (default 3.12)")
    parser.add_argument("--out", type=Path, default=ROOT / ".kit", help="where the kit goes (default .kit/)")
    parser.add_argument("--max-mb", type=float, default=50.0, help="refuse a kit larger than this (default 50)")
    parser.add_argument("--wheelhouse", type=Path, help="use this wheelhouse (same target) instead of building one")
    parser.add_argument("--image", type=Path, default=IMAGE, help="the image's packages (default scripts/gpu_image.txt)")
    args = parser.parse_args(argv)
    try:
        m = build(args.out.resolve(), args.python_version, args.max_mb, args.image, wheelhouse=args.wheelhouse)
    except (KitError, W.WheelhouseError) as exc:
        print(f"device-kit: {exc}", file=sys.stderr)
        return 1
    print(f"device-kit: {args.out / KIT_NAME}: {len(m['wheels'])} wheels for CPython {m['python_version']}, "
          f"{m['size_mb']} MB; {len(m['left_to_the_image'])} packages left to the image, "
          f"{len(m['not_on_a_gpu_runner']) + len(m['left_out_with_them'])} not needed on a GPU runner; "
          f"bubblewrap: {m['bubblewrap'] or 'not included (no apt-get here)'}")
    print("On the GPU machine: bash scripts/device_check.sh (see book/gpu-machines.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
