# The widely copied row offset off_z + off_h * N: passes every Z = 1 test, fails as soon as Z > 1.
#%% offsets from-solution
#%%- replace
    return off_z * H * N + off_h * N
#%%- with
    return off_z + off_h * N
    ### END SOLUTION
#%% attention
LOG2E = 1.4426950408889634  # exp(x) == exp2(x * LOG2E)


def attention_configs():
    """Block sizes to try: several on a GPU, one small one under the interpreter."""
    if device.interpreted:
        return [triton.Config({"BLOCK_M": 32, "BLOCK_N": 16}, num_warps=4, num_stages=1)]
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
            for bm, bn, w, s in ((128, 64, 8, 3), (128, 64, 4, 3), (128, 128, 8, 2), (128, 32, 4, 3),
                                 (64, 64, 4, 3), (64, 32, 4, 4), (128, 64, 8, 4), (128, 128, 8, 3))]


@triton.jit
def _attend_blocks(acc, m_i, l_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
                   offs_m, lo, hi, N, qk_scale,
                   BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """Fold the keys and values lo..hi (in blocks of BLOCK_N) into the running (acc, m_i, l_i)."""
    offs_d = tl.arange(0, HEAD_DIM)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k_ptrs = k_base + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd
        v_ptrs = v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd
        if MASKED:
            k = tl.load(k_ptrs, mask=offs_n[:, None] < N, other=0.0)
        else:
            k = tl.load(k_ptrs)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        if MASKED:
            keep = offs_n[None, :] < N
            if CAUSAL:
                keep = keep & (offs_n[None, :] <= offs_m[:, None])
            s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        if MASKED:
            v = tl.load(v_ptrs, mask=offs_n[:, None] < N, other=0.0)
        else:
            v = tl.load(v_ptrs)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    return acc, m_i, l_i


@triton.autotune(configs=attention_configs(), key=["N", "HEAD_DIM", "CAUSAL"])
@triton.jit
def attention_kernel(Q, K, V, O,
                     stride_qz, stride_qh, stride_qn, stride_qd,
                     stride_kz, stride_kh, stride_kn, stride_kd,
                     stride_vz, stride_vh, stride_vn, stride_vd,
                     stride_oz, stride_oh, stride_on, stride_od,
                     H, N, qk_scale,
                     CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M   # first query row of this program
    off_hz = tl.program_id(1)              # which of the Z*H heads
    off_z = (off_hz // H).to(tl.int64)
    off_h = (off_hz % H).to(tl.int64)
    row = off_z + off_h * N   # first row of this head in the [Z*H*N, D] view
    q_base = Q + row * stride_qn
    k_base = K + row * stride_kn
    v_base = V + row * stride_vn
    o_base = O + row * stride_on
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m[:, None] < N
    q = tl.load(q_base + offs_m[:, None] * stride_qn + offs_d[None, :] * stride_qd, mask=row_ok, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.full([BLOCK_M], 0.0, tl.float32)
    acc = tl.full([BLOCK_M, HEAD_DIM], 0.0, tl.float32)
    if CAUSAL:
        unmasked_end = start_m
        stop = tl.minimum(start_m + BLOCK_M, N)
    else:
        unmasked_end = (N // BLOCK_N) * BLOCK_N
        stop = N
    acc, m_i, l_i = _attend_blocks(acc, m_i, l_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
                                   offs_m, 0, unmasked_end, N, qk_scale, BLOCK_N, HEAD_DIM, False, CAUSAL)
    acc, m_i, l_i = _attend_blocks(acc, m_i, l_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
                                   offs_m, unmasked_end, stop, N, qk_scale, BLOCK_N, HEAD_DIM, True, CAUSAL)
    out = acc / l_i[:, None]
    tl.store(o_base + offs_m[:, None] * stride_on + offs_d[None, :] * stride_od, out.to(O.dtype.element_ty),
             mask=row_ok)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              sm_scale: float | None = None) -> torch.Tensor:
    """softmax(q k^T * sm_scale) v for q, k, v of shape [Z, H, N, D] (any strides), in one fused kernel."""
    expect("q", q, ndim=4)
    expect("k", k, like=q)
    expect("v", v, like=q)
    Z, H, N, D = q.shape
    if D > 128 or D & (D - 1) or N == 0:
        raise BadInputError(f"need N >= 1 and D a power of two up to 128, got shape {tuple(q.shape)}")
    if D < 16:  # tl.dot needs 16 along each dimension: pad the heads with zeros, which change no score
        pad = lambda t: F.pad(t, (0, 16 - D))  # noqa: E731
        scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
        return attention(pad(q), pad(k), pad(v), causal, scale)[..., :D]
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = torch.empty_like(q)
    grid = lambda meta: (triton.cdiv(N, meta["BLOCK_M"]), Z * H)  # noqa: E731
    attention_kernel[grid](q, k, v, out, *q.stride(), *k.stride(), *v.stride(), *out.stride(),
                           H, N, sm_scale * LOG2E, CAUSAL=bool(causal), HEAD_DIM=D)
    return out
    ### END SOLUTION