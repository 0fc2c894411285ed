"""Execute the chapters that record GPU reference outputs, one after the other, and keep what they printed.

A whole book build on a GPU takes longer than a lent GPU window allows beside anything else (2026-11-27,
an H200: five chapters in 380 s, the DDP chapter alone 220 s) and keeps no output of a cell that caught
its own failure (the `reduce-overhead` measurement said why it failed, and the build threw it away).  This
script executes only the chapters that record GPU references (those whose source calls
``gpu_reference.note``), each in a fresh kernel from the chapter's folder, as the book build does, with
``DLPERF_GPU_REFERENCE_OUT`` set so that they record; it writes each executed notebook (outputs and
tracebacks included, also when a cell fails) and a summary (``summary.json``: per chapter its seconds,
whether it executed, the error, the references it recorded).  Where there is no CUDA device the chapters
run and record nothing (``gpu_reference.record`` records only on CUDA).

Usage: ``python scripts/gpu_references.py [--chapters async,compilers] [--out DIR] [--time-limit SECONDS]``
(default: every such chapter, those with a measurement the committed references lack first;
``_build/gpu-references``, no limit).  ``make gpu-check`` runs it as its
``references`` step.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
CELL_TIMEOUT = 900    # seconds per cell, as _config.yml's execute.timeout


NOTE = re.compile(r'gpu_reference\.note\(\s*"([\w-]+)",\s*"(\w+)"')


def missing(chapter: str) -> list[str]:
    """The measurements a chapter's cells record that its committed reference does not hold yet, or holds
    without a value that the note's sentence or rows name (``key.value``)."""
    text = (BOOK / f"{chapter}.md").read_text()
    committed = BOOK / "_gpu_reference" / f"{chapter}.json"
    held = json.loads(committed.read_text()).get("measurements", {}) if committed.is_file() else {}
    out = []
    for match in NOTE.finditer(text):
        if match.group(1) != chapter:
            continue
        key = match.group(2)
        if key not in held:
            out.append(key)
            continue
        call = text[match.end():text.find("\n```", match.end())]        # the rest of the cell
        named = set(re.findall(r"\{(\w+):", call))      # a value with its format: {name:.1f}
        out += [f"{key}.{name}" for name in sorted(named - set(held[key].get("values", {})))]
    return sorted(set(out))


def recording_chapters() -> list[str]:
    """The chapters whose cells record GPU references: first those with a measurement no GPU has recorded yet
    (so that a window cut short still records them), then the others, each group in the order of names."""
    chapters = sorted(p.stem for p in BOOK.glob("*.md") if "gpu_reference.note(" in p.read_text())
    return sorted(chapters, key=lambda c: not missing(c))


def execute(chapter: str, out: Path, seconds: float | None) -> dict:
    """Execute one chapter; write ``out/<chapter>.ipynb``; what happened."""
    import jupytext
    import nbclient
    import nbformat

    nb = jupytext.read(BOOK / f"{chapter}.md")
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                                     resources={"metadata": {"path": str(BOOK)}})
    started = time.monotonic()
    error = None
    try:
        if seconds is not None:
            client.timeout = max(1, min(CELL_TIMEOUT, int(seconds)))
        client.execute()
    except Exception as exc:     # a failing cell: keep the notebook up to it, and say why
        lines = [line for line in str(exc).splitlines() if line.strip()]
        error = f"{type(exc).__name__}: {lines[-1] if lines else ''}"[:500]
    elapsed = time.monotonic() - started
    nbformat.write(nb, out / f"{chapter}.ipynb")
    return {"chapter": chapter, "seconds": round(elapsed, 1), "executed": error is None, "error": error}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chapters", default=None, help="comma-separated (default: every recording chapter)")
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "gpu-references")
    parser.add_argument("--time-limit", type=float, default=None, metavar="SECONDS")
    args = parser.parse_args(argv)
    chapters = args.chapters.split(",") if args.chapters else recording_chapters()
    unknown = [c for c in chapters if not (BOOK / f"{c}.md").is_file()]
    if unknown:
        parser.error(f"no chapter {', '.join(unknown)} in book/")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    recorded = out / "gpu_reference"
    os.environ["DLPERF_GPU_REFERENCE_OUT"] = str(recorded)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(ROOT / "_build" / ".inductor_cache"))
    deadline = None if args.time_limit is None else time.monotonic() + args.time_limit
    summary: list[dict] = []
    for chapter in chapters:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left < 10:
            summary.append({"chapter": chapter, "executed": False, "error": "no time left", "seconds": 0})
            continue
        print(f"gpu-references: {chapter} ...", flush=True)
        entry = execute(chapter, out, left)
        path = recorded / f"{chapter}.json"
        entry["recorded"] = sorted(json.loads(path.read_text())["measurements"]) if path.is_file() else []
        summary.append(entry)
        print(f"gpu-references: {chapter}: {'executed' if entry['executed'] else 'FAILED: ' + entry['error']} in "
              f"{entry['seconds']:.0f} s; recorded {', '.join(entry['recorded']) or 'nothing'}", flush=True)
        (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0 if all(e["executed"] for e in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
