"""scripts/api_names.py: the torch / triton / numpy names the project uses, and whether each resolves here."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "api_names.py"

FAKE_PY = '''\
import torch
import torch.distributed as dist
from torch import nn
import numpy as np
from torch.distributed import all_reduce as reduce_all

dist.all_reduce(torch.ones(1))
layer = nn.Linear(2, 2)
np.linalg.norm([1.0])
torch.definitely_not_here(1)
x = torch.randn(2)
x.foo_bar_not_collected
torch.randn(2).nonexistent_method_not_collected()
gather = getattr(dist, "not_yet_a_collective", None) or dist.all_gather_into_tensor
if hasattr(torch, "future_thing"):
    torch.future_thing.run()
try:
    from torch import also_future
except ImportError:
    also_future = None
try:
    torch.other_future()
except (ValueError, AttributeError):
    pass
'''

FAKE_MD = '''\
# A chapter

```{code-cell} ipython3
:tags: [hide-input]
%matplotlib inline
import triton.language as tl
```

Some text.

```{code-cell} ipython3
def kernel():
    tl.program_id(0)
    tl.not_a_lang_thing
```
'''

FAKE_CELLS = [
    "!pip list\nimport numpy as np\n",
    "np.not_a_numpy_name\nnp.zeros(3)\n",
]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def fake_tree(tmp_path: Path) -> Path:
    (tmp_path / "dlperf").mkdir()
    (tmp_path / "dlperf" / "fake.py").write_text(FAKE_PY)
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "fake.md").write_text(FAKE_MD)
    (tmp_path / "solutions" / "fake").mkdir(parents=True)
    cells = [{"cell_type": "code", "source": c, "metadata": {}, "outputs": []} for c in FAKE_CELLS]
    (tmp_path / "solutions" / "fake" / "fake.ipynb").write_text(json.dumps({"cells": cells, "nbformat": 4}))
    return tmp_path


def test_synthetic_tree(tmp_path):
    root = fake_tree(tmp_path)
    out = run("--root", str(root), "--json", str(tmp_path / "report.json"), "--strict")
    assert out.returncode == 1, out.stdout + out.stderr  # torch.definitely_not_here and friends
    report = json.loads((tmp_path / "report.json").read_text())
    assert set(report["versions"]) == {"python", "torch", "triton", "numpy"}
    paths = report["paths"]

    # aliases and from-imports resolve to full paths
    for path in ("torch.distributed.all_reduce", "torch.nn.Linear", "numpy.linalg.norm", "torch.randn",
                 "torch.distributed.all_gather_into_tensor", "numpy.zeros"):
        assert paths[path]["resolves"], path
    assert "dlperf/fake.py:7" in paths["torch.distributed.all_reduce"]["uses"]
    assert "dlperf/fake.py:5" in paths["torch.distributed.all_reduce"]["uses"]  # the from-import itself
    # chains through a call's result, or rooted at a variable, are not collected
    assert not [p for p in paths if "not_collected" in p]

    # the deliberately missing name is a failure, with where it fails and where it is used
    missing = paths["torch.definitely_not_here"]
    assert missing == {**missing, "resolves": False, "guarded": False, "fails_at": "torch.definitely_not_here"}
    assert missing["uses"] == ["dlperf/fake.py:10"]
    assert "torch.definitely_not_here" in out.stdout.split("guarded (absent here")[0]

    # probes: getattr with a default, hasattr (and the if it guards), try/except ImportError / AttributeError
    for path in ("torch.distributed.not_yet_a_collective", "torch.future_thing", "torch.future_thing.run",
                 "torch.also_future", "torch.other_future"):
        assert paths[path]["resolves"] is False and paths[path]["guarded"] is True, path
        assert path not in out.stdout.split("guarded (absent here")[0], path

    # the book's code cells share their imports (triton.language in cell 1, used in cell 2; magics skipped)
    assert paths["triton.language.program_id"]["resolves"]
    lang = paths["triton.language.not_a_lang_thing"]
    assert lang["resolves"] is False and lang["uses"] == ["book/fake.md:14"]
    # the notebook's cells likewise (a shell line skipped)
    assert paths["numpy.not_a_numpy_name"]["uses"] == ["solutions/fake/fake.ipynb:cell1:1"]
    assert not report["skipped"]


def test_without_strict_exit_zero(tmp_path):
    out = run("--root", str(fake_tree(tmp_path)))
    assert out.returncode == 0 and "torch.definitely_not_here" in out.stdout


def test_real_tree_resolves_here(tmp_path):
    out = run("--json", str(tmp_path / "report.json"), "--strict")
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert len(report["paths"]) > 100
    gather = report["paths"]["torch.distributed.all_gather_single"]  # the name the first GPU run tripped on
    assert gather["guarded"], textwrap.shorten(str(gather), 300)


def test_a_name_the_gpu_image_lacks_is_caught_here_without_a_gpu(tmp_path):
    """The first GPU run failed on `dist.all_gather_single`, new in torch 2.13: the record of a run on the GPU
    image (scripts/gpu_image_api.json, torch 2.11) lists it as lacking there, so an unguarded use fails
    --strict here, where torch 2.13 has it; a guarded use does not."""
    record = json.loads((ROOT / "scripts" / "gpu_image_api.json").read_text())
    assert "torch.distributed.all_gather_single" in record["absent"] and record["versions"]["torch"].startswith("2.11")
    (tmp_path / "dlperf").mkdir()
    source = tmp_path / "dlperf" / "uses.py"
    source.write_text("import torch.distributed as dist\n\ndist.all_gather_single\n")
    out = run("--root", str(tmp_path), "--strict")
    assert out.returncode == 1 and "LACKING ON THE GPU IMAGE: torch.distributed.all_gather_single" in out.stdout
    assert "dlperf/uses.py:3" in out.stdout
    source.write_text("import torch.distributed as dist\n\ngetattr(dist, 'all_gather_single', None)\n")
    out = run("--root", str(tmp_path), "--strict")
    assert out.returncode == 0, out.stdout
