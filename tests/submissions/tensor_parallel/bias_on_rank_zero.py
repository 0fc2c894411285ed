# why: adds the output bias before g on rank 0 only: the outputs are right, but the other ranks' copies of the replicated bias get no gradient (an optimizer would then let the copies drift apart)
# expect: {"tensor_parallel-test-values": 3, "tensor_parallel-test-gradients": 0, "tensor_parallel-test-traffic": 3}
# %% tensor_parallel-fg: solution
# %% tensor_parallel-block: solution, edited
<<<<<<< solution
    return reduce_from_parallel(partial) + bo     # g: one all-reduce in the forward pass; the bias once
=======
    import torch.distributed as dist
    if dist.get_rank() == 0:
        partial = partial + bo
    return reduce_from_parallel(partial)
>>>>>>> mistake
