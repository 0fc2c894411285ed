"""Comparing what the student's code produced with what the checker computed: exact types, then values.

:func:`difference` walks two values side by side and describes the first place
where they differ, with its path (``iteration 3 > returned > A: got None,
expected 0.25``).  Types are compared exactly (a ``float`` subclass that
compares equal to everything is not a ``float``; a 0-dim tensor is not a
number); tensors must agree in dtype, shape and device, then in every value
(bit for bit by default, NaN equal to NaN; or within ``rtol``/``atol``).
:func:`expect_same` raises :class:`~autograder.trusted.student.CheckFailed`
with that description.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from dlperf.grading.wire import Opaque

from .student import CheckFailed

__all__ = ["difference", "expect_same", "show"]


def show(value: Any, width: int = 60) -> str:
    """A short description of a value for a message."""
    if isinstance(value, torch.Tensor):
        flat = value.detach().reshape(-1).cpu()
        head = ", ".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in flat[:4].tolist())
        more = f", ... ({flat.numel()} values)" if flat.numel() > 4 else ""
        text = f"[{head}{more}] ({str(value.dtype).removeprefix('torch.')}, shape {tuple(value.shape)}" + \
               (f", on {value.device})" if value.device.type != "cpu" else ")")
        return text
    if isinstance(value, Opaque):
        return f"a {value.type} object"
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _tensor_difference(got: Any, expected: torch.Tensor, rtol: float, atol: float) -> str | None:
    if type(got) is not torch.Tensor:
        return f"got {show(got)}, expected a tensor {show(expected)}"
    if got.dtype != expected.dtype:
        return f"got a {str(got.dtype)[6:]} tensor, expected {str(expected.dtype)[6:]}"
    if got.shape != expected.shape:
        return f"got shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    if got.device != expected.device:
        return f"got a tensor on {got.device}, expected one on {expected.device}"
    a, b = got.detach(), expected.detach()
    if a.dtype.is_floating_point or a.dtype.is_complex:
        nan_a, nan_b = torch.isnan(a), torch.isnan(b)
        if not torch.equal(nan_a, nan_b):
            return f"got {show(a)}, expected {show(b)} (NaN in other places)"
        a, b = torch.where(nan_a, torch.zeros_like(a), a), torch.where(nan_b, torch.zeros_like(b), b)
        if rtol or atol:
            same = torch.isclose(a, b, rtol=rtol, atol=atol)
        else:
            same = (a == b) | (torch.isinf(a) & torch.isinf(b) & (torch.sign(a) == torch.sign(b)))
    else:
        same = a == b
    if bool(same.all()):
        return None
    index = int((~same).reshape(-1).nonzero()[0])
    return (f"got {show(got)}, expected {show(expected)}; first difference at flat index {index}: "
            f"{a.reshape(-1)[index].item():.9g} instead of {b.reshape(-1)[index].item():.9g}")


def difference(got: Any, expected: Any, *, rtol: float = 0.0, atol: float = 0.0, path: str = "") -> str | None:
    """Where and how ``got`` differs from ``expected`` (None if it does not)."""
    here = f"{path}: " if path else ""

    def deeper(key: str) -> str:
        return f"{path} > {key}" if path else key

    if isinstance(expected, torch.Tensor):
        problem = _tensor_difference(got, expected, rtol, atol)
        return here + problem if problem else None
    if isinstance(expected, (list, tuple)):
        if type(got) is not type(expected):
            return f"{here}got {show(got)}, expected a {type(expected).__name__}"
        if len(got) != len(expected):
            return f"{here}got {len(got)} elements, expected {len(expected)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            problem = difference(g, e, rtol=rtol, atol=atol, path=deeper(f"[{i}]"))
            if problem:
                return problem
        return None
    if isinstance(expected, Mapping):
        if not isinstance(got, Mapping) or type(got) is not type(expected):
            return f"{here}got {show(got)}, expected a {type(expected).__name__}"
        if sorted(map(repr, got)) != sorted(map(repr, expected)):
            return f"{here}got the keys {sorted(got, key=repr)}, expected {sorted(expected, key=repr)}"
        for key in expected:
            problem = difference(got[key], expected[key], rtol=rtol, atol=atol, path=deeper(str(key)))
            if problem:
                return problem
        return None
    if type(got) is not type(expected):
        return f"{here}got {show(got)} ({type(got).__name__}), expected {show(expected)} ({type(expected).__name__})"
    if isinstance(expected, float):
        if math.isnan(expected) and math.isnan(got):
            return None
        if (rtol or atol) and math.isclose(got, expected, rel_tol=rtol, abs_tol=atol):
            return None
    if got != expected:
        return f"{here}got {show(got)}, expected {show(expected)}"
    return None


def expect_same(got: Any, expected: Any, where: str, hint: str = "", **tolerance: float) -> None:
    """Raise :class:`CheckFailed` (``where: difference (hint)``) unless ``got`` matches ``expected``."""
    problem = difference(got, expected, **tolerance)
    if problem:
        raise CheckFailed(f"{where}: {problem}" + (f" ({hint})" if hint else ""))
