"""scripts/gpu_references.py: a lent GPU window executes first the chapters with a measurement no GPU has recorded."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import gpu_references as G  # noqa: E402

CELL = '''```{{code-cell}} ipython3
gpu_reference.note(
    "{chapter}", "{key}", device, values=v,
    sentence="ran at {{rate:.1f}} GB/s",
    rows=[(f"stride {{s}}", f"{{{{useful_{{s}}:,.0f}}}} GB/s") for s in (1, 2)] + [("new", "{{extra:.2f}} x")])
```
'''


def _chapter(book: Path, chapter: str, key: str, held: dict | None) -> None:
    (book / f"{chapter}.md").write_text("# t\n\n" + CELL.format(chapter=chapter, key=key))
    if held is not None:
        (book / "_gpu_reference").mkdir(exist_ok=True)
        (book / "_gpu_reference" / f"{chapter}.json").write_text(json.dumps({"measurements": held}))


def test_chapters_lacking_a_measurement_or_a_named_value_come_first(tmp_path, monkeypatch):
    monkeypatch.setattr(G, "BOOK", tmp_path)
    _chapter(tmp_path, "a-done", "probe", {"probe": {"values": {"rate": 1, "extra": 2}}})
    _chapter(tmp_path, "b-new-value", "probe", {"probe": {"values": {"rate": 1}}})
    _chapter(tmp_path, "c-never", "probe", None)
    _chapter(tmp_path, "d-other-key", "speed", {"probe": {"values": {"rate": 1, "extra": 2}}})
    assert G.missing("a-done") == []                 # the f-string's {s} and {{useful_{s}:...}} are no value names
    assert G.missing("b-new-value") == ["probe.extra"]
    assert G.missing("c-never") == ["probe"] and G.missing("d-other-key") == ["speed"]
    assert G.recording_chapters() == ["b-new-value", "c-never", "d-other-key", "a-done"]
