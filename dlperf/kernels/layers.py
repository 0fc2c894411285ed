"""Characterise a network layer by layer: FLOPs, bytes, arithmetic intensity, working set.

For every leaf module (a layer with no children) of a model, one forward pass records its input and output
(forward hooks) and then, for that layer alone:

* ``flops``: counted by ``torch.utils.flop_counter.FlopCounterMode`` (matrix products and convolutions,
  a multiply-add counted as 2 FLOPs).  That counter ignores elementwise and pooling layers; for those
  (``counted=False``) we count one operation per *input* element, an approximation said in the table;
* ``param_bytes``, ``input_bytes``, ``output_bytes``: bytes of the layer's parameters and buffers, of its
  input and of its output;
* ``intensity = flops / (param_bytes + input_bytes + output_bytes)``: FLOP per byte if each is moved
  between memory and the processor exactly once, the intensity a perfect implementation of the layer has
  on the roofline (see the hardware chapter).

The *working set* of a layer, ``param_bytes + input_bytes + output_bytes``, is what must be resident while
it runs; a training step also keeps every layer's output for the backward pass (:func:`activation_bytes`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

__all__ = ["LayerCost", "characterize", "activation_bytes"]


@dataclass(frozen=True)
class LayerCost:
    """FLOPs and bytes of one layer for one forward pass."""

    name: str
    kind: str
    flops: int
    counted: bool          # True: FLOPs from FlopCounterMode; False: one per input element (elementwise/pooling)
    param_bytes: int
    input_bytes: int
    output_bytes: int
    output_shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        """The layer's working set: parameters, input and output."""
        return self.param_bytes + self.input_bytes + self.output_bytes

    @property
    def intensity(self) -> float:
        """FLOP per byte, each operand moved once."""
        return self.flops / self.nbytes


def _nbytes(x: object) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (tuple, list)):
        return sum(_nbytes(v) for v in x)
    return 0


def characterize(model: nn.Module, example: torch.Tensor) -> list[LayerCost]:
    """One :class:`LayerCost` per leaf module of ``model``, in the order the forward pass calls them.

    Layers whose output is a view of their input (``nn.Flatten``) move nothing and are left out.
    """
    seen: list[tuple[str, nn.Module, tuple, torch.Tensor]] = []
    hooks = []
    for name, module in model.named_modules():
        if not list(module.children()):
            hooks.append(module.register_forward_hook(
                lambda mod, args, out, name=name: seen.append((name, mod, args, out))))
    try:
        with torch.no_grad():
            model(example)
    finally:
        for h in hooks:
            h.remove()
    costs = []
    with torch.no_grad():
        for name, module, args, out in seen:
            if (isinstance(out, torch.Tensor) and args and isinstance(args[0], torch.Tensor)
                    and out.untyped_storage().data_ptr() == args[0].untyped_storage().data_ptr()):
                continue                              # a view (Flatten): moves and computes nothing
            with FlopCounterMode(display=False) as counter:
                module(*args)
            flops = counter.get_total_flops()
            counted = flops > 0
            if not counted:
                flops = sum(a.numel() for a in args if isinstance(a, torch.Tensor))
            params = sum(_nbytes(p) for p in module.parameters(recurse=False)) + sum(
                _nbytes(b) for b in module.buffers(recurse=False))
            costs.append(LayerCost(name, type(module).__name__, int(flops), counted, params, _nbytes(args),
                                   _nbytes(out), tuple(out.shape) if isinstance(out, torch.Tensor) else ()))
    return costs


def activation_bytes(costs: list[LayerCost]) -> int:
    """Bytes of every layer's output: what a training step keeps for the backward pass (an upper bound;
    in-place activations and layers that save their input instead change it)."""
    return sum(c.output_bytes for c in costs)
