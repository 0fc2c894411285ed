# why: g divides the sum by the number of ranks, as DDP averages gradients: the output is the mean of the partial outputs, not their sum; the gradients are those of the right block (g's backward is the identity)
# expect: {"tensor_parallel-test-values": 0, "tensor_parallel-test-gradients": 4, "tensor_parallel-test-traffic": 0}
# %% tensor_parallel-fg: solution, edited
<<<<<<< solution
    @staticmethod
    def forward(ctx, x):
        # about 3 lines
        total = x.clone()
        dist.all_reduce(total)
        return total
=======
    @staticmethod
    def forward(ctx, x):
        total = x.clone()
        dist.all_reduce(total)
        return total / dist.get_world_size()
>>>>>>> mistake
# %% tensor_parallel-block: solution
