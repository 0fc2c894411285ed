# why: C stored in the inputs' dtype, where matmul_tiled allocates it in float32 (the accumulator's type) whatever the inputs: the stores are half the count for float16 inputs
# expect: {"roofline_place-test-costs": 3, "roofline_place-test-place": 3, "roofline_place-test-kernels": 0}
# %% roofline_place-costs: solution
# %% roofline_place-place: solution
# %% roofline_place-kernels: solution, edited
<<<<<<< solution
    return (a_reads + b_reads) * ITEMSIZE[dtype], m * n * 4   # C is float32 whatever the inputs
=======
    return (a_reads + b_reads) * ITEMSIZE[dtype], m * n * ITEMSIZE[dtype]
>>>>>>> mistake
