"""The last checks: each exercise's reference solution graded here by the class autograder's runner."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from .. import course
from .gpus import first_gpu
from .report import FAIL, OK

def grade_reference(assignment: str, settings: Any, gpu: str | None) -> tuple[Any, float, float, dict[str, Any]]:
    """Grade the reference solution of ``assignment`` with the class autograder's runner, here, in its sandboxes.

    Returns the runner's :class:`~autograder.runner.Result`, the score and the maximum score
    (nbgrader's ``determine_grade`` on the graded notebook, as the gradebook scores it), and the
    per-cell scores.
    """
    import nbformat
    from nbgrader import utils

    from ..engine import Submission, make_jobs
    from ..runner import grade

    with tempfile.TemporaryDirectory(prefix="doctor-grade-") as tmp:
        root = Path(tmp)
        path = root / f"{assignment}.ipynb"
        nbformat.write(course.reference_submission(assignment), path)
        job = make_jobs(assignment, [Submission("doctor-reference", path, None)], settings, course_root=root)[0]
        saved = os.environ.get("CUDA_VISIBLE_DEVICES")
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu if gpu is not None else ""   # as the engine pins a worker
        try:
            result = grade(job, worker="doctor")
        finally:
            if saved is None:
                os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            else:
                os.environ["CUDA_VISIBLE_DEVICES"] = saved
    cells: dict[str, Any] = {}
    failures: dict[str, str] = {}
    if result.notebook:
        for cell in nbformat.reads(result.notebook, as_version=4).cells:
            if utils.is_grade(cell):
                grade_id = cell.metadata.nbgrader.grade_id
                cells[grade_id] = utils.determine_grade(cell)
                got, most = cells[grade_id]
                if (got or 0.0) < most:
                    failures[grade_id] = why_lost(cell)
    result.stats["failures"] = failures
    score = sum(s or 0.0 for s, _ in cells.values())
    top = sum(m for _, m in cells.values())
    return result, score, top, cells


def why_lost(cell: Any, limit: int = 400) -> str:
    """What a graded cell that lost points printed: its error (``CheckFailed: ...``), else its last output line."""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"[:limit]
    text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream").strip()
    return (text.splitlines()[-1] if text else "no error output (no points recorded)")[:limit]


def check_reference(slot: dict[str, Any], assignment: str, settings: Any, gpus: int) -> None:
    from dataclasses import replace

    from ..engine import requires_gpu

    needs_gpu = requires_gpu(assignment)
    cpu = needs_gpu and not gpus
    run_settings = replace(settings, cpu=True) if cpu else settings
    result, score, top, cells = grade_reference(assignment, run_settings, first_gpu() if gpus else None)
    secs = result.seconds
    isolation = ", ".join(result.stats.get("isolation", [])) or "no student process started"
    slot["data"] = {"assignment": assignment, "requires_gpu": needs_gpu, "score": score, "max_score": top,
                    "outcome": result.outcome, "seconds": secs, "device": result.device, "isolation": isolation,
                    "cpu_only": result.cpu_only, "failures": result.stats.get("failures", {})}
    where = (f"on {result.device}" + (" (needs a GPU: graded on CPU here, as --cpu would)" if cpu else ""))
    timing = f"{secs.get('total', 0):.1f} s (student run {secs.get('student', 0):.1f} s, checks {secs.get('checks', 0):.1f} s)"
    if result.outcome != "graded" or not cells or score != top:
        per_cell = ", ".join(f"{k} {s:g}/{m:g}" for k, (s, m) in cells.items())
        lost = "".join(f"\n{k}: {why}" for k, why in result.stats.get("failures", {}).items())
        slot.update(verdict=FAIL, detail=f"reference solution {result.outcome} {where}: {score:g}/{top:g} "
                    f"({per_cell or 'no graded cell'}){'; ' + result.reason if result.reason else ''}; {timing}"
                    f"{lost}")
    else:
        slot.update(verdict=OK, detail=f"reference solution: full marks {score:g}/{top:g} {where} in {timing}; "
                    f"student processes of its checks: {isolation}")
