# why: leaves a parameter without a gradient out of its bucket's flat tensor (and a bucket with none at all unsent) instead of sending zeros: the averages are right here, but those all-reduces are smaller than the rule's, or missing (and would differ between ranks that did and did not use the parameter)
# expect: {"ddp_buckets-test-values": 4, "ddp_buckets-test-buckets": 0, "ddp_buckets-test-overlap": 3}
# %% ddp_buckets-assign: solution
# %% ddp_buckets-wrapper: solution, edited
<<<<<<< solution
        members = self.buckets[self.next_bucket]
        grads = [self.params[j].grad for j in members]
        flat = torch.cat([(g if g is not None else torch.zeros_like(self.params[j])).reshape(-1)
                          for j, g in zip(members, grads)])
=======
        members = [j for j in self.buckets[self.next_bucket] if self.params[j].grad is not None]
        if not members:
            self.next_bucket += 1
            return
        flat = torch.cat([self.params[j].grad.reshape(-1) for j in members])
>>>>>>> mistake
