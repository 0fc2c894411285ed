# why: counts the gradients that have arrived and launches bucket b once as many have arrived as buckets 0..b hold, assuming they always arrive from the last parameter to the first: right on a plain MLP, but with layers used in another order than registered a bucket goes out before its own gradients exist (zeros in their place): wrong averages, posted too early
# expect: {"ddp_buckets-test-values": 0, "ddp_buckets-test-buckets": 3, "ddp_buckets-test-overlap": 0}
# %% ddp_buckets-assign: solution
# %% ddp_buckets-wrapper: solution, edited
<<<<<<< solution
        self.missing = [len(members) for members in self.buckets]
        self.next_bucket = 0
=======
        self.missing = [len(members) for members in self.buckets]
        self.arrived = 0
        self.next_bucket = 0
>>>>>>> mistake
<<<<<<< solution
        self.missing[self.bucket_of[i]] -= 1
        while self.next_bucket < len(self.buckets) and self.missing[self.next_bucket] == 0:
            self.launch_next()
=======
        self.arrived += 1          # the gradients come from the last parameter to the first
        while (self.next_bucket < len(self.buckets)
               and self.arrived >= sum(len(b) for b in self.buckets[:self.next_bucket + 1])):
            self.launch_next()
>>>>>>> mistake
