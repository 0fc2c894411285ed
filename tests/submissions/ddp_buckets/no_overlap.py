# why: the hooks only count; finish_gradient_synchronization() launches every bucket after backward() has returned: right values and buckets, but no communication overlaps the backward pass (the relay's timeline shows every all-reduce after the last gradient)
# expect: {"ddp_buckets-test-values": 4, "ddp_buckets-test-buckets": 3, "ddp_buckets-test-overlap": 0}
# %% ddp_buckets-assign: solution
# %% ddp_buckets-wrapper: solution, edited
<<<<<<< solution
        self.missing[self.bucket_of[i]] -= 1
        while self.next_bucket < len(self.buckets) and self.missing[self.next_bucket] == 0:
            self.launch_next()
=======
        self.missing[self.bucket_of[i]] -= 1
>>>>>>> mistake
