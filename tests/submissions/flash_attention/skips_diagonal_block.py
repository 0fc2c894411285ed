# why: the causal loop stops before the diagonal block (hi = start_m * BLOCK_M): the first query block sees no key, the others miss their nearest keys; the causal runs also load fewer bytes than FlashAttention must
# expect: {"flash_attention-bytes-test": 2, "flash_attention-values-test": 3, "flash_attention-causal-test": 0, "flash_attention-traffic-test": 0}
# %% flash_attention-bytes: solution
# %% flash_attention-kernel: solution, edited
<<<<<<< solution
        hi = tl.minimum((start_m + 1) * BLOCK_M, seq_len)
=======
        hi = tl.minimum(start_m * BLOCK_M, seq_len)
>>>>>>> mistake
