# why: launches the kernel once per row on a grid of one program (a Python loop over the rows of x and out): right values, but M launches instead of one on a grid of M programs (each launch costs microseconds on a GPU, and the rows are not processed in parallel); the kernel itself is right
# expect: {"triton_softmax-values-test": 4, "triton_softmax-half-test": 2, "triton_softmax-traffic-test": 2, "triton_softmax-launcher-test": 0}
# %% triton_softmax-kernel: solution
# %% triton_softmax-launcher: solution, edited
<<<<<<< solution
    softmax_kernel[(n_rows,)](x, y, n_cols, x.stride(0), y.stride(0), BLOCK=triton.next_power_of_2(n_cols))
=======
    for row in range(n_rows):
        softmax_kernel[(1,)](x[row], y[row], n_cols, x.stride(0), y.stride(0), BLOCK=triton.next_power_of_2(n_cols))
>>>>>>> mistake
