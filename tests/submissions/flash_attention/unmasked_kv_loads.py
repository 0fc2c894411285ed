# why: the key and value loads have no mask: the last block reads past seq_len (the next head's rows, or the canaries after k and v); the scores of those keys are still set to -inf, so the values are right, but the loads are more than FlashAttention's
# expect: {"flash_attention-bytes-test": 2, "flash_attention-values-test": 3, "flash_attention-causal-test": 3, "flash_attention-traffic-test": 0}
# %% flash_attention-bytes: solution
# %% flash_attention-kernel: solution, edited
<<<<<<< solution
        k = tl.load(k_ptr + offs, mask=col_ok[:, None], other=0.0)
        v = tl.load(v_ptr + offs, mask=col_ok[:, None], other=0.0)
=======
        k = tl.load(k_ptr + offs)
        v = tl.load(v_ptr + offs)
>>>>>>> mistake
