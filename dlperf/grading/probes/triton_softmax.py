"""Probes of the ``triton_softmax`` exercise: run a softmax launcher while Triton's interpreter is watched.

The student writes a Triton kernel and its launcher ``softmax(x)``.  These probes run the launcher in the
process of the code they are given (the student's solution in its host, or a reference) and report what
they saw, as plain data; nothing here knows the right answer.

* :func:`prepare` -- chooses the Triton mode of the process *before* the kernels are decorated (the host
  runs it ahead of the solution's cells): the interpreter where there is no CUDA device, or when asked
  (``interpret=True``: the traffic can only be counted there), compiled on a CUDA device otherwise.
* :func:`run` -- one call ``softmax(x)`` inside :func:`dlperf.kernels.traffic.count_traffic`: the result,
  and every launch with its grid and the bytes its programs loaded and stored (masked lanes move nothing).
* :func:`cuda_prepare` / :func:`cuda_repeat` -- on a CUDA device: a copy of the input on the device, the
  launcher's first calls (Triton compiles there), then ``repeats`` calls for the caller to time with its own
  clock.

What the counts can be fooled by: they are taken in the process of the code they count, so that code
could change the counter (``dlperf.kernels.traffic``, the interpreter's builder), move data in ways the
counter does not watch (block pointers, tensor descriptors, atomics), or compute the softmax with torch
in the launcher and hand a kernel the finished values.  The grader therefore also reads the solution's
source itself (``autograder/exercises/triton_softmax.py``), in a process this code never reaches.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

import torch

__all__ = ["prepare", "run", "cuda_prepare", "cuda_repeat"]

_kept: dict[str, Any] = {}


def prepare(interpret: bool | None = None) -> str:
    """Choose the Triton mode of this process before any kernel is decorated; returns the choice in words.

    ``interpret=None``: :func:`dlperf.kernels.select_mode`'s choice (the interpreter where no CUDA device
    exists).  ``interpret=True``: the interpreter even on a CUDA device (Triton helpers imported earlier
    are switched to it too).
    """
    from dlperf.kernels import mode

    # Compiled kernels are cached on disk: in the grader's processes only the private /tmp is sure to be writable.
    os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(tempfile.gettempdir(), "triton-cache"))
    if interpret:
        os.environ[mode.ENV] = "1"
        if "triton.language" in sys.modules:
            mode._interpret_imported_triton()
    chosen = mode.select_mode(verbose=False)
    if interpret and not chosen.interpreted:
        raise RuntimeError(f"the interpreter was asked for, but {chosen}")
    return str(chosen)


def _launches(traffic: Any) -> list[dict[str, Any]]:
    return [{"kernel": str(launch.kernel), "grid": list(launch.grid), "programs": launch.programs,
             "loaded": launch.loaded_bytes, "stored": launch.stored_bytes,
             "programs_that_loaded": len({a.program for a in launch.accesses if a.kind == "load"})}
            for launch in traffic.launches]


def run(mod: Any, x: torch.Tensor) -> dict[str, Any]:
    """``mod.softmax(x)`` with every Triton launch counted (interpreter only).

    Returns ``{"out": what softmax returned, "launches": [{"kernel", "grid", "programs", "loaded",
    "stored", "programs_that_loaded"}], "loaded": bytes, "stored": bytes}``.
    """
    from dlperf.kernels.traffic import count_traffic

    with count_traffic() as traffic:
        out = mod.softmax(x)
    return {"out": out, "launches": _launches(traffic), "loaded": traffic.loaded_bytes,
            "stored": traffic.stored_bytes}


def cuda_prepare(mod: Any, x: torch.Tensor, warmup: int = 3) -> torch.Tensor:
    """Keep a CUDA copy of ``x``, call ``mod.softmax`` on it ``warmup`` times (compiling); its result, on the CPU."""
    xc = x.to("cuda")
    out = None
    for _ in range(max(1, warmup)):
        out = mod.softmax(xc)
    torch.cuda.synchronize()
    _kept["x"] = xc
    return out.cpu() if isinstance(out, torch.Tensor) else out


def cuda_repeat(mod: Any, repeats: int) -> torch.Tensor:
    """``repeats`` calls of ``mod.softmax`` on the kept CUDA input, then a synchronisation; the last result's
    row sums (on the CPU), so that the caller sees that work was done."""
    xc = _kept["x"]
    out = None
    for _ in range(max(1, int(repeats))):
        out = mod.softmax(xc)
    torch.cuda.synchronize()
    return out.float().sum(dim=1).cpu() if isinstance(out, torch.Tensor) else out
