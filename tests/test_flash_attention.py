"""dlperf.kernels.flash: FlashAttention's forward kernel against the reference, and its bytes against the closed forms.

Values: several head dimensions (powers of two and not), lengths that are not multiples of the blocks,
causal and not, float16 and bfloat16 (float32 accumulation), the log-sum-exp beside the output.  Bytes:
what Triton's interpreter counts, load by load, against :func:`flash_bytes`, and eager standard attention
against :func:`standard_bytes`.  A kernel that forgets to rescale its accumulator must fail the value check;
a causal kernel that masks the blocks above the diagonal instead of skipping them passes it and fails the count.
Sizes are tiny: the interpreter runs every program instance as Python.
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import sys

import pytest

if importlib.util.find_spec("triton") is None:       # not importorskip: the mode must be chosen before the import
    pytest.skip("triton is not installed: the FlashAttention kernel cannot be tested", allow_module_level=True)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from dlperf.attention import attention  # noqa: E402
from dlperf.kernels import flash as FL  # noqa: E402  (chooses the Triton mode before importing triton)
from dlperf.kernels.traffic import count_torch_ops, count_traffic  # noqa: E402

interpreted = pytest.mark.skipif(not FL.MODE.interpreted,
                                 reason=f"the byte counter watches Triton's interpreter; here: {FL.MODE}")
TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2, torch.float32: 1e-5}


def _qkv(shape_q, n_k, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    *lead, n_q, d = shape_q
    return [torch.randn(*lead, n, d, generator=g).to(dtype) for n in (n_q, n_k, n_k)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape_q,n_k,blocks", [((1, 2, 37, 16), 37, (32, 16)),     # ragged, n_q = n_k
                                                ((2, 1, 20, 24), 45, (16, 16)),     # d not a power of two
                                                ((1, 1, 33, 64), 33, (32, 32))])    # d = 64, one lane past
def test_values_and_lse_equal_the_reference(dtype, causal, shape_q, n_k, blocks):
    q, k, v = _qkv(shape_q, n_k, dtype)
    out, lse = FL.flash_attention(q, k, v, causal=causal, block_m=blocks[0], block_n=blocks[1],
                                  return_lse=True)
    assert out.dtype == dtype and out.shape == q.shape and lse.dtype == torch.float32
    want = attention(q, k, v, causal=causal)
    torch.testing.assert_close(out.float(), want, rtol=TOL[dtype], atol=TOL[dtype])
    s = q.float() @ k.float().transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).tril().logical_not(), float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(s, -1), rtol=1e-4, atol=1e-4)


def test_float32_and_a_given_scale_match_pytorchs_sdpa():
    q, k, v = _qkv((1, 2, 19, 8), 27, torch.float32)
    got = FL.flash_attention(q, k, v, scale=0.3, block_m=16, block_n=8)
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, scale=0.3), rtol=1e-5, atol=1e-5)


def test_large_scores_do_not_overflow():
    q, k, v = _qkv((1, 1, 16, 16), 32, torch.float16)
    q, k = q * 8, k * 8                              # scores near +-100: exp would overflow without the max
    got = FL.flash_attention(q, k, v, block_m=16, block_n=16)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.float(), attention(q, k, v), rtol=2e-3, atol=2e-3)


@interpreted
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n_q,n_k,d,bm,bn", [(50, 50, 24, 32, 16), (20, 45, 8, 16, 8)])
def test_counted_bytes_equal_the_closed_form(causal, n_q, n_k, d, bm, bn):
    q, k, v = _qkv((1, 2, n_q, d), n_k, torch.float16)
    with count_traffic() as traffic:
        out, lse = FL.flash_attention(q, k, v, causal=causal, block_m=bm, block_n=bn, return_lse=True)
    launch = traffic.last
    want = FL.flash_bytes(2, n_q, n_k, d, 2, bm, bn, causal)
    assert (launch.loaded_bytes, launch.stored_bytes) == (want["load"], want["store"])
    assert launch.stored_bytes == out.nbytes + lse.nbytes     # it writes its results and nothing else
    per_program = launch.per_program()                 # program (t, head): its queries, then K_t keys and values
    for t, keys in enumerate(FL.flash_keys_loaded(n_q, n_k, bm, bn, causal)):
        rows = min(bm, n_q - t * bm)
        assert per_program[(t, 1, 0)]["load"] == 2 * d * (rows + 2 * keys)
    assert max(a.elements for a in launch.accesses) <= max(bm, bn) * d   # one tile at a time, at most


def test_closed_form_in_the_aligned_case():
    n, bm, bn = 256, 64, 32
    t = n // bm
    assert sum(FL.flash_keys_loaded(n, n, bm, bn, False)) == t * n
    assert sum(FL.flash_keys_loaded(n, n, bm, bn, True)) == n * (t + 1) // 2


@pytest.mark.parametrize("n_q,n_k,d", [(30, 30, 16), (12, 40, 8)])
def test_standard_attention_values_and_bytes(n_q, n_k, d):
    q, k, v = _qkv((2, 3, n_q, d), n_k, torch.float32)
    out, ops = count_torch_ops(FL.standard_attention, q, k, v)
    torch.testing.assert_close(out, attention(q, k, v), rtol=1e-5, atol=1e-5)
    assert [op.op for op in ops] == ["mul", "bmm", "_softmax", "bmm"]
    assert sum(op.nbytes for op in ops) == FL.standard_bytes(6, n_q, n_k, d, 4)
    torch.testing.assert_close(FL.standard_attention(q, k, v, causal=True), attention(q, k, v, causal=True),
                               rtol=1e-5, atol=1e-5)


def test_flash_moves_fewer_bytes_once_sequences_outgrow_the_head():
    for n in (256, 1024, 8192):
        flash = sum(FL.flash_bytes(1, n, n, 64, 2, 128, 64).values())
        assert flash < FL.standard_bytes(1, n, n, 64, 2)
    ratio = FL.standard_bytes(1, 8192, 8192, 64, 2) / sum(FL.flash_bytes(1, 8192, 8192, 64, 2, 128, 64).values())
    assert 2 * 128 / 64 * 0.9 < ratio < 2 * 128 / 64 * 1.1      # about 2 BLOCK_M / d (module docstring)


def _variant(tmp_path, old: str, new: str, name: str):
    """The kernel's source with one line changed, imported from a file (Triton needs a source file)."""
    source = inspect.getsource(FL.flash_fwd_kernel.fn)
    assert old in source, f"the kernel no longer contains {old!r}"
    path = tmp_path / f"{name}.py"
    path.write_text("import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
                    + source.replace(old, new, 1).split("\n", 1)[1])   # drop the original decorator line
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module.flash_fwd_kernel


