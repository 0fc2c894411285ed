"""Build the whole book into _build/html, executing every chapter.

Warnings are errors (``-W -n``), every page is executed with the per-cell
timeout of ``_config.yml``, and execution is cached in ``_build/.jupyter_cache``
so that an unchanged rebuild re-executes nothing.  When a page fails to
execute, the execution report (the traceback) is printed, and kept under
``_build/html/reports/``.

The execution cache keys on the cells' code, not on the machine: outputs cached
on a CPU would be shown in a build on a GPU machine (a checkout copied with its
``_build``).  So the cache remembers the device it was made on
(``_build/.jupyter_cache/DEVICE``) and is emptied when the build runs on another;
``--fresh`` empties it anyway, so that every chapter executes here.  The pages' cells call the
library (``dlperf``, ``autograder``), whose changes the cells' code does not show: the cache also
remembers a digest of the library's sources (``LIBRARY``) and is emptied when they change.

On a CUDA machine the chapters record their GPU reference outputs into
``_build/gpu_reference/`` (:mod:`dlperf.gpu_reference`; promote them into
``book/_gpu_reference/`` after review).

Usage: ``python scripts/build_book.py [--output DIR] [--fresh]`` (the README's ``make book``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build_device() -> str:
    """The device the chapters will run on, as the cache marker names it (``cpu``, or ``cuda: <GPU names>``)."""
    out = subprocess.run([sys.executable, "-c", "import torch; n = torch.cuda.device_count() if "
                          "torch.cuda.is_available() else 0; print('cuda: ' + ', '.join(torch.cuda.get_device_name(i) "
                          "for i in range(n)) if n else 'cpu')"], capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def library_digest() -> str:
    """SHA-256 of the library's sources (``dlperf/``, ``autograder/``): what the pages' cells call."""
    h = hashlib.sha256()
    for path in sorted([*ROOT.glob("dlperf/**/*.py"), *ROOT.glob("autograder/**/*.py")]):
        h.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def prepare_cache(cache: Path, fresh: bool) -> None:
    """Empty the execution cache when asked, when it was made on another device, or with another version of the
    library; mark it with this device (``DEVICE``) and this library (``LIBRARY``)."""
    device, library = build_device(), library_digest()
    marker, library_marker = cache / "DEVICE", cache / "LIBRARY"
    made_on = marker.read_text().strip() if marker.is_file() else None
    made_with = library_marker.read_text().strip() if library_marker.is_file() else None
    if cache.exists() and (fresh or made_on != device or made_with != library):
        if fresh:
            why = "--fresh"
        elif made_on != device:
            why = f"it was made on {made_on}" if made_on else "it does not say where it was made"
        else:
            why = "the library (dlperf/, autograder/) changed since"
        print(f"build_book: emptying the execution cache ({why}); every chapter executes on {device}", flush=True)
        shutil.rmtree(cache)
    cache.mkdir(parents=True, exist_ok=True)
    marker.write_text(device + "\n")
    library_marker.write_text(library + "\n")


def build(output: Path | None = None, fresh: bool = False) -> int:
    """Run ``jupyter-book build`` and return its exit status."""
    # --all: Sphinx writes every page again (from the execution cache, nothing re-executes), so
    # that the navigation of unchanged pages shows pages added since the last build.
    cmd = [str(Path(sys.executable).parent / "jupyter-book"), "build", "--all", "-W", "-n", "--keep-going"]
    if output is not None:
        cmd += ["--path-output", str(output)]
    cmd.append(str(ROOT))
    # Inductor's compiled kernels are cached beside the execution cache, so that a
    # rebuild reuses them and a cold build (fresh clone) really is cold.
    build_dir = (output or ROOT) / "_build"
    # _config.yml's execute.cache, relative to the working directory of the build (ROOT)
    prepare_cache(ROOT / "_build" / ".jupyter_cache", fresh)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(build_dir / ".inductor_cache"),
           "DLPERF_GPU_REFERENCE_OUT": str(build_dir / "gpu_reference")}
    started = time.perf_counter()
    status = subprocess.call(cmd, cwd=ROOT, env=env)
    elapsed = time.perf_counter() - started
    html = (output or ROOT) / "_build" / "html"
    reports = sorted((html / "reports").glob("**/*.err.log")) if (html / "reports").exists() else []
    for report in reports:
        print(f"\n--- execution report {report.relative_to(ROOT) if report.is_relative_to(ROOT) else report} ---")
        print(report.read_text(errors="replace")[-6000:])
    if status == 0:
        print(f"\nBook built in {elapsed:.0f} s: {html / 'index.html'}")
    else:
        print(f"\nBook build FAILED after {elapsed:.0f} s (exit {status}); see the messages above.", file=sys.stderr)
    return status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=None, help="build into DIR/_build instead of ./_build")
    parser.add_argument("--fresh", action="store_true", help="empty the execution cache: every chapter executes")
    args = parser.parse_args()
    sys.exit(build(args.output, args.fresh))


if __name__ == "__main__":
    main()
