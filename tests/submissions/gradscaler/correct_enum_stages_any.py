# why: a correct alternative written differently: an enum.Enum for the per-optimizer stage (READY/UNSCALED/STEPPED) in a dict of small records keyed by id(optimizer), found_inf accumulated with any() over torch.isinf(g).any() | torch.isnan(g).any() looked at before multiplying, the scale a Python float grown only while below torch.finfo(torch.float32).max, and scale() recursing through a helper
# expect: {"gradscaler-unscale-test": 2, "gradscaler-scale-test": 1, "gradscaler-step-test": 2, "gradscaler-update-test": 2, "gradscaler-errors-test": 1, "gradscaler-state-test": 1, "gradscaler-e2e-test": 1}
# %% gradscaler-unscale
import torch


def unscale_grads_(optimizer, inv_scale):
    params = [p for group in optimizer.param_groups for p in group["params"]]
    grads = [p.grad for p in params if p.grad is not None]
    for g in grads:
        if g.dtype is torch.float16:
            raise ValueError("cannot unscale float16 gradients")
    bad = [bool(torch.isinf(g).any() | torch.isnan(g).any()) for g in grads]
    with torch.no_grad():
        for g in grads:
            g.mul_(inv_scale)
    return any(bad)
# %% gradscaler-scaler
import enum

import torch


class Stage(enum.Enum):
    READY = "ready"
    UNSCALED = "unscaled"
    STEPPED = "stepped"


class GradScaler:
    _KEYS = ("scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker")

    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        self._enabled = bool(enabled)
        self._s = float(init_scale)
        self._grow = float(growth_factor)
        self._back = float(backoff_factor)
        self._interval = int(growth_interval)
        self._clean = 0
        self._has_scaled = False
        self._records = {}

    def _record(self, optimizer):
        return self._records.setdefault(id(optimizer), {"stage": Stage.READY, "found_inf": False})

    def _mul(self, x):
        if isinstance(x, torch.Tensor):
            return x * self._s
        if isinstance(x, list):
            return [self._mul(v) for v in x]
        if isinstance(x, tuple):
            return tuple(self._mul(v) for v in x)
        raise ValueError(f"cannot scale a {type(x).__name__}")

    def scale(self, outputs):
        if not self._enabled:
            return outputs
        self._has_scaled = True
        return self._mul(outputs)

    def get_scale(self):
        return self._s if self._enabled else 1.0

    def unscale_(self, optimizer):
        if not self._enabled:
            return
        assert self._has_scaled, "call scale() before unscale_()"
        rec = self._record(optimizer)
        if rec["stage"] is Stage.UNSCALED:
            raise RuntimeError("unscale_() already called on this optimizer in this iteration")
        if rec["stage"] is Stage.STEPPED:
            raise RuntimeError("unscale_() called after step()")
        rec["found_inf"] = unscale_grads_(optimizer, 1.0 / self._s)
        rec["stage"] = Stage.UNSCALED

    def step(self, optimizer):
        if not self._enabled:
            return optimizer.step()
        assert self._has_scaled, "call scale() before step()"
        rec = self._record(optimizer)
        if rec["stage"] is Stage.STEPPED:
            raise RuntimeError("step() already called on this optimizer in this iteration")
        if rec["stage"] is Stage.READY:
            self.unscale_(optimizer)
        rec["stage"] = Stage.STEPPED
        return None if rec["found_inf"] else optimizer.step()

    def update(self):
        if not self._enabled:
            return
        assert self._has_scaled, "call scale() before update()"
        done = [r for r in self._records.values() if r["stage"] is not Stage.READY]
        assert done, "No inf checks were recorded prior to update."
        if any(r["found_inf"] for r in done):
            self._s = self._s * self._back
            self._clean = 0
        else:
            self._clean += 1
            if self._clean == self._interval:
                self._clean = 0
                if self._s * self._grow <= torch.finfo(torch.float32).max:
                    self._s = self._s * self._grow
        self._records.clear()

    def state_dict(self):
        if not self._enabled:
            return {}
        values = (self._s, self._grow, self._back, self._interval, self._clean)
        return dict(zip(self._KEYS, values))

    def load_state_dict(self, state_dict):
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("the state dict is empty (saved from a disabled GradScaler?)")
        self._s = float(state_dict["scale"])
        self._grow = float(state_dict["growth_factor"])
        self._back = float(state_dict["backoff_factor"])
        self._interval = int(state_dict["growth_interval"])
        self._clean = int(state_dict["_growth_tracker"])
