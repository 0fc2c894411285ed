# why: exponentiates the row as it is, without subtracting its maximum: mathematically the same softmax, but exp overflows float32 above 88.7, so rows near 1e4 give inf / inf = NaN; float16 inputs of moderate size (computed in float32) still pass
# expect: {"triton_softmax-values-test": 0, "triton_softmax-half-test": 2, "triton_softmax-traffic-test": 2, "triton_softmax-launcher-test": 2}
# %% triton_softmax-kernel: solution, edited
<<<<<<< solution
    z = x - tl.max(x, axis=0)                         # every exponent <= 0: no overflow
=======
    z = x
>>>>>>> mistake
# %% triton_softmax-launcher: solution
