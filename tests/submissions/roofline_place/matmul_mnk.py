# why: a multiply-add counted as one FLOP: a matrix product of m x k by k x n as m n k, and the same in the convolution and attention (half the FLOPs of every product; the bytes right)
# expect: {"roofline_place-test-costs": 0, "roofline_place-test-place": 3, "roofline_place-test-kernels": 4}
# %% roofline_place-costs: solution, edited
<<<<<<< solution
    flops = 2 * m * n * k                         # m n outputs, k multiply-adds each
=======
    flops = m * n * k                             # m n outputs, k products each
>>>>>>> mistake
<<<<<<< solution
    flops = 2 * outputs * c_in * kernel * kernel
=======
    flops = outputs * c_in * kernel * kernel
>>>>>>> mistake
<<<<<<< solution
    flops = 2 * (2 * batch * heads * seq * seq * head_dim)   # Q K^T, then P V
=======
    flops = 2 * batch * heads * seq * seq * head_dim   # Q K^T, then P V
>>>>>>> mistake
# %% roofline_place-place: solution
# %% roofline_place-kernels: solution
