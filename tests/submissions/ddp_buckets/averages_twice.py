# why: divides each gradient by the number of ranks before the all-reduce and again after it: the gradients are n times too small (buckets and overlap are right)
# expect: {"ddp_buckets-test-values": 0, "ddp_buckets-test-buckets": 3, "ddp_buckets-test-overlap": 3}
# %% ddp_buckets-assign: solution
# %% ddp_buckets-wrapper: solution, edited
<<<<<<< solution
                          for j, g in zip(members, grads)])
=======
                          for j, g in zip(members, grads)]) / dist.get_world_size()
>>>>>>> mistake
