# why: the causal mask at the diagonal block is off by one (key j < query i): each query misses itself, query 0 sees no key at all (NaN); without the mask and the bytes are right
# expect: {"flash_attention-bytes-test": 2, "flash_attention-values-test": 3, "flash_attention-causal-test": 0, "flash_attention-traffic-test": 2}
# %% flash_attention-bytes: solution
# %% flash_attention-kernel: solution, edited
<<<<<<< solution
            keep = keep & (cols[None, :] <= rows[:, None])
=======
            keep = keep & (cols[None, :] < rows[:, None])
>>>>>>> mistake
