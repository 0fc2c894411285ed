"""The doctor's report: one :class:`Line` per check, and what they mean together (:class:`Report`)."""

from __future__ import annotations

import contextlib
import socket
import textwrap
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

OK, WARN, FAIL, NO_GPU, NA = "OK", "WARN", "FAIL", "NO GPU", "N/A"


@dataclass
class Line:
    """One check: its name, verdict (``OK``, ``WARN``, ``FAIL``, ``NO GPU``, ``N/A``), what it found, how long."""

    check: str
    verdict: str
    detail: str
    seconds: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Report:
    """Every line, and what they mean together."""

    lines: list[Line]
    gpus: int
    gpu_required: bool
    host: str = field(default_factory=socket.gethostname)

    @property
    def can_grade(self) -> bool:
        return not any(line.verdict == FAIL for line in self.lines)

    def verdict(self) -> str:
        """One paragraph: can this node grade, and what."""
        failed = [line.check for line in self.lines if line.verdict == FAIL]
        if failed:
            return f"CANNOT GRADE on {self.host}: {', '.join(failed)} failed (see those lines)."
        warned = [line.check for line in self.lines if line.verdict == WARN]
        caveat = f" With warnings: {', '.join(warned)}." if warned else ""
        if self.gpus:
            return (f"CAN GRADE on {self.host}, GPU exercises included: {self.gpus} GPU(s), one grading worker "
                    f"each.{caveat}")
        gpu_ids = [line.data["assignment"] for line in self.lines if line.data.get("requires_gpu")]
        which = f" ({', '.join(gpu_ids)})" if gpu_ids else ""
        return (f"CAN GRADE on {self.host} on CPU only: no GPU here. Exercises that need a GPU{which} are graded "
                "here only when asked for with --cpu (and marked in every record); without --cpu they are recorded "
                f"as infrastructure failures, to be graded on a GPU runner.{caveat}")

    def table(self, width: int = 110) -> str:
        """The report as text: a table of the lines, then the verdict."""
        name_w = max(len(line.check) for line in self.lines)
        head = f"{'check':<{name_w}}  {'verdict':<7}  {'seconds':>7}  detail"
        out = [head, "-" * len(head)]
        indent = name_w + 2 + 7 + 2 + 7 + 2
        for line in self.lines:
            wrapped = [w for part in line.detail.split("\n")    # a detail's own lines stay lines
                       for w in textwrap.wrap(part, max(40, width - indent), break_on_hyphens=False)] or [""]
            out.append(f"{line.check:<{name_w}}  {line.verdict:<7}  {line.seconds:>7.1f}  {wrapped[0]}")
            out += [" " * indent + rest for rest in wrapped[1:]]
        out += ["", *textwrap.wrap("verdict: " + self.verdict(), width, subsequent_indent="         ")]
        return "\n".join(out)

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "gpus": self.gpus, "gpu_required": self.gpu_required, "can_grade": self.can_grade,
                "verdict": self.verdict(), "lines": [asdict(line) for line in self.lines]}


@contextlib.contextmanager
def _timed(lines: list[Line], check: str) -> Iterator[dict[str, Any]]:
    """Run one check: the body fills ``slot`` (verdict, detail, data); an exception is a FAIL that says what."""
    slot: dict[str, Any] = {"verdict": FAIL, "detail": "", "data": {}}
    start = time.monotonic()
    try:
        yield slot
    except Exception as exc:  # noqa: BLE001 - a check that breaks is a failed check, said in its line
        slot.update(verdict=FAIL, detail=f"{slot['detail']} {type(exc).__name__}: {exc}".strip())
    lines.append(Line(check, slot["verdict"], slot["detail"], time.monotonic() - start, slot["data"]))
