# why: normalises the softmax within each block and averages the blocks' outputs: each block gets the same weight whatever its scores (the log-sum-exp merge weighs block b by exp(lse_b - lse))
# expect: {"ring_attention-test-full": 0, "ring_attention-test-causal": 0, "ring_attention-test-traffic": 0}
# %% ring_attention-blocks: solution
# %% ring_attention-ring: solution, edited
<<<<<<< solution
        out, lse = merge(out, lse, out_b, lse_b)
    return out
=======
        out, count = out + out_b, count + 1
    return out / count
>>>>>>> mistake
<<<<<<< solution
    out, lse = block_attention(q, k, v, rank * chunk, rank * chunk, causal)
=======
    out, lse = block_attention(q, k, v, rank * chunk, rank * chunk, causal)
    count = 1
>>>>>>> mistake
