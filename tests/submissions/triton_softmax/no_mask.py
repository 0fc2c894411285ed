# why: loads the whole block without a mask (the store is masked): on a row of N < BLOCK columns the lanes past its end read the next row's values, or the padding, or whatever lies past the tensor, into the maximum and the sum, so ragged rows get wrong values, and every program loads BLOCK elements, not N
# expect: {"triton_softmax-values-test": 0, "triton_softmax-half-test": 0, "triton_softmax-traffic-test": 0, "triton_softmax-launcher-test": 2}
# %% triton_softmax-kernel: solution, edited
<<<<<<< solution
    x = tl.load(x_ptr + this_row * stride_x + offsets, mask=inside, other=-float("inf")).to(tl.float32)
=======
    x = tl.load(x_ptr + this_row * stride_x + offsets).to(tl.float32)
>>>>>>> mistake
# %% triton_softmax-launcher: solution
