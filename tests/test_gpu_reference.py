"""GPU reference outputs (``dlperf/gpu_reference.py``, ``book/_ext/gpu_reference_pages.py``, ``scripts/build_book.py``).

No reference in this repository comes from a GPU yet, so no test data here
claims to: files made by these tests carry the provenance of a device named
"Test GPU (made by the test suite)" and live in temporary folders only.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from conftest import ROOT, toc_files
from dlperf import gpu_reference as G

FAKE = {"device": "Test GPU (made by the test suite)", "device_type": "cuda", "capability": "9.0",
        "torch": "2.11.0+cu130", "cuda": "13.0", "driver": "580.00", "python": "3.12.3",
        "date": "2026-11-24T12:00:00+00:00", "commit": "0123456789ab"}


def reference(chapter: str = "async", values: dict | None = None, **provenance: str) -> dict:
    data = {"schema": G.SCHEMA, "chapter": chapter, "provenance": {**FAKE, **provenance},
            "measurements": {"launch": {"values": values or {"launch_ms": 0.25, "work_ms": 61.5}}}}
    data["digest"] = G._digest(data)
    return data


def write(folder: Path, data: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{data['chapter']}.json"
    path.write_text(json.dumps(data))
    return path


SENTENCE = "the loop returned after {launch_ms:.2f} ms, the work took {work_ms:.1f} ms"


# ---------------------------------------------------------------------------------------------
# What is refused
# ---------------------------------------------------------------------------------------------


def test_a_complete_reference_from_a_cuda_device_is_accepted(tmp_path):
    write(tmp_path, reference())
    ref = G.load("async", tmp_path)
    assert ref is not None and ref.measurements["launch"]["values"]["work_ms"] == 61.5
    assert "Test GPU (made by the test suite)" in ref.source() and "driver 580.00" in ref.source()


@pytest.mark.parametrize("change, words", [
    (lambda d: d.pop("provenance"), "no provenance"),
    (lambda d: d["provenance"].pop("driver"), "provenance lacks driver"),
    (lambda d: d["provenance"].update(date=""), "provenance lacks date"),
    (lambda d: d["provenance"].update(device_type="cpu", device="cpu"), "not on a CUDA GPU"),
    (lambda d: d["provenance"].update(cuda="None"), "not on a CUDA GPU"),
    (lambda d: d["provenance"].update(date="yesterday"), "not an ISO date"),
    (lambda d: d.update(chapter="hardware"), "not of 'async'"),
    (lambda d: d["measurements"]["launch"]["values"].update(work_ms=float("nan")), "not a finite number"),
    (lambda d: d["measurements"]["launch"]["values"].update(work_ms="61.5"), "not a finite number"),
    (lambda d: d.update(measurements={}), "no measurements"),
    (lambda d: d.update(schema=0), "schema"),
], ids=["no-provenance", "no-driver", "empty-date", "cpu-device", "cpu-torch", "bad-date", "other-chapter", "nan",
        "string", "empty", "schema"])
def test_references_without_provenance_or_from_a_cpu_are_refused(tmp_path, change, words):
    data = reference()
    change(data)
    data["digest"] = G._digest(data)    # well formed apart from the defect under test
    (tmp_path / "async.json").write_text(json.dumps(data))
    with pytest.raises(G.InvalidReference, match=re.escape(words)):
        G.load("async", tmp_path)


def test_a_reference_edited_after_it_was_recorded_is_refused(tmp_path):
    data = reference()
    data["measurements"]["launch"]["values"]["work_ms"] = 6.15      # the digest is the recorded one
    write(tmp_path, data)
    with pytest.raises(G.InvalidReference, match="edited by hand"):
        G.load("async", tmp_path)


def test_an_invalid_reference_fails_the_cell_that_shows_it(tmp_path, monkeypatch):
    write(tmp_path, reference(device_type="cpu", device="cpu"))
    monkeypatch.setenv("DLPERF_GPU_REFERENCE_DIR", str(tmp_path))
    with pytest.raises(G.InvalidReference):
        G.note("async", "launch", "cpu", sentence=SENTENCE)


def test_every_committed_reference_is_valid_and_from_a_gpu():
    folder = ROOT / G.FOLDER
    refs = G.check_folder(folder) if folder.is_dir() else []
    for ref in refs:
        assert ref.provenance["device_type"] == "cuda", ref.path
    committed = sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []
    assert sorted(r.chapter for r in refs) == committed


# ---------------------------------------------------------------------------------------------
# What is shown
# ---------------------------------------------------------------------------------------------


def test_without_a_reference_the_note_says_so_and_shows_no_figure(tmp_path, monkeypatch):
    monkeypatch.setenv("DLPERF_GPU_REFERENCE_DIR", str(tmp_path))
    shown = G.note("async", "launch", "cpu", values={"launch_ms": 1.234, "work_ms": 5.678}, sentence=SENTENCE)
    html = shown._repr_html_()
    assert not shown.available and 'data-reference="absent"' in html
    assert "No GPU reference is available yet" in html
    assert "1.23" not in html and "5.7" not in html, "a CPU build's own values must never be shown as a GPU's"


def test_with_a_reference_the_note_shows_the_recorded_values_and_their_source(tmp_path, monkeypatch):
    write(tmp_path, reference(values={"launch_ms": 0.25, "work_ms": 61.5, "bf16": 800.0}))
    monkeypatch.setenv("DLPERF_GPU_REFERENCE_DIR", str(tmp_path))
    shown = G.note("async", "launch", "cpu", values={"launch_ms": 3.1416, "work_ms": 2.7183}, sentence=SENTENCE,
                   rows=[("bfloat16", "{bf16:.0f} GFLOP/s"), ("float8", "{f8:.0f} GFLOP/s")])
    html = shown._repr_html_()
    assert shown.available and 'data-reference="present"' in html
    assert "the loop returned after 0.25 ms, the work took 61.5 ms" in html
    assert "Test GPU (made by the test suite)" in html and "CUDA 13.0" in html and "2026-11-24" in html
    assert "800 GFLOP/s" in html and "float8" not in html     # a value that GPU did not measure: no row
    assert "3.14" not in html and "2.7" not in html       # this build's own values are never shown
    absent = G.note("async", "item", "cpu", sentence="{x}")
    assert not absent.available and "does not hold it" in absent.text


def test_a_sentence_that_needs_a_value_the_reference_lacks_is_an_error(tmp_path, monkeypatch):
    write(tmp_path, reference())
    monkeypatch.setenv("DLPERF_GPU_REFERENCE_DIR", str(tmp_path))
    with pytest.raises(G.InvalidReference, match="ratio"):
        G.note("async", "launch", "cpu", sentence="{ratio:.1f} times")


# ---------------------------------------------------------------------------------------------
# Recording
# ---------------------------------------------------------------------------------------------


def test_a_cpu_build_records_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("DLPERF_GPU_REFERENCE_OUT", str(tmp_path / "out"))
    assert G.record("async", "launch", {"launch_ms": 1.0}, torch.device("cpu")) is None
    assert not (tmp_path / "out").exists()


def test_a_cuda_build_records_what_the_reference_check_accepts(tmp_path, monkeypatch):
    # No GPU here: the provenance of a CUDA device is faked for this test (and says so); the rest --
    # merging measurements, the digest, validation, promotion -- is the code a GPU build runs.
    monkeypatch.setattr(G, "provenance", lambda device: dict(FAKE))
    monkeypatch.setattr(G, "_recorded_here", set())
    out = tmp_path / "out"
    stale = write(out, reference(values={"launch_ms": 7.0, "work_ms": 7.0}))   # a previous build's file
    monkeypatch.setenv("DLPERF_GPU_REFERENCE_OUT", str(out))
    cuda = torch.device("cuda")
    assert G.record("async", "launch", {"launch_ms": 0.5, "work_ms": 40}, cuda) == stale
    G.record("async", "item", {"ratio": 2.5}, cuda)
    ref = G.load("async", out)
    assert ref is not None and set(ref.measurements) == {"launch", "item"}, "a new build replaces the old file"
    assert ref.measurements["launch"]["values"] == {"launch_ms": 0.5, "work_ms": 40.0}
    target = tmp_path / "book" / "_gpu_reference"
    monkeypatch.setattr(G, "REPO", tmp_path)
    assert G.main(["promote", str(out)]) == 0
    assert json.loads((target / "async.json").read_text()) == json.loads(stale.read_text())
    (out / "hardware.json").write_text(json.dumps(reference("hardware", device_type="cpu", device="cpu")))
    assert G.main(["promote", str(out)]) == 1, "a folder holding a refused file promotes nothing"


# ---------------------------------------------------------------------------------------------
# The book
# ---------------------------------------------------------------------------------------------


def noted(doc: str) -> list[str]:
    """The measurement keys a chapter's hidden cells show, in order."""
    return re.findall(r'gpu_reference\.note\(\s*"[^"]+",\s*"([^"]+)"', (ROOT / f"{doc}.md").read_text())


