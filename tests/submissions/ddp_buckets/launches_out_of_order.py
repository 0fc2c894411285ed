# why: launches each bucket as soon as it is complete, whatever the buckets before it: every rank happens to post the same order, but where gradients arrive out of parameter order the relay sees the buckets in another order than the rule's (values and overlap right)
# expect: {"ddp_buckets-test-values": 4, "ddp_buckets-test-buckets": 0, "ddp_buckets-test-overlap": 3}
# %% ddp_buckets-assign: solution
# %% ddp_buckets-wrapper: solution, edited
<<<<<<< solution
    def launch_next(self):
        members = self.buckets[self.next_bucket]
=======
    def launch_next(self, b=None):
        members = self.buckets[self.next_bucket if b is None else b]
>>>>>>> mistake
<<<<<<< solution
        self.launched.append((members, flat, dist.all_reduce(flat, async_op=True)))
        self.next_bucket += 1
=======
        self.launched.append((members, flat, dist.all_reduce(flat, async_op=True)))
        if b is None:
            self.next_bucket += 1
        self.missing[self.buckets.index(members)] = -1
>>>>>>> mistake
<<<<<<< solution
        self.missing[self.bucket_of[i]] -= 1
        while self.next_bucket < len(self.buckets) and self.missing[self.next_bucket] == 0:
            self.launch_next()
=======
        b = self.bucket_of[i]
        self.missing[b] -= 1
        if self.missing[b] == 0:
            self.launch_next(b)
>>>>>>> mistake
<<<<<<< solution
        while self.next_bucket < len(self.buckets):      # a parameter without a gradient held them back
            self.launch_next()
=======
        for b in range(len(self.buckets)):              # a parameter without a gradient held them back
            if self.missing[b] >= 0:
                self.launch_next(b)
>>>>>>> mistake
