"""The interpreter's byte counter (dlperf.kernels.traffic) against kernels counted by hand.

Every expected number here is worked out from the kernel's indexing, not from the counter: a copy, a masked
ragged vector add, strided loads in 32-byte sectors, the naive and tiled matrix products against their
closed forms (with ragged edges, where the masks matter), and the fused LayerNorm on ragged rows.
"""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys

import pytest

if importlib.util.find_spec("triton") is None:       # not importorskip: the mode must be chosen before the import
    pytest.skip("triton is not installed (pip install triton): the Triton kernels and their byte counter "
                "cannot be tested", allow_module_level=True)

import torch  # noqa: E402

from dlperf.kernels import triton_kernels as T  # noqa: E402  (chooses the Triton mode before importing triton)
from dlperf.kernels.traffic import SECTOR, count_torch_ops, count_traffic  # noqa: E402

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

pytestmark = pytest.mark.skipif(not T.MODE.interpreted,
                                reason=f"the byte counter watches Triton's interpreter; here: {T.MODE}")


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


def copy(src: torch.Tensor, block: int) -> torch.Tensor:
    dst = torch.empty_like(src)
    copy_kernel[(triton.cdiv(src.numel(), block),)](src, dst, src.numel(), BLOCK=block)
    return dst


@pytest.mark.parametrize("dtype,itemsize", [(torch.float32, 4), (torch.float16, 2), (torch.float64, 8)])
def test_copy_counts_every_element_once(dtype, itemsize):
    src = torch.arange(1024).to(dtype)
    with count_traffic() as traffic:
        dst = copy(src, 128)
    assert torch.equal(dst, src)
    launch = traffic.last
    assert launch.kernel == "copy_kernel" and launch.grid == (8, 1, 1)
    assert launch.loaded_bytes == launch.stored_bytes == 1024 * itemsize
    assert all(p == {"load": 128 * itemsize, "store": 128 * itemsize} for p in launch.per_program().values())
    assert launch.sector_bytes == launch.nbytes          # contiguous and aligned: whole sectors, no waste


def test_masked_ragged_add():
    n, block = 1000, 256                                 # 4 programs, the last has 1000 - 768 = 232 lanes on
    x, y = torch.randn(n), torch.randn(n)
    with count_traffic() as traffic:
        out = T.add(x, y, block)
    assert torch.equal(out, x + y)
    launch = traffic.last
    assert launch.programs == 4
    assert launch.loaded_bytes == 2 * n * 4 and launch.stored_bytes == n * 4
    per = launch.per_program()
    assert per[(3, 0, 0)] == {"load": 2 * 232 * 4, "store": 232 * 4}
    assert per[(0, 0, 0)] == {"load": 2 * 256 * 4, "store": 256 * 4}
    # 232 float32 lanes = 928 bytes = 29 sectors of 32 bytes
    last_store = [a for a in launch.accesses if a.program == (3, 0, 0) and a.kind == "store"][0]
    assert last_store.sectors == 29


