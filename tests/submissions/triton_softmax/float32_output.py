# why: allocates the output as float32 whatever the input's dtype: float32 inputs are right, a float16 input gets a float32 result (wrong dtype), and its stores move 4 bytes per element instead of 2 (1.5x the minimum traffic in all)
# expect: {"triton_softmax-values-test": 4, "triton_softmax-half-test": 0, "triton_softmax-traffic-test": 0, "triton_softmax-kernel-test": 2}
# %% triton_softmax-kernel: solution
# %% triton_softmax-launcher: solution, edited
<<<<<<< solution
    y = torch.empty_like(x)                           # every element is written by the kernel
=======
    y = torch.empty(x.shape, dtype=torch.float32, device=x.device)
>>>>>>> mistake
