# why: splits the work into two kernels, one for each row's maximum (written to a buffer) and one for the exponentials and the division, which re-reads the row: right values from softmax, but the kernel no longer has the specified signature (it takes the maximum's buffer too), so the grader's launch softmax_kernel[(M,)](x, out, N, stride_x, stride_out, BLOCK) fails, as the kernel's self-check shows, and the launcher makes two launches, one of another kernel
# expect: {"triton_softmax-values-test": 0, "triton_softmax-half-test": 0, "triton_softmax-traffic-test": 0, "triton_softmax-launcher-test": 0}
# %% triton_softmax-kernel
import triton
import triton.language as tl


@triton.jit
def row_max_kernel(x_ptr, max_ptr, n_cols, stride_x, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * stride_x + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
    tl.store(max_ptr + row, tl.max(v, axis=0))


@triton.jit
def softmax_kernel(x_ptr, out_ptr, max_ptr, n_cols, stride_x, stride_out, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    v = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(v - tl.load(max_ptr + row))
    tl.store(out_ptr + row * stride_out + cols, (e / tl.sum(e, axis=0)).to(out_ptr.dtype.element_ty), mask=mask)
# %% triton_softmax-launcher
import torch
import triton


def softmax(x):
    if x.dim() != 2 or not x.is_contiguous():
        raise ValueError("softmax expects a contiguous 2-D tensor")
    n_rows, n_cols = x.shape
    block = triton.next_power_of_2(n_cols)
    row_max = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    y = torch.empty_like(x)
    row_max_kernel[(n_rows,)](x, row_max, n_cols, x.stride(0), BLOCK=block)
    softmax_kernel[(n_rows,)](x, y, row_max, n_cols, x.stride(0), y.stride(0), BLOCK=block)
    return y
