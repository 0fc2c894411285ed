# why: counts the intermediates in the minimum: the chain's partial results written and read back, LayerNorm's second pass over x, attention's scores written and read (an unfused implementation's traffic, not the minimum)
# expect: {"roofline_place-test-costs": 0, "roofline_place-test-place": 3, "roofline_place-test-kernels": 4}
# %% roofline_place-costs: solution, edited
<<<<<<< solution
    return ops * n, (inputs + 1) * n * ITEMSIZE[dtype]
=======
    return ops * n, (inputs + 1 + 2 * (ops - 1)) * n * ITEMSIZE[dtype]   # each op writes, the next reads
>>>>>>> mistake
<<<<<<< solution
    return 7 * elements, (2 * elements + 2 * cols) * ITEMSIZE[dtype]   # x, y; weight, bias once
=======
    return 7 * elements, (3 * elements + 2 * cols) * ITEMSIZE[dtype]   # x twice: mean and variance, then y
>>>>>>> mistake
<<<<<<< solution
    return flops, 4 * one * ITEMSIZE[dtype]
=======
    scores = batch * heads * seq * seq            # S = Q K^T written, then read by the softmax
    return flops, (4 * one + 2 * scores) * ITEMSIZE[dtype]
>>>>>>> mistake
# %% roofline_place-place: solution
# %% roofline_place-kernels: solution
