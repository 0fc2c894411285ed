# why: the log-sum-exp stored is the running maximum only (m instead of m + log l): the output is right, the lse is not, in every run
# expect: {"flash_attention-bytes-test": 2, "flash_attention-values-test": 0, "flash_attention-causal-test": 0, "flash_attention-traffic-test": 0}
# %% flash_attention-bytes: solution
# %% flash_attention-kernel: solution, edited
<<<<<<< solution
    tl.store(lse_ptr + head * seq_len + rows, m_i + tl.log(l_i), mask=row_ok)
=======
    tl.store(lse_ptr + head * seq_len + rows, m_i, mask=row_ok)
>>>>>>> mistake
