# why: the launcher passes BLOCK=1024 whatever N ("big enough for the examples"): wrong for every row wider than 1024 and four times the lanes needed for N = 257; the kernel is right when the grader launches it with BLOCK = next_power_of_2(N), so the launcher's cell alone loses its points
# expect: {"triton_softmax-values-test": 4, "triton_softmax-half-test": 2, "triton_softmax-traffic-test": 2, "triton_softmax-launcher-test": 0}
# %% triton_softmax-kernel: solution
# %% triton_softmax-launcher: solution, edited
<<<<<<< solution
    softmax_kernel[(n_rows,)](x, y, n_cols, x.stride(0), y.stride(0), BLOCK=triton.next_power_of_2(n_cols))
=======
    softmax_kernel[(n_rows,)](x, y, n_cols, x.stride(0), y.stride(0), BLOCK=1024)
>>>>>>> mistake
