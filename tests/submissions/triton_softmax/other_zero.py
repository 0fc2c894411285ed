# why: masks the load with other=0.0 instead of -inf: the lanes past the row's end then count as zeros, each adding exp(0 - max) to the sum (and 0 to the maximum), so every ragged row is wrong in float32 and float16; rows whose length is a power of two are right, and the traffic is one pass
# expect: {"triton_softmax-values-test": 0, "triton_softmax-half-test": 0, "triton_softmax-traffic-test": 2, "triton_softmax-launcher-test": 2}
# %% triton_softmax-kernel: solution, edited
<<<<<<< solution
    x = tl.load(x_ptr + this_row * stride_x + offsets, mask=inside, other=-float("inf")).to(tl.float32)
=======
    x = tl.load(x_ptr + this_row * stride_x + offsets, mask=inside, other=0.0).to(tl.float32)
>>>>>>> mistake
# %% triton_softmax-launcher: solution
