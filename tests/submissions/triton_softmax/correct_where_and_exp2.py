# why: a correct solution written differently: the masked lanes load 0.0 and are then set to -inf with tl.where, the exponential is tl.exp2 with a log2(e) factor kept as a module constant, the launcher uses x.size(0), torch.empty(x.shape, dtype=x.dtype, device=x.device), a grid function and x.ndim, and the kernel's cell also holds a Python helper and an example that the grader never runs: full marks
# expect: {"triton_softmax-values-test": 4, "triton_softmax-half-test": 2, "triton_softmax-traffic-test": 2, "triton_softmax-launcher-test": 2}
# %% triton_softmax-kernel
import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634     # exp(z) = 2 ** (z * log2(e))


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, stride_x, stride_out, BLOCK: tl.constexpr):
    """Program tl.program_id(0) writes the softmax of that row of x to the same row of out."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    valid = cols < n_cols
    v = tl.load(x_ptr + row * stride_x + cols, mask=valid, other=0.0).to(tl.float32)
    v = tl.where(valid, v, float("-inf"))
    p = tl.exp2((v - tl.max(v, axis=0)) * LOG2E)
    tl.store(out_ptr + row * stride_out + cols, (p / tl.sum(p, axis=0)).to(out_ptr.dtype.element_ty), mask=valid)


def show(t):
    print(t.shape, t.dtype)


example_input = torch.randn(3, 5)
show(example_input)
# %% triton_softmax-launcher
import torch
import triton


def softmax(x):
    """The softmax of every row of the contiguous 2-D tensor x, by one launch of softmax_kernel."""
    if x.ndim != 2:
        raise ValueError(f"expected a 2-D tensor, got {x.ndim} dimensions")
    if not x.is_contiguous():
        raise ValueError("expected a contiguous tensor")
    rows, cols = x.size(0), x.size(1)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)

    def grid(meta):
        return (rows,)

    softmax_kernel[grid](x, out, cols, x.stride(0), out.stride(0), BLOCK=triton.next_power_of_2(cols), num_warps=4)
    return out