def test_the_gpu_only_phenomena_of_the_chapters_have_a_reference_note():
    found = {doc: noted(doc) for doc in toc_files()}
    assert found["book/compilers"] == ["gelu_trace", "reduce_overhead", "batch_sweep"]
    assert found["book/async"] == ["launch", "launch_trace", "launch_spans", "queue", "item", "streams", "copies",
                                   "deep_queue"]
    assert found["book/memory"] == ["state", "checkpointing", "accumulation"]
    assert found["book/auto-parallelism"] == ["cpu_gpu", "streams", "overlap"]
    assert found["book/attention-kernels"] == ["flash", "fp8"]
    assert found["book/hardware"] == ["probe"]
    assert found["book/mixed-precision"] == ["speed"]
    for doc, keys in found.items():
        text = (ROOT / f"{doc}.md").read_text()
        chapter = Path(doc).name
        assert all(f'gpu_reference.note(\n    "{chapter}"' in text for _ in keys), f"{doc}: notes name their chapter"
        if keys:
            cells = re.findall(r"```\{code-cell\} ipython3\n(.*?)```", text, flags=re.S)
            showing = [c for c in cells if "gpu_reference.note(" in c]
            assert all(c.startswith(":tags: [remove-input]") for c in showing), f"{doc}: note cells hide their input"


