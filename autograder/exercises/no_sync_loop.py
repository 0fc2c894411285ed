"""The checker's side of the ``no_sync_loop`` exercise: the references, a static reading of the source, the verdicts.

The student's ``fetch`` and ``train_epoch`` run in their own process, driven by
the public probes of :mod:`dlperf.grading.probes.no_sync_loop`, which count the
synchronisations there.  That count runs beside the student's code, which
could change it (patch the counter, call the C methods behind its wrappers).
So the checker also reads the solution's source itself (:func:`static_findings`,
on the cells as submitted, never run here): every
synchronising call inside a loop, and every construct a loop needs only to
hide one (private attributes, ``getattr``, imports beyond ``torch`` and a few
standard modules).  A submission passes the synchronisation checks only when
both say so.

What the static reading cannot see: a synchronising call outside any loop but
executed per step (in a helper the loop calls; the count sees it), and whether
a ``float(...)`` outside the batch loop reads a tensor.  What the count cannot
see: anything the student's process lies about.  Together they leave a
submission that hides a per-step read behind a helper *and* tampers with the
count using only allowed constructs (e.g. rebinding ``torch.Tensor.tolist`` to
a reference saved at import) -- a real attack, not a mistake; a GPU grader's
``torch.cuda.set_sync_debug_mode`` (run in the same process) does not close it
either.
"""

from __future__ import annotations

import ast
import math
import types
from collections.abc import Sequence
from typing import Any

import torch

from autograder.trusted import CheckFailed
from autograder.trusted.reading import parse_cells

__all__ = ["ALLOWED_IMPORTS", "reference", "same_log", "slow_train_epoch", "static_findings"]

ALLOWED_IMPORTS = {"torch", "math", "collections", "itertools", "functools", "typing", "operator", "__future__"}
SYNC_METHODS = {"item", "tolist", "numpy", "cpu", "synchronize"}
HIDING_NAMES = {"getattr", "setattr", "delattr", "globals", "locals", "vars", "exec", "eval", "compile",
                "__import__", "breakpoint"}
# Calls that make a host value from a tensor (or print / format it): a synchronisation when given a tensor.
HOST_BUILTINS = {"float", "int", "bool", "complex", "print", "repr", "str", "format", "min", "max", "sorted", "any",
                 "all", "list", "tuple"}
# Host metadata of a tensor: reading it never waits.
METADATA = {"shape", "dtype", "device", "ndim", "size", "dim", "numel", "is_cuda", "requires_grad"}
HOST_CALLS = {"len", "range", "enumerate", "zip", "isinstance", "type", "id", "abs", "round", "divmod"}


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
# Reading the source
# ---------------------------------------------------------------------------------------------


def _uses(node: ast.AST, names: set[str]) -> bool:
    """Whether ``node`` reads one of ``names`` as a value (not only its length, shape, dtype or device)."""
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.Attribute) and node.attr in METADATA:
        return False
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in HOST_CALLS:
        return False
    return any(_uses(child, names) for child in ast.iter_child_nodes(node))


