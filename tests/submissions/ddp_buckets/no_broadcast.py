# why: forgets the constructor's broadcast: each rank trains from its own initial values, so the ranks' models differ from each other and from the reference, and the relay sees no broadcast before the first step
# expect: {"ddp_buckets-test-values": 0, "ddp_buckets-test-buckets": 0, "ddp_buckets-test-overlap": 3}
# %% ddp_buckets-assign: solution
# %% ddp_buckets-wrapper: solution, edited
<<<<<<< solution
        with torch.no_grad():
            for p in self.params:
                dist.broadcast(p.data, src=0)
=======
>>>>>>> mistake
