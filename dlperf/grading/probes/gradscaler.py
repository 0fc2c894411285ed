"""Probes of the ``gradscaler`` exercise: training loops that drive a scaler and report what happened.

Each probe takes ``mod`` (a namespace with ``GradScaler`` and ``unscale_grads_``:
the student's solution in its process, :func:`reference` in the checker),
plain data describing a run (settings, where to plant an inf or a NaN, which
optimizers), and returns what it observed: scales, what ``step`` returned,
parameters, optimizer states, exceptions.  The checker runs the same probe on
the reference and compares; nothing here knows what the right answer is.
Optimizers and models are built here from fixed seeds, so both sides start
from the same numbers.
"""

from __future__ import annotations

import copy
import math
import types
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

__all__ = [
    "Plain",
    "devices",
    "drive",
    "errors",
    "reference",
    "scale_observations",
    "scaled_grads",
    "step_run",
    "train",
    "unscale",
    "unscale_model",
    "update_trace",
]


def devices() -> list[str]:
    """Where the runs happen: the CPU, and a CUDA GPU when there is one."""
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _dense_only(optimizer: Any) -> list[torch.Tensor]:
    """The gradients of ``optimizer``.  Sparse ones are out of the exercise's scope: the reference refuses
    them, so a graded run that made one would fail for the reference solution too, which the fixture
    tests (the reference gets 10/10) would catch: that is how the specification's statement is tested."""
    grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
    if any(g.is_sparse for g in grads):
        raise ValueError("sparse gradients are out of the gradscaler exercise's scope")
    return grads


def _reference_unscale(optimizer: Any, inv_scale: float) -> bool:
    """The specification's ``unscale_grads_``, which the checker's reference runs use."""
    found = False
    grads = _dense_only(optimizer)
    if any(g.dtype == torch.float16 for g in grads):
        raise ValueError("Attempting to unscale FP16 gradients.")
    with torch.no_grad():
        for g in grads:
            found = found or not bool(torch.isfinite(g).all())
            g.mul_(inv_scale)
    return found


def reference(device: str) -> types.SimpleNamespace:
    """The reference the checker runs: ``torch.amp.GradScaler`` on ``device``, refusing sparse gradients (see
    :func:`_dense_only`).  (Defined here, not when this module is imported: in the student's process the
    exercise switches ``torch.amp.GradScaler`` off before this module is imported.)"""
    class DenseGradScaler(torch.amp.GradScaler):
        def unscale_(self, optimizer: Any) -> None:    # step() calls it too, when unscale_ was not called
            _dense_only(optimizer)
            super().unscale_(optimizer)

    def scaler(**kwargs: Any) -> Any:
        return DenseGradScaler(device, **kwargs)
    return types.SimpleNamespace(GradScaler=scaler, unscale_grads_=_reference_unscale)


class Plain:
    """A minimal optimizer (plain SGD): a GradScaler only uses ``param_groups`` and ``step()``.

    (``torch.optim``'s classes import ``torch._dynamo``, about a second per process.)
    """

    def __init__(self, params: Any, lr: float = 0.0, returns: Any = None):
        params = list(params)
        groups = params if params and isinstance(params[0], dict) else [{"params": params}]
        self.param_groups = [{"lr": lr, **g, "params": list(g["params"])} for g in groups]
        self.state: dict[Any, Any] = {}
        self.defaults = {"lr": lr}
        self.returns = returns

    def zero_grad(self) -> None:
        for g in self.param_groups:
            for p in g["params"]:
                p.grad = None

    def step(self) -> Any:
        with torch.no_grad():
            for g in self.param_groups:
                for p in g["params"]:
                    if g["lr"] and p.grad is not None:
                        p.sub_(g["lr"] * p.grad)
        return self.returns


# ---------------------------------------------------------------------------------------------
# Part 1: unscale_grads_
# ---------------------------------------------------------------------------------------------


def unscale_model(device: str) -> nn.ModuleDict:
    """Two param groups' layers and one that gets no gradient."""
    torch.manual_seed(0)
    return nn.ModuleDict({"a": nn.Linear(3, 4), "b": nn.Linear(4, 2), "unused": nn.Linear(2, 2)}).to(device)


