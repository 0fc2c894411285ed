# why: unscales inside GradScaler.unscale_ and leaves unscale_grads_ as the stub: only the unscale_grads_ points are lost
# expect: {"gradscaler-unscale-test": 0, "gradscaler-scale-test": 1, "gradscaler-step-test": 2, "gradscaler-update-test": 2, "gradscaler-errors-test": 1, "gradscaler-state-test": 1, "gradscaler-e2e-test": 1}
# %% gradscaler-scaler
import math

import torch

# unscale_grads_ is the function of the cell above: the tests load both cells.


class GradScaler:
    """Dynamic loss scaling with the semantics of ``torch.amp.GradScaler``.

    ``init_scale``: the first scale S. After an iteration in which some gradient was inf or NaN,
    ``update()`` multiplies S by ``backoff_factor`` (< 1) and restarts the count of clean
    iterations; after ``growth_interval`` consecutive clean iterations it multiplies S by
    ``growth_factor`` (> 1). With ``enabled=False`` the scaler does nothing: ``scale`` returns its
    argument, ``step`` just calls ``optimizer.step()``, ``get_scale()`` is 1.0.
    """

    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        # about 10 lines: remember the settings, the scale, the growth tracker (count of clean
        # iterations), whether scale() was ever called, and a per-optimizer state
        self.enabled = enabled
        self._scale = float(init_scale)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._growth_tracker = 0
        self._started = False  # scale() called at least once
        # id(optimizer) -> {"stage": "unscaled" or "stepped", "found_inf": bool}; emptied by update()
        self._per_optimizer = {}

    def scale(self, outputs):
        """Return ``outputs`` times the current scale: a tensor, or a list/tuple of them (nested too),
        rebuilt with the same type. Disabled: return ``outputs`` itself."""
        # about 7 lines
        if not self.enabled:
            return outputs
        self._started = True
        if isinstance(outputs, torch.Tensor):
            return outputs * self._scale
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    def get_scale(self):
        """The current scale as a Python float (1.0 when disabled)."""
        # 1 or 2 lines
        return float(self._scale) if self.enabled else 1.0

    def unscale_(self, optimizer):
        """Unscale this optimizer's gradients with ``unscale_grads_`` (from the cell above) and record,
        for this optimizer, that it was unscaled and whether an inf or NaN was found."""
        # about 10 lines
        if not self.enabled:
            return
        if not self._started:
            raise AssertionError("unscale_() before any scale(): call scaler.scale(loss) first")
        state = self._per_optimizer.get(id(optimizer))
        if state is not None and state["stage"] == "unscaled":
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state is not None and state["stage"] == "stepped":
            raise RuntimeError("unscale_() is being called after step().")
        inv_scale = 1.0 / self._scale
        found_inf = False
        with torch.no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        found_inf = found_inf or not bool(torch.isfinite(p.grad).all())
                        p.grad.mul_(inv_scale)
        self._per_optimizer[id(optimizer)] = {"stage": "unscaled", "found_inf": found_inf}

    def step(self, optimizer):
        """Unscale (unless ``unscale_`` was already called for this optimizer in this iteration), then
        run ``optimizer.step()`` and return its result, or skip it and return None if an inf or NaN
        was found in this optimizer's gradients."""
        # about 12 lines
        if not self.enabled:
            return optimizer.step()
        if not self._started:
            raise AssertionError("step() before any scale(): call scaler.scale(loss) first")
        state = self._per_optimizer.get(id(optimizer))
        if state is not None and state["stage"] == "stepped":
            raise RuntimeError("step() has already been called since the last update().")
        if state is None:
            self.unscale_(optimizer)
            state = self._per_optimizer[id(optimizer)]
        state["stage"] = "stepped"
        if state["found_inf"]:
            return None
        return optimizer.step()

    def update(self):
        """Back off (inf/NaN in any optimizer this iteration) or count a clean iteration and grow
        after ``growth_interval`` of them; then forget this iteration's per-optimizer state."""
        # about 15 lines
        if not self.enabled:
            return
        if not self._started:
            raise AssertionError("update() before any scale(): call scaler.scale(loss) first")
        if not self._per_optimizer:
            raise AssertionError("No inf checks were recorded prior to update.")
        if any(state["found_inf"] for state in self._per_optimizer.values()):
            self._scale *= self._backoff_factor
            self._growth_tracker = 0
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self._growth_interval:
                grown = self._scale * self._growth_factor
                if math.isfinite(grown):
                    self._scale = grown
                self._growth_tracker = 0
        self._per_optimizer = {}

    def state_dict(self):
        """``{"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}``
        (float, float, float, int, int); ``{}`` when disabled."""
        # about 5 lines
        if not self.enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict):
        """Restore what ``state_dict()`` returned. Disabled: do nothing. An empty dict: RuntimeError."""
        # about 8 lines
        if not self.enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        self._scale = float(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])
