# why: a correct kernel written differently: scores in log2 units (scale x log2(e), a module constant) with tl.exp2, the values loaded after the scores, the accumulator rescaled inside tl.dot's acc argument, the causal bound as tl.minimum(seq_len, pid_m * BLOCK_M + BLOCK_M) and lse converted back to natural log: full marks
# expect: {"flash_attention-bytes-test": 2, "flash_attention-values-test": 3, "flash_attention-causal-test": 3, "flash_attention-traffic-test": 2}
# %% flash_attention-bytes: solution
# %% flash_attention-kernel
import triton
import triton.language as tl

LOG2E = 1.4426950408889634      # log2(e): e^x = 2^(x log2 e)


@triton.jit
def flash_fwd_kernel(q_ptr, k_ptr, v_ptr, out_ptr, lse_ptr, seq_len, scale,
                     CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_h = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q_ptrs = q_ptr + pid_h * seq_len * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    q = tl.load(q_ptrs, mask=offs_m[:, None] < seq_len, other=0.0)
    qk_scale = scale * LOG2E                              # scores in log2 units: exp2 instead of exp
    m_i = tl.zeros((BLOCK_M,), dtype=tl.float32) - float("inf")
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    end = seq_len
    if CAUSAL:
        end = tl.minimum(seq_len, pid_m * BLOCK_M + BLOCK_M)
    for start in range(0, end, BLOCK_N):
        kv = start + offs_n
        kv_ptrs = pid_h * seq_len * HEAD_DIM + kv[:, None] * HEAD_DIM + offs_d[None, :]
        k = tl.load(k_ptr + kv_ptrs, mask=kv[:, None] < seq_len, other=0.0)
        qk = tl.dot(q, tl.trans(k)) * qk_scale
        valid = kv[None, :] < seq_len
        if CAUSAL:
            valid = valid & (offs_m[:, None] >= kv[None, :])
        qk = tl.where(valid, qk, -float("inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp2(qk - m_ij[:, None])
        corr = tl.exp2(m_i - m_ij)
        l_i = l_i * corr + tl.sum(p, 1)
        v = tl.load(v_ptr + kv_ptrs, mask=kv[:, None] < seq_len, other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc * corr[:, None])
        m_i = m_ij
    acc = acc / l_i[:, None]
    o_ptrs = out_ptr + pid_h * seq_len * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    tl.store(o_ptrs, acc.to(out_ptr.dtype.element_ty), mask=offs_m[:, None] < seq_len)
    tl.store(lse_ptr + pid_h * seq_len + offs_m, (m_i + tl.log2(l_i)) / LOG2E, mask=offs_m < seq_len)