def _tensor_names(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Names of ``fn`` that may hold tensors: its arguments, the loop targets, and what is computed from them."""
    args = fn.args
    tainted = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    tainted |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    pairs: list[tuple[ast.AST, ast.AST]] = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            pairs += [(t, node.value) for t in node.targets]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            pairs.append((node.target, node.value))
        elif isinstance(node, (ast.For, ast.comprehension)):
            it = node.iter
            # enumerate(...)'s index is a host integer
            if (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "enumerate"
                    and isinstance(node.target, ast.Tuple) and len(node.target.elts) == 2):
                pairs.append((node.target.elts[1], it.args[0] if it.args else it))
            elif not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"):
                pairs.append((node.target, it))
        elif isinstance(node, ast.NamedExpr):
            pairs.append((node.target, node.value))
    changed = True
    while changed:
        changed = False
        for target, value in pairs:
            computed = any(isinstance(n, ast.Call) and not (isinstance(n.func, ast.Name) and n.func.id in HOST_CALLS)
                           and not (isinstance(n.func, ast.Attribute) and n.func.attr in METADATA)
                           for n in ast.walk(value))
            if _uses(value, tainted) or computed:
                for name in (n.id for n in ast.walk(target) if isinstance(n, ast.Name)):
                    if name not in tainted:
                        tainted.add(name)
                        changed = True
    return tainted


def _batch_loops(fn: ast.FunctionDef) -> list[ast.For]:
    """The training loops of ``fn``: loops over one of its arguments whose body calls one (``model(x)``,
    ``optimizer.step()``); a later loop over plain Python numbers is not one."""
    params = {a.arg for a in fn.args.args}

    def calls_a_param(node: ast.AST) -> bool:
        for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
            root = call.func
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in params:
                return True
        return False

    return [n for n in ast.walk(fn) if isinstance(n, ast.For)
            and any(isinstance(x, ast.Name) and x.id in params for x in ast.walk(n.iter))
            and any(calls_a_param(stmt) for stmt in n.body)]


def _loop_bodies(tree: ast.AST) -> list[ast.AST]:
    out: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            out += node.body + ([node.test] if isinstance(node, ast.While) else [])
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            out.append(node)
    return out


def static_findings(parts: Sequence[tuple[str, str]]) -> list[str]:
    """What the source of the solution cells shows that synchronises per step, or hides a synchronisation.

    ``parts``: ``[(file name, source)]`` (:func:`autograder.trusted.solution_parts`).  Each finding
    is a sentence naming the line; an empty list means the reading found nothing.
    """
    cells, found = parse_cells(parts)
    for cell in cells:
        tree, add = cell.tree, cell.add

        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for module in modules:
                    parts_ = module.split(".")
                    if parts_[0] not in ALLOWED_IMPORTS or any(p.startswith("_") for p in parts_[1:]):
                        add(node, f"imports {module} (the exercise needs only torch and math)")
                if isinstance(node, ast.ImportFrom):
                    for a in node.names:
                        if a.name.startswith("_"):
                            add(node, f"imports the private name {a.name}")
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
                add(node, f"uses the private or special attribute {node.attr} (not needed here)")
            elif isinstance(node, ast.Name) and node.id in HIDING_NAMES:
                add(node, f"uses {node.id}() (not needed here; it can hide what the code calls)")
        for body in _loop_bodies(tree):
            for node in ast.walk(body):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    if node.func.attr in SYNC_METHODS:
                        add(node, f".{node.func.attr}() inside a loop: one synchronisation per iteration")
                    elif (node.func.attr == "to" and any(isinstance(a, ast.Constant) and isinstance(a.value, str)
                                                         and a.value.startswith("cpu") for a in node.args)):
                        add(node, ".to('cpu') inside a loop: one synchronisation per iteration")
        for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            tensors = _tensor_names(fn)
            for loop in _batch_loops(fn):
                for stmt in loop.body:
                    for node in ast.walk(stmt):
                        if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)) and _uses(node.test, tensors):
                            add(node, "a condition computed from tensors inside the loop over the batches: "
                                      "bool() of a tensor waits for its value")
                        elif isinstance(node, ast.BoolOp) and any(_uses(v, tensors) for v in node.values[:-1]):
                            add(node, "and/or on a tensor inside the loop over the batches: bool() waits")
                        elif (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)
                              and _uses(node.operand, tensors)):
                            add(node, "`not` on a tensor inside the loop over the batches: bool() waits")
                        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                              and node.func.id in HOST_BUILTINS
                              and any(_uses(a, tensors) for a in [*node.args, *(k.value for k in node.keywords)])):
                            add(node, f"{node.func.id}() of a tensor inside the loop over the batches: it reads "
                                      "the value on the host")
                        elif isinstance(node, ast.FormattedValue) and _uses(node.value, tensors):
                            add(node, "a tensor formatted into a string inside the loop over the batches")
                        elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod)
                              and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str)
                              and _uses(node.right, tensors)):
                            add(node, "a tensor formatted with % inside the loop over the batches")
    return found
