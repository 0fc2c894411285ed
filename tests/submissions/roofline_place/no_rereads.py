# why: the tiled product's traffic as part 1's minimum: A and B read once, C written once in the inputs' dtype; every program of a row of tiles re-reads its panel of A (and of a column, of B), which the interpreter counts
# expect: {"roofline_place-test-costs": 3, "roofline_place-test-place": 3, "roofline_place-test-kernels": 0}
# %% roofline_place-costs: solution
# %% roofline_place-place: solution
# %% roofline_place-kernels: solution, edited
<<<<<<< solution
    a_reads = m * k * col_tiles                   # each program of a row of tiles reads A's panel
    b_reads = k * n * row_tiles
    return (a_reads + b_reads) * ITEMSIZE[dtype], m * n * 4   # C is float32 whatever the inputs
=======
    return (m * k + k * n) * ITEMSIZE[dtype], m * n * ITEMSIZE[dtype]
>>>>>>> mistake
