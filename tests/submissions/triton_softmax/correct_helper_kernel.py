# why: a correct solution written differently: the row's softmax is a @triton.jit helper the kernel calls, tl is imported from triton, the masked lanes load float("-inf") spelled through tl.full, the store lets tl.store cast to the output's dtype, and the launcher computes BLOCK with int.bit_length, passes every argument by keyword and checks the input in one condition: full marks
# expect: {"triton_softmax-values-test": 4, "triton_softmax-half-test": 2, "triton_softmax-traffic-test": 2, "triton_softmax-launcher-test": 2}
# %% triton_softmax-kernel
import triton
from triton import language as tl


@triton.jit
def row_softmax(v):
    shifted = v - tl.max(v, axis=0)
    num = tl.exp(shifted)
    return num / tl.sum(num, axis=0)


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, stride_x, stride_out, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = tl.arange(0, BLOCK)
    m = offs < n_cols
    neg_inf = tl.full((BLOCK,), float("-inf"), tl.float32)
    v = tl.load(x_ptr + pid * stride_x + offs, mask=m)
    v = tl.where(m, v.to(tl.float32), neg_inf)
    tl.store(out_ptr + pid * stride_out + offs, row_softmax(v), mask=m)
# %% triton_softmax-launcher
import torch


def softmax(x):
    if not (isinstance(x, torch.Tensor) and x.dim() == 2 and x.is_contiguous()):
        raise ValueError("softmax takes a contiguous 2-D tensor")
    n_rows, n_cols = x.shape
    block = 1 << (n_cols - 1).bit_length()
    out = torch.empty_like(x)
    softmax_kernel[(n_rows,)](x_ptr=x, out_ptr=out, n_cols=n_cols, stride_x=x.stride(0),
                              stride_out=out.stride(0), BLOCK=block)
    return out
