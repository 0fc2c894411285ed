"""The checker's side of the ``no_sync_loop`` exercise: the references, the reading, the meta run, the verdicts.

The student's ``fetch`` and ``train_epoch`` run in their own process, driven by
the public probes of :mod:`dlperf.grading.probes.no_sync_loop`.  Three
observations decide the synchronisation points, and a submission needs all three:

* **outside the student's process** (:func:`meta_check`): ``train_epoch`` runs
  with the model and the batches on PyTorch's ``meta`` device, where every read of
  a value (and every operator whose output shape depends on values) raises, and
  with an optimizer that lives *here* (a :class:`~autograder.trusted.Remote`):
  this process counts the steps itself, so it sees how many steps ran before the
  first read.  All of them, then one read, is a pass; a read in the loop stops it
  at the first step, and a tensor kept on the host (created without ``device=``)
  raises a device error instead of a read;
* **in the student's process** (the probe's :class:`SyncCounter`): the
  synchronisations counted by a ``TorchFunctionMode`` and a ``TorchDispatchMode``
  (every spelling of a read, formatting and ``print`` included, which the meta
  device does not refuse), at most the reference's one;
* **the reading of the cells** (:func:`reading`, never run here): the public
  allow-list ``RULES``, so that the student's code cannot reach the counter's
  modes (no private name, no ``getattr``, imports of ``torch``, ``math`` and a
  few standard modules only, the torch names a loop needs, no test of the
  device's type, no ``try``).

What remains forgeable: a submission that tells the meta run apart by a spelling
the reading allows (e.g. the text of ``x.device`` in an f-string) and reads per
step only on real devices *and* hides those reads from the in-process count
with allowed constructs only.  Graph retention is observed in the student's
process only (weak references to marks the probe owns), behind the same reading.
"""

from __future__ import annotations

import math
import types
from collections.abc import Sequence
from typing import Any

import torch

from autograder.trusted import CheckFailed, Remote, Student, StudentRaised
from dlperf.grading.probes import no_sync_loop as probe

__all__ = ["meta_check", "reading", "reference", "same_log", "slow_train_epoch"]


# ---------------------------------------------------------------------------------------------
# The references (run here, by the same probes)
# ---------------------------------------------------------------------------------------------


def slow_train_epoch(model: Any, optimizer: Any, loss_fn: Any, batches: Sequence[Any]) -> dict[str, Any]:
    """The notebook's ``train_epoch_slow``: what the student's loop must return (it synchronises ~4 times a step)."""
    losses, total, correct, count = [], 0.0, 0, 0
    best, best_step = math.inf, -1
    for step, (x, y) in enumerate(batches):
        optimizer.zero_grad()
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        total += loss.item() * len(y)
        correct += (logits.argmax(dim=1) == y).sum().item()
        count += len(y)
        if loss < best:
            best, best_step = loss.item(), step
    return {"losses": losses, "mean_loss": total / count, "accuracy": correct / count, "best_step": best_step}


def _fetch(*tensors: torch.Tensor) -> list[Any]:
    if not tensors:
        return []
    flat = torch.cat([t.detach().reshape(-1).to(torch.float64) for t in tensors]).tolist()
    out, start = [], 0
    for t in tensors:
        part = flat[start:start + t.numel()]
        start += t.numel()
        if t.dtype == torch.bool:
            part = [v != 0 for v in part]
        elif not t.dtype.is_floating_point:
            part = [int(v) for v in part]
        out.append(part[0] if t.dim() == 0 else part)
    return out


def _train_epoch(model: Any, optimizer: Any, loss_fn: Any, batches: Sequence[Any]) -> dict[str, Any]:
    losses, sizes = [], []
    correct = torch.zeros((), dtype=torch.long, device=batches[0][0].device)
    for x, y in batches:
        optimizer.zero_grad()
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
        correct += (logits.argmax(dim=1) == y).sum()
        sizes.append(len(y))
    values, right = _fetch(torch.stack(losses), correct)
    count = sum(sizes)
    return {"losses": values, "mean_loss": sum(v * n for v, n in zip(values, sizes)) / count,
            "accuracy": right / count, "best_step": values.index(min(values))}


