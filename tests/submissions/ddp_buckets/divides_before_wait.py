# why: divides the flat tensor by the number of ranks right after launching its all-reduce, before waiting: the division applies to the local gradients, and the sum that arrives at wait() replaces them, so .grad gets the sum
# expect: {"ddp_buckets-test-values": 0, "ddp_buckets-test-buckets": 3, "ddp_buckets-test-overlap": 3}
# %% ddp_buckets-assign: solution
# %% ddp_buckets-wrapper: solution, edited
<<<<<<< solution
        self.launched.append((members, flat, dist.all_reduce(flat, async_op=True)))
=======
        self.launched.append((members, flat, dist.all_reduce(flat, async_op=True)))
        flat /= dist.get_world_size()
>>>>>>> mistake
<<<<<<< solution
            handle.wait()
            flat /= n
=======
            handle.wait()
>>>>>>> mistake
