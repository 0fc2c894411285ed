# why: g gathers every rank's partial output with dist.all_gather and sums them itself: right values and gradients, but n partial outputs travel to every rank where one all-reduce does (the relay logs an all_gather)
# expect: {"tensor_parallel-test-values": 3, "tensor_parallel-test-gradients": 4, "tensor_parallel-test-traffic": 0}
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
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, x.contiguous())
        return torch.stack(parts).sum(dim=0)
>>>>>>> mistake
# %% tensor_parallel-block: solution
