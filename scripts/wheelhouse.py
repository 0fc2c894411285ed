"""Build a wheelhouse: every wheel the course needs, for another machine's Python, to install there offline.

GPU nodes of university clusters are often air-gapped (no internet, a shared file
system) and ship a Python and a torch of their own.  This script, run on a machine
that reaches the package index, downloads into one folder a wheel for every
package the course installs (``pyproject.toml``'s dependencies and its extras
``book``, ``course`` and ``test``, its build requirements, and d2l, which
``scripts/setup.sh`` installs without dependencies), built for the *target's*
Python version and platform -- never for this machine's.  On the node::

    WHEELHOUSE=/path/to/wheelhouse make test      # or: make setup, make book, ...

``scripts/setup.sh`` then installs from that folder alone (``pip --no-index
--find-links``), and keeps the node's own torch (and numpy) through
``--system-site-packages``.

What is left out:

* **torch** (and, through it, its own dependencies, unless the course needs
  them anyway): the node's build is kept.  ``--torch "torch==2.13.0"`` adds one
  (a CPU-only node without torch; the test suite uses it for this machine).
* **triton**, which the course needs for its Triton kernels, goes with torch:
  a CUDA build of torch depends on the triton it was built with, so a node that
  ships torch has it.  With ``--torch`` (a node without torch) the course's
  triton requirement is downloaded too, since the CPU torch does not bring it.
* **what the node already has** (``--have "numpy==2.5.0"``): not downloaded, and
  the pinned versions constrain the resolution, so that what is downloaded works
  with them (pandas, scipy and scikit-learn are resolved against the node's numpy).

How: one ``pip download`` for the target (``--python-version``, ``--platform``,
``--implementation cp`` and ``--only-binary=:all:``, the ``--have`` pins as
constraints), then the ``--have`` packages are dropped from what it fetched.  A
package with no wheel for the target (sdist only) makes pip fail: the script
names it and stops, since a wheel built here could only be trusted for
pure-Python code.  Checked on 2026-11-24: every dependency of the course has a
wheel for CPython 3.11 and 3.12 on manylinux_2_28_x86_64, and for 3.11 the versions
``--only-binary`` picks are those of an ordinary install (``.venv``): no package
was held back for want of a wheel.

Platforms: pip does not widen a ``manylinux_2_X`` tag to the older ones a glibc
2.X system also runs, so ``--platform manylinux_2_28_x86_64`` (the default: any
Linux with glibc 2.28 or newer, i.e. RHEL 8, Debian 10, Ubuntu 20.04 and later)
is expanded here to ``manylinux_2_17`` ... ``manylinux_2_28`` and the legacy
``manylinux2014``/``2010``/``1`` names.  Check the node's glibc with ``ldd --version``.

Usage (``make wheelhouse PY=3.12 [PLATFORM=...] [OUT=wheelhouse] [HAVE="numpy==2.5.0"]``)::

    python scripts/wheelhouse.py --python-version 3.12 --out wheelhouse [--have "numpy==2.5.0"] [--torch "torch==2.13.0"]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = "wheelhouse.json"
DEFAULT_PLATFORM = "manylinux_2_28_x86_64"
# The extras of pyproject.toml that scripts/setup.sh installs.
EXTRAS = ("book", "course", "test")


class WheelhouseError(RuntimeError):
    """The wheelhouse cannot be built as asked (the message says why and what to do)."""


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(spec: str) -> str:
    """``numpy`` for ``numpy>=1.26``, ``jupyter-book`` for ``jupyter-book[x]>=1; python_version>'3'``."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
    if not match:
        raise WheelhouseError(f"cannot read a package name in the requirement {spec!r}")
    return canonical(match.group(1))


def expand_platform(tag: str) -> list[str]:
    """Every platform tag a system of ``tag`` runs, newest first (pip does not widen ``manylinux_2_X`` itself).

    >>> expand_platform("manylinux_2_19_x86_64")
    ['manylinux_2_19_x86_64', 'manylinux_2_18_x86_64', 'manylinux_2_17_x86_64', 'manylinux2014_x86_64', 'manylinux2010_x86_64', 'manylinux1_x86_64']
    >>> expand_platform("manylinux2014_aarch64")
    ['manylinux2014_aarch64', 'manylinux_2_17_aarch64']
    >>> expand_platform("win_amd64")
    ['win_amd64']
    """
    match = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", tag)
    legacy = {"manylinux2014": 17, "manylinux2010": 12, "manylinux1": 5}
    if match is None:
        old = re.fullmatch(r"(manylinux2014|manylinux2010|manylinux1)_(\w+)", tag)
        if old is None:
            return [tag]
        minor, arch = legacy[old.group(1)], old.group(2)
        tags = [tag]
    else:
        minor, arch = int(match.group(1)), match.group(2)
        tags = []
    for m in range(minor, 4, -1):
        tags.append(f"manylinux_2_{m}_{arch}")
        for name, at in legacy.items():
            if at == m and (arch in ("x86_64", "i686") or name == "manylinux2014"):
                tags.append(f"{name}_{arch}")
    seen: list[str] = []
    for t in tags:
        if t not in seen:
            seen.append(t)
    # Below manylinux_2_17 only the legacy names matter in practice; keep the list short.
    return [t for t in seen if not re.fullmatch(r"manylinux_2_(\d+)_\w+", t)
            or int(t.split("_")[2]) >= 17]


