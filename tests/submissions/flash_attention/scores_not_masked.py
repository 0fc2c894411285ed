# why: the loads are masked (other=0.0) but the scores of the keys past seq_len are not set to -inf: each missing key counts with score 0 in the maximum and the sum; the causal runs pass (the position mask removes them there), the runs without the mask fail, and traffic with them
# expect: {"flash_attention-bytes-test": 2, "flash_attention-values-test": 0, "flash_attention-causal-test": 3, "flash_attention-traffic-test": 0}
# %% flash_attention-bytes: solution
# %% flash_attention-kernel: solution, edited
<<<<<<< solution
        keep = col_ok[None, :]
=======
        keep = cols[None, :] >= 0
>>>>>>> mistake
