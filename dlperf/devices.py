"""Device discovery that never crashes and always says what it chose.

Every chapter asks for devices through this module.  On a machine with fewer
accelerators than a cell wants, it does not fail: it falls back to the CPU and
prints one line that says so, so the reader always knows where the numbers
printed below a cell came from.
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVar

import torch

__all__ = [
    "DeviceInfo",
    "accelerator_count",
    "by_device",
    "ddp_device_ids",
    "cpu_threads",
    "default_device",
    "describe",
    "device_info",
    "get_devices",
    "has_cuda",
    "has_mps",
    "synchronize",
]

T = TypeVar("T")


def has_cuda() -> bool:
    """True when at least one CUDA device can be used."""
    return torch.cuda.is_available() and torch.cuda.device_count() > 0


def has_mps() -> bool:
    """True on Apple silicon with a working Metal backend."""
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def accelerator_count() -> int:
    """Number of accelerators (CUDA devices, or 1 for MPS, else 0)."""
    if has_cuda():
        return torch.cuda.device_count()
    return 1 if has_mps() else 0


@dataclass(frozen=True)
class DeviceInfo:
    """What a reader needs to know about the device a cell ran on."""

    device: torch.device
    name: str
    memory_bytes: int | None
    detail: str

    def __str__(self) -> str:
        mem = f", {self.memory_bytes / 2**30:.1f} GiB" if self.memory_bytes else ""
        return f"{self.device} ({self.name}{mem}{', ' + self.detail if self.detail else ''})"


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def _total_ram() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def device_info(device: torch.device | str) -> DeviceInfo:
    """Name, memory and a short detail line for ``device``."""
    device = torch.device(device)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        detail = f"compute capability {props.major}.{props.minor}, {props.multi_processor_count} SMs"
        return DeviceInfo(torch.device("cuda", index), props.name, props.total_memory, detail)
    if device.type == "mps":
        return DeviceInfo(device, "Apple GPU (MPS)", None, "")
    threads = torch.get_num_threads()
    return DeviceInfo(device, _cpu_name(), _total_ram(), f"{os.cpu_count()} logical cores, torch uses {threads} threads")


def ddp_device_ids(device: torch.device) -> list[int] | None:
    """What DDP's ``device_ids`` wants: ``[index]`` for a GPU rank, ``None`` for a CPU rank."""
    return [device.index] if device.type == "cuda" else None


def describe(device: torch.device | str) -> str:
    """One line naming ``device``, for the output of a cell."""
    return str(device_info(device))


def default_device(verbose: bool = True) -> torch.device:
    """The best single device: ``cuda:0``, else ``mps``, else ``cpu``.

    With ``verbose`` it prints which one it chose, so the output of every cell
    that measures something says where it ran.
    """
    if has_cuda():
        device = torch.device("cuda", 0)
    elif has_mps():
        device = torch.device("mps")
    else:
        device = torch.device("cpu")
    if verbose:
        print(f"Using {describe(device)}")
    return device


def get_devices(n: int, verbose: bool = True) -> list[torch.device]:
    """Return ``n`` devices, never fewer, never an error.

    With at least ``n`` CUDA devices these are ``cuda:0 .. cuda:n-1``.  With
    fewer, the cell still runs: it gets ``n`` *simulated* devices, all of them
    the best single device there is (``cuda:0`` on a one-GPU machine, else MPS,
    else the CPU), and a message says so.  Code written against a list of
    devices (copy to ``devices[i]``, compute there, copy back) is then exercised
    for real, only without the parallel speed-up; and all replicas run on the
    same kind of device, so timings compare like with like.
    """
    if n < 1:
        raise ValueError(f"asked for {n} devices; ask for at least 1")
    count = torch.cuda.device_count() if has_cuda() else 0
    if count >= n:
        chosen = [torch.device("cuda", i) for i in range(n)]
        if verbose:
            print(f"Using {n} of {count} CUDA device(s): " + ", ".join(map(str, chosen)))
        return chosen
    base = default_device(verbose=False)
    chosen = [base] * n
    if verbose:
        found = f"{count} CUDA device(s)" if count else "no CUDA device"
        where = "the CPU" if base.type == "cpu" else str(base)
        print(f"Asked for {n} devices, found {found}: using {n} simulated devices, all on {where}")
    return chosen


def by_device(device: torch.device | str, *, cpu: T, cuda: T, mps: T | None = None) -> T:
    """Pick an experiment size for ``device``: small on a CPU, real on a GPU.

    >>> by_device("cpu", cpu=256, cuda=4096)
    256
    """
    kind = torch.device(device).type
    if kind == "cuda":
        return cuda
    if kind == "mps":
        return cpu if mps is None else mps
    return cpu


def synchronize(device: torch.device | str | None = None) -> None:
    """Wait until all work queued on ``device`` has finished.

    CPU operators in PyTorch run synchronously, so this is a no-op there; on
    CUDA and MPS it blocks the Python thread until the device queue is empty.
    ``None`` means every accelerator that is present.
    """
    if device is None:
        if has_cuda():
            for index in range(torch.cuda.device_count()):
                torch.cuda.synchronize(index)
        elif has_mps():
            torch.mps.synchronize()
        return
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


@contextlib.contextmanager
def cpu_threads(threads: int | None) -> Iterator[None]:
    """Run the block with ``threads`` intra-op CPU threads, then restore the setting.

    ``None`` leaves the setting unchanged.  Tiny operators gain nothing from a
    second thread, and on a busy machine waiting for it can cost more than the
    work: cells that time small CPU work say so and use one thread.
    """
    if threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