@dataclass
class Wanted:
    """What the course asks pip for: resolved requirements, packages without dependencies, build requirements."""

    requirements: list[str]     # resolved together, with their dependencies
    no_deps: list[str]          # installed with --no-deps by scripts/setup.sh (d2l)


def course_requirements(torch: str | None = None, root: Path = ROOT) -> Wanted:
    """The requirements of the course from ``pyproject.toml`` and ``scripts/setup.sh``; torch only if asked."""
    import tomllib

    project = tomllib.loads((root / "pyproject.toml").read_text())
    specs = list(project["project"]["dependencies"])
    for extra in EXTRAS:
        specs += project["project"]["optional-dependencies"][extra]
    # Installing the course package itself (pip install -e .) builds it: its build requirements too.
    specs += project["build-system"]["requires"]
    if torch and requirement_name(torch) != "torch":
        raise WheelhouseError(f"--torch wants a torch requirement (torch==2.13.0), not {torch!r}")
    # triton comes with the node's torch (a CUDA torch depends on it): left out with torch, kept with --torch.
    specs = [s for s in specs if requirement_name(s) != "torch" and (torch or requirement_name(s) != "triton")]
    if torch:
        specs.append(torch)
    setup = (root / "scripts" / "setup.sh").read_text()
    found = re.search(r"^D2L=(\S+)$", setup, flags=re.MULTILINE)
    if found is None:
        raise WheelhouseError("scripts/setup.sh has no line D2L=<requirement>: where is the d2l pin?")
    return Wanted(specs, [found.group(1)])


def _pip(python: str) -> list[str]:
    return [python, "-m", "pip", "--disable-pip-version-check"]


def _target_options(python_version: str, platforms: list[str]) -> list[str]:
    options = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp"]
    for tag in platforms:
        options += ["--platform", tag]
    return options


def _no_wheel(stderr: str) -> str | None:
    """The package pip found no usable distribution for, from its error message."""
    for pattern in (r"No matching distribution found for ([A-Za-z0-9._-]+)",
                    r"Could not find a version that satisfies the requirement ([A-Za-z0-9._-]+)"):
        match = re.search(pattern, stderr)
        if match:
            return match.group(1)
    return None


def fetch(wanted: Wanted, dest: Path, python_version: str, platforms: list[str], have: dict[str, str | None],
          python: str = sys.executable) -> None:
    """``pip download`` the course for the target into ``dest``: resolution and download in one step.

    (``pip install --dry-run --report --target`` would resolve without downloading, but pip 23 checks
    Requires-Python against the *running* interpreter there, so it silently picks versions that suit
    this machine's Python instead of the target's; ``pip download`` applies ``--python-version``.)
    """
    constraints = dest / ".have-constraints.txt"
    constraints.write_text("".join(f"{name}=={version}\n" for name, version in have.items() if version))
    steps = [["-c", str(constraints), *wanted.requirements], ["--no-deps", *wanted.no_deps]]
    try:
        for args in steps:
            cmd = [*_pip(python), "download", "--quiet", "--dest", str(dest),
                   *_target_options(python_version, platforms), *args]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode != 0:
                name = _no_wheel(out.stderr)
                hint = ""
                if name is not None:
                    pinned = " (or none of its versions fits the versions given with --have)" if have else ""
                    hint = (f"\n{name} has no wheel for CPython {python_version} on {platforms[0]}{pinned}. "
                            "Check the tag (--platform: the node's glibc, `ldd --version`), or install that "
                            "package on the node another way; a pure-Python sdist can be turned into a wheel "
                            f"with `pip wheel --no-deps {name}` and put into the wheelhouse by hand.")
                raise WheelhouseError(f"pip could not download the course for the target:\n"
                                      f"{out.stderr.strip()[-3000:]}{hint}")
    finally:
        constraints.unlink(missing_ok=True)


def wheel_name(filename: str) -> str:
    """The canonical distribution name of a wheel file (``Jinja2-3.1.6-py3-none-any.whl`` -> ``jinja2``)."""
    return canonical(filename.split("-", 1)[0])


