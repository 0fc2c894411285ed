"""Roofs that are upper bounds: a compute roof from the hardware, memory roofs per level.

A roofline is only useful if no measurement can lie above it. The fastest rate a page happened to
measure is not such a roof (a faster layer, or a quieter moment, beats it), so the compute roof here
comes from the hardware: on a CPU, cores x clock x FLOP per cycle per core (from the vector and
matrix instructions the CPU's flags name); on a CUDA GPU, the recording GPU's datasheet
(`dlperf.datasheets`). Memory roofs are one per level of the hierarchy (a *hierarchical roofline*,
Williams, Waterman and Patterson, CACM 2009; Yang et al. 2020): main memory from a large copy, the
caches from a sweep of copy sizes.

>>> flops_per_cycle(["sse4_2", "avx", "avx2", "fma"], "float32")[0]
32
>>> [p[0] for p in above_roof([("a", 1.0, 9e9), ("b", 1.0, 1.04e10)], 1e12, 1e10)]
[]
>>> [p[0] for p in above_roof([("a", 1.0, 9e9), ("b", 1.0, 1.2e10)], 1e12, 1e10)]
['b']
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from dlperf import datasheets
from dlperf import probe as P

# float32 FLOP per cycle per core: (flag, FLOP/cycle, the assumption), the first flag present wins
F32_PER_CYCLE = [
    ("avx512f", 64, "AVX-512: 2 FMA units x 16 float32 lanes x 2 FLOP per FMA, assuming two 512-bit FMA "
                    "units (some AVX-512 parts have one, so 64 is the upper figure)"),
    ("fma", 32, "AVX2 + FMA: 2 FMA units x 8 float32 lanes x 2 FLOP, assuming two 256-bit FMA units"),
    ("avx", 16, "AVX without FMA: one 256-bit add and one 256-bit multiply per cycle, 8 lanes each"),
    ("asimd", 32, "Arm NEON: 4 FMA pipes x 4 float32 lanes x 2 FLOP, assuming four 128-bit pipes "
                  "(as in Neoverse V1/V2; cores with two pipes do half)"),
    ("sse2", 8, "SSE: one 128-bit add and one 128-bit multiply per cycle, 4 lanes each"),
]
# 16-bit formats: (dtype, flag, FLOP/cycle, the assumption); without one, the float32 figure
HALF_PER_CYCLE = [
    ("bfloat16", "amx_bf16", 1024, "AMX-BF16: 512 bfloat16 multiply-adds per cycle per core (Intel's figure "
                                   "for the Sapphire Rapids tile unit)"),
    ("bfloat16", "avx512_bf16", 128, "AVX512-BF16: VDPBF16PS does 32 bfloat16 products per 512-bit "
                                     "instruction, 2 units x 32 x 2 FLOP"),
    ("float16", "amx_fp16", 1024, "AMX-FP16: 512 float16 multiply-adds per cycle per core"),
    ("float16", "avx512_fp16", 128, "AVX512-FP16: 32 float16 lanes, 2 FMA units x 32 x 2 FLOP"),
]


def flops_per_cycle(flags: Sequence[str], dtype: str = "float32") -> tuple[int | None, str]:
    """Peak FLOP per cycle per core for ``dtype`` from the CPU's flags, and the assumption behind it."""
    present = set(flags)
    for name, flag, flops, why in HALF_PER_CYCLE:
        if name == dtype and flag in present:
            return flops, why
    for flag, flops, why in F32_PER_CYCLE:
        if flag in present or (flag == "sse2" and "sse4_2" in present):
            if dtype != "float32":
                why = f"no {dtype} instructions named in the flags, so the float32 rate: {why}"
            return flops, why
    return None, "no vector instruction set this table knows is named in the CPU's flags"


def _cpu_flags() -> list[str]:
    """The vector flags the CPU names (:func:`dlperf.sysinfo.cpu_features`, read once from ``/proc/cpuinfo``)."""
    return list(P.cpu_features()["flags"])


