# why: reads the row from memory three times, once for the maximum, once for the sum and once for the division (the eager chain's passes inside one kernel): right values, but 3 M N s bytes loaded, twice the minimum traffic in all
# expect: {"triton_softmax-values-test": 4, "triton_softmax-half-test": 2, "triton_softmax-traffic-test": 0, "triton_softmax-launcher-test": 2}
# %% triton_softmax-kernel
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, stride_x, stride_out, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    start = x_ptr + row * stride_x
    m = tl.max(tl.load(start + cols, mask=mask, other=-float("inf")).to(tl.float32), axis=0)
    s = tl.sum(tl.exp(tl.load(start + cols, mask=mask, other=-float("inf")).to(tl.float32) - m), axis=0)
    y = tl.exp(tl.load(start + cols, mask=mask, other=-float("inf")).to(tl.float32) - m) / s
    tl.store(out_ptr + row * stride_out + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
# %% triton_softmax-launcher: solution
