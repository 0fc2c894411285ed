# why: copies a non-contiguous input with x.contiguous() instead of raising ValueError: the specification asks for the error (a hidden copy doubles the traffic the caller did not ask for), the reading refuses .contiguous() outside the kernel and the input check finds no ValueError; the kernel is right
# expect: {"triton_softmax-values-test": 4, "triton_softmax-half-test": 2, "triton_softmax-traffic-test": 2, "triton_softmax-launcher-test": 0}
# %% triton_softmax-kernel: solution
# %% triton_softmax-launcher: solution, edited
<<<<<<< solution
    if x.dim() != 2 or not x.is_contiguous():
        raise ValueError(f"softmax expects a contiguous 2-D tensor, got shape {tuple(x.shape)}")
=======
    if x.dim() != 2:
        raise ValueError(f"softmax expects a 2-D tensor, got shape {tuple(x.shape)}")
    x = x.contiguous()
>>>>>>> mistake
