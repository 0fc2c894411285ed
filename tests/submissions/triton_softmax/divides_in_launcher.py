# why: the kernel writes exp(x - max) and the launcher divides by the row sums with torch (out / out.sum(dim=1, keepdim=True)): the numbers softmax returns are right, but the kernel alone is not a softmax and the launcher does torch work on the data (an extra read and write of the whole output); the kernel's traffic is one pass
# expect: {"triton_softmax-values-test": 0, "triton_softmax-half-test": 0, "triton_softmax-traffic-test": 2, "triton_softmax-launcher-test": 0}
# %% triton_softmax-kernel: solution, edited
<<<<<<< solution
    y = num / tl.sum(num, axis=0)
=======
    y = num
>>>>>>> mistake
# %% triton_softmax-launcher: solution, edited
<<<<<<< solution
    return y
=======
    return y / y.sum(dim=1, keepdim=True)
>>>>>>> mistake
