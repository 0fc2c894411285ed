"""Interpreter or compiled: how Triton kernels run on this machine, decided once and said out loud.

Triton compiles a ``@triton.jit`` function for a GPU.  With the environment variable
``TRITON_INTERPRET=1`` it instead *interprets* it: every program instance of the grid runs, one after the
other, as Python with numpy arrays standing in for the block's values, on tensors in host memory.  Same
source, same results (up to floating-point reassociation), none of the speed: the interpreter is for
correctness, for counting, and for readers without a GPU.

The variable is read when a kernel is *decorated* (``triton.jit`` returns an interpreted function when it is
set), so it must be set before the module that defines the kernels is imported.  :func:`select_mode`
sets it exactly when no CUDA device exists, leaves a reader's own ``TRITON_INTERPRET`` alone, and returns
and prints what it chose.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["TritonMode", "select_mode", "interpreting", "ENV"]

ENV = "TRITON_INTERPRET"
_TRUE = {"1", "true", "yes", "on"}
_chosen: "TritonMode | None" = None   # this process's choice, once made


@dataclass(frozen=True)
class TritonMode:
    """How Triton kernels run here.

    ``mode`` is ``"interpreter"`` (kernels run as Python on the CPU), ``"compiled"`` (kernels are compiled
    for the CUDA device) or ``"unavailable"`` (triton is not installed); ``reason`` says why.
    """

    mode: str
    reason: str
    triton_version: str | None

    @property
    def interpreted(self) -> bool:
        """True when kernels run in Triton's interpreter."""
        return self.mode == "interpreter"

    @property
    def available(self) -> bool:
        """True when triton can be imported."""
        return self.mode != "unavailable"

    def __str__(self) -> str:
        if not self.available:
            return f"Triton unavailable: {self.reason}"
        how = ("interpreter: each program instance runs as Python on the CPU, one after another"
               if self.interpreted else "compiled for the GPU")
        return f"Triton {self.triton_version}, {how} ({self.reason})"


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover - the course always has torch
        return False
    return torch.cuda.is_available()


def interpreting() -> bool:
    """Whether ``@triton.jit`` makes interpreted functions now (``triton.knobs`` where it exists, else the variable)."""
    import triton

    knobs = getattr(triton, "knobs", None)
    if knobs is not None:
        return bool(knobs.runtime.interpret)
    return os.environ.get(ENV, "").strip().lower() in _TRUE


def _interpret_imported_triton() -> int:
    """Replace every compiled ``@triton.jit`` function of an already imported ``triton.language`` by an
    interpreted one (what importing it with ``TRITON_INTERPRET=1`` would have made); returns how many."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    made: dict[int, InterpretedFunction] = {}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "triton.language" or name.startswith("triton.language.")):
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, JITFunction):
                if id(value) not in made:
                    made[id(value)] = InterpretedFunction(value.fn)
                setattr(module, attr, made[id(value)])
    return len(made)


def fix_scalar_index() -> bool:
    """Make the interpreter's scalars usable as ``range`` bounds with NumPy 2.5; True where it patched.

    The interpreter hands a kernel's scalar arguments (``K`` in ``for k0 in range(0, K, BLOCK_K)``) over as
    one-element arrays.  Triton 3.6 (the one the CUDA build of torch 2.11 ships) turns them into ``int`` with
    ``int(array)``, which NumPy 2.5 refuses ("only 0-dimensional arrays can be converted to Python scalars";
    a deprecation warning before); later Triton squeezes the array first.  Seen on an H200 (torch 2.11,
    triton 3.6.0, numpy 2.5.2) on 2026-11-26, where the chapter's traffic counts of the matrix products
    failed.  The patch does what later Triton does, wherever the interpreter patches ``tl.tensor``.
    """
    try:
        from triton.runtime import interpreter
    except ImportError:
        return False
    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None or getattr(original, "dlperf_scalar_index", False):
        return False

    def _index(self: Any) -> int:
        return int(self.handle.data.squeeze())

    def patch_lang_tensor(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        done = original(tensor, *args, **kwargs)
        tensor.__index__ = _index     # undone with the interpreter's own patches (it saved the original)
        return done

    patch_lang_tensor.dlperf_scalar_index = True  # type: ignore[attr-defined]
    interpreter._patch_lang_tensor = patch_lang_tensor
    return True


def select_mode(verbose: bool = True) -> TritonMode:
    """Choose interpreter or compiled Triton for this process, before ``triton`` is imported.

    * No CUDA device and ``TRITON_INTERPRET`` unset: set it to ``1`` (the interpreter).
    * ``TRITON_INTERPRET`` already set by the reader: respected, whatever the hardware.
    * A CUDA device: compiled.

    Triton reads the variable each time a function is decorated.  When ``triton`` was imported earlier
    without it (``torch.compile`` imports triton, even on a CPU), Triton's own helpers (``tl.zeros``,
    ``tl.sum``'s combine function, ...) were decorated for compilation; they are then switched to the
    interpreter here, so kernels decorated after this call run.  With ``verbose`` the choice is printed.
    """
    global _chosen
    if _chosen is not None and _chosen.available and (os.environ.get(ENV, "").strip().lower() in _TRUE) == _chosen.interpreted:
        if verbose:
            print(_chosen)
        return _chosen
    if importlib.util.find_spec("triton") is None:
        result = TritonMode("unavailable", "the package triton is not installed (pip install triton)", None)
        if verbose:
            print(result)
        return result
    cuda = _cuda_available()
    preset = os.environ.get(ENV)
    if preset is not None:
        interpreted = preset.strip().lower() in _TRUE
        reason = f"{ENV}={preset} was set before this process chose" + ("" if interpreted or cuda else
                                                                        "; no CUDA device, kernels cannot run")
    elif cuda:
        interpreted, reason = False, "a CUDA device is present"
    else:
        before = "triton.language" in sys.modules
        os.environ[ENV] = "1"
        interpreted, reason = True, f"no CUDA device, so {ENV}=1 was set before importing triton"
        if before:
            switched = _interpret_imported_triton()
            reason = (f"no CUDA device, so {ENV}=1 was set; triton had been imported before, and "
                      f"{switched} of its helpers were switched to the interpreter")
    import triton

    if interpreting() != interpreted:
        raise RuntimeError(f"triton does not see {ENV}={os.environ.get(ENV)!r}; set it before starting Python")
    if interpreted:
        fix_scalar_index()
    result = TritonMode("interpreter" if interpreted else "compiled", reason, triton.__version__)
    _chosen = result
    if verbose:
        print(result)
    return result
