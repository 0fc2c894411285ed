"""Visible self-checks: what the student's code produced beside what was expected, then pass or raise."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["SelfCheck"]


def _short(value: Any, width: int = 46) -> str:
    if isinstance(value, torch.Tensor):
        if value.numel() <= 6:
            text = f"{value.tolist()} {str(value.dtype).removeprefix('torch.')}"
        else:
            flat = value.detach().reshape(-1)
            text = (f"tensor{tuple(value.shape)} {str(value.dtype).removeprefix('torch.')} "
                    f"[{', '.join(f'{v:.4g}' for v in flat[:3].tolist())}, ...]")
    else:
        text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


class SelfCheck:
    """A self-check table: ``case | got | expected | ok``, then pass or raise.

    ::

        check = SelfCheck("allreduce")
        check.row("k=2, float32", got, expected, ok=torch.equal(got, expected))
        check.done()       # prints the table; raises AssertionError if a row failed
    """

    def __init__(self, title: str):
        self.title = title
        self.rows: list[tuple[str, str, str, bool, str]] = []

    def row(self, case: str, got: Any, expected: Any, ok: bool, hint: str = "") -> bool:
        """Record one case; ``hint`` is printed under the table when the case fails."""
        self.rows.append((case, _short(got), _short(expected), bool(ok), hint))
        return bool(ok)

    def run(self, case: str, fn: Callable[[], tuple[Any, Any, bool]], hint: str = "") -> bool:
        """Record ``fn()``'s ``(got, expected, ok)``; an exception is recorded as a failed row."""
        try:
            got, expected, ok = fn()
        except NotImplementedError:
            return self.row(case, "NotImplementedError", "(your code)", False, "the stub is still there")
        except Exception as exc:  # noqa: BLE001 - shown to the student as the row's result
            return self.row(case, f"{type(exc).__name__}: {exc}", "(no exception)", False, hint)
        return self.row(case, got, expected, ok, hint)

    def done(self) -> None:
        """Print the table; raise ``AssertionError`` if any row failed."""
        w0 = max([len("case")] + [len(r[0]) for r in self.rows])
        w1 = max([len("got")] + [len(r[1]) for r in self.rows])
        w2 = max([len("expected")] + [len(r[2]) for r in self.rows])
        lines = [f"Self-check: {self.title}", f"{'case':<{w0}}  {'got':<{w1}}  {'expected':<{w2}}  ok",
                 f"{'-' * w0}  {'-' * w1}  {'-' * w2}  --"]
        for case, got, expected, ok, _ in self.rows:
            lines.append(f"{case:<{w0}}  {got:<{w1}}  {expected:<{w2}}  {'yes' if ok else 'NO'}")
        failed = [r for r in self.rows if not r[3]]
        for case, _, _, _, hint in failed:
            if hint:
                lines.append(f"hint ({case}): {hint}")
        passed = len(self.rows) - len(failed)
        lines.append(f"{passed} of {len(self.rows)} cases pass.")
        print("\n".join(lines))
        if failed:
            raise AssertionError(f"self-check {self.title!r}: {len(failed)} of {len(self.rows)} cases fail "
                                 f"(first: {failed[0][0]})")
