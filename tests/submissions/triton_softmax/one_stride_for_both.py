# why: writes the output with the input's row stride (stride_x for both tensors): right whenever both are contiguous of the same shape, wrong when the output's rows lie at another distance than the input's, which the kernel's signature exists for
# expect: {"triton_softmax-values-test": 0, "triton_softmax-half-test": 2, "triton_softmax-traffic-test": 2, "triton_softmax-launcher-test": 2}
# %% triton_softmax-kernel: solution, edited
<<<<<<< solution
    tl.store(out_ptr + this_row * stride_out + offsets, y.to(out_ptr.dtype.element_ty), mask=inside)
=======
    tl.store(out_ptr + this_row * stride_x + offsets, y.to(out_ptr.dtype.element_ty), mask=inside)
>>>>>>> mistake
# %% triton_softmax-launcher: solution
