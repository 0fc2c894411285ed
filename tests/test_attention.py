"""dlperf.attention: the one-pass softmax and the merge of partial results against the materialised reference."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from dlperf.attention import Partial, attention, block_partial, causal_mask, merge, online_softmax, partial


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
