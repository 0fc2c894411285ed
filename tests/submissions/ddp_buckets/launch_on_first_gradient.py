# why: a bucket is flushed when its first gradient is ready, with zeros for the gradients not computed yet: the relay sees the right sizes in the right order, but the averages are wrong and each bucket is posted before the gradient that completes it
# expect: {"ddp_buckets-test-values": 0, "ddp_buckets-test-buckets": 3, "ddp_buckets-test-overlap": 0}
# %% ddp_buckets-assign: solution
# %% ddp_buckets-wrapper: solution, edited
<<<<<<< solution
        while self.next_bucket < len(self.buckets) and self.missing[self.next_bucket] == 0:
            self.launch_next()
=======
        while (self.next_bucket < len(self.buckets)
               and self.missing[self.next_bucket] < len(self.buckets[self.next_bucket])):
            self.launch_next()
>>>>>>> mistake
