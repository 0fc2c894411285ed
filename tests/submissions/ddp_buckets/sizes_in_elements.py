# why: gives assign_buckets the parameters' element counts (p.numel()) instead of their bytes: the cap is in bytes, so with float32 the buckets are four times too big; the rule itself and the values are right, but where the rule's buckets would overlap the backward pass (cap 160 bytes), one bucket holds everything and nothing starts before the last gradient
# expect: {"ddp_buckets-test-values": 4, "ddp_buckets-test-buckets": 0, "ddp_buckets-test-overlap": 0}
# %% ddp_buckets-assign: solution
# %% ddp_buckets-wrapper: solution, edited
<<<<<<< solution
        self.buckets = assign_buckets([p.numel() * p.element_size() for p in self.params], bucket_cap_bytes)
=======
        self.buckets = assign_buckets([p.numel() for p in self.params], bucket_cap_bytes)
>>>>>>> mistake
