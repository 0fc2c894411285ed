"""Load the d2l helpers without imposing d2l's pins, and fail clearly where they cannot work.

``d2l`` 1.0.3 pins numpy 1.23.5 (no wheel for Python 3.12) and an old
matplotlib, so it is installed with ``pip install --no-deps`` on a modern
stack; its helpers for timing, plotting and device lists work there.  It also
imports ``torchvision`` at import time.  Where no working torchvision exists
(PyPI has only CUDA builds of it, which cannot load beside a CPU build of
torch), :func:`load_d2l` puts a stand-in module in its place, says so once, and
every use of it raises :class:`VisionUnavailable` with the reason.  d2l's
downloads (``d2l.download``, ``load_data_fashion_mnist``) need the internet:
:func:`load_d2l` replaces ``d2l.download`` with a function that raises
:class:`OfflineError` instead of hanging on a network that is not there.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__all__ = ["OfflineError", "VisionUnavailable", "load_d2l", "torchvision_status"]


class VisionUnavailable(RuntimeError):
    """Raised when d2l's vision helpers are used without a working torchvision."""


class OfflineError(RuntimeError):
    """Raised when d2l tries to download something: this course never downloads."""


_status: str | None = None


class _MissingModule(types.ModuleType):
    """A module whose every attribute access raises, with the reason."""

    def __init__(self, name: str, reason: str):
        super().__init__(name)
        self.__dict__["_reason"] = reason
        self.__dict__["__path__"] = []  # lets ``from torchvision import transforms`` find the submodule

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        raise VisionUnavailable(
            f"{self.__name__}.{attr} is not available: {self.__dict__['_reason']}. "
            "The d2l helpers that need torchvision (image data sets, transforms) cannot run here; "
            "everything else in d2l works."
        )


def torchvision_status() -> str:
    """``'real'`` when torchvision imports, otherwise why it does not."""
    global _status
    if _status is None:
        try:
            importlib.import_module("torchvision")
            _status = "real"
        except Exception as exc:  # ImportError, RuntimeError from a mismatched CUDA build, OSError
            for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
                del sys.modules[name]
            _status = f"torchvision cannot be imported ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    return _status


def _install_standin(reason: str) -> None:
    root = _MissingModule("torchvision", reason)
    sys.modules["torchvision"] = root
    for sub in ("transforms", "datasets", "models", "io", "ops", "utils"):
        module = _MissingModule(f"torchvision.{sub}", reason)
        sys.modules[f"torchvision.{sub}"] = module
        root.__dict__[sub] = module


def _offline_download(*args: Any, **kwargs: Any) -> Any:
    raise OfflineError(
        "d2l tried to download a file: this course builds and runs offline. "
        "Data sets are shipped or generated (see dlperf's data helpers)."
    )


def load_d2l(verbose: bool = True) -> types.ModuleType:
    """Import ``d2l.torch`` and return it, ready to use offline::

        d2l = load_d2l()
        d2l.try_all_gpus()   # [] on a machine without GPUs

    (tests/test_d2l_compat.py runs this in a fresh interpreter.)
    """
    if "d2l.torch" in sys.modules:
        return sys.modules["d2l.torch"]
    status = torchvision_status()
    if status != "real":
        _install_standin(status)
        if verbose:
            print(f"d2l: {status}; its vision helpers will raise VisionUnavailable, the rest works.")
    try:
        d2l = importlib.import_module("d2l.torch")
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            f"{exc}. Install the book's environment with `make setup` (d2l is installed with --no-deps)."
        ) from exc
    d2l.download = _offline_download
    d2l.download_extract = _offline_download
    d2l.download_all = _offline_download
    return d2l
