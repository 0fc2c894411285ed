# why: writes the sum of the ranks' gradients into .grad, not their average: as if the learning rate were n times larger
# expect: {"ddp_buckets-test-values": 0, "ddp_buckets-test-buckets": 3, "ddp_buckets-test-overlap": 3}
# %% ddp_buckets-assign: solution
# %% ddp_buckets-wrapper: solution, edited
<<<<<<< solution
            handle.wait()
            flat /= n
=======
            handle.wait()
>>>>>>> mistake
