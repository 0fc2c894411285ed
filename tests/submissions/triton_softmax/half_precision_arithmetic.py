# why: computes in the input's dtype: for float16 the exponentials are rounded to float16, summed into a float16 and divided in float16, up to about 1.5 units in the last place off (the float32 path rounds once, at the store); float32 inputs are unaffected
# expect: {"triton_softmax-values-test": 4, "triton_softmax-half-test": 0, "triton_softmax-traffic-test": 2, "triton_softmax-launcher-test": 2}
# %% triton_softmax-kernel: solution, edited
<<<<<<< solution
    x = tl.load(x_ptr + this_row * stride_x + offsets, mask=inside, other=-float("inf")).to(tl.float32)
=======
    x = tl.load(x_ptr + this_row * stride_x + offsets, mask=inside, other=-float("inf"))
>>>>>>> mistake
<<<<<<< solution
    num = tl.exp(z)                                   # a masked lane: exp(-inf) = 0 adds nothing to the sum
=======
    num = tl.exp(z).to(x.dtype)
>>>>>>> mistake
# %% triton_softmax-launcher: solution
