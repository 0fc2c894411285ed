# why: the accumulator is divided by the running sum inside the loop, after every block, and not at the end: the blocks before the last are divided several times
# expect: {"flash_attention-bytes-test": 2, "flash_attention-values-test": 0, "flash_attention-causal-test": 0, "flash_attention-traffic-test": 0}
# %% flash_attention-bytes: solution
# %% flash_attention-kernel: solution, edited
<<<<<<< solution
        m_i = m_new
    out = acc / l_i[:, None]
=======
        acc = acc / l_i[:, None]
        m_i = m_new
    out = acc
>>>>>>> mistake
