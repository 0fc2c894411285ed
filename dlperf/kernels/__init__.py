"""GPU kernels from the inside: Triton kernels that run anywhere, a memory-traffic counter, a systolic array.

One concept per module:

* :mod:`dlperf.kernels.mode` -- interpreter or compiled Triton: decided once, before ``triton`` is imported,
  and said out loud (``TRITON_INTERPRET=1`` only where no CUDA device exists);
* :mod:`dlperf.kernels.triton_kernels` -- the chapter's kernels (vector add, strided copy, naive and tiled
  matrix products, fused LayerNorm) with their launchers; the same source runs compiled on a GPU and
  interpreted on a CPU;
* :mod:`dlperf.kernels.grouped` -- a tensor-core (16-bit) matrix product in grouped program order, and a model of
  what that order saves in the L2 cache;
* :mod:`dlperf.kernels.autograd` -- a Triton kernel in autograd: the GELU with its own backward kernel, and the
  same registered with ``torch.library.triton_op`` for ``torch.compile``;
* :mod:`dlperf.kernels.traffic` -- counts the bytes every ``tl.load``/``tl.store`` of an interpreted kernel
  moves, per program and per launch, and the 32-byte sectors they touch;
* :mod:`dlperf.kernels.flash` -- FlashAttention's forward kernel (FlashAttention-2's loop order, causal block
  skipping, ragged ends) beside standard attention, with the closed forms of both traffics;
* :mod:`dlperf.kernels.systolic` -- a cycle-by-cycle systolic-array simulator (weight- and output-stationary);
* :mod:`dlperf.kernels.layers` -- FLOPs, bytes and arithmetic intensity of each layer of a network.

Importing this package imports neither triton nor the kernels: ``systolic`` and ``layers`` need only torch
and numpy, and the Triton mode must be chosen before ``triton`` is first imported.
"""

from .mode import TritonMode, select_mode

__all__ = ["TritonMode", "select_mode"]
