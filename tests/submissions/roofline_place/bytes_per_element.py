# why: counts elements, not bytes: the dtype's size never enters (FLOPs right; every byte count 1/s of the truth, in part 3 too), the mistake a TA sees most
# expect: {"roofline_place-test-costs": 0, "roofline_place-test-place": 3, "roofline_place-test-kernels": 0}
# %% roofline_place-costs
ITEMSIZE = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1, "int8": 1}


def matmul_cost(m, n, k, dtype):
    return 2 * m * n * k, m * k + k * n + m * n


def elementwise_cost(n, inputs, ops, dtype):
    return ops * n, (inputs + 1) * n


def softmax_cost(rows, cols, dtype):
    return 5 * rows * cols, 2 * rows * cols


def layer_norm_cost(rows, cols, dtype):
    return 7 * rows * cols, 2 * rows * cols + 2 * cols


def conv2d_cost(batch, c_in, height, width, c_out, kernel, padding, dtype):
    oh, ow = height + 2 * padding - kernel + 1, width + 2 * padding - kernel + 1
    out = batch * c_out * oh * ow
    return 2 * out * c_in * kernel * kernel, batch * c_in * height * width + c_out * c_in * kernel * kernel + out


def attention_cost(batch, heads, seq, head_dim, dtype):
    return 4 * batch * heads * seq * seq * head_dim, 4 * batch * heads * seq * head_dim
# %% roofline_place-place: solution
# %% roofline_place-kernels
def tiled_matmul_traffic(m, n, k, block_m, block_n, block_k, dtype):
    rows, cols = -(-m // block_m), -(-n // block_n)
    return m * k * cols + k * n * rows, m * n


def layer_norm_traffic(rows, cols, dtype):
    return 3 * rows * cols, rows * cols
