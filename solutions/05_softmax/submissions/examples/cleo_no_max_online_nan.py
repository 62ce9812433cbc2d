# Two traps: softmax without the max subtraction (inf/NaN on large inputs), and an online softmax_long
# without the -inf guard (exp(-inf - (-inf)) = NaN in rows that start with a chunk of -inf).
#%% softmax
MAX_COLS = 32768  # longest row `softmax` takes in one block; longer rows are the extension's job


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_rows, n_cols, x_row_stride, out_row_stride,
                   BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    ok = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=ok, other=float("-inf")).to(tl.float32)
    e = tl.exp(x)
    tl.store(out_ptr + row * out_row_stride + cols, (e / tl.sum(e, axis=0)).to(out_ptr.dtype.element_ty), mask=ok)


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension of a 2-D float32/float16/bfloat16 tensor, by softmax_kernel."""
    expect("x", x, ndim=2, dtypes=(torch.float32, torch.float16, torch.bfloat16))
    if x.shape[1] > MAX_COLS:
        raise BadInputError(f"x has rows of {x.shape[1]} elements; softmax takes up to {MAX_COLS} "
                            "(longer rows: softmax_long, the extension)")
    if x.stride(1) != 1 and x.shape[1] > 1:
        x = x.contiguous()  # rows may be strided, but the elements of a row must be adjacent
    out = torch.empty_like(x)
    n_rows, n_cols = x.shape
    softmax_kernel[(n_rows,)](x, out, n_rows, n_cols, x.stride(0), out.stride(0),
                              BLOCK_N=triton.next_power_of_2(n_cols), ROWS=1)
    return out
#%% softmax_long
CHUNK = 4096  # elements per loop step of softmax_long


@triton.jit
def softmax_long_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, CHUNK)
    m = float("-inf")
    s = 0.0
    for start in tl.range(0, n_cols, CHUNK):
        cols = start + offs
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)   # NaN while m_new is -inf
        m = m_new
    for start in tl.range(0, n_cols, CHUNK):
        cols = start + offs
        ok = cols < n_cols
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=ok, other=float("-inf")).to(tl.float32)
        tl.store(out_ptr + row * out_row_stride + cols, (tl.exp(x - m) / s).to(out_ptr.dtype.element_ty), mask=ok)


def softmax_long(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension of a 2-D float32/float16/bfloat16 tensor with rows of any length."""
    expect("x", x, ndim=2, dtypes=(torch.float32, torch.float16, torch.bfloat16))
    if x.stride(1) != 1 and x.shape[1] > 1:
        x = x.contiguous()
    out = torch.empty_like(x)
    softmax_long_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), out.stride(0), CHUNK=CHUNK)
    return out
