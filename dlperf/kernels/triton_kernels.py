"""The chapter's Triton kernels and their launchers: one source, compiled on a CUDA GPU, interpreted elsewhere.

Importing this module chooses the Triton mode first (:func:`dlperf.kernels.mode.select_mode`, silently:
call it yourself to see the choice), so the kernels below are compiled where a CUDA device exists and
interpreted (``TRITON_INTERPRET=1``) where none does.

A Triton kernel is written for one *program*: the launch ``kernel[grid](...)`` runs one program instance
per point of ``grid``, each identified by ``tl.program_id(axis)``; a program handles a whole block of
values (``tl.arange``), and the compiler spreads that block over the threads of the thread block
(``num_warps`` warps of 32 threads) that the program becomes on an NVIDIA GPU.

Memory traffic of each kernel, with ``s`` bytes per element (what :mod:`dlperf.kernels.traffic` counts):

* :func:`add` of ``n`` elements: loads ``2 n s``, stores ``n s``, whatever the block size (masked lanes move
  nothing).
* :func:`matmul_naive`, ``C = A B`` with ``A`` ``M x K`` and ``B`` ``K x N``: one program per element of ``C``
  reads a row of ``A`` and a column of ``B``: loads ``2 M N K s``, stores ``M N s``.
* :func:`matmul_tiled` with tiles ``BM x BN`` (and ``BK`` along ``K``), sizes divisible by the tiles: each of
  the ``(M/BM)(N/BN)`` programs reads a ``BM x K`` panel of ``A`` and a ``K x BN`` panel of ``B``:
  loads ``M N K s (1/BN + 1/BM)``, stores ``M N s``.
* :func:`layer_norm` over the rows of an ``M x N`` matrix with a weight and a bias of ``N``: each of the ``M``
  programs reads its row and the whole weight and bias: loads ``3 M N s``, stores ``M N s`` (one pass over
  ``x``; the least any implementation moves is ``2 M N s + 2 N s``, the weight and bias read once).
"""

from __future__ import annotations

from .mode import select_mode

MODE = select_mode(verbose=False)

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

__all__ = ["MODE", "add", "add_kernel", "strided_load", "strided_load_kernel", "matmul_naive",
           "matmul_naive_kernel", "matmul_tiled", "matmul_tiled_kernel", "layer_norm",
           "layer_norm_kernel"]


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)                      # which block of the vector this program handles
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n                          # the last block may stick out past the end
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def add(x: torch.Tensor, y: torch.Tensor, block: int = 1024) -> torch.Tensor:
    """``x + y`` for 1-D tensors, one program per ``block`` elements (``ceil(n / block)`` programs)."""
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, block),)](x, y, out, n, BLOCK=block)
    return out


