# why: unscale_grads_ rebinds p.grad = p.grad * inv_scale instead of multiplying in place (right values, new tensors)
# expect: {"gradscaler-unscale-test": 0, "gradscaler-scale-test": 1, "gradscaler-step-test": 2, "gradscaler-update-test": 2, "gradscaler-errors-test": 1, "gradscaler-state-test": 1, "gradscaler-e2e-test": 1}
# %% gradscaler-unscale
import torch


def unscale_grads_(optimizer, inv_scale):
    """Multiply every gradient of ``optimizer`` in place by ``inv_scale`` (a float); return True if any
    of them contained an inf or a NaN, else False.

    Every parameter of every param group (``optimizer.param_groups[i]["params"]``); parameters whose
    ``.grad`` is None are skipped. All gradients are multiplied, also after an inf or NaN was found.
    A ``float16`` gradient raises ``ValueError`` before any gradient is touched.
    """
    # about 10 lines
    params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    grads = [p.grad for p in params]
    if any(g.dtype == torch.float16 for g in grads):
        raise ValueError("Attempting to unscale FP16 gradients.")
    found_inf = False
    with torch.no_grad():
        for g in grads:
            found_inf = found_inf or not bool(torch.isfinite(g).all())  # looked at before multiplying
            pass
        for p in params:
            p.grad = p.grad * inv_scale
    return found_inf
# %% gradscaler-scaler: solution
