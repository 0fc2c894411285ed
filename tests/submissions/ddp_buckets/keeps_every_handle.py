# why: keeps every step's handles and flat tensors in one list that is never cleared, and reads only the last step's entries: right values, buckets and overlap, but each rank holds a few more tensors and handles after every step (the memory grows with training)
# expect: {"ddp_buckets-test-values": 4, "ddp_buckets-test-buckets": 0, "ddp_buckets-test-overlap": 3}
# %% ddp_buckets-assign: solution
# %% ddp_buckets-wrapper: solution, edited
<<<<<<< solution
        self.reset()
        for i, p in enumerate(self.params):
=======
        self.launched = []
        self.reset()
        for i, p in enumerate(self.params):
>>>>>>> mistake
<<<<<<< solution
        self.missing = [len(members) for members in self.buckets]
        self.next_bucket = 0
        self.launched = []
=======
        self.missing = [len(members) for members in self.buckets]
        self.next_bucket = 0
>>>>>>> mistake
<<<<<<< solution
        for members, flat, handle in self.launched:
=======
        for members, flat, handle in self.launched[-len(self.buckets):]:
>>>>>>> mistake
