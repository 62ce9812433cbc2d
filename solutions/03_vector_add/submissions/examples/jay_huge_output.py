# A correct kernel whose cell prints 40 MB: full marks, and the grader keeps only the first MB of output.
#%% add
BLOCK = 1024

print("spam " * 8_000_000)


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = idx < n_elements
    tl.store(out_ptr + idx, tl.load(x_ptr + idx, mask=ok) + tl.load(y_ptr + idx, mask=ok), mask=ok)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x + y elementwise for two tensors of one shape and dtype (float32 or float16), by add_kernel."""
    expect("x", x)
    expect("y", y, like=x)
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
    return out
