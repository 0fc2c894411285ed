# why: broadcasts rank 0's parameters at every forward instead of once in the constructor: the values are right (the ranks' parameters are equal anyway after the first step), but every step sends the whole model once more besides the buckets
# expect: {"ddp_buckets-test-values": 4, "ddp_buckets-test-buckets": 0, "ddp_buckets-test-overlap": 3}
# %% ddp_buckets-assign: solution
# %% ddp_buckets-wrapper: solution, edited
<<<<<<< solution
        return self.module(*args, **kwargs)
=======
        with torch.no_grad():
            for p in self.params:
                dist.broadcast(p.data, src=0)
        return self.module(*args, **kwargs)
>>>>>>> mistake