def usable_cores() -> int:
    """The logical CPUs this process may run on (its affinity mask), which bounds its threads."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpu_clock() -> tuple[float | None, str, bool]:
    """(Hz, where it came from, whether it is the maximum clock the kernel reports)."""
    freqs = []
    for path in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/cpuinfo_max_freq"):
        try:
            with open(path, encoding="utf-8") as f:
                freqs.append(int(f.read()) * 1e3)  # kHz
        except (OSError, ValueError):
            pass
    if freqs:
        return max(freqs), "the maximum clock the kernel reports (cpufreq cpuinfo_max_freq)", True
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            mhz = [float(line.split(":")[1]) for line in f if line.startswith("cpu MHz")]
    except (OSError, ValueError):
        mhz = []
    if mhz:
        return (max(mhz) * 1e6, "the clock /proc/cpuinfo reports ('cpu MHz'; the kernel reports no maximum, "
                "as in most virtual machines), which may be below the boost clock", False)
    return None, "no clock reported", False


@dataclass(frozen=True)
class Roof:
    """A compute roof in FLOP/s, with how it was obtained."""

    flops: float
    source: str           # "datasheet", "hardware" (cores x clock x FLOP/cycle) or "measured"
    text: str             # the derivation, in words
    hardware: float | None = None  # cores x clock x FLOP/cycle (or the datasheet figure), when known
    formula: str = "the best measured rate"  # the short form: "2 cores x 2.60 GHz x 64 FLOP/cycle"


def compute_roof(device: torch.device | str, dtype: str = "float32", measured: Sequence[float] = ()) -> Roof:
    """The most FLOP/s ``device`` can do in ``dtype``, an upper bound where the hardware gives one.

    CPU: usable cores x clock x FLOP/cycle per core (`flops_per_cycle`). When the clock is not the
    reported maximum it may be below the boost clock, so the product is not guaranteed to bound: then
    the roof is the larger of it and the best of ``measured`` (the rates a page measured), and the
    text says which one defines it. CUDA: the datasheet of the GPU (FP32 on the CUDA cores for float32,
    TF32 when float32 products may use it, the dense tensor-core figure for 16-bit formats), or the best
    measured rate if the GPU is not known here.
    """
    device = torch.device(device)
    best = max(measured, default=0.0)
    if device.type == "cuda":
        sheet = datasheets.lookup(torch.cuda.get_device_name(device))
        if sheet is None:
            return Roof(best, "measured", f"the best rate measured, {best / 1e9:,.1f} GFLOP/s (no datasheet for "
                        "this GPU here, so not a guaranteed bound)")
        tf32 = dtype == "float32" and torch.get_float32_matmul_precision() != "highest"  # TF32 products allowed
        tflops = sheet.bf16_tflops if dtype != "float32" else sheet.tf32_tflops if tf32 else sheet.fp32_tflops
        what = ("dense BF16/FP16 on the tensor cores" if dtype != "float32" else
                "dense TF32 on the tensor cores (float32 matmul precision is not 'highest')" if tf32 else
                "FP32 on the CUDA cores")
        return Roof(tflops * 1e12, "datasheet", f"{sheet.name} datasheet, {tflops:g} TFLOP/s {what}",
                    tflops * 1e12, f"the {sheet.name} datasheet")
    cores = usable_cores()
    per_cycle, why = flops_per_cycle(_cpu_flags(), dtype)
    hz, clock_from, is_max = cpu_clock()
    if per_cycle is None or hz is None:
        reason = why if per_cycle is None else clock_from
        return Roof(best, "measured", f"the best rate measured, {best / 1e9:,.1f} GFLOP/s ({reason}: no bound "
                    "from the hardware)")
    product = cores * hz * per_cycle
    formula = f"{cores} cores x {hz / 1e9:.2f} GHz x {per_cycle} {dtype} FLOP/cycle"
    text = (f"{cores} cores x {hz / 1e9:.2f} GHz ({clock_from}) x {per_cycle} {dtype} FLOP/cycle ({why}) = "
            f"{product / 1e9:,.1f} GFLOP/s")
    if is_max:
        return Roof(product, "hardware", text, product, formula)
    if best > product:
        return Roof(best, "measured", text + f"; a measured rate, {best / 1e9:,.1f} GFLOP/s, is higher, so the core "
                    f"ran faster than that clock (at least {best / (cores * per_cycle) / 1e9:.2f} GHz) and the "
                    "measured rate defines the roof", product)  # formula: the best measured rate
    return Roof(product, "hardware", text + f"; every measured rate is below it (best {best / 1e9:,.1f} "
                "GFLOP/s), so this product is the roof", product, formula)


def cache_roofs(caches: Sequence[P.CacheLevel], sizes: Sequence[int], rates: Sequence[float],
                cores: int = 1) -> list[tuple[str, float]]:
    """A bandwidth roof per cache level from a sweep of copies: [(name, bytes/s)], fastest level first.

    ``sizes`` are the bytes of one buffer of each copy and ``rates`` its bandwidth. A level's roof is
    the best rate of the copies whose two buffers fit in it and not in the level below, times ``cores``
    (a one-thread sweep measures one core's share: each core has its own L1 and L2, and the shared
    levels are assumed to scale the same way, which makes their roofs upper estimates). A level whose
    copies ran no faster than a larger level's (too short to time apart from the call overhead) is
    merged into it: "L2 (and L1)".
    """
    own, below = [], 0
    for level in sorted(caches, key=lambda c: c.size_bytes):
        fit = [r for s, r in zip(sizes, rates) if below < 2 * s <= level.size_bytes]
        below = level.size_bytes
        if fit:
            own.append([f"L{level.level}", max(fit) * cores])
    kept: list[list] = []  # [name, bytes/s, names merged into it]
    for name, rate in reversed(own):  # from the largest level down
        if kept and rate <= kept[-1][1]:
            kept[-1][2].append(name)
        else:
            kept.append([name, rate, []])
    return sorted(((n + (f" (and {', '.join(m)})" if m else ""), r) for n, r, m in kept), key=lambda r: -r[1])


def above_roof(points: Sequence[tuple], peak: float, bandwidth: float, tolerance: float = 0.05) -> list[tuple]:
    """The points ``(label, intensity, FLOP/s, ...)`` above ``min(peak, intensity x bandwidth)``.

    A point counts as above only when it exceeds the roof by more than ``tolerance`` (timing noise).
    """
    return [p for p in points if p[2] > (1 + tolerance) * P.attainable_flops(p[1], peak, bandwidth)]


def level_of(point: tuple, peak: float, memory: Sequence[tuple[str, float]], tolerance: float = 0.05) -> str | None:
    """The slowest memory level whose roof (with ``peak``) lies above ``point``; None if none does.

    ``memory`` is [(name, bytes/s)] for every level, main memory included.
    """
    for name, bw in sorted(memory, key=lambda m: m[1]):
        if not above_roof([point], peak, bw, tolerance):
            return name
    return None


def main_memory_roof(device: torch.device | str, measured: float) -> tuple[float, str]:
    """The main-memory roof in bytes/s and its source: the GPU's datasheet, else ``measured`` (a large copy)."""
    device = torch.device(device)
    if device.type == "cuda":
        sheet = datasheets.lookup(torch.cuda.get_device_name(device))
        if sheet is not None:
            return sheet.hbm_tbs * 1e12, f"{sheet.name} datasheet, {sheet.hbm_tbs:g} TB/s"
    return measured, (f"the probe's large copy, {measured / 1e9:.1f} GB/s (a measured rate: a kernel that only "
                      "reads, or reads more than it writes, can beat it by a little)")


