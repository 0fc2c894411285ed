# why: the closed form counts whole key blocks up to the diagonal, (t + 1) block_m keys for query block t, also when the last block sticks out past seq_len (where masked lanes load nothing): wrong for causal lengths that are not a multiple of the blocks; the kernel (the reference's) keeps its points
# expect: {"flash_attention-bytes-test": 0, "flash_attention-values-test": 3, "flash_attention-causal-test": 3, "flash_attention-traffic-test": 2}
# %% flash_attention-bytes: solution, edited
<<<<<<< solution
            last = min((t + 1) * block_m, seq_len)
            keys += min(-(-last // block_n) * block_n, seq_len)
=======
            keys += (t + 1) * block_m
>>>>>>> mistake
# %% flash_attention-kernel: solution
