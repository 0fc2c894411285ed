# why: f is the identity both ways (its backward returns the gradient as it came): each rank's x gets only its own heads' part of the gradient, and the backward pass makes no all-reduce
# expect: {"tensor_parallel-test-values": 3, "tensor_parallel-test-gradients": 0, "tensor_parallel-test-traffic": 0}
# %% tensor_parallel-fg: solution, edited
<<<<<<< solution
        total = grad.clone()
        dist.all_reduce(total)
        return total
=======
        return grad
>>>>>>> mistake
# %% tensor_parallel-block: solution