def parse_have(text: str) -> dict[str, str | None]:
    """``"numpy==2.5.0 torchvision"`` -> ``{"numpy": "2.5.0", "torchvision": None}``."""
    have: dict[str, str | None] = {}
    for item in text.replace(",", " ").split():
        name, sep, version = item.partition("==")
        if not name or (sep and not version) or any(c in name for c in "<>=!~;"):
            raise WheelhouseError(f"--have takes name or name==version items, not {item!r}")
        have[canonical(name)] = version or None
    return have


def build(out: Path, python_version: str, platform_tag: str = DEFAULT_PLATFORM, have: str = "",
          torch: str | None = None, python: str = sys.executable) -> dict:
    """Build the wheelhouse in ``out`` (wheels of an earlier build that are no longer needed go); its manifest."""
    if not re.fullmatch(r"3\.\d+", python_version):
        raise WheelhouseError(f"--python-version wants MAJOR.MINOR (3.12), not {python_version!r}")
    have_map = parse_have(have)
    if "torch" in have_map:
        raise WheelhouseError("torch is always left out unless --torch asks for it: leave it out of --have")
    platforms = expand_platform(platform_tag)
    wanted = course_requirements(torch)
    for spec in wanted.no_deps:
        if "==" not in spec:
            raise WheelhouseError(f"{spec}: packages installed without dependencies must be pinned (name==version)")
    if out.exists() and any(out.iterdir()) and not (out / MANIFEST).is_file():
        raise WheelhouseError(f"{out} exists and is not a wheelhouse (no {MANIFEST}): choose an empty or new folder")
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=out.parent))
    try:
        fetch(wanted, staging, python_version, platforms, have_map, python)
        fetched = sorted(staging.iterdir())
        not_wheels = [p.name for p in fetched if p.suffix != ".whl"]
        if not_wheels:   # cannot happen with --only-binary=:all:, but a wheelhouse holds wheels only
            raise WheelhouseError(f"pip fetched files that are not wheels: {not_wheels}")
        for old in out.glob("*.whl"):
            old.unlink()
        kept = []
        for path in fetched:
            if wheel_name(path.name) in have_map:
                continue                      # the node has it: resolved against, not shipped
            shutil.move(str(path), out / path.name)
            kept.append(path.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    names = {wheel_name(f) for f in kept}
    if "torch" in names and not torch:
        raise WheelhouseError("torch was pulled in by a dependency: the wheelhouse must leave it out")
    left_out = {name: (f"the node has {name}=={version}" if version else f"the node has {name}")
                for name, version in have_map.items()}
    if not torch:
        left_out["torch"] = "the node's own torch is kept (scripts/setup.sh: --system-site-packages)"
        left_out["triton"] = "comes with the node's torch (a CUDA torch depends on the triton it was built with)"
    manifest = {
        "python_version": python_version,
        "platforms": platforms,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "left_out": left_out,
        "torch": torch or None,
        "wheels": kept,
        "install": "WHEELHOUSE=<this folder> make setup   (or make test, make book: see book/gpu-machines.md)",
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     epilog="See the module docstring (and book/gpu-machines.md).")
    parser.add_argument("--python-version", default=f"{sys.version_info[0]}.{sys.version_info[1]}",
                        help="the target's Python, MAJOR.MINOR (default: this Python's)")
    parser.add_argument("--platform", default=DEFAULT_PLATFORM,
                        help=f"the target's platform tag (default {DEFAULT_PLATFORM}: glibc 2.28 or newer)")
    parser.add_argument("--out", type=Path, default=ROOT / "wheelhouse", help="the folder (default: wheelhouse/)")
    parser.add_argument("--have", default="", help='what the node already has, not downloaded: "numpy==2.5.0 ..."')
    parser.add_argument("--torch", default=None, help='also download this torch (a node without one): "torch==2.13.0"')
    args = parser.parse_args(argv)
    try:
        manifest = build(args.out.resolve(), args.python_version, args.platform, args.have, args.torch)
    except WheelhouseError as exc:
        print(f"wheelhouse: {exc}", file=sys.stderr)
        return 1
    size = sum((args.out / f).stat().st_size for f in manifest["wheels"]) / 1e6
    print(f"wheelhouse: {len(manifest['wheels'])} wheels for CPython {manifest['python_version']} on "
          f"{manifest['platforms'][0]} in {args.out} ({size:.0f} MB)")
    for name, why in manifest["left_out"].items():
        print(f"  left out: {name} ({why})")
    print(f"Copy {args.out} and the repository to the node; there: WHEELHOUSE=<its path> make test")
    return 0


if __name__ == "__main__":
    sys.exit(main())
