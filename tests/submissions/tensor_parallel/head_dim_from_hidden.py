# why: takes the head size from the input's width over this rank's heads (hidden / heads), which is n times the real head size on n ranks: the reshape into heads fails
# expect: {"tensor_parallel-test-values": 0, "tensor_parallel-test-gradients": 0, "tensor_parallel-test-traffic": 0}
# %% tensor_parallel-fg: solution
# %% tensor_parallel-block: solution, edited
<<<<<<< solution
    d = wq.shape[0] // heads
=======
    d = x.shape[1] // heads
>>>>>>> mistake
