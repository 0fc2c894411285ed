# why: the closed form's stores leave out the log-sum-exp (4 bytes a query, float32): the kernel (the reference's) keeps its points, kernel_bytes loses its own
# expect: {"flash_attention-bytes-test": 0, "flash_attention-values-test": 3, "flash_attention-causal-test": 3, "flash_attention-traffic-test": 2}
# %% flash_attention-bytes: solution, edited
<<<<<<< solution
    store = heads * seq_len * (itemsize * head_dim + 4)   # out, and lse in float32
=======
    store = heads * seq_len * itemsize * head_dim         # the output
>>>>>>> mistake
# %% flash_attention-kernel: solution
