# why: a correct kernel written differently: the loop in a @triton.jit helper over block indices (range(tl.cdiv(hi - lo, BLOCK_N))), called twice when causal, once for the blocks below the diagonal without the position mask and once for the diagonal blocks with it, as Triton's tutorial does: full marks
# expect: {"flash_attention-bytes-test": 2, "flash_attention-values-test": 3, "flash_attention-causal-test": 3, "flash_attention-traffic-test": 2}
# %% flash_attention-bytes: solution
# %% flash_attention-kernel
import triton
import triton.language as tl


@triton.jit
def _attend(q, k_ptr, v_ptr, base, rows, dims, seq_len, scale, acc, l_i, m_i, lo, hi,
            DIAGONAL: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    """Key blocks lo, lo + BLOCK_N, ... < hi into the running (acc, l_i, m_i); DIAGONAL: mask by position."""
    for j in range(0, tl.cdiv(hi - lo, BLOCK_N)):
        cols = lo + j * BLOCK_N + tl.arange(0, BLOCK_N)
        inside = cols < seq_len
        k = tl.load(k_ptr + base + cols[:, None] * HEAD_DIM + dims[None, :], mask=inside[:, None], other=0.0)
        v = tl.load(v_ptr + base + cols[:, None] * HEAD_DIM + dims[None, :], mask=inside[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        if DIAGONAL:
            s = tl.where(inside[None, :] & (cols[None, :] <= rows[:, None]), s, float("-inf"))
        else:
            s = tl.where(inside[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        acc = acc * alpha[:, None]
        acc += tl.dot(p.to(v.dtype), v)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def flash_fwd_kernel(q_ptr, k_ptr, v_ptr, out_ptr, lse_ptr, seq_len, scale,
                     CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    block = tl.program_id(0)
    head = tl.program_id(1)
    base = head * seq_len * HEAD_DIM
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + base + rows[:, None] * HEAD_DIM + dims[None, :], mask=rows[:, None] < seq_len, other=0.0)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    m_i = tl.full((BLOCK_M,), -float("inf"), dtype=tl.float32)
    if CAUSAL:
        # below the diagonal: whole blocks, no position mask; then the blocks on it, masked; none above it
        acc, l_i, m_i = _attend(q, k_ptr, v_ptr, base, rows, dims, seq_len, scale, acc, l_i, m_i,
                                0, block * BLOCK_M, False, BLOCK_N, HEAD_DIM)
        acc, l_i, m_i = _attend(q, k_ptr, v_ptr, base, rows, dims, seq_len, scale, acc, l_i, m_i,
                                block * BLOCK_M, tl.minimum((block + 1) * BLOCK_M, seq_len), True, BLOCK_N, HEAD_DIM)
    else:
        acc, l_i, m_i = _attend(q, k_ptr, v_ptr, base, rows, dims, seq_len, scale, acc, l_i, m_i,
                                0, seq_len, False, BLOCK_N, HEAD_DIM)
    tl.store(out_ptr + base + rows[:, None] * HEAD_DIM + dims[None, :], (acc / l_i[:, None]).to(out_ptr.dtype.element_ty),
             mask=rows[:, None] < seq_len)
    tl.store(lse_ptr + head * seq_len + rows, m_i + tl.log(l_i), mask=rows < seq_len)
