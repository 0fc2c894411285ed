# why: counts whole tiles where the last row and column of tiles stick out past the matrices: the masked lanes counted as if they moved bytes (right only when the tiles divide the sizes)
# expect: {"roofline_place-test-costs": 3, "roofline_place-test-place": 3, "roofline_place-test-kernels": 0}
# %% roofline_place-costs: solution
# %% roofline_place-place: solution
# %% roofline_place-kernels: solution, edited
<<<<<<< solution
    a_reads = m * k * col_tiles                   # each program of a row of tiles reads A's panel
    b_reads = k * n * row_tiles
    return (a_reads + b_reads) * ITEMSIZE[dtype], m * n * 4   # C is float32 whatever the inputs
=======
    k_steps = -(-k // block_k)
    a_reads = row_tiles * col_tiles * k_steps * block_m * block_k   # one BLOCK_M x BLOCK_K tile per step
    b_reads = row_tiles * col_tiles * k_steps * block_k * block_n
    stored = row_tiles * col_tiles * block_m * block_n * 4
    return (a_reads + b_reads) * ITEMSIZE[dtype], stored
>>>>>>> mistake
