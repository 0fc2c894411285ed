# why: the scores are accumulated in float16 (tl.dot(..., out_dtype=tl.float16)): with scores of a few units the rounding shows in the log-sum-exp of the float16 runs
# expect: {"flash_attention-bytes-test": 2, "flash_attention-values-test": 0, "flash_attention-causal-test": 0, "flash_attention-traffic-test": 0}
# %% flash_attention-bytes: solution
# %% flash_attention-kernel: solution, edited
<<<<<<< solution
        s = tl.dot(q, tl.trans(k)) * scale
=======
        s = tl.dot(q, tl.trans(k), out_dtype=tl.float16).to(tl.float32) * scale
>>>>>>> mistake