@pytest.mark.parametrize("stride,sectors", [(1, 8), (2, 16), (4, 32), (8, 64), (64, 64)])
def test_strided_load_sectors(stride, sectors):
    # 64 float32 lanes, `stride` elements apart: they span 64 * stride * 4 bytes; one sector holds
    # 8 float32, so the lanes touch min(64, 64 * stride / 8) sectors.
    src = torch.randn(64 * stride)
    assert src.data_ptr() % SECTOR == 0
    with count_traffic() as traffic:
        out = T.strided_load(src, 64, stride, block=64)
    assert torch.equal(out, src[::stride][:64])
    load = [a for a in traffic.last.accesses if a.kind == "load"][0]
    assert load.nbytes == 64 * 4
    assert load.sectors == sectors == min(64, 64 * stride // 8)


def test_naive_matmul_closed_form():
    M, K, N = 12, 20, 10                                 # K = 20 with BLOCK_K = 8: pieces of 8, 8 and 4
    a, b = torch.randn(M, K), torch.randn(K, N)
    with count_traffic() as traffic:
        c = T.matmul_naive(a, b, block_k=8)
    torch.testing.assert_close(c, a @ b)
    launch = traffic.last
    assert launch.programs == M * N
    assert launch.loaded_bytes == 2 * M * N * K * 4      # a row of A and a column of B per element of C
    assert launch.stored_bytes == M * N * 4
    assert all(p == {"load": 2 * K * 4, "store": 4} for p in launch.per_program().values())


@pytest.mark.parametrize("M,K,N,bm,bn,bk", [(32, 32, 48, 16, 16, 16), (64, 16, 32, 32, 16, 8),
                                            (20, 20, 20, 16, 16, 16), (33, 7, 17, 16, 16, 16)])
def test_tiled_matmul_closed_form(M, K, N, bm, bn, bk):
    # Program (pm, pn) loads the rows of A in its row block (all K columns) and the columns of B in its
    # column block: summed over the grid, A is read ceil(N/bn) times and B ceil(M/bm) times.
    a, b = torch.randn(M, K), torch.randn(K, N)
    with count_traffic() as traffic:
        c = T.matmul_tiled(a, b, bm, bn, bk)
    torch.testing.assert_close(c, a @ b)
    launch = traffic.last
    assert launch.grid == (math.ceil(M / bm), math.ceil(N / bn), 1)
    assert launch.loaded_bytes == (M * K * math.ceil(N / bn) + K * N * math.ceil(M / bm)) * 4
    assert launch.stored_bytes == M * N * 4
    if M % bm == 0 and N % bn == 0:                      # divisible: M N K s (1/bn + 1/bm), as the docstring says
        assert launch.loaded_bytes == M * N * K * 4 * (1 / bn + 1 / bm)
        assert all(p["load"] == (bm * K + K * bn) * 4 for p in launch.per_program().values())


def test_tiling_beats_naive_on_the_same_product():
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    with count_traffic() as traffic:
        T.matmul_naive(a, b, block_k=16)
        T.matmul_tiled(a, b, 16, 16, 16)
    naive, tiled = traffic.launches
    assert naive.loaded_bytes == 2 * 16**3 * 4 and tiled.loaded_bytes == 2 * 16**3 * 4 // 16
    assert traffic.loaded_bytes == naive.loaded_bytes + tiled.loaded_bytes


@pytest.mark.parametrize("M,N,offset", [(6, 50, 0.0), (5, 33, 100.0), (3, 1, 0.0), (4, 64, 0.0), (7, 257, -30.0),
                                        (2, 1000, 5.0)])
def test_fused_layer_norm_reads_each_row_once(M, N, offset):
    # One program per row with a block of next_power_of_2(N) lanes (N - those are masked): program i loads
    # its N elements of x and the N elements of the weight and of the bias, and stores N elements of y.
    # Summed over the M programs: loads 3 M N s, stores M N s. An offset makes the mean large, so a masked
    # lane left in the variance ((0 - mean)^2) would show in the values.
    g = torch.Generator().manual_seed(M * 1000 + N)
    x = torch.randn(M, N, generator=g) * 3 + offset
    w, b = torch.randn(N, generator=g), torch.randn(N, generator=g)
    with count_traffic() as traffic:
        y = T.layer_norm(x, w, b)
    torch.testing.assert_close(y, torch.nn.functional.layer_norm(x, (N,), w, b))
    launch = traffic.last
    assert launch.kernel == "layer_norm_kernel" and launch.grid == (M, 1, 1)
    assert launch.loaded_bytes == 3 * M * N * 4 and launch.stored_bytes == M * N * 4
    assert all(p == {"load": 3 * N * 4, "store": N * 4} for p in launch.per_program().values())
    least = (2 * M * N + 2 * N) * 4                      # x read once, y written once, weight and bias once
    assert launch.nbytes - least == 2 * (M - 1) * N * 4  # the weight and bias read again by every other row


def test_fused_layer_norm_half_computes_in_float32():
    x = (torch.randn(8, 100) * 2 + 50).half()            # a sum of 100 float16 values near 50 loses digits
    w, b = torch.randn(100).half(), torch.randn(100).half()
    with count_traffic() as traffic:
        y = T.layer_norm(x, w, b)
    assert y.dtype == torch.float16
    expected = torch.nn.functional.layer_norm(x.float(), (100,), w.float(), b.float()).half()
    torch.testing.assert_close(y, expected, rtol=2e-3, atol=2e-3)
    assert traffic.last.loaded_bytes == 3 * 8 * 100 * 2 and traffic.last.stored_bytes == 8 * 100 * 2


def test_fused_layer_norm_refuses_what_it_cannot_do():
    x = torch.randn(4, 10)
    with pytest.raises(ValueError, match="contiguous rows"):
        T.layer_norm(x.t(), torch.ones(4), torch.zeros(4))
    with pytest.raises(ValueError, match="10 elements"):
        T.layer_norm(x, torch.ones(9), torch.zeros(10))


def test_torch_op_chain_counted_per_operator():
    n = 1000
    x, y, z = torch.randn(n), torch.randn(n), torch.randn(n)
    out, ops = count_torch_ops(lambda: (x + y) * z)
    torch.testing.assert_close(out, (x + y) * z)
    assert [o.op for o in ops] == ["add", "mul"]
    assert [(o.read, o.written) for o in ops] == [(2 * n * 4, n * 4), (2 * n * 4, n * 4)]
    _, views = count_torch_ops(lambda: x.view(10, 100).t())
    assert views == []                                   # views move nothing


def test_blocks_do_not_nest_and_restore_the_interpreter():
    from triton.runtime import interpreter

    with count_traffic():
        with pytest.raises(RuntimeError, match="nest"):
            with count_traffic():
                pass
    assert "create_masked_load" not in vars(interpreter.interpreter_builder)
    x = torch.randn(10)
    torch.testing.assert_close(T.add(x, x, 16), 2 * x)   # kernels still run after the block


def test_mode_helper_after_torch_compile_imported_triton():
    # torch.compile imports triton (even on a CPU) before anyone chose a mode: the helper still makes the
    # kernels run in the interpreter.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    code = ("import sys, torch; import triton.language; from dlperf.kernels import select_mode; m = select_mode(); "
            "from dlperf.kernels import triton_kernels as T; a = torch.randn(8, 8); "
            "print('OK', m.mode, bool((T.matmul_tiled(a, a, 4, 4, 4) - a @ a).abs().max() < 1e-4))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "OK interpreter True" in out.stdout and "switched to the interpreter" in out.stdout


def test_mode_helper_in_a_fresh_process_without_cuda():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    code = ("import os; from dlperf.kernels import select_mode; m = select_mode(); "
            "print('ENV', os.environ.get('TRITON_INTERPRET'), m.mode)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "interpreter" in out.stdout and "ENV 1 interpreter" in out.stdout


def test_count_in_a_child_interpreter_equals_in_process():
    # What a GPU build does (its kernels are compiled, so the counting runs in an interpreter process).
    from dlperf.kernels.traffic import count

    a, b = torch.randn(20, 20), torch.randn(20, 20)
    here, here_traffic = count(T.matmul_tiled, a, b, 16, 16, 16, in_subprocess=False)
    there, there_traffic = count(T.matmul_tiled, a, b, 16, 16, 16, in_subprocess=True)
    torch.testing.assert_close(here, there)
    assert [(x.loaded_bytes, x.stored_bytes, x.sector_bytes) for x in here_traffic.launches] == \
        [(x.loaded_bytes, x.stored_bytes, x.sector_bytes) for x in there_traffic.launches]


def test_scalar_bounds_survive_triton_3_6_with_numpy_2_5():
    # Seen on an H200 (torch 2.11's triton 3.6.0, numpy 2.5.2): the interpreter turned the scalar K of
    # `range(0, K, BLOCK_K)` into an int with int(one-element array), which numpy 2.5 refuses, so the
    # chapter's traffic counts of the matrix products failed.  Here: triton 3.6's conversion put back,
    # numpy 2.5's refusal made by turning numpy's deprecation into an error, in a fresh process.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    code = """
import warnings
warnings.filterwarnings("error", message="Conversion of an array with ndim > 0", category=DeprecationWarning)
from triton.runtime import interpreter
newer = interpreter._patch_lang_tensor
def as_in_triton_3_6(tensor, *args):
    newer(tensor, *args)
    tensor.__index__ = lambda self: int(self.handle.data)
interpreter._patch_lang_tensor = as_in_triton_3_6
import sys, torch
from dlperf.kernels import triton_kernels as T
a, b = torch.randn(8, 24), torch.randn(24, 8)
if sys.argv[1] == "unfixed":
    interpreter._patch_lang_tensor = as_in_triton_3_6
try:
    ok = bool((T.matmul_naive(a, b, block_k=8) - a @ b).abs().max() < 1e-4)
    print("RESULT", ok)
except Exception as exc:
    print("RESULT failed", type(exc).__name__, str(exc)[:200])
"""
    def run(which):
        out = subprocess.run([sys.executable, "-c", code, which], env=env, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout.split("RESULT", 1)[1].strip()

    assert run("unfixed").startswith("failed"), "the simulated triton 3.6 conversion no longer fails"
    assert run("fixed") == "True"


def test_a_launch_that_fails_before_its_grid_is_set_keeps_its_own_error(monkeypatch):
    """A kernel called with the wrong arguments raises the student's TypeError, not the counter's AttributeError
    (the counter read the interpreter builder's grid after a launch that never set one)."""
    from triton.runtime import interpreter as interp

    if hasattr(interp.interpreter_builder, "grid_dim"):
        monkeypatch.delattr(interp.interpreter_builder, "grid_dim")
    x = torch.ones(8)
    with count_traffic() as traffic:
        with pytest.raises(TypeError):
            T.add_kernel[(1,)](x, x)                     # too few arguments
    assert traffic.launches[-1].grid == (0, 0, 0)
