# why: a correct alternative written differently: the scale kept, like PyTorch, as a one-element float32 tensor (grown only if the product is finite in float32, get_scale() via .item()), inf/NaN found with one torch.isfinite over the stacked per-gradient abs().max() taken before multiplying, a collections.defaultdict of small per-optimizer dicts keyed by id(optimizer) with "unscaled"/"stepped"/"inf" flags
# expect: {"gradscaler-unscale-test": 2, "gradscaler-scale-test": 1, "gradscaler-step-test": 2, "gradscaler-update-test": 2, "gradscaler-errors-test": 1, "gradscaler-state-test": 1, "gradscaler-e2e-test": 1}
# %% gradscaler-unscale
import torch


def unscale_grads_(optimizer, inv_scale):
    grads = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is not None:
                if p.grad.dtype == torch.float16:
                    raise ValueError("float16 gradients cannot be unscaled")
                grads.append(p.grad)
    if not grads:
        return False
    with torch.no_grad():
        peaks = torch.stack([g.abs().max().to(grads[0].device) for g in grads])
        found = not bool(torch.isfinite(peaks).all())
        for g in grads:
            g.mul_(inv_scale)
    return found
# %% gradscaler-scaler
import collections

import torch


class GradScaler:
    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        self.enabled = enabled
        self._scale = torch.full((1,), float(init_scale), dtype=torch.float32)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._growth_tracker = 0
        self._scaled_once = False
        self._opt_states = collections.defaultdict(dict)

    def _check_started(self, what):
        assert self._scaled_once, f"{what}: scale() was never called"

    def scale(self, outputs):
        if not self.enabled:
            return outputs
        self._scaled_once = True
        if isinstance(outputs, torch.Tensor):
            return outputs * self._scale.to(outputs.device)[0]
        if isinstance(outputs, (list, tuple)):
            return type(outputs)([self.scale(o) for o in outputs])
        raise ValueError("outputs must be a tensor, a list or a tuple")

    def get_scale(self):
        if not self.enabled:
            return 1.0
        return self._scale.item()

    def unscale_(self, optimizer):
        if not self.enabled:
            return
        self._check_started("unscale_()")
        record = self._opt_states[id(optimizer)]
        if record.get("unscaled"):
            raise RuntimeError("unscale_() was already called on this optimizer since the last update()")
        if record.get("stepped"):
            raise RuntimeError("unscale_() is being called after step()")
        inv = self._scale.double().reciprocal().item()
        record["inf"] = unscale_grads_(optimizer, inv)
        record["unscaled"] = True

    def step(self, optimizer):
        if not self.enabled:
            return optimizer.step()
        self._check_started("step()")
        record = self._opt_states[id(optimizer)]
        if record.get("stepped"):
            raise RuntimeError("step() was already called since the last update()")
        if not record.get("unscaled"):
            self.unscale_(optimizer)
        record["stepped"] = True
        if record["inf"]:
            return None
        return optimizer.step()

    def update(self):
        if not self.enabled:
            return
        self._check_started("update()")
        checked = [r for r in self._opt_states.values() if "inf" in r]
        assert checked, "No inf checks were recorded prior to update."
        if any(r["inf"] for r in checked):
            self._scale = self._scale * self._backoff_factor
            self._growth_tracker = 0
        else:
            self._growth_tracker += 1
            if self._growth_tracker >= self._growth_interval:
                grown = self._scale * self._growth_factor
                if torch.isfinite(grown).all():
                    self._scale = grown
                self._growth_tracker = 0
        self._opt_states = collections.defaultdict(dict)

    def state_dict(self):
        if not self.enabled:
            return {}
        return dict(scale=self.get_scale(), growth_factor=self._growth_factor,
                    backoff_factor=self._backoff_factor, growth_interval=self._growth_interval,
                    _growth_tracker=self._growth_tracker)

    def load_state_dict(self, state_dict):
        if not self.enabled:
            return
        if not state_dict:
            raise RuntimeError("empty state dict: saved from a disabled GradScaler?")
        self._scale = torch.full((1,), float(state_dict["scale"]), dtype=torch.float32)
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])