def _groups(model: nn.ModuleDict) -> list[dict[str, Any]]:
    return [{"params": list(model["a"].parameters()), "lr": 0.1},
            {"params": list(model["b"].parameters()) + list(model["unused"].parameters()), "lr": 0.01}]


def scaled_grads(device: str, scale: float, plant: Sequence[Sequence[Any]]) -> dict[str, torch.Tensor | None]:
    """The gradients of :func:`unscale_model` scaled by ``scale``, with ``(layer, param, index, value)`` planted."""
    model = unscale_model(device)
    x = torch.linspace(-1, 1, 15).reshape(5, 3).to(device)
    (model["b"](torch.tanh(model["a"](x))).square().mean() * scale).backward()
    for layer, name, index, value in plant:
        getattr(model[layer], name).grad[tuple(index)] = value
    return {k: (p.grad.detach().clone() if p.grad is not None else None) for k, p in model.named_parameters()}


def unscale(mod: Any, device: str, grads: dict[str, torch.Tensor | None], inv_scale: float) -> dict[str, Any]:
    """``mod.unscale_grads_`` on an optimizer whose parameters hold ``grads``: what it returned, the grads after."""
    model = unscale_model(device)
    for k, p in model.named_parameters():
        p.grad = grads[k]
    found = mod.unscale_grads_(Plain(_groups(model)), inv_scale)
    return {"found": found, "grads": {k: p.grad for k, p in model.named_parameters()}}


def reference_unscale(device: str, grads: dict[str, torch.Tensor | None], scale: float) -> dict[str, Any]:
    """What ``torch.amp.GradScaler(init_scale=scale).unscale_`` does to ``grads`` (copies), and whether its step skips."""
    model = unscale_model(device)
    for k, p in model.named_parameters():
        p.grad = None if grads[k] is None else grads[k].clone()
    ref = torch.amp.GradScaler(device, init_scale=scale)
    opt = Plain(_groups(model), returns="stepped")
    ref.scale(torch.ones((), device=device))
    ref.unscale_(opt)
    skipped = ref.step(opt) is None
    return {"found": skipped, "grads": {k: p.grad for k, p in model.named_parameters()}}


def float16_grads(mod: Any, device: str, grads: Sequence[torch.Tensor]) -> None:
    """``unscale_grads_`` with a float32 gradient in group 0 and a float16 one in group 1 (it must raise)."""
    p32 = torch.ones(3, device=device, requires_grad=True)
    p16 = torch.ones(2, dtype=torch.float16, device=device, requires_grad=True)
    p32.grad, p16.grad = grads
    mod.unscale_grads_(Plain([{"params": [p32]}, {"params": [p16]}]), 0.5)


# ---------------------------------------------------------------------------------------------
# Part 2: scale
# ---------------------------------------------------------------------------------------------


def scale_observations(mod: Any, device: str, init: float) -> dict[str, Any]:
    """The gradient through ``scale(loss)``, and what a disabled scaler gives back."""
    w = torch.linspace(-1, 1, 5, device=device).requires_grad_()
    s = mod.GradScaler(init_scale=init)
    out = s.scale((w * w).sum())
    requires_grad = isinstance(out, torch.Tensor) and out.requires_grad
    if isinstance(out, torch.Tensor) and out.requires_grad:
        out.backward()
    off = mod.GradScaler(init_scale=8.0, enabled=False)
    x = torch.ones(3, device=device)
    lst = [x, (x,)]
    return {"requires_grad": requires_grad, "grad": w.grad,
            "disabled: scale(x) is x": off.scale(x) is x, "disabled: scale(a list) is that list": off.scale(lst) is lst,
            "disabled: get_scale()": off.get_scale()}


# ---------------------------------------------------------------------------------------------
# Part 3: step
# ---------------------------------------------------------------------------------------------


class Marked(torch.optim.SGD):
    """SGD whose ``step()`` returns a value, to see that ``step`` passes it on."""

    def step(self, closure: Any = None) -> float:  # type: ignore[override]
        super().step(closure)
        return 0.25


def _opt_state(opt: torch.optim.Optimizer) -> list[dict[str, Any]]:
    return [{k: v for k, v in sorted(opt.state[p].items())} for g in opt.param_groups for p in g["params"]]


