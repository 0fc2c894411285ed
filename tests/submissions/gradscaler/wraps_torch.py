# why: GradScaler delegates to torch.amp.GradScaler instead of implementing it: refused by every test of the class
# expect: {"gradscaler-unscale-test": 2, "gradscaler-scale-test": 0, "gradscaler-step-test": 0, "gradscaler-update-test": 0, "gradscaler-errors-test": 0, "gradscaler-state-test": 0, "gradscaler-e2e-test": 0}
# %% gradscaler-unscale: solution
# %% gradscaler-scaler
import torch


class GradScaler:
    """Delegates everything to torch.amp.GradScaler."""

    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        self._inner = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_factor=growth_factor,
                                           backoff_factor=backoff_factor, growth_interval=growth_interval,
                                           enabled=enabled)

    def scale(self, outputs):
        return self._inner.scale(outputs)

    def get_scale(self):
        return self._inner.get_scale()

    def unscale_(self, optimizer):
        return self._inner.unscale_(optimizer)

    def step(self, optimizer):
        return self._inner.step(optimizer)

    def update(self):
        return self._inner.update()

    def state_dict(self):
        return self._inner.state_dict()

    def load_state_dict(self, state_dict):
        return self._inner.load_state_dict(state_dict)
