# why: the kernel ignores BLOCK and always spans tl.arange(0, 1024) lanes (tried on rows of up to 1000 columns): every row up to 1024 columns is right, but a row of 1500 or 2049 columns has its tail never read nor written, so the float32 values (which include rows wider than 1024) and the traffic (too few bytes) fail; the float16 cases and the launcher are right
# expect: {"triton_softmax-values-test": 0, "triton_softmax-half-test": 2, "triton_softmax-traffic-test": 0, "triton_softmax-launcher-test": 2}
# %% triton_softmax-kernel: solution, edited
<<<<<<< solution
    offsets = tl.arange(0, BLOCK)
=======
    offsets = tl.arange(0, 1024)
>>>>>>> mistake
# %% triton_softmax-launcher: solution