def reference() -> types.SimpleNamespace:
    """The module the checker runs the probes on: the no-sync ``fetch`` and ``train_epoch``, and the slow loop."""
    return types.SimpleNamespace(fetch=_fetch, train_epoch=_train_epoch, slow=slow_train_epoch)


# ---------------------------------------------------------------------------------------------
# Comparing logs
# ---------------------------------------------------------------------------------------------


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def same_log(got: Any, want: dict[str, Any], where: str) -> None:
    """The student's log equals the slow loop's: types, lengths, values (1e-6 relative; the best step exactly)."""
    if type(got) is not dict or sorted(got) != sorted(want):
        keys = sorted(got) if type(got) is dict else type(got).__name__
        raise CheckFailed(f"{where}: train_epoch returned {keys}, expected a dict with keys {sorted(want)}")
    losses = got["losses"]
    if type(losses) is not list or not all(type(v) is float for v in losses):
        kinds = sorted({type(v).__name__ for v in losses}) if isinstance(losses, list) else "?"
        raise CheckFailed(f"{where}: 'losses' must be a list of Python floats, got {type(losses).__name__} of {kinds}")
    if len(losses) != len(want["losses"]):
        raise CheckFailed(f"{where}: {len(losses)} losses logged, expected one per batch ({len(want['losses'])})")
    for step, (g, w) in enumerate(zip(losses, want["losses"])):
        if not _close(g, w):
            raise CheckFailed(f"{where}: the loss of step {step} is {g!r}, expected {w!r}")
    for key in ("mean_loss", "accuracy"):
        if type(got[key]) is not float:
            raise CheckFailed(f"{where}: {key!r} must be a Python float, got {type(got[key]).__name__}")
        if not _close(got[key], want[key]):
            why = " (the mean over all samples: the last batch is smaller)" if key == "mean_loss" else ""
            raise CheckFailed(f"{where}: {key!r} is {got[key]!r}, expected {want[key]!r}{why}")
    if type(got["best_step"]) is not int or got["best_step"] != want["best_step"]:
        raise CheckFailed(f"{where}: 'best_step' is {got['best_step']!r}, expected {want['best_step']!r} (the first "
                          "step with the lowest loss)")


# ---------------------------------------------------------------------------------------------
# The reading, and the meta run (observed here)
# ---------------------------------------------------------------------------------------------


def reading(parts: Sequence[tuple[str, str]]) -> list[str]:
    """The grader's reading of the solution cells (``[(file name, source)]``, never run here): the public
    allow-list :data:`dlperf.grading.probes.no_sync_loop.RULES` and the exercise's extra rule, the same
    code as the self-check's."""
    return probe.findings(parts)


def meta_check(student: Student, sizes: Sequence[int], where: str) -> None:
    """``train_epoch`` on the meta device in the student's process, with the optimizer here.

    Every host read raises on ``meta``; this process counts the optimizer's steps itself, so it sees how
    many steps ran before the first read: all of them, then a read, is a pass
    (:func:`~dlperf.grading.probes.no_sync_loop.meta_verdict`).
    """
    steps = probe.Steps()
    optimizer = Remote(steps, methods=["zero_grad", "step"], name="SGD")
    raised: tuple[str, str] | None = None
    try:
        student.probe("no_sync_loop:meta_train", optimizer, list(sizes))
    except StudentRaised as exc:
        raised = (exc.type_name, exc.message)
    verdict = probe.meta_verdict(steps.steps, len(sizes), raised)
    if verdict:
        raise CheckFailed(f"{where}, on the meta device (every read of a value raises there; the grader counts "
                          f"the optimizer's steps itself): {verdict}")
