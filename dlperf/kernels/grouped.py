"""A tensor-core matrix product in Triton, and the order of its programs as the L2 cache sees it.

:func:`matmul` computes ``C = A B`` for 16-bit inputs (``float16`` or ``bfloat16``) with ``tl.dot`` and a
``float32`` accumulator: on an NVIDIA GPU since Volta, ``tl.dot`` on 16-bit operands runs on the tensor
cores (Triton's tutorial 03, *Matrix Multiplication*).  Its launch grid is one-dimensional, and program
``pid`` computes the tile :func:`tile_of` gives it: with ``group_m = 1`` the tiles go row by row (row-major
order), with ``group_m = g`` they go down a column of ``g`` tile rows before moving one tile column right
("grouped ordering", the tutorial's ``GROUP_SIZE_M``).  Every program reads a ``BM x K`` panel of ``A`` and
a ``K x BN`` panel of ``B`` whatever the order: what the order changes is which panels the programs running
*at the same time* share, and so how many of those reads the L2 cache serves instead of HBM.

:func:`hbm_bytes` is a model of that, a simulation rather than a measurement: ``concurrent`` programs (the
SMs of the GPU times the programs each holds) run in waves, in launch order, all advancing along ``K`` in
step; the L2 is one least-recently-used cache of ``l2_bytes`` holding ``BM x BK`` tiles of ``A`` and ``BK x BN``
tiles of ``B``; a tile not in it is read from HBM.  Its two limits are closed forms (tested):

* no cache (``l2_bytes = 0``): every program reads its panels from HBM,
  ``(M / BM)(N / BN)(BM K + K BN) s = M N K s (1 / BN + 1 / BM)`` bytes -- the loads Triton's interpreter counts
  (:func:`dlperf.kernels.traffic.count`), which sees no cache at all;
* a cache that holds everything: each tile once, ``(M K + K N) s``.

Between the two, grouping a wave's programs into a squarer block of tiles makes them share more panels.  The
model leaves out what a real L2 also does (its split into two partitions on an H100, its set associativity,
the output tiles' writes, the programs of a wave not starting together), so it predicts the *direction* and the
size of the effect, not a GPU's counters; on a GPU, Nsight Compute's ``dram__bytes_read.sum`` is the measurement.
"""

from __future__ import annotations

from collections import OrderedDict

from .mode import select_mode

MODE = select_mode(verbose=False)

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from .flash import fix_bf16_interpreter  # noqa: E402

if MODE.interpreted:
    fix_bf16_interpreter()             # bfloat16 products and casts as a GPU makes them (see there)

__all__ = ["MODE", "hbm_bytes", "matmul", "matmul_kernel", "program_order", "tile_of", "tile_order",
           "tile_order_kernel"]


@triton.jit
def tile_of(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """The tile ``(pid_m, pid_n)`` of program ``pid``: down GROUP_M tile rows, then one tile column right."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * tiles_n                 # programs in one band of GROUP_M tile rows
    first_m = (pid // in_group) * GROUP_M        # the band's first tile row
    rows = tl.minimum(tiles_m - first_m, GROUP_M)  # the last band may be shorter
    pid_m = first_m + (pid % in_group) % rows
    pid_n = (pid % in_group) // rows
    return pid_m, pid_n


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                  stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid_m, pid_n = tile_of(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)     # float32 accumulation
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rows[:, None] * stride_am + k[None, :] * stride_ak,
                    mask=(rows[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(b_ptr + k[:, None] * stride_bk + cols[None, :] * stride_bn,
                    mask=(k[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)                  # 16-bit operands: the tensor cores
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn,
             acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


def matmul(a: torch.Tensor, b: torch.Tensor, block_m: int = 64, block_n: int = 64, block_k: int = 32,
           group_m: int = 8) -> torch.Tensor:
    """``a @ b`` for ``float16``/``bfloat16`` matrices, in their dtype, with one program per tile in
    :func:`tile_of`'s order (``group_m = 1``: row-major).  Every block size must be at least 16."""
    if a.dtype not in (torch.float16, torch.bfloat16) or b.dtype != a.dtype:
        raise ValueError(f"16-bit inputs of one dtype, not {a.dtype} and {b.dtype} (the tensor cores' operands)")
    (M, K), (K2, N) = a.shape, b.shape
    if K != K2:
        raise ValueError(f"inner dimensions differ: {tuple(a.shape)} @ {tuple(b.shape)}")
    if min(block_m, block_n, block_k) < 16 or group_m < 1:
        raise ValueError("tl.dot needs blocks of at least 16, and a group of at least one tile row")
    c = torch.empty(M, N, dtype=a.dtype, device=a.device)
    grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n),)
    matmul_kernel[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(),
                        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m)
    return c


@triton.jit
def tile_order_kernel(out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)                       # writes its own tile, as the product's programs compute it
    pid_m, pid_n = tile_of(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    tl.store(out_ptr + 2 * pid, pid_m)
    tl.store(out_ptr + 2 * pid + 1, pid_n)


def tile_order(M: int, N: int, block_m: int, block_n: int, group_m: int) -> list[tuple[int, int]]:
    """The tiles in launch order, as the kernel's own :func:`tile_of` computes them (a launch of Triton)."""
    programs = triton.cdiv(M, block_m) * triton.cdiv(N, block_n)
    out = torch.empty(2 * programs, dtype=torch.int32, device="cpu" if MODE.interpreted else "cuda")
    tile_order_kernel[(programs,)](out, M, N, BLOCK_M=block_m, BLOCK_N=block_n, GROUP_M=group_m)
    pairs = out.view(programs, 2).tolist()
    return [(m, n) for m, n in pairs]


def program_order(tiles_m: int, tiles_n: int, group_m: int) -> list[tuple[int, int]]:
    """The same order in plain Python: ``(pid_m, pid_n)`` of programs 0, 1, 2, ...

    >>> program_order(2, 3, 1)
    [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    >>> program_order(4, 2, 2)
    [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (3, 0), (2, 1), (3, 1)]
    """
    order = []
    for pid in range(tiles_m * tiles_n):
        band = group_m * tiles_n
        first = (pid // band) * group_m
        rows = min(tiles_m - first, group_m)
        order.append((first + (pid % band) % rows, (pid % band) // rows))
    return order


def hbm_bytes(M: int, N: int, K: int, block_m: int, block_n: int, block_k: int, itemsize: int,
              group_m: int, l2_bytes: float, concurrent: int) -> int:
    """Bytes of ``A`` and ``B`` read from HBM by :func:`matmul`'s programs, in the module's L2 model."""
    tiles_m, tiles_n = -(-M // block_m), -(-N // block_n)
    steps = -(-K // block_k)
    a_tile, b_tile = block_m * block_k * itemsize, block_k * block_n * itemsize
    order = program_order(tiles_m, tiles_n, group_m)
    cache: OrderedDict[tuple[str, int, int], int] = OrderedDict()
    held = 0
    read = 0
    for start in range(0, len(order), max(1, concurrent)):
        wave = order[start:start + max(1, concurrent)]
        for k in range(steps):
            for pid_m, pid_n in wave:
                for key, size in ((("a", pid_m, k), a_tile), (("b", k, pid_n), b_tile)):
                    if key in cache:
                        cache.move_to_end(key)
                        continue
                    read += size
                    if size > l2_bytes:
                        continue
                    cache[key] = size
                    held += size
                    while held > l2_bytes:
                        _, old = cache.popitem(last=False)
                        held -= old
    return read
