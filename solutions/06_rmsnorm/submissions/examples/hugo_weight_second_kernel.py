# Normalises in one kernel and scales by the weight in a second one that reads the output back and writes it
# again: right values, but it moves x-sized data two to three times (fails the GPU bandwidth check).
#%% rmsnorm
@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, out_ptr, M, N, stride_x, stride_out, eps,
                   BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    ok = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    tl.store(out_ptr + row * stride_out + cols, (x * rstd).to(tl.float32), mask=ok)


@triton.jit
def scale_kernel(xhat_ptr, w_ptr, out_ptr, N, stride_out, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    ok = cols < N
    xhat = tl.load(xhat_ptr + row * N + cols, mask=ok, other=0.0)
    w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, (xhat * w).to(out_ptr.dtype.element_ty), mask=ok)


def launch_config(m: int, n: int, element_size: int) -> tuple[int, int, int, int, bool]:
    """(BLOCK_N, ROWS, num_warps, programs, STREAM) for an [m, n] input."""
    return triton.next_power_of_2(n), 1, 4, m, False   # one row per program (rmsnorm_with_rstd uses it)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dimension of x (float32, float16 or bfloat16, any rank), scaled by weight of shape [N]."""
    expect_float("x", x)
    expect_float("weight", weight, ndim=1)
    if x.dim() == 0 or weight.shape[0] != x.shape[-1]:
        raise BadInputError(f"weight has shape {tuple(weight.shape)}; it must be [N] for x of shape "
                            f"{tuple(x.shape)} (N, the last dimension, is normalised)")
    N = x.shape[-1]
    x2 = x.reshape(-1, N)               # [M, N]; a view when possible, so rows may be stride(0) apart
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    weight = weight.contiguous()
    M = x2.shape[0]
    # the normalised rows go to a float32 tensor, read back by the second kernel (so float16 rounds once)
    xhat = torch.empty((M, N), dtype=torch.float32, device=x.device)
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    block = triton.next_power_of_2(N)
    rmsnorm_kernel[(M,)](x2, weight, xhat, M, N, x2.stride(0), N, eps, BLOCK_N=block, ROWS=1)
    scale_kernel[(M,)](xhat, weight, out, N, out.stride(0), BLOCK_N=block)
    return out.reshape(x.shape)
#%% rmsnorm_with_rstd from-solution
