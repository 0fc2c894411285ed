# why: masks with offsets <= n_cols, one lane too many: each program reads one element past its row (the next row's first, the padding, or past the tensor) into the maximum and the sum, and writes one past it, so every row comes out wrong; the traffic is one element per row over the minimum, within the allowance
# expect: {"triton_softmax-values-test": 0, "triton_softmax-half-test": 0, "triton_softmax-traffic-test": 2, "triton_softmax-launcher-test": 2}
# %% triton_softmax-kernel: solution, edited
<<<<<<< solution
    inside = offsets < n_cols                         # lanes past the row's end load and store nothing
=======
    inside = offsets <= n_cols
>>>>>>> mistake
# %% triton_softmax-launcher: solution
