# why: masks the load but not the store: the values inside each row are right, but every program writes BLOCK - N lanes past its row's end (into the next row, which on a GPU races with that row's program, and past the end of the output on the last row): the grader sees its canaries past the rows overwritten and BLOCK / N times the stored bytes; float16 cases (graded for values only) pass
# expect: {"triton_softmax-values-test": 0, "triton_softmax-half-test": 2, "triton_softmax-traffic-test": 0, "triton_softmax-launcher-test": 2}
# %% triton_softmax-kernel: solution, edited
<<<<<<< solution
    tl.store(out_ptr + this_row * stride_out + offsets, y.to(out_ptr.dtype.element_ty), mask=inside)
=======
    tl.store(out_ptr + this_row * stride_out + offsets, y.to(out_ptr.dtype.element_ty))
>>>>>>> mistake
# %% triton_softmax-launcher: solution
