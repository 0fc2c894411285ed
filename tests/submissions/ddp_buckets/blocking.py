# why: launches each bucket from its hook but waits for it there: the relay's timeline shows the rank waiting before the next gradient, so the backward pass stops until every rank has sent its part (right values and buckets, no overlap)
# expect: {"ddp_buckets-test-values": 4, "ddp_buckets-test-buckets": 3, "ddp_buckets-test-overlap": 0}
# %% ddp_buckets-assign: solution
# %% ddp_buckets-wrapper: solution, edited
<<<<<<< solution
        self.launched.append((members, flat, dist.all_reduce(flat, async_op=True)))
=======
        handle = dist.all_reduce(flat, async_op=True)
        handle.wait()
        self.launched.append((members, flat, handle))
>>>>>>> mistake
