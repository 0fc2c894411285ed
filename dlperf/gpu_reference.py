"""GPU reference outputs: what a GPU build of the book measured, stamped with where it comes from, shown in every build.

Most readers build (or read) the book on a CPU, where the GPU-only phenomena --
launches that return before the work is done, ``.item()`` draining the queue,
copies overlapping computation, tensor cores -- show nothing.  A GPU build
*records* its key measurements; once committed under the book's sources they
are shown, with their provenance, beside the live numbers of any build:
"On a GPU (NVIDIA H100 80GB HBM3, torch 2.11.0, CUDA 13.0, driver 580.95.05,
recorded 2026-12-01) ...".

One hidden cell per phenomenon, after the cell that measured it::

    gpu_reference.note("async", "launch", device,
                       values={"launch_ms": launch_s * 1e3, "work_ms": work_s * 1e3},
                       sentence="the loop returned after {launch_ms:.2f} ms, the work took {work_ms:.1f} ms")

:func:`note` does two things:

* **records** ``values`` when the cell ran on a CUDA device and recording is on
  (``DLPERF_GPU_REFERENCE_OUT`` names a folder; ``scripts/build_book.py`` sets it
  to ``_build/gpu_reference``): ``<folder>/<chapter>.json`` gets the values and
  the provenance of this run (device, compute capability, torch, CUDA, driver,
  Python, date, the repository's commit).  Nothing is recorded on a CPU, ever.
* **shows** the committed reference of that measurement, ``book/_gpu_reference/<chapter>.json``
  (``DLPERF_GPU_REFERENCE_DIR`` to look elsewhere): the sentence filled with the
  recorded values and the provenance, or, when there is none, a sentence saying
  plainly that no GPU reference is available yet.  No figure is ever shown that
  a GPU did not measure.

A reference file is **refused** (:class:`InvalidReference`, which fails the
build) when its provenance is missing or incomplete, when it was not measured on
a CUDA device (device type, CUDA version), when a value is not a finite number,
or when its content no longer matches the digest written when it was recorded
(it was edited by hand).  The digest catches edits, not forgery: review what is
committed.  Promote a GPU build's recordings after looking at them::

    python -m dlperf.gpu_reference check [FOLDER]           # validate (default: the committed ones)
    python -m dlperf.gpu_reference promote _build/gpu_reference   # validate, then copy into book/_gpu_reference

The book's Sphinx extension ``book/_ext/gpu_reference_pages.py`` re-executes a
chapter when its reference file changes (the execution cache would otherwise
keep the old output).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import html
import json
import math
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["InvalidReference", "Note", "Reference", "load", "note", "provenance", "record", "reference_dir",
           "validate"]

SCHEMA = 1
REPO = Path(__file__).resolve().parents[1]
FOLDER = Path("book") / "_gpu_reference"   # the committed references, relative to the repository
PROVENANCE_KEYS = ("device", "device_type", "capability", "torch", "cuda", "driver", "python", "date", "commit")


class InvalidReference(ValueError):
    """A reference file that must not be shown (the message names the file and what is wrong)."""


def reference_dir() -> Path:
    """Where the committed references are read from (``DLPERF_GPU_REFERENCE_DIR``, else ``book/_gpu_reference``)."""
    return Path(os.environ.get("DLPERF_GPU_REFERENCE_DIR") or REPO / FOLDER)


def record_dir() -> Path | None:
    """Where a GPU build records (``DLPERF_GPU_REFERENCE_OUT``), or ``None``: no recording."""
    value = os.environ.get("DLPERF_GPU_REFERENCE_OUT")
    return Path(value) if value else None


# ---------------------------------------------------------------------------------------------
# Provenance and validation
# ---------------------------------------------------------------------------------------------


def _driver() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        first = out.stdout.strip().splitlines()
        if out.returncode == 0 and first:
            return first[0].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown (nvidia-smi gave no driver version)"


def _commit() -> str:
    # A copy of a working tree whose .git is not the checkout's (a lent GPU machine's copy kept the .git of
    # an older commit, 2026-11-27) says its commit through DLPERF_COMMIT (scripts/device_check.sh: .kit/commit).
    given = os.environ.get("DLPERF_COMMIT", "").strip()
    if given:
        return given
    try:
        out = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty", "--abbrev=12"],
                             capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown (not a git checkout)"


def provenance(device: Any) -> dict[str, str]:
    """Where a measurement on the CUDA ``device`` comes from: device, capability, torch, CUDA, driver, Python, date, commit."""
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        raise InvalidReference(f"a GPU reference is measured on a CUDA device, not on {device}")
    major, minor = torch.cuda.get_device_capability(device)
    return {"device": torch.cuda.get_device_name(device), "device_type": "cuda", "capability": f"{major}.{minor}",
            "torch": torch.__version__, "driver": _driver(),
            "cuda": torch.version.cuda or (f"HIP {torch.version.hip}" if getattr(torch.version, "hip", None) else "None"),
            "python": platform.python_version(),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "commit": _commit()}


def _digest(data: Mapping[str, Any]) -> str:
    body = {"chapter": data.get("chapter"), "provenance": data.get("provenance"),
            "measurements": data.get("measurements")}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def validate(data: Any, chapter: str, where: str = "") -> None:
    """Raise :class:`InvalidReference` unless ``data`` is a complete, unedited reference of ``chapter`` from a CUDA device."""
    at = where or f"the GPU reference of {chapter}"

    def bad(why: str) -> InvalidReference:
        return InvalidReference(f"{at}: {why}. GPU references come only from a GPU build "
                                "(make gpu-check, then python -m dlperf.gpu_reference promote)")

    if not isinstance(data, dict):
        raise bad("not a JSON object")
    if data.get("schema") != SCHEMA:
        raise bad(f"schema {data.get('schema')!r}, expected {SCHEMA}")
    if data.get("chapter") != chapter:
        raise bad(f"it is the reference of {data.get('chapter')!r}, not of {chapter!r}")
    prov = data.get("provenance")
    if not isinstance(prov, dict):
        raise bad("no provenance")
    missing = [k for k in PROVENANCE_KEYS if not isinstance(prov.get(k), str) or not prov[k].strip()]
    if missing:
        raise bad(f"provenance lacks {', '.join(missing)}")
    if prov["device_type"] != "cuda" or prov["cuda"] in ("None", "") or prov["device"].lower().startswith("cpu"):
        raise bad(f"measured on {prov['device']!r} (device type {prov['device_type']!r}, CUDA {prov['cuda']!r}), "
                  "not on a CUDA GPU")
    try:
        dt.datetime.fromisoformat(prov["date"])
    except ValueError:
        raise bad(f"date {prov['date']!r} is not an ISO date") from None
    measurements = data.get("measurements")
    if not isinstance(measurements, dict) or not measurements:
        raise bad("no measurements")
    for key, entry in measurements.items():
        values = entry.get("values") if isinstance(entry, dict) else None
        if not isinstance(values, dict) or not values:
            raise bad(f"measurement {key!r} has no values")
        for name, value in values.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise bad(f"measurement {key!r}: value {name!r} = {value!r} is not a finite number")
    if data.get("digest") != _digest(data):
        raise bad("its content does not match the digest written when it was recorded (edited by hand?)")


@dataclass(frozen=True)
class Reference:
    """The committed GPU reference of one chapter (validated)."""

    chapter: str
    provenance: dict[str, str]
    measurements: dict[str, dict[str, Any]]
    path: Path

    def source(self) -> str:
        """Where the numbers come from, in words."""
        p = self.provenance
        return (f"{p['device']} (compute capability {p['capability']}), torch {p['torch']}, CUDA {p['cuda']}, "
                f"driver {p['driver']}, Python {p['python']}; recorded {p['date'][:10]} at commit {p['commit']}")


def load(chapter: str, folder: Path | None = None) -> Reference | None:
    """The committed reference of ``chapter`` (``None`` when there is none); :class:`InvalidReference` if it is bad."""
    path = (folder or reference_dir()) / f"{chapter}.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise InvalidReference(f"{path}: not JSON ({exc})") from None
    validate(data, chapter, str(path))
    return Reference(chapter, dict(data["provenance"]), dict(data["measurements"]), path)


# ---------------------------------------------------------------------------------------------
# Recording (GPU builds)
# ---------------------------------------------------------------------------------------------

_recorded_here: set[Path] = set()   # files this process has (re)started: a new build replaces an old file


def record(chapter: str, key: str, values: Mapping[str, float], device: Any, folder: Path | None = None) -> Path | None:
    """Add measurement ``key`` of ``chapter`` to the recording folder; only on a CUDA device, only when recording.

    Returns the file written, or ``None`` (not a CUDA device, or no recording folder).
    """
    import torch

    folder = folder or record_dir()
    if folder is None or torch.device(device).type != "cuda":
        return None
    clean = {name: float(value) for name, value in values.items()}
    path = folder / f"{chapter}.json"
    prov = provenance(device)
    data: dict[str, Any] = {"schema": SCHEMA, "chapter": chapter, "provenance": prov, "measurements": {}}
    if path in _recorded_here and path.is_file():
        previous = json.loads(path.read_text())
        data["measurements"] = previous.get("measurements", {})
        data["provenance"] = previous.get("provenance", prov)
    data["measurements"][key] = {"values": clean}
    data["digest"] = _digest(data)
    validate(data, chapter, str(path))      # what is written is what would be accepted
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)
    _recorded_here.add(path)
    return path


# ---------------------------------------------------------------------------------------------
# Showing (every build)
# ---------------------------------------------------------------------------------------------

TITLE = "On a GPU"
ABSENT = ("No GPU reference is available yet for this measurement: no build of this book on a CUDA GPU whose "
          "results were committed has measured it, so no GPU figure is shown here. A GPU build records it "
          "(make gpu-check; see the page Running this course).")


class Note:
    """What a hidden cell shows: the GPU reference of one measurement, or that there is none (HTML and text)."""

    def __init__(self, text: str, source: str | None, rows: Sequence[tuple[str, str]] = (),
                 datasheet: str | None = None):
        self.text = text
        self.source = source
        self.rows = list(rows)
        self.datasheet = datasheet      # the recording GPU's datasheet figures, in one sentence

    @property
    def available(self) -> bool:
        return self.source is not None

    def _repr_html_(self) -> str:
        body = f"<p>{html.escape(self.text)}</p>"
        if self.rows:
            body += ('<table class="dlperf-table">' + "".join(
                f"<tr><td>{html.escape(a)}</td><td>{html.escape(b)}</td></tr>" for a, b in self.rows) + "</table>")
        if self.datasheet:
            body += f'<p class="dlperf-gpu-datasheet">{html.escape(self.datasheet)}</p>'
        if self.source:
            body += f'<p class="dlperf-gpu-source">Source: {html.escape(self.source)}.</p>'
        state = "present" if self.available else "absent"
        return (f'<div class="admonition note dlperf-gpu-reference" data-reference="{state}">'
                f'<p class="admonition-title">{TITLE}</p>{body}</div>')

    def __repr__(self) -> str:
        rows = "".join(f"\n  {a}: {b}" for a, b in self.rows)
        source = f"\n  (source: {self.source})" if self.source else ""
        sheet = f"\n  {self.datasheet}" if self.datasheet else ""
        return f"{TITLE}: {self.text}{rows}{sheet}{source}"


def _fill(template: str, values: Mapping[str, float], where: str) -> str:
    try:
        return template.format(**values)
    except (KeyError, IndexError, ValueError) as exc:
        raise InvalidReference(f"{where}: the sentence needs {exc} that the recorded values "
                               f"({', '.join(sorted(values))}) do not give; record it again on a GPU "
                               "(make gpu-check) or keep the names of the values") from None


def note(chapter: str, key: str, device: Any, *, sentence: str, values: Mapping[str, float] | None = None,
         rows: Sequence[tuple[str, str]] = ()) -> Note:
    """Record ``values`` (CUDA builds that record) and show the committed reference of ``chapter``/``key``.

    ``sentence`` and each ``rows`` template (``(label, "{value:.1f} GB/s")``) are
    filled with the *committed* values, never with this build's: a CPU build
    shows only what a GPU measured.  The sentence must find every value it
    names (else :class:`InvalidReference`); a row naming a value the reference
    GPU did not measure (bfloat16 before Ampere) is left out.
    """
    if values is not None:
        record(chapter, key, values, device)
    ref = load(chapter)
    entry = ref.measurements.get(key) if ref is not None else None
    if ref is None or entry is None:
        extra = "" if ref is None else (f" (the committed reference of this chapter, {ref.path.name}, does not hold "
                                         "it: recorded before this measurement existed, or its cell failed on that GPU)")
        return Note(ABSENT if not extra else ABSENT.replace("measurement:", f"measurement{extra}:", 1), None)
    where = f"{ref.path}, measurement {key!r}"
    values_got = entry["values"]
    text = _fill(sentence, values_got, where)
    filled = []
    for label, template in rows:       # a row whose value that GPU did not measure is left out
        try:
            filled.append((label, template.format(**values_got)))
        except KeyError:
            continue
    from .datasheets import lookup

    sheet = lookup(ref.provenance["device"])
    return Note(text, ref.source(), filled, sheet.sentence() if sheet else None)


# ---------------------------------------------------------------------------------------------
# Command line: check, promote
# ---------------------------------------------------------------------------------------------


def check_folder(folder: Path) -> list[Reference]:
    """Every reference file in ``folder``, validated (raises on the first bad one)."""
    refs = []
    for path in sorted(folder.glob("*.json")):
        ref = load(path.stem, folder)
        assert ref is not None
        refs.append(ref)
    return refs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dlperf.gpu_reference", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="validate the reference files of a folder (default: the committed ones)")
    c.add_argument("folder", nargs="?", type=Path)
    p = sub.add_parser("promote", help="validate a GPU build's recordings and copy them into book/_gpu_reference")
    p.add_argument("folder", type=Path, help="what a GPU build recorded (e.g. _build/gpu_reference)")
    args = parser.parse_args(argv)
    folder = args.folder or reference_dir()
    try:
        refs = check_folder(folder)
    except InvalidReference as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 1
    if not refs:
        print(f"{folder}: no GPU reference" + (" to promote" if args.command == "promote" else ""))
        return 1 if args.command == "promote" else 0
    for ref in refs:
        print(f"{ref.path}: {len(ref.measurements)} measurement(s) on {ref.source()}")
    if args.command == "promote":
        target = REPO / FOLDER
        target.mkdir(parents=True, exist_ok=True)
        for ref in refs:
            shutil.copyfile(ref.path, target / ref.path.name)
        print(f"copied {len(refs)} file(s) into {target}: review them, rebuild the book (make book), commit them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