def step_run(mod: Any, device: str, plans: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Iterations with two optimizers (A: SGD with momentum, two groups; B: Adam, a layer without gradient).

    Each plan: ``plant`` [(layer, param, index, value)], ``unscale`` (optimizers unscaled explicitly, then
    clipped), ``order`` (of the ``step`` calls).  Per iteration: what each ``step`` returned, the
    parameters and both optimizers' states.
    """
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3), nn.Linear(3, 3)).to(device)
    x, y = torch.randn(16, 4).to(device), torch.randn(16, 3).to(device)
    opts = {"A": Marked([{"params": [model[0].weight]}, {"params": [model[0].bias], "lr": 0.05}], lr=0.1,
                        momentum=0.9),
            "B": torch.optim.Adam([*model[2].parameters(), *model[3].parameters()], lr=0.01)}
    scaler = mod.GradScaler(init_scale=2.0**12, growth_interval=3)
    seen = []
    for plan in plans:
        for o in opts.values():
            o.zero_grad()
        loss = (model[2](model[1](model[0](x))) - y).square().mean()   # model[3] gets no gradient
        scaler.scale(loss).backward()
        for layer, name, index, value in plan["plant"]:
            getattr(model[layer], name).grad[tuple(index)] = value
        for key in plan["unscale"]:
            scaler.unscale_(opts[key])
        for key in plan["unscale"]:  # clip each optimizer's gradients (a NaN in A must not reach B)
            torch.nn.utils.clip_grad_norm_([p for g in opts[key].param_groups for p in g["params"]], 0.5)
        returned = {key: scaler.step(opts[key]) for key in plan["order"]}
        scaler.update()
        seen.append({"returned": returned,
                     "params": {k: p.detach().clone() for k, p in model.named_parameters()},
                     "state": {key: _opt_state(o) for key, o in opts.items()}})
    return seen


# ---------------------------------------------------------------------------------------------
# Part 4: update
# ---------------------------------------------------------------------------------------------


def update_trace(mod: Any, device: str, settings: dict[str, Any], n: int, planted: dict[int, float],
                 two_optimizers: bool, explicit: bool) -> list[Any]:
    """``get_scale()`` before the first iteration and after each ``update()``."""
    scaler = mod.GradScaler(**settings)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1)).to(device)
    x = torch.linspace(-2, 2, 12).reshape(4, 3).to(device)
    opts = ([Plain(model[0].parameters()), Plain(model[2].parameters())] if two_optimizers
            else [Plain(model.parameters())])
    out = [scaler.get_scale()]
    for it in range(n):
        for o in opts:
            o.zero_grad()
        scaler.scale(model(x).square().mean()).backward()
        if it in planted:
            model[2].weight.grad[0, it % 5] = planted[it]
        if explicit:
            scaler.unscale_(opts[-1])
        for o in opts:
            scaler.step(o)
        scaler.update()
        out.append(scaler.get_scale())
    return out


# ---------------------------------------------------------------------------------------------
# Part 5: errors
# ---------------------------------------------------------------------------------------------


def _outcome(fn: Any) -> list[str] | None:
    """None if ``fn()`` raised nothing, else the names of the exception's classes (its MRO)."""
    try:
        fn()
    except NotImplementedError:
        raise
    except Exception as exc:  # noqa: BLE001 - the type is what is observed
        return [c.__name__ for c in type(exc).__mro__]
    return None


def errors(mod: Any, device: str) -> dict[str, Any]:
    """What each misuse of the scaler raises, and what the normal sequences and a disabled scaler do."""
    def fresh(scaled: bool = True) -> tuple[Any, Any, Any]:
        torch.manual_seed(0)
        model = nn.Linear(3, 2).to(device)
        opt = Plain(model.parameters(), lr=0.1)
        s = mod.GradScaler(init_scale=4.0)
        if scaled:
            s.scale(model(torch.ones(2, 3, device=device)).sum()).backward()
        return model, opt, s

    seen: dict[str, Any] = {}
    model, opt, s = fresh(scaled=False)
    model(torch.ones(2, 3, device=device)).sum().backward()
    seen["step() before any scale()"] = _outcome(lambda: s.step(opt))
    model, opt, s = fresh()
    seen["update() with no unscale_()/step() since the last update()"] = _outcome(s.update)
    model, opt, s = fresh()
    s.unscale_(opt)
    seen["unscale_() twice for one optimizer in one iteration"] = _outcome(lambda: s.unscale_(opt))
    model, opt, s = fresh()
    s.step(opt)
    seen["unscale_() after step() in the same iteration"] = _outcome(lambda: s.unscale_(opt))
    model, opt, s = fresh()
    s.step(opt)
    seen["step() twice for one optimizer in one iteration"] = _outcome(lambda: s.step(opt))
    s.update()
    seen["update() twice in a row"] = _outcome(s.update)
    # the normal sequences raise nothing, over several iterations and with two optimizers
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2)).to(device)
    opts = [Plain(model[0].parameters(), lr=0.1), Plain(model[1].parameters(), lr=0.1)]
    s = mod.GradScaler(init_scale=4.0)
    for it, (name, explicit) in enumerate([("unscale_() then step()", True), ("step() alone", False),
                                           ("unscale_() then step()", True)]):
        for o in opts:
            o.zero_grad()
        s.scale(model(torch.ones(2, 3, device=device)).sum()).backward()

        def iteration(explicit: bool = explicit) -> None:
            for o in opts:
                if explicit:
                    s.unscale_(o)
                s.step(o)
            s.update()
        seen[f"iteration {it}, two optimizers, {name} for each, then update()"] = _outcome(iteration)
    # a disabled scaler does nothing and raises nothing
    model = nn.Linear(3, 2).to(device)
    w0 = model.weight.detach().clone()
    opt = Plain(model.parameters(), lr=0.1)
    s = mod.GradScaler(enabled=False)
    model(torch.ones(2, 3, device=device)).sum().backward()
    g0 = model.weight.grad.clone()
    changed: list[bool] = []

    def disabled() -> None:
        s.unscale_(opt)
        changed.append(not torch.equal(model.weight.grad, g0))
        s.step(opt)
        s.update()
        s.update()
    seen["enabled=False, unscale_(), step(), update(), update() without scale()"] = _outcome(disabled)
    seen["enabled=False: unscale_() changed the gradients"] = bool(changed and changed[0])
    seen["enabled=False: step() did exactly optimizer.step()"] = bool(torch.equal(model.weight.detach(),
                                                                                 w0 - 0.1 * g0))
    return seen