@triton.jit
def strided_load_kernel(src_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    i = pid * BLOCK + tl.arange(0, BLOCK)
    mask = i < n
    x = tl.load(src_ptr + i * stride, mask=mask)    # stride 1: neighbours; stride k: every k-th element
    tl.store(out_ptr + i, x, mask=mask)


def strided_load(src: torch.Tensor, n: int, stride: int, block: int = 256) -> torch.Tensor:
    """``src[::stride][:n]`` gathered by a kernel: element ``i`` of the result is ``src[i * stride]``."""
    if (n - 1) * stride >= src.numel():
        raise ValueError(f"src has {src.numel()} elements; n={n} at stride {stride} needs {(n - 1) * stride + 1}")
    out = torch.empty(n, dtype=src.dtype, device=src.device)
    strided_load_kernel[(triton.cdiv(n, block),)](src, out, n, stride, BLOCK=block)
    return out


@triton.jit
def matmul_naive_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                        stride_cm, stride_cn, BLOCK_K: tl.constexpr):
    i = tl.program_id(0)                        # one program per element C[i, j]
    j = tl.program_id(1)
    acc = tl.zeros((BLOCK_K,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        mask = k < K
        a = tl.load(a_ptr + i * stride_am + k * stride_ak, mask=mask, other=0.0)   # a piece of row i of A
        b = tl.load(b_ptr + k * stride_bk + j * stride_bn, mask=mask, other=0.0)   # a piece of column j of B
        acc += a * b
    tl.store(c_ptr + i * stride_cm + j * stride_cn, tl.sum(acc, axis=0))


def matmul_naive(a: torch.Tensor, b: torch.Tensor, block_k: int = 16) -> torch.Tensor:
    """``a @ b`` with one program per output element (``M x N`` programs), reading ``K`` pairs each."""
    (M, K), (K2, N) = a.shape, b.shape
    if K != K2:
        raise ValueError(f"inner dimensions differ: {tuple(a.shape)} @ {tuple(b.shape)}")
    c = torch.empty(M, N, dtype=torch.float32, device=a.device)
    matmul_naive_kernel[(M, N)](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(), BLOCK_K=block_k)
    return c


@triton.jit
def matmul_tiled_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                        stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)                    # one program per BLOCK_M x BLOCK_N tile of C
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rows[:, None] * stride_am + k[None, :] * stride_ak,
                    mask=(rows[:, None] < M) & (k[None, :] < K), other=0.0)        # BLOCK_M x BLOCK_K
        b = tl.load(b_ptr + k[:, None] * stride_bk + cols[None, :] * stride_bn,
                    mask=(k[:, None] < K) & (cols[None, :] < N), other=0.0)        # BLOCK_K x BLOCK_N
        acc += tl.dot(a, b, input_precision="ieee")   # every loaded value is used BLOCK_N (or BLOCK_M) times
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc,
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def matmul_tiled(a: torch.Tensor, b: torch.Tensor, block_m: int = 32, block_n: int = 32,
                 block_k: int = 32) -> torch.Tensor:
    """``a @ b`` with one program per ``block_m x block_n`` tile of the result (``tl.dot`` on the tiles).

    Compiled, ``tl.dot`` needs every block size to be at least 16.
    """
    (M, K), (K2, N) = a.shape, b.shape
    if K != K2:
        raise ValueError(f"inner dimensions differ: {tuple(a.shape)} @ {tuple(b.shape)}")
    c = torch.empty(M, N, dtype=torch.float32, device=a.device)
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    matmul_tiled_kernel[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(),
                              BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k)
    return c


@triton.jit
def layer_norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_cols, stride_x, stride_out, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)                      # one program per row; the whole row fits in one block
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols                        # lanes past the row's end load and store nothing
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)   # accumulate in float32
    mean = tl.sum(x, axis=0) / n_cols           # a masked lane holds 0: it adds nothing to the sum
    centred = tl.where(mask, x - mean, 0.0)     # there x - mean would be -mean: keep it out of the variance
    var = tl.sum(centred * centred, axis=0) / n_cols      # the biased variance, as F.layer_norm uses
    w = tl.load(w_ptr + cols, mask=mask)        # every program reads the whole weight and bias
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(out_ptr + row * stride_out + cols, centred * tl.rsqrt(var + eps) * w + b, mask=mask)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """``F.layer_norm(x, (N,), weight, bias, eps)`` of an ``M x N`` tensor in one pass, one program per row.

    Each row of ``x`` is read once and written once; each program also reads the whole ``weight`` and ``bias``.
    """
    if x.dim() != 2 or x.stride(1) != 1:
        raise ValueError("layer_norm expects a 2-D tensor with contiguous rows")
    M, N = x.shape
    if weight.shape != (N,) or bias.shape != (N,) or not (weight.is_contiguous() and bias.is_contiguous()):
        raise ValueError(f"weight and bias must be contiguous vectors of {N} elements, "
                         f"got {tuple(weight.shape)} and {tuple(bias.shape)}")
    out = torch.empty_like(x)
    layer_norm_kernel[(M,)](x, weight, bias, out, N, x.stride(0), out.stride(0), eps,
                            BLOCK=triton.next_power_of_2(N))
    return out