def test_the_built_chapters_show_the_committed_reference_or_say_there_is_none(book):
    for doc in toc_files():
        keys = noted(doc)
        if not keys:
            continue
        page = (book.html / f"{doc}.html").read_text()
        states = re.findall(r'class="admonition note dlperf-gpu-reference" data-reference="(\w+)"', page)
        ref = G.load(Path(doc).name, ROOT / G.FOLDER)
        want = ["present" if ref is not None and k in ref.measurements else "absent" for k in keys]
        assert states == want, f"{doc}: {states} != {want}"
        if "absent" in states:
            assert "No GPU reference is available yet" in page


def _build_book_module():
    spec = importlib.util.spec_from_file_location("build_book", ROOT / "scripts" / "build_book.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_execution_cache_is_emptied_when_the_device_changes(tmp_path, monkeypatch):
    build_book = _build_book_module()
    cache = tmp_path / ".jupyter_cache"
    monkeypatch.setattr(build_book, "build_device", lambda: "cpu")
    cache.mkdir()
    (cache / "entry").write_text("executed on some GPU")
    (cache / "DEVICE").write_text("cuda: Test GPU\n")
    build_book.prepare_cache(cache, fresh=False)
    assert not (cache / "entry").exists() and (cache / "DEVICE").read_text() == "cpu\n"
    (cache / "entry").write_text("executed on this CPU")
    build_book.prepare_cache(cache, fresh=False)
    assert (cache / "entry").exists(), "same device: the cache is kept"
    build_book.prepare_cache(cache, fresh=True)
    assert not (cache / "entry").exists()


def test_the_execution_cache_is_emptied_when_the_library_changes(tmp_path, monkeypatch):
    build_book = _build_book_module()
    cache = tmp_path / ".jupyter_cache"
    monkeypatch.setattr(build_book, "build_device", lambda: "cpu")
    monkeypatch.setattr(build_book, "library_digest", lambda: "one")
    build_book.prepare_cache(cache, fresh=False)
    (cache / "entry").write_text("executed with library one")
    build_book.prepare_cache(cache, fresh=False)
    assert (cache / "entry").exists(), "same library: the cache is kept"
    monkeypatch.setattr(build_book, "library_digest", lambda: "two")
    build_book.prepare_cache(cache, fresh=False)
    assert not (cache / "entry").exists() and (cache / "LIBRARY").read_text() == "two\n"


def test_the_real_build_device_is_this_machines():
    want = f"cuda: {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else "cpu"
    assert _build_book_module().build_device().startswith(want)


PAGE = """\
---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
    format_version: 0.13
kernelspec:
  display_name: Python 3 (ipykernel)
  language: python
  name: python3
---

# Page

```{code-cell} ipython3
from dlperf import gpu_reference

gpu_reference.note("page", "launch", "cpu", sentence="the loop returned after {launch_ms:.2f} ms")
```
"""


@pytest.mark.slow
def test_a_chapter_executes_again_when_its_reference_is_committed(tmp_path):
    """A tiny book with the real extension: no reference, then one, then another; each build shows the current one."""
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "page.md").write_text(PAGE)
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: book/page\n")
    (tmp_path / "_config.yml").write_text(textwrap.dedent(f"""\
        title: test
        only_build_toc_files: true
        execute:
          execute_notebooks: cache
          cache: "{tmp_path / '_build' / '.jupyter_cache'}"
          allow_errors: false
        sphinx:
          local_extensions:
            gpu_reference_pages: {ROOT / 'book' / '_ext'}
        """))
    folder = tmp_path / "book" / "_gpu_reference"
    env = {**os.environ, "DLPERF_GPU_REFERENCE_DIR": str(folder)}

    def build() -> str:
        out = subprocess.run([str(Path(sys.executable).parent / "jupyter-book"), "build", "-W", "-n", "--keep-going",
                              str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
        return (tmp_path / "_build" / "html" / "book" / "page.html").read_text()

    assert "No GPU reference is available yet" in build()
    write(folder, reference("page", values={"launch_ms": 0.25}))
    page = build()
    assert "the loop returned after 0.25 ms" in page and "No GPU reference" not in page
    write(folder, reference("page", values={"launch_ms": 0.5}))
    assert "the loop returned after 0.50 ms" in build()
