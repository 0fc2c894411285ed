# why: the causal mask is applied only by skipping the blocks of later ranks: the rank's own (diagonal) block is computed whole, so each query also sees the later keys of its own chunk
# expect: {"ring_attention-test-full": 3, "ring_attention-test-causal": 0, "ring_attention-test-traffic": 0}
# %% ring_attention-blocks: solution
# %% ring_attention-ring: solution, edited
<<<<<<< solution
    out, lse = block_attention(q, k, v, rank * chunk, rank * chunk, causal)
=======
    out, lse = block_attention(q, k, v, rank * chunk, rank * chunk, False)
>>>>>>> mistake
