# why: the launcher computes the softmax with torch.softmax and launches a kernel that only copies the finished values: the kernel, launched by the grader on x, returns x unchanged (no softmax), though it moves exactly the minimum traffic; the launcher launches on other data than x and the reading refuses torch.softmax
# expect: {"triton_softmax-values-test": 0, "triton_softmax-half-test": 0, "triton_softmax-traffic-test": 2, "triton_softmax-launcher-test": 0}
# %% triton_softmax-kernel
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, stride_x, stride_out, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    values = tl.load(x_ptr + row * stride_x + cols, mask=mask)
    tl.store(out_ptr + row * stride_out + cols, values, mask=mask)
# %% triton_softmax-launcher
import torch
import triton


def softmax(x):
    done = torch.softmax(x.float(), dim=1).to(x.dtype)
    out = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](done, out, x.shape[1], done.stride(0), out.stride(0),
                                  BLOCK=triton.next_power_of_2(x.shape[1]))
    return out
