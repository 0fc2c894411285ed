# why: writes the softmax into x itself and returns x (no new tensor): the values returned are right, but the caller's input is destroyed, against the specification ("a new tensor", "leaves x unchanged"); the kernel is right
# expect: {"triton_softmax-values-test": 4, "triton_softmax-half-test": 2, "triton_softmax-traffic-test": 2, "triton_softmax-launcher-test": 0}
# %% triton_softmax-kernel: solution
# %% triton_softmax-launcher: solution, edited
<<<<<<< solution
    y = torch.empty_like(x)                           # every element is written by the kernel
=======
    y = x                                             # the softmax replaces the input
>>>>>>> mistake
