# why: BLOCK = triton.next_power_of_2(n_cols - 1) in the launcher, off by one: right whenever N is not 2^k + 1, but a row of 257 columns gets a block of 256 (its last column never read nor written) and a row of one column a block of 0; the kernel itself is right (the grader launches it with the right BLOCK), so only the launcher's cell loses its points
# expect: {"triton_softmax-values-test": 4, "triton_softmax-half-test": 2, "triton_softmax-traffic-test": 2, "triton_softmax-launcher-test": 0}
# %% triton_softmax-kernel: solution
# %% triton_softmax-launcher: solution, edited
<<<<<<< solution
    softmax_kernel[(n_rows,)](x, y, n_cols, x.stride(0), y.stride(0), BLOCK=triton.next_power_of_2(n_cols))
=======
    softmax_kernel[(n_rows,)](x, y, n_cols, x.stride(0), y.stride(0), BLOCK=triton.next_power_of_2(n_cols - 1))
>>>>>>> mistake
