# why: launches buckets only from the hooks: a parameter the forward pass does not use never gets its hook, so its bucket and every later one are never all-reduced (their gradients stay local, the relay sees too few all-reduces); the buckets that are launched are overlapped
# expect: {"ddp_buckets-test-values": 0, "ddp_buckets-test-buckets": 0, "ddp_buckets-test-overlap": 3}
# %% ddp_buckets-assign: solution
# %% ddp_buckets-wrapper: solution, edited
<<<<<<< solution
        while self.next_bucket < len(self.buckets):      # a parameter without a gradient held them back
            self.launch_next()
=======
>>>>>>> mistake
