"""The checker's side of the ``allreduce`` exercise: inputs, the reference and the verdict of each case.

Part 1 (``allreduce``): the replicas the student's function receives are, on
the CPU, tensors in this process's memory (:meth:`Student.share`): whether
the sum was written *into them* -- through views, into each tensor's own
memory, bit for bit the same everywhere -- is read here, not asked.  Replicas
on a GPU cannot live in this process's memory; their values are what the
student's process reports for the caller's tensor objects (so a GPU case
checks values, and the CPU cases check memory).

Part 2 (``split_batch``, ``train_step``): each part is graded on its own, so
``train_step`` runs with this process's ``allreduce`` and ``split_batch``
(callbacks), and its replicas' parameters live in this process's memory on
the CPU and are kept in the student's process between steps (the same tensor
objects, gradients and all, as a training loop would keep them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from autograder.trusted import CheckFailed, SharedTensor, Student, seed

__all__ = ["NAMES", "check_split", "make", "mixed", "second_device", "short", "steps", "through_views", "verify"]

TOL = {torch.float32: 1e-5, torch.float64: 1e-12, torch.float16: 1e-3}
NAMES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16", torch.int64: "int64"}
PARAM_NAMES = ["W1", "b1", "W2", "b2"]


def second_device() -> str | None:
    """The second kind of device of the mixed cases: ``cuda:0`` where there is a GPU."""
    return "cuda:0" if torch.cuda.is_available() else None


def mixed(k: int, second: str) -> list[str]:
    """k devices alternating between the CPU and the second device."""
    return ["cpu" if i % 2 == 0 else second for i in range(k)]


def short(t: torch.Tensor) -> str:
    t = t.detach().cpu()
    if t.numel() <= 4:
        return str(t.tolist())
    return "[" + ", ".join(f"{v:.6g}" for v in t.reshape(-1)[:3].tolist()) + f", ...] ({t.numel()} values)"


def make(shape: Sequence[int], dtype: torch.dtype, case: Any, device: str) -> torch.Tensor:
    """A replica's tensor for ``case`` (random values, new for every submission under the class autograder)."""
    g = torch.Generator().manual_seed(seed("allreduce", case))
    if dtype == torch.int64:
        t = torch.randint(-2 ** 40, 2 ** 40, tuple(shape), generator=g)  # beyond float32's exact integers
    elif dtype == torch.float16:
        t = torch.randint(-32, 33, tuple(shape), generator=g).to(torch.float16) / 8  # sums exact in float16
    else:
        t = torch.randn(tuple(shape), generator=g, dtype=torch.float64).to(dtype)
    return t.to(device)


def _expected(before: Sequence[torch.Tensor]) -> torch.Tensor:
    if before[0].dtype.is_floating_point:
        return torch.stack([b.double() for b in before]).sum(0)
    return torch.stack(list(before)).sum(0)


