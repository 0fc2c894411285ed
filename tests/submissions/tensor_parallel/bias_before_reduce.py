# why: adds the output bias to the partial output before g, so every rank adds it and the sum holds n copies of bo; the gradients do not see it (g's backward is the identity), the outputs do
# expect: {"tensor_parallel-test-values": 0, "tensor_parallel-test-gradients": 4, "tensor_parallel-test-traffic": 0}
# %% tensor_parallel-fg: solution
# %% tensor_parallel-block: solution, edited
<<<<<<< solution
    return reduce_from_parallel(partial) + bo     # g: one all-reduce in the forward pass; the bias once
=======
    return reduce_from_parallel(partial + bo)
>>>>>>> mistake
