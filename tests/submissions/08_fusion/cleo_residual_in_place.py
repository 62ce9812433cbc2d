# Right values, but the kernel writes h = x + residual back into residual (a production habit): inputs changed.
#%% traffic from-solution
#%% roofline from-solution
#%% fused
@triton.jit
def rmsnorm_residual_silu_kernel(x_ptr, r_ptr, w_ptr, out_ptr, n_rows, n_cols, eps,
                                 BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    ok = cols < n_cols
    base = row.to(tl.int64) * n_cols
    h = tl.load(x_ptr + base + cols, mask=ok, other=0.0).to(tl.float32) \
        + tl.load(r_ptr + base + cols, mask=ok, other=0.0).to(tl.float32)
    tl.store(r_ptr + base + cols, h.to(r_ptr.dtype.element_ty), mask=ok)   # updates the residual stream
    w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    y = h * tl.math.rsqrt(tl.sum(h * h, axis=0) / n_cols + eps) * w
    tl.store(out_ptr + base + cols, (y * tl.sigmoid(y)).to(out_ptr.dtype.element_ty), mask=ok)


def rmsnorm_residual_silu(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                          eps: float = 1e-6) -> torch.Tensor:
    """silu(rmsnorm(x + residual) * weight) over the last dimension, in one kernel; residual is untouched."""
    expect("x", x)
    expect("residual", residual, like=x)
    expect("weight", weight, ndim=1)
    if x.dim() == 0 or weight.shape[0] != x.shape[-1] or weight.dtype != x.dtype:
        raise BadInputError(f"weight must have dtype {x.dtype} and {x.shape[-1] if x.dim() else '?'} "
                            f"elements (the last dimension of x); got {weight.dtype}[{weight.shape[0]}]")
    if x.shape[-1] > 65536:
        raise BadInputError(f"rows of {x.shape[-1]} elements do not fit one program; at most 65536")
    x, residual, weight = x.contiguous(), residual.contiguous(), weight.contiguous()
    n = x.shape[-1]
    out = torch.empty_like(x)
    rmsnorm_residual_silu_kernel[(x.numel() // n,)](x, residual, weight, out, x.numel() // n, n, eps,
                                                    BLOCK_N=triton.next_power_of_2(n), ROWS=1)
    return out
