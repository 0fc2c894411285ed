"""What a machine says about itself: its CPU caches and vector extensions (from the operating system), and a
CUDA GPU's properties (from torch).  :mod:`dlperf.probe` measures; this module only reads."""

from __future__ import annotations

import contextlib
import os
import platform
from dataclasses import dataclass

import torch

from .devices import has_cuda


KiB = 2**10
MiB = 2**20
GiB = 2**30


def _nbytes_text(nbytes: int) -> str:
    """Binary units for sizes of buffers: ``2**26`` -> ``'64 MiB'``."""
    for scale, unit in ((GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes} B"


def _resolve(device: torch.device | str | None) -> torch.device:
    if device is None:
        return torch.device("cpu")
    device = torch.device(device)
    if device.type == "cuda" and device.index is None and has_cuda():
        device = torch.device("cuda", torch.cuda.current_device())
    return device


@dataclass(frozen=True)
class CacheLevel:
    """One CPU cache as the operating system reports it."""

    level: int
    kind: str
    size_bytes: int
    line_bytes: int | None
    shared_by: int

    def __str__(self) -> str:
        return f"L{self.level} {self.kind.lower()}: {_nbytes_text(self.size_bytes)}, shared by {self.shared_by} CPU(s)"


def _parse_size(text: str) -> int:
    text = text.strip().upper()
    for suffix, scale in (("K", KiB), ("M", MiB), ("G", GiB)):
        if text.endswith(suffix):
            return int(float(text[:-1]) * scale)
    return int(text)


def _cpu_count_in(cpulist: str) -> int:
    count = 0
    for part in cpulist.strip().split(","):
        if "-" in part:
            lo, hi = part.split("-")
            count += int(hi) - int(lo) + 1
        elif part:
            count += 1
    return count


def cpu_caches() -> list[CacheLevel]:
    """The data and unified caches of CPU 0, from Linux's sysfs (empty elsewhere)."""
    root = "/sys/devices/system/cpu/cpu0/cache"
    found = []
    try:
        entries = sorted(e for e in os.listdir(root) if e.startswith("index"))
    except OSError:
        return []
    for entry in entries:
        path = os.path.join(root, entry)
        try:
            with open(os.path.join(path, "type"), encoding="utf-8") as f:
                kind = f.read().strip()
            if kind == "Instruction":
                continue
            with open(os.path.join(path, "level"), encoding="utf-8") as f:
                level = int(f.read())
            with open(os.path.join(path, "size"), encoding="utf-8") as f:
                size = _parse_size(f.read())
            line = None
            with contextlib.suppress(OSError, ValueError):
                with open(os.path.join(path, "coherency_line_size"), encoding="utf-8") as f:
                    line = int(f.read())
            shared = 1
            with contextlib.suppress(OSError, ValueError):
                with open(os.path.join(path, "shared_cpu_list"), encoding="utf-8") as f:
                    shared = _cpu_count_in(f.read())
        except (OSError, ValueError):
            continue
        found.append(CacheLevel(level, kind, size, line, shared))
    return found


_INTERESTING_FLAGS = (
    "sse2", "sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni",
    "amx_tile", "amx_bf16", "amx_fp16", "asimd", "asimdhp", "sve", "sve2", "bf16",
)


def cpu_features() -> dict[str, object]:
    """What the CPU and PyTorch say about vector units.

    ``capability`` is the widest instruction set PyTorch's CPU kernels were
    dispatched to (``torch.backends.cpu.get_cpu_capability()``); ``flags`` are
    the vector-related flags in ``/proc/cpuinfo`` (Linux only; empty elsewhere).
    """
    flags: list[str] = []
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    present = set(line.split(":", 1)[1].split())
                    flags = [fl for fl in _INTERESTING_FLAGS if fl in present]
                    break
    except OSError:
        pass
    capability = "unknown"
    with contextlib.suppress(Exception):
        capability = torch.backends.cpu.get_cpu_capability()
    return {"capability": capability, "flags": flags, "machine": platform.machine(), "threads": torch.get_num_threads()}


def gpu_properties(device: torch.device | str | None = None) -> dict[str, object]:
    """The CUDA device's properties as a plain dict; empty when ``device`` is not CUDA."""
    device = _resolve(device if device is not None else ("cuda" if has_cuda() else "cpu"))
    if device.type != "cuda" or not has_cuda():
        return {}
    props = torch.cuda.get_device_properties(device)
    out: dict[str, object] = {
        "name": props.name,
        "compute capability": f"{props.major}.{props.minor}",
        "streaming multiprocessors (SMs)": props.multi_processor_count,
        "memory": _nbytes_text(props.total_memory),
    }
    for attr, label, fmt in (
        ("L2_cache_size", "L2 cache", _nbytes_text),
        ("max_threads_per_multi_processor", "max threads per SM", int),
        ("warp_size", "warp size", int),
        ("regs_per_multiprocessor", "32-bit registers per SM", int),
        ("shared_memory_per_multiprocessor", "shared memory per SM", _nbytes_text),
    ):
        value = getattr(props, attr, None)
        if value:
            out[label] = fmt(value)
    return out
