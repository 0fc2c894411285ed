# why: the running maximum is written to lse_ptr and read back after every key block (global memory as scratch for the state): right values, but stores beyond out and lse and extra loads
# expect: {"flash_attention-bytes-test": 2, "flash_attention-values-test": 3, "flash_attention-causal-test": 3, "flash_attention-traffic-test": 0}
# %% flash_attention-bytes: solution
# %% flash_attention-kernel: solution, edited
<<<<<<< solution
        m_i = m_new
    out = acc / l_i[:, None]
=======
        m_i = m_new
        tl.store(lse_ptr + head * seq_len + rows, m_i, mask=row_ok)
        m_i = tl.load(lse_ptr + head * seq_len + rows, mask=row_ok, other=float("-inf"))
    out = acc / l_i[:, None]
>>>>>>> mistake