# ---------------------------------------------------------------------------------------------
# Part 6: state_dict
# ---------------------------------------------------------------------------------------------


def drive(mod: Any, scaler: Any, device: str, n: int, planted: Sequence[int]) -> list[Any]:
    """``n`` iterations of a small model with ``scaler`` (an inf at the ``planted`` iterations): the scales."""
    torch.manual_seed(0)
    model = nn.Linear(3, 2).to(device)
    opt = Plain(model.parameters())
    x = torch.linspace(-1, 1, 6).reshape(2, 3).to(device)
    out = []
    for it in range(n):
        opt.zero_grad()
        scaler.scale(model(x).square().mean()).backward()
        if it in planted:
            model.weight.grad[0, 0] = math.inf
        scaler.step(opt)
        scaler.update()
        out.append(scaler.get_scale())
    return out


# ---------------------------------------------------------------------------------------------
# Part 7: end to end
# ---------------------------------------------------------------------------------------------


def train(mod: Any, device: str, settings: dict[str, Any] | None, n: int, bad: Sequence[int]) -> list[list[torch.Tensor]]:
    """A 3-layer MLP, SGD with momentum; with ``mod.GradScaler(**settings)`` and an inf planted at the ``bad``
    iterations, or (``settings`` None) float32 training that skips those steps.  The parameters after each
    iteration."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3)).to(device)
    x, y = torch.randn(64, 6).to(device), torch.randn(64, 3).to(device)
    model = copy.deepcopy(model)
    scaler = None if settings is None else mod.GradScaler(**settings)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    params = []
    for it in range(n):
        opt.zero_grad()
        loss = (model(x) - y).square().mean()
        if scaler is None:
            loss.backward()
            if it not in bad:
                opt.step()
        else:
            scaler.scale(loss).backward()
            if it in bad:
                model[0].weight.grad[it % 16, 0] = math.inf
            scaler.step(opt)
            scaler.update()
        params.append([p.detach().clone() for p in model.parameters()])
    return params