def _close(value: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> bool:
    if dtype.is_floating_point:
        err = (value.double() - expected).abs().max().item() if value.numel() else 0.0
        scale = max(1.0, expected.abs().max().item()) if value.numel() else 1.0
        return err <= TOL[dtype] * scale
    return bool(torch.equal(value, expected))


def _judge(case: str, got: Sequence[Any], before: Sequence[torch.Tensor], devices: Sequence[torch.device],
           where: Sequence[str], identical: bool) -> None:
    """Every replica holds the sum (dtype, device, shape kept), bit for bit the same if ``identical``."""
    k = len(before)
    dtype, shape = before[0].dtype, tuple(before[0].shape)
    expected = _expected(before)
    values = []
    for i, t in enumerate(got):
        if type(t) is not torch.Tensor:
            raise CheckFailed(f"{case}: tensor {i} is no longer a tensor")
        if t.dtype != dtype:
            raise CheckFailed(f"{case}: tensor {i} is now {t.dtype}; it was {dtype}: keep each tensor's dtype")
        if t.device != devices[i]:
            raise CheckFailed(f"{case}: tensor {i} is now on {t.device}; it was on {devices[i]}: "
                              "each tensor stays on its own device")
        if tuple(t.shape) != shape:
            raise CheckFailed(f"{case}: tensor {i} now has shape {tuple(t.shape)}, not {shape}")
        value = t.detach().cpu()
        if not _close(value, expected, dtype):
            hint = ""
            if k > 1 and torch.equal(value, before[i]):
                hint = (" -- it still holds its own value: the sum has to be written into the caller's tensors "
                        "themselves, in place (into their own memory: replacing a tensor's storage with "
                        "t.data = ... or t.set_(...) writes nothing into it)")
            raise CheckFailed(f"{case}: tensor {i} (on {t.device}, {where[i]}) holds {short(value)}, expected the sum "
                              f"{short(expected.to(dtype))}{hint}")
        values.append(value)
    for i in range(1, k if identical else 1):
        if not torch.equal(values[i], values[0]):
            diff = (values[i].double() - values[0].double()).abs().max().item()
            raise CheckFailed(f"{case}: tensors 0 and {i} both hold the sum up to rounding, but not the same bits "
                              f"(they differ by up to {diff:.3g}): compute the sum once and copy it everywhere, so "
                              "that the replicas stay bitwise identical")


def verify(student: Student, case: str, tensors: Sequence[torch.Tensor], identical: bool = True) -> None:
    """The student's ``allreduce`` on ``tensors``: CPU ones in this process's memory, the others sent as values."""
    before = [t.detach().cpu().clone() for t in tensors]
    sent = [student.share(t) if t.device.type == "cpu" else t for t in tensors]
    _, report = student.call("allreduce", sent, _report=True)
    got = [s.read() if isinstance(s, SharedTensor) else report.objects[i] for i, s in enumerate(sent)]
    where = ["its memory, read by the grader" if isinstance(s, SharedTensor)
             else "as your process reports the caller's tensor" for s in sent]
    _judge(case, got, before, [t.device for t in tensors], where, identical)


def through_views(student: Student, case: str, bases: Sequence[torch.Tensor], view: Callable[[Any], Any]) -> None:
    """The student's ``allreduce`` on a view of each base tensor: the sum lands in the memory the view looks at,
    and nowhere else in its base."""
    kept = [b.detach().cpu().clone() for b in bases]
    given = [view(b) for b in bases]
    specs = [(list(v.shape), list(v.stride()), v.storage_offset()) for v in given]
    sent = [student.share(b) if b.device.type == "cpu" else b for b in bases]
    seen = student.probe("allreduce:through_views", sent, specs)
    after = [s.read() if isinstance(s, SharedTensor) else seen["bases"][i] for i, s in enumerate(sent)]
    for i, b in enumerate(after):
        if type(b) is not torch.Tensor or b.shape != kept[i].shape:
            raise CheckFailed(f"{case}: base tensor {i} is no longer a tensor of shape {tuple(kept[i].shape)}")
    got = [view(b.detach()) for b in after]
    where = ["read by the grader through the view" if isinstance(s, SharedTensor)
             else "as your process reports it" for s in sent]
    _judge(case, got, [view(k) for k in kept], [b.device for b in bases], where, identical=False)
    for i, b in enumerate(after):
        inside = torch.zeros(kept[i].shape, dtype=torch.bool)
        view(inside).fill_(True)
        now = b.detach().cpu()
        if not torch.equal(now[~inside], kept[i][~inside]):
            raise CheckFailed(f"{case}: allreduce changed elements of tensor {i}'s base tensor outside the view it "
                              "was given")


# ---------------------------------------------------------------------------------------------
# Part 2
# ---------------------------------------------------------------------------------------------


def check_split(student: Student, n: int, devices: Sequence[str]) -> None:
    """``split_batch`` of a batch of ``n`` examples onto ``devices``: sizes, order, devices, inputs untouched."""
    k = len(devices)
    X = torch.arange(n * 3, dtype=torch.float32).reshape(n, 3)
    y = torch.arange(n) * 10
    sizes = [len(s) for s in torch.arange(n).tensor_split(k)]
    case = f"{n} examples on {k} devices {list(devices)}"
    X_sent, y_sent = student.share(X), student.share(y)
    out = student.call("split_batch", X_sent, y_sent, list(devices))
    if not (torch.equal(X_sent.read(), X) and torch.equal(y_sent.read(), y)):
        raise CheckFailed(f"{case}: split_batch changed X or y")
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise CheckFailed(f"{case}: split_batch must return two lists (X slices, y slices)")
    for what, slices, full in (("X", out[0], X), ("y", out[1], y)):
        if not isinstance(slices, (list, tuple)) or len(slices) != k:
            count = len(slices) if isinstance(slices, (list, tuple)) else "not a list of"
            raise CheckFailed(f"{case}: expected {k} {what} slices, one per device (some may be empty), got "
                              f"{count} slices")
        if any(type(s) is not torch.Tensor for s in slices):
            raise CheckFailed(f"{case}: the {what} slices must be tensors")
        got_sizes = [s.shape[0] if s.dim() else None for s in slices]
        if got_sizes != sizes:
            raise CheckFailed(f"{case}: {what} slices have {got_sizes} examples; expected {sizes} (nearly equal, the "
                              "first slices one larger, as torch.tensor_split)")
        for j, (s, d) in enumerate(zip(slices, devices)):
            if s.device != torch.device(d):
                raise CheckFailed(f"{case}: {what} slice {j} is on {s.device}, not on {d}")
            if s.dtype != full.dtype or tuple(s.shape[1:]) != tuple(full.shape[1:]):
                raise CheckFailed(f"{case}: {what} slice {j} has dtype {s.dtype} and shape {tuple(s.shape)}: each "
                                  "slice keeps the batch's dtype and the shape of one example")
        joined = torch.cat([s.cpu() for s in slices])
        if not torch.equal(joined, full):
            raise CheckFailed(f"{case}: the {what} slices, put back together in order, are not the batch: slice j "
                              "must hold the j-th consecutive part of the batch")


def _reference_allreduce(data: list[torch.Tensor]) -> None:
    total = data[0].detach().clone()
    for t in data[1:]:
        total.add_(t.to(total.device))
    for t in data:
        t.copy_(total)


def _reference_split(X: torch.Tensor, y: torch.Tensor, devices: Sequence[str]) -> tuple[list[Any], list[Any]]:
    k = len(devices)
    return ([x.to(d) for x, d in zip(X.tensor_split(k), devices)],
            [t.to(d) for t, d in zip(y.tensor_split(k), devices)])


def steps(student: Student, setup: Mapping[str, Any], n: int, devices: Sequence[str], dtype: torch.dtype = torch.float64,
          count: int = 1, case_seed: int = 0, objects: bool = False, lr: float = 0.5) -> None:
    """``count`` steps of the student's ``train_step`` on replicas on ``devices`` against ``single_device_step``.

    ``setup``: the instructor's setup cell's names (``init_params``, ``get_params``, ``make_batch``,
    ``single_device_step``).  ``objects``: the parameters must be updated in place (the memory the
    replicas were given holds the result); otherwise the values the replicas' lists hold are judged.
    """
    init_params, get_params = setup["init_params"], setup["get_params"]
    make_batch, single_device_step = setup["make_batch"], setup["single_device_step"]
    k = len(devices)
    sizes = [len(s) for s in torch.arange(n).tensor_split(k)]
    name = "float64" if dtype == torch.float64 else "float32"
    case = f"k={k} on {list(devices)}, batches of {n} {name} examples (slices of {sizes})"
    tol = 1e-10 if dtype == torch.float64 else 2e-5
    base = init_params(seed("allreduce-step", case_seed) % 2**31, dtype)
    reference = get_params(base, "cpu")
    sent = [[student.share(p.detach(), requires_grad=True) if d == "cpu" else p.detach().to(d).requires_grad_()
             for p in base] for d in devices]
    replicas = student.hold(sent)      # the same tensor objects for every step
    for step in range(count):
        where = f"{case}, step {step + 1} of {count}" if count > 1 else case
        X, y = make_batch(n, seed=seed("allreduce-batch", case_seed, step) % 2**31, dtype=dtype)
        X_sent, y_sent = student.share(X), student.share(y)
        before = [[p.read() if isinstance(p, SharedTensor) else None for p in r] for r in sent]
        want = single_device_step(X, y, reference, lr)
        got, report = student.call("train_step", X_sent, y_sent, replicas, list(devices), lr, _report=True,
                                   _replace={"allreduce": _reference_allreduce, "split_batch": _reference_split})
        if not (torch.equal(X_sent.read(), X) and torch.equal(y_sent.read(), y)):
            raise CheckFailed(f"{where}: train_step changed the batch X, y it was given")
        lists = report.contents[0][2] if len(report.contents[0]) > 2 else None
        if not isinstance(lists, list) or len(lists) != k:
            raise CheckFailed(f"{where}: train_step changed the list device_params itself; update the parameters "
                              "of each replica instead")
        for j, r in enumerate(lists):
            if not isinstance(r, list) or len(r) != 4:
                raise CheckFailed(f"{where}: replica {j} is no longer a list of 4 parameter tensors")
            for i, p in enumerate(r):
                if type(p) is not torch.Tensor or p.dtype != dtype or p.device != torch.device(devices[j]):
                    raise CheckFailed(f"{where}: replica {j}'s {PARAM_NAMES[i]} is not a {name} tensor on "
                                      f"{devices[j]} any more")
        for j, r in enumerate(lists):
            for i, listed in enumerate(r):
                shared = sent[j][i]
                value = shared.read() if objects and isinstance(shared, SharedTensor) else listed.detach().cpu()
                diff = (value.double() - reference[i].detach().double()).abs().max().item()
                if diff <= tol:
                    continue
                if objects and isinstance(shared, SharedTensor):
                    listed_diff = (listed.detach().cpu().double() - reference[i].detach().double()).abs().max().item()
                    if listed_diff <= tol:
                        raise CheckFailed(f"{where}: replica {j}'s {PARAM_NAMES[i]} has the right values but is a new "
                                          "tensor (or lives in new memory): update the parameters in place (p -= ..., "
                                          "under torch.no_grad()), as an optimizer holding references to them would "
                                          "need")
                hint = ""
                if before[j][i] is not None and torch.equal(value, before[j][i]):
                    hint = " (this replica's parameters did not change at all)"
                raise CheckFailed(f"{where}: replica {j}'s {PARAM_NAMES[i]} differs from one SGD step on one device "
                                  f"with the whole batch (single_device_step) by up to {diff:.3g}, tolerance "
                                  f"{tol:g}{hint}")
        first: dict[str, int] = {}
        for j, d in enumerate(devices):
            if d in first:
                j0 = first[d]
                for i in range(4):
                    if not torch.equal(lists[j][i].detach(), lists[j0][i].detach()):
                        raise CheckFailed(f"{where}: replicas {j0} and {j} (both on {d}) hold different values of "
                                          f"{PARAM_NAMES[i]} after the step: every replica must apply the same update")
            else:
                first[d] = j
        if type(got) is not float:
            raise CheckFailed(f"{where}: train_step returned {type(got).__name__} {got!r:.40}; it must return the mean "
                              "loss of the whole batch as a Python float")
        if not abs(got - want) <= tol:
            raise CheckFailed(f"{where}: train_step returned the loss {got:.10g}, but the mean loss of the whole "
                              f"batch is {want:.10g}")
