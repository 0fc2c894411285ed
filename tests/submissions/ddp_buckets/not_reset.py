# why: never resets the hooks' counts after a step: the first step is right, later steps launch nothing and write the first step's stale averages back into .grad
# expect: {"ddp_buckets-test-values": 0, "ddp_buckets-test-buckets": 0, "ddp_buckets-test-overlap": 0}
# %% ddp_buckets-assign: solution
# %% ddp_buckets-wrapper: solution, edited
<<<<<<< solution
                offset += p.numel()
        self.reset()
=======
                offset += p.numel()
>>>>>>> mistake
