# why: correct, written differently: part 1 lists each operation's tensors as shapes and sums them with one helper (math.prod), part 2 decides the bound level by level against each ridge point, part 3 walks the programs of the grid and adds up each program's unmasked tile loads, as the interpreter does
# expect: {"roofline_place-test-costs": 3, "roofline_place-test-place": 3, "roofline_place-test-kernels": 4}
# %% roofline_place-costs
import math

ITEMSIZE = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1, "int8": 1}


def _nbytes(dtype, *shapes):
    return sum(math.prod(shape) for shape in shapes) * ITEMSIZE[dtype]


def matmul_cost(m, n, k, dtype):
    return 2 * math.prod((m, n, k)), _nbytes(dtype, (m, k), (k, n), (m, n))


def elementwise_cost(n, inputs, ops, dtype):
    return ops * n, _nbytes(dtype, *[(n,)] * (inputs + 1))


def softmax_cost(rows, cols, dtype):
    return 5 * rows * cols, _nbytes(dtype, (rows, cols), (rows, cols))


def layer_norm_cost(rows, cols, dtype):
    return 7 * rows * cols, _nbytes(dtype, (rows, cols), (cols,), (cols,), (rows, cols))


def conv2d_cost(batch, c_in, height, width, c_out, kernel, padding, dtype):
    out = (batch, c_out, height + 2 * padding - kernel + 1, width + 2 * padding - kernel + 1)
    weight = (c_out, c_in, kernel, kernel)
    macs = math.prod(out) * c_in * kernel * kernel
    return 2 * macs, _nbytes(dtype, (batch, c_in, height, width), weight, out)


def attention_cost(batch, heads, seq, head_dim, dtype):
    q = (batch, heads, seq, head_dim)
    scores_macs = batch * heads * seq * seq * head_dim      # Q K^T; P V has as many
    return 2 * 2 * scores_macs, _nbytes(dtype, q, q, q, q)
# %% roofline_place-place
def roofline(flops, traffic, peak, bandwidth):
    intensity = {}
    attainable, bound = peak, "compute"
    for level, moved in traffic.items():
        intensity[level] = flops / moved
        ridge = peak / bandwidth[level]
        if intensity[level] < ridge:              # this level's slanted roof is below the peak
            roof = intensity[level] * bandwidth[level]
            if roof < attainable:
                attainable, bound = roof, level
    return {"intensity": intensity, "attainable": attainable, "bound": bound}
# %% roofline_place-kernels
def tiled_matmul_traffic(m, n, k, block_m, block_n, block_k, dtype):
    loaded = 0
    for row0 in range(0, m, block_m):
        rows = min(block_m, m - row0)             # the unmasked rows of this program's tiles
        for col0 in range(0, n, block_n):
            cols = min(block_n, n - col0)
            loaded += rows * k + k * cols         # its panel of A and its panel of B, over all of k
    return loaded * ITEMSIZE[dtype], 4 * m * n


def layer_norm_traffic(rows, cols, dtype):
    per_program = 3 * cols * ITEMSIZE[dtype]      # x's row, the weight, the bias
    return rows * per_program, rows * cols * ITEMSIZE[dtype]