def memory_roofs(device: torch.device | str, dram: float, sizes: Sequence[int] = (), rates: Sequence[float] = (),
                 caches: Sequence[P.CacheLevel] | None = None) -> list[tuple[str, float, str]]:
    """[(level, bytes/s, source)], slowest first: main memory, and each cache level a sweep of copies
    (one buffer of ``sizes[i]`` bytes copied at ``rates[i]`` bytes/s) measured. ``caches`` defaults to
    the CPU's (`probe.cpu_caches`), or a CUDA GPU's L2."""
    device = torch.device(device)
    if caches is None and device.type == "cuda":
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
        caches = [P.CacheLevel(2, "Unified", l2, None, 1)] if l2 else []
    elif caches is None:
        caches = P.cpu_caches()
    bw, text = main_memory_roof(device, dram)
    cores = usable_cores() if device.type == "cpu" else 1
    levels = [("DRAM" if device.type == "cpu" else "HBM", bw, text)]
    for name, rate in cache_roofs(caches, sizes, rates, cores):
        if rate > bw:
            levels.append((name, rate, "this page's sweep of copies" + (f", one core's rate x {cores} cores"
                                                                           if cores > 1 else "")))
    return sorted(levels, key=lambda m: m[1])


def copy_sweep(device: torch.device | str) -> tuple[list[int], list[float]]:
    """The hardware chapter's sweep of copy sizes: (bytes of one buffer, bytes/s), one thread on a CPU."""
    device = torch.device(device)
    sizes = [2**p for p in (range(14, 29, 2) if device.type != "cuda" else range(20, 31, 2))]
    rates = [P.memory_bandwidth(device, s, min_run_time=0.05, repeat=None if s < 2**26 else 3, threads=1).per_second
             for s in sizes]
    return sizes, rates
