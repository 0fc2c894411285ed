# why: finds each row at x_ptr + row * n_cols (and the same in the output) instead of using the strides it is given: right for contiguous tensors, wrong as soon as the rows are stored further apart than N, which the specification allows (stride_x, stride_out); only the float32 cell has such cases
# expect: {"triton_softmax-values-test": 0, "triton_softmax-half-test": 2, "triton_softmax-traffic-test": 2, "triton_softmax-launcher-test": 2}
# %% triton_softmax-kernel: solution, edited
<<<<<<< solution
    x = tl.load(x_ptr + this_row * stride_x + offsets, mask=inside, other=-float("inf")).to(tl.float32)
=======
    x = tl.load(x_ptr + this_row * n_cols + offsets, mask=inside, other=-float("inf")).to(tl.float32)
>>>>>>> mistake
<<<<<<< solution
    tl.store(out_ptr + this_row * stride_out + offsets, y.to(out_ptr.dtype.element_ty), mask=inside)
=======
    tl.store(out_ptr + this_row * n_cols + offsets, y.to(out_ptr.dtype.element_ty), mask=inside)
>>>>>>> mistake
# %% triton_softmax-launcher: solution
