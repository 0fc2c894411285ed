"""dlperf.attention: the one-pass softmax and the merge of partial results against the materialised reference."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from dlperf.attention import (Partial, attention, block_partial, causal_mask, flash_forward, merge, online_softmax,
                              partial)


def _qkv(n_q=13, n_k=29, d=8, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 3, n, d, generator=g).to(dtype) for n in (n_q, n_k, n_k)]


@pytest.mark.parametrize("causal", [False, True])
def test_reference_equals_pytorchs_sdpa(causal):
    q, k, v = _qkv(n_q=29)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(attention(q, k, v, causal=causal), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("block", [1, 4, 7, 29, 64])
@pytest.mark.parametrize("causal", [False, True])
def test_block_partial_equals_attention_for_any_block(block, causal):
    q, k, v = _qkv(n_q=29)
    got = block_partial(q, k, v, block, causal=causal)
    torch.testing.assert_close(got.out, attention(q, k, v, causal=causal), rtol=1e-5, atol=1e-5)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(~causal_mask(29, 29), float("-inf"))
    torch.testing.assert_close(got.lse, torch.logsumexp(s, -1), rtol=1e-5, atol=1e-5)


def test_merge_is_order_free_and_has_an_identity():
    q, k, v = _qkv()
    parts = [partial(q, k[..., a:b, :], v[..., a:b, :]) for a, b in [(0, 5), (5, 17), (17, 29)]]
    left = merge(merge(parts[0], parts[1]), parts[2])
    right = merge(parts[2], merge(parts[1], parts[0]))
    torch.testing.assert_close(left.out, right.out)
    torch.testing.assert_close(left.out, attention(q, k, v), rtol=1e-5, atol=1e-5)
    same = merge(Partial.empty(q), parts[0])
    torch.testing.assert_close(same.out, parts[0].out)
    torch.testing.assert_close(same.lse, parts[0].lse)


def test_a_query_that_sees_no_key_stays_empty_until_merged():
    q, k, v = _qkv(n_q=4, n_k=4)
    nothing = partial(q, k, v, mask=torch.zeros(4, 4, dtype=torch.bool))
    assert torch.isneginf(nothing.lse).all() and not nothing.out.abs().sum()
    torch.testing.assert_close(merge(nothing, partial(q, k, v)).out, attention(q, k, v), rtol=1e-5, atol=1e-6)


def test_online_softmax_is_softmax_and_survives_large_scores():
    x = torch.randn(5, 37) * 50 + 1000     # exp(1000) overflows: only a max-subtracted softmax survives
    for block in (1, 8, 37):
        torch.testing.assert_close(online_softmax(x, block), torch.softmax(x, -1), rtol=1e-5, atol=1e-6)


def test_half_inputs_accumulate_in_float32():
    q, k, v = _qkv(dtype=torch.bfloat16)
    got = block_partial(q, k, v, 8).out
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, attention(q, k, v), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("blocks", [(16, 16), (32, 8), (8, 32), (7, 5), (64, 64)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n_q,n_k", [(29, 29), (13, 29), (40, 17)])
def test_flash_forward_is_attention_and_its_lse(blocks, causal, n_q, n_k):
    q, k, v = _qkv(n_q=n_q, n_k=n_k, seed=1)
    out, lse = flash_forward(q, k, v, causal=causal, block_m=blocks[0], block_n=blocks[1])
    assert out.dtype == lse.dtype == torch.float32 and out.shape == q.shape and lse.shape == q.shape[:-1]
    torch.testing.assert_close(out, attention(q, k, v, causal=causal), rtol=1e-5, atol=1e-5)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(~causal_mask(n_q, n_k), float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(s, -1), rtol=1e-5, atol=1e-5)


def test_flash_forward_rescales_when_a_later_block_raises_the_maximum():
    q, k, v = _qkv(n_q=8, n_k=32, seed=2)
    k[..., 24:, :] = 4 * q[..., :1, :]                 # the last key block holds every query's largest score
    out, _ = flash_forward(q, k, v, block_m=8, block_n=8)
    torch.testing.assert_close(out, attention(q, k, v), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("block_m,block_n", [(16, 16), (16, 8), (32, 16)])
def test_causal_flash_forward_never_reads_a_key_block_above_the_diagonal(block_m, block_n):
    q, k, v = _qkv(n_q=50, n_k=50, seed=3)
    for t in range(-(-50 // block_m)):
        above = -(-min((t + 1) * block_m, 50) // block_n) * block_n    # the first key block it must not read
        k_nan, v_nan = k.clone(), v.clone()
        k_nan[..., above:, :] = v_nan[..., above:, :] = float("nan")  # a read spreads NaN into the output
        out, lse = flash_forward(q, k_nan, v_nan, causal=True, block_m=block_m, block_n=block_n)
        rows = slice(t * block_m, (t + 1) * block_m)
        torch.testing.assert_close(out[..., rows, :], attention(q, k, v, causal=True)[..., rows, :],
                                   rtol=1e-5, atol=1e-5)
    # without the mask every key is read: the same poison reaches the output
    k[..., 40:, :] = float("nan")
    assert flash_forward(q, k, v, block_m=16, block_n=16)[0].isnan().all()


def test_flash_forward_of_half_inputs_accumulates_in_float32():
    q, k, v = _qkv(dtype=torch.bfloat16)
    out, lse = flash_forward(q, k, v, causal=True, block_m=8, block_n=4)
    assert out.dtype == lse.dtype == torch.float32
    torch.testing.assert_close(out, attention(q, k, v, causal=True), rtol=1e-5, atol=1e-5)
