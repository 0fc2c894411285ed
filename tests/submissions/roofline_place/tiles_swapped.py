# why: the re-reads attached to the wrong tiles: A re-read once per row of tiles (ceil(m / BLOCK_M)) and B once per column, where each panel of A is read by every program of its row, ceil(n / BLOCK_N) of them; right when the tiles and the matrices are square
# expect: {"roofline_place-test-costs": 3, "roofline_place-test-place": 3, "roofline_place-test-kernels": 0}
# %% roofline_place-costs: solution
# %% roofline_place-place: solution
# %% roofline_place-kernels: solution, edited
<<<<<<< solution
    a_reads = m * k * col_tiles                   # each program of a row of tiles reads A's panel
    b_reads = k * n * row_tiles
=======
    a_reads = m * k * row_tiles
    b_reads = k * n * col_tiles
>>>>>>> mistake
