# why: correct, written differently: floats where the reference uses integers (math.ceil of a division, FLOPs as 2.0 * ...), the roofs sorted with the peak among them, the itemsize from a table of bits
# expect: {"roofline_place-test-costs": 3, "roofline_place-test-place": 3, "roofline_place-test-kernels": 4}
# %% roofline_place-costs
BITS = {"float64": 64, "float32": 32, "bfloat16": 16, "float16": 16, "float8_e4m3fn": 8, "int8": 8}


def size(dtype):
    return BITS[dtype] // 8


def matmul_cost(m, n, k, dtype):
    return 2.0 * m * n * k, float(size(dtype) * (m * k + k * n + m * n))


def elementwise_cost(n, inputs, ops, dtype):
    return float(n * ops), float(n * size(dtype) * (inputs + 1))


def softmax_cost(rows, cols, dtype):
    return 5.0 * rows * cols, 2.0 * rows * cols * size(dtype)


def layer_norm_cost(rows, cols, dtype):
    return 7.0 * rows * cols, float(size(dtype) * cols * (2 * rows + 2))


def conv2d_cost(batch, c_in, height, width, c_out, kernel, padding, dtype):
    h_out = height - kernel + 2 * padding + 1
    w_out = width - kernel + 2 * padding + 1
    flops = 2.0 * batch * c_out * h_out * w_out * c_in * kernel ** 2
    elements = batch * (c_in * height * width + c_out * h_out * w_out) + c_out * c_in * kernel ** 2
    return flops, float(elements * size(dtype))


def attention_cost(batch, heads, seq, head_dim, dtype):
    return 4.0 * batch * heads * seq ** 2 * head_dim, 4.0 * batch * heads * seq * head_dim * size(dtype)
# %% roofline_place-place
def roofline(flops, traffic, peak, bandwidth):
    intensity = {name: flops / traffic[name] for name in traffic}
    roofs = sorted([(peak, 0, "compute")] + [(intensity[name] * bandwidth[name], 1, name) for name in traffic])
    return {"intensity": intensity, "attainable": roofs[0][0], "bound": roofs[0][2]}
# %% roofline_place-kernels
import math


def tiled_matmul_traffic(m, n, k, block_m, block_n, block_k, dtype):
    s = size(dtype)
    return s * k * (m * math.ceil(n / block_n) + n * math.ceil(m / block_m)), 4 * m * n


def layer_norm_traffic(rows, cols, dtype):
    return 3 * rows * cols * size(dtype), rows * cols * size(dtype)
