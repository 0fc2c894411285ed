# why: the LayerNorm kernel's bytes as part 1's minimum (weight and bias read once), where each of its programs loads the whole weight and bias again
# expect: {"roofline_place-test-costs": 3, "roofline_place-test-place": 3, "roofline_place-test-kernels": 0}
# %% roofline_place-costs: solution
# %% roofline_place-place: solution
# %% roofline_place-kernels: solution, edited
<<<<<<< solution
    return rows * 3 * row_bytes, rows * row_bytes   # each program: its row, the weight and the bias
=======
    return rows * row_bytes + 2 * row_bytes, rows * row_bytes
>>>>>>> mistake
