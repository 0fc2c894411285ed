# why: f and g swapped: the input is summed over the ranks before the projections (n times x) and the partial outputs are never summed; the gradients are those of that wrong block
# expect: {"tensor_parallel-test-values": 0, "tensor_parallel-test-gradients": 0, "tensor_parallel-test-traffic": 0}
# %% tensor_parallel-fg: solution
# %% tensor_parallel-block: solution, edited
<<<<<<< solution
    x = copy_to_parallel(x)                       # f: one all-reduce of x's gradient in the backward pass
=======
    x = reduce_from_parallel(x)
>>>>>>> mistake
<<<<<<< solution
    return reduce_from_parallel(partial) + bo     # g: one all-reduce in the forward pass; the bias once
=======
    return copy_to_parallel(partial) + bo
>>>>>>> mistake
