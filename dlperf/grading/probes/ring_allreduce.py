"""Probes of the ``ring_allreduce`` exercise (they run beside the student's code; nothing here is a check)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["simulated"]


def _storage(t: Any) -> int | None:
    return t.untyped_storage().data_ptr() if isinstance(t, torch.Tensor) and t.numel() else None


def simulated(mod: Any, cluster: Any, inputs: Sequence[torch.Tensor]) -> dict[str, Any]:
    """``mod.ring_allreduce(cluster, inputs)``: what it returned, and which results share memory with an input
    or with another result (as this process sees it)."""
    out = mod.ring_allreduce(cluster, list(inputs))
    given = {_storage(t) for t in inputs} - {None}
    results = list(out) if isinstance(out, (list, tuple)) else []
    mine = [_storage(o) for o in results]
    return {"out": out,
            "shares_an_input": [m is not None and m in given for m in mine],
            "shares_another_result": [m is not None and mine.count(m) > 1 for m in mine]}
