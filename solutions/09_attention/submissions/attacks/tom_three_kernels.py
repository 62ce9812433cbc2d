# Attention in three kernels, the way it is written before FlashAttention: one writes the scores S = q k^T * scale
# (an N x N matrix per head) to memory, one turns each row of S into probabilities P in another N x N buffer, one
# multiplies P by v. Right on every test, so it keeps its correctness points; it moves 4 * Z * H * N^2 elements
# more than a fused kernel, and the judge's re-run of its launch record holds S and P: no fusion points.
#%% offsets from-solution

#%% copy_heads from-solution

#%% attention from-solution
#%%- replace
LOG2E = 1.4426950408889634  # exp(x) == exp2(x * LOG2E)
#%%- with
LOG2E = 1.4426950408889634  # exp(x) == exp2(x * LOG2E)


@triton.jit
def scores_kernel(Q, K, S, stride_qz, stride_qh, stride_qn, stride_qd, stride_kz, stride_kh, stride_kn, stride_kd,
                  H, N, sm_scale, CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr):
    """S[hz, m, n] = sm_scale * q[m] . k[n] (-inf past the diagonal when causal), one BLOCK x BLOCK tile."""
    off_hz = tl.program_id(2)
    off_z, off_h = (off_hz // H).to(tl.int64), (off_hz % H).to(tl.int64)
    offs_m = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_n = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + off_z * stride_qz + off_h * stride_qh + offs_m[:, None] * stride_qn + offs_d[None, :] * stride_qd,
                mask=offs_m[:, None] < N, other=0.0)
    k = tl.load(K + off_z * stride_kz + off_h * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                mask=offs_n[:, None] < N, other=0.0)
    s = tl.dot(q, tl.trans(k)) * sm_scale
    if CAUSAL:
        s = tl.where(offs_n[None, :] <= offs_m[:, None], s, float("-inf"))
    inside = (offs_m[:, None] < N) & (offs_n[None, :] < N)
    tl.store(S + off_hz.to(tl.int64) * N * N + offs_m[:, None] * N + offs_n[None, :], s, mask=inside)


@triton.jit
def softmax_rows_kernel(S, P, ROWS, N, BLOCK_R: tl.constexpr, BLOCK: tl.constexpr):
    """P[rows] = softmax(S[rows]) for BLOCK_R rows of the Z*H*N rows of N scores."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    offs = tl.arange(0, BLOCK)
    inside = (rows[:, None] < ROWS) & (offs[None, :] < N)
    s = tl.load(S + rows[:, None] * N + offs[None, :], mask=inside, other=float("-inf")).to(tl.float32)
    p = tl.exp(s - tl.max(s, 1)[:, None])
    tl.store(P + rows[:, None] * N + offs[None, :], p / tl.sum(p, 1)[:, None], mask=inside)


@triton.jit
def pv_kernel(P, V, O, stride_vz, stride_vh, stride_vn, stride_vd, stride_oz, stride_oh, stride_on, stride_od,
              H, N, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr):
    """O[rows] = P[rows] @ v for BLOCK query rows of one head."""
    off_hz = tl.program_id(1)
    off_z, off_h = (off_hz // H).to(tl.int64), (off_hz % H).to(tl.int64)
    offs_m = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, HEAD_DIM)
    acc = tl.zeros([BLOCK, HEAD_DIM], tl.float32)
    for start_n in range(0, N, BLOCK):
        offs_n = start_n + tl.arange(0, BLOCK)
        p = tl.load(P + off_hz.to(tl.int64) * N * N + offs_m[:, None] * N + offs_n[None, :],
                    mask=(offs_m[:, None] < N) & (offs_n[None, :] < N), other=0.0)
        v = tl.load(V + off_z * stride_vz + off_h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                    mask=offs_n[:, None] < N, other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc)
    tl.store(O + off_z * stride_oz + off_h * stride_oh + offs_m[:, None] * stride_on + offs_d[None, :] * stride_od,
             acc.to(O.dtype.element_ty), mask=offs_m[:, None] < N)
#%%- replace
    out = torch.empty_like(q)
    grid = (triton.cdiv(N, config.block_m), Z * H)
    attention_kernel[grid](q, k, v, out, *q.stride(), *k.stride(), *v.stride(), *out.stride(),
                           H, N, sm_scale * LOG2E, CAUSAL=bool(causal), HEAD_DIM=D, **config.launch)
    return out
#%%- with
    out = torch.empty_like(q)
    s = torch.empty(Z * H, N, N, device=q.device, dtype=torch.float32)   # the scores, through memory
    p = torch.empty_like(s)                                              # and the probabilities
    block = 64
    scores_kernel[(triton.cdiv(N, block), triton.cdiv(N, block), Z * H)](
        q, k, s, *q.stride(), *k.stride(), H, N, sm_scale, CAUSAL=bool(causal), HEAD_DIM=D, BLOCK=block)
    softmax_rows_kernel[(triton.cdiv(Z * H * N, 16),)](s, p, Z * H * N, N, BLOCK_R=16,
                                                       BLOCK=triton.next_power_of_2(N))
    pv_kernel[(triton.cdiv(N, block), Z * H)](p, v, out, *v.stride(), *out.stride(), H, N, HEAD_DIM=D, BLOCK=block)
    return out
