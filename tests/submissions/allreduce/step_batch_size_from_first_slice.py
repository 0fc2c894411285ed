# why: sums the slice losses (right) but takes the batch size as the first slice's size times the number of replicas, as if the slices were equal: right when the devices divide the batch, a gradient and a loss divided by 12 instead of 10 for 10 examples on 4 devices, by 4 instead of 3 for 3 examples on 4
# expect: {"allreduce-sum-test-values": 2, "allreduce-sum-test-dtypes": 1, "allreduce-sum-test-views": 1, "allreduce-sum-test-storage": 1, "allreduce-split-test": 1, "allreduce-step-test-even": 1, "allreduce-step-test-uneven": 0, "allreduce-step-test-tiny": 0, "allreduce-step-test-state": 1}
# %% allreduce-sum: solution
# %% allreduce-split: solution
# %% allreduce-step: solution, edited
<<<<<<< solution
    n = X.shape[0]
    X_slices, y_slices = split_batch(X, y, devices)
=======
    X_slices, y_slices = split_batch(X, y, devices)
    n = X_slices[0].shape[0] * len(devices)
>>>>>>> mistake
