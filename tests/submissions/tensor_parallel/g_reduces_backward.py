# why: g all-reduces in the backward pass too (f's backward copied into g): the output's gradient, the same on every rank, is summed n times over, so every gradient before g is n times too large; the backward pass makes two all-reduces
# expect: {"tensor_parallel-test-values": 3, "tensor_parallel-test-gradients": 0, "tensor_parallel-test-traffic": 0}
# %% tensor_parallel-fg: solution, edited
<<<<<<< solution
    @staticmethod
    def backward(ctx, grad):
        # about 1 line
        return grad
=======
    @staticmethod
    def backward(ctx, grad):
        total = grad.clone()
        dist.all_reduce(total)
        return total
>>>>>>> mistake
# %% tensor_parallel-block: solution
