# why: checks that x is 2-D but not that it is contiguous, and passes x.stride(0): a transposed or column-strided x is then launched on (its rows are not contiguous, so the kernel reads the wrong elements) instead of raising the ValueError the specification asks for
# expect: {"triton_softmax-values-test": 4, "triton_softmax-half-test": 2, "triton_softmax-traffic-test": 2, "triton_softmax-launcher-test": 0}
# %% triton_softmax-kernel: solution
# %% triton_softmax-launcher: solution, edited
<<<<<<< solution
    if x.dim() != 2 or not x.is_contiguous():
=======
    if x.dim() != 2:
>>>>>>> mistake
