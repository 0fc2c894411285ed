# why: allocates the output as float32 whatever the input's dtype: a float16 input gets a float32 result (wrong dtype, and 4-byte stores); the kernel is right (it stores in out_ptr.dtype.element_ty), so the launcher's cell alone loses its points
# expect: {"triton_softmax-values-test": 4, "triton_softmax-half-test": 2, "triton_softmax-traffic-test": 2, "triton_softmax-launcher-test": 0}
# %% triton_softmax-kernel: solution
# %% triton_softmax-launcher: solution, edited
<<<<<<< solution
    y = torch.empty_like(x)                           # every element is written by the kernel
=======
    y = torch.empty(x.shape, dtype=torch.float32, device=x.device)
>>>>>>> mistake
