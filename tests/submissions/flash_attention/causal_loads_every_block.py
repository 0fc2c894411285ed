# why: the causal loop runs over every key block (hi = seq_len) and relies on the mask alone: right values, but the key and value blocks wholly above the diagonal are loaded for nothing, 1.3 times FlashAttention's loads for 40 queries in blocks of 16 (with BLOCK_M = 2 BLOCK_N and 37 queries it is only 1.06 times, within the factor)
# expect: {"flash_attention-bytes-test": 2, "flash_attention-values-test": 3, "flash_attention-causal-test": 3, "flash_attention-traffic-test": 0}
# %% flash_attention-bytes: solution
# %% flash_attention-kernel: solution, edited
<<<<<<< solution
    hi = seq_len
    if CAUSAL:
        hi = tl.minimum((start_m + 1) * BLOCK_M, seq_len)
=======
    hi = seq_len
>>>>>>> mistake
