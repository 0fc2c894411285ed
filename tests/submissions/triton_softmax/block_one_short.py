# why: BLOCK = triton.next_power_of_2(n_cols - 1), off by one: right whenever N is not 2^k + 1, but a row of 257 columns gets a block of 256, so its last column is never read nor written (the output keeps whatever torch.empty left there) and a row of one column gets a block of 0
# expect: {"triton_softmax-values-test": 0, "triton_softmax-half-test": 0, "triton_softmax-traffic-test": 0, "triton_softmax-kernel-test": 2}
# %% triton_softmax-kernel: solution
# %% triton_softmax-launcher: solution, edited
<<<<<<< solution
    softmax_kernel[(n_rows,)](x, y, n_cols, x.stride(0), y.stride(0), BLOCK=triton.next_power_of_2(n_cols))
=======
    softmax_kernel[(n_rows,)](x, y, n_cols, x.stride(0), y.stride(0), BLOCK=triton.next_power_of_2(n_cols - 1))
>>>>>>> mistake
