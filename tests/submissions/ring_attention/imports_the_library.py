# why: calls the chapter's library for the block and the merge (dlperf.attention.partial and merge) instead of writing them: right values and traffic, but the reading's allow-list refuses dlperf in every hidden cell
# expect: {"ring_attention-test-full": 0, "ring_attention-test-causal": 0, "ring_attention-test-traffic": 0}
# %% ring_attention-blocks
from dlperf import attention


def block_attention(q, k, v, q_start, k_start, causal):
    mask = attention.causal_mask(q.shape[-2], k.shape[-2], q_start, k_start) if causal else None
    return tuple(attention.partial(q, k, v, mask))


def merge(out_a, lse_a, out_b, lse_b):
    return tuple(attention.merge(attention.Partial(out_a, lse_a), attention.Partial(out_b, lse_b)))
# %% ring_attention-ring: solution