@pytest.mark.parametrize("old,new", [("acc = acc * alpha[:, None]", "acc = acc"),
                                     ("l_i = l_i * alpha +", "l_i = l_i +")])
def test_a_kernel_that_does_not_rescale_is_caught(tmp_path, old, new):
    q, k, v = _qkv((1, 1, 16, 16), 64, torch.float16, seed=1)
    k = k + torch.linspace(0, 4, 64)[:, None].half()      # later key blocks raise the running maximum
    wrong = _variant(tmp_path, old, new, f"wrong_flash_{abs(hash(old))}")
    got = FL.flash_attention(q, k, v, block_m=16, block_n=16, kernel=wrong)
    want = attention(q, k, v)
    assert not torch.allclose(got.float(), want, rtol=TOL[torch.float16], atol=TOL[torch.float16])
    torch.testing.assert_close(FL.flash_attention(q, k, v, block_m=16, block_n=16).float(), want,
                               rtol=TOL[torch.float16], atol=TOL[torch.float16])


@interpreted
def test_the_interpreters_bfloat16_products_and_casts_are_a_gpus():
    import triton
    import triton.language as tl

    @triton.jit
    def dot_cast(a_ptr, b_ptr, c_ptr, r_ptr, N: tl.constexpr):
        i = tl.arange(0, N)
        tile = i[:, None] * N + i[None, :]
        c = tl.dot(tl.load(a_ptr + tile), tl.load(b_ptr + tile))
        tl.store(c_ptr + tile, c)
        tl.store(r_ptr + tile, c.to(tl.bfloat16))

    a, b = (torch.randn(16, 16, generator=torch.Generator().manual_seed(s)).bfloat16() for s in (0, 1))
    c, r = torch.empty(16, 16), torch.empty(16, 16, dtype=torch.bfloat16)
    dot_cast[(1,)](a, b, c, r, N=16)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-5, atol=1e-5)
    assert torch.equal(r, c.bfloat16())                  # rounded to nearest even, as torch and a GPU


@interpreted
def test_a_causal_kernel_that_loads_every_block_is_caught_by_its_bytes(tmp_path):
    """Masking the blocks above the diagonal instead of skipping them gives the right values: only the
    count sees that it loads about twice the keys and values it needs."""
    q, k, v = _qkv((1, 1, 48, 16), 48, torch.float16, seed=2)
    lazy = _variant(tmp_path, "hi = tl.minimum((start_m + 1) * BLOCK_M, N_K)", "hi = N_K", "lazy_causal_flash")
    with count_traffic() as traffic:
        got = FL.flash_attention(q, k, v, causal=True, block_m=16, block_n=16, kernel=lazy)
    torch.testing.assert_close(got.float(), attention(q, k, v, causal=True), rtol=2e-3, atol=2e-3)
    want = FL.flash_bytes(1, 48, 48, 16, 2, 16, 16, causal=True)
    assert traffic.last.loaded_bytes > want["load"]
    assert traffic.last.loaded_bytes == FL.flash_bytes(1, 48, 48, 16, 2, 16, 16, causal=False)["load"]


def test_refuses_what_it_cannot_do():
    q, k, v = _qkv((1, 1, 8, 8), 8, torch.float16)
    with pytest.raises(ValueError, match="shapes"):
        FL.flash_attention(q, k[..., :4], v)
    with pytest.raises(ValueError, match="dtype"):
        FL.flash_attention(q, k.float(), v)
    with pytest.raises(ValueError, match="multiple"):
        FL.flash_attention(q, k, v, block_m=16, block_n=32)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: the kernel compiled")
@pytest.mark.parametrize("causal", [False, True])
def test_compiled_kernel_equals_sdpa_on_a_gpu(causal):
    q, k, v = (t.cuda() for t in _qkv((2, 4, 1000, 64), 1000, torch.float16))
    got = FL.flash_attention(q, k, v, causal=causal, block_m=128, block_n=64)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3)
