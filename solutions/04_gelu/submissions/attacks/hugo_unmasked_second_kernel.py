# gelu_kernel is masked, but gelu hands the last, partial block to a second kernel whose load has no mask (its store is masked): every value is right, and on a GPU that kernel reads past the end of x. The mask check reads every kernel gelu launched: it loses the shapes test only.
#%% gelu from-solution
#%%- replace
        tl.store(out_ptr + idx, y.to(out_ptr.dtype.element_ty), mask=inside)
#%%- with
        tl.store(out_ptr + idx, y.to(out_ptr.dtype.element_ty), mask=inside)


@triton.jit
def gelu_tail_kernel(x_ptr, out_ptr, n_elements, start, BLOCK: tl.constexpr):
    idx = start + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + idx).to(tl.float32)
    y = 0.5 * x * (1.0 + stable_tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    tl.store(out_ptr + idx, y.to(out_ptr.dtype.element_ty), mask=idx < n_elements)
#%%- replace
    if n:
        gelu_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK)
#%%- with
    full = n // BLOCK
    if full:
        gelu_kernel[(full,)](x, out, n, BLOCK=BLOCK)
    if n % BLOCK:
        gelu_tail_kernel[(1,)](x, out, n, full * BLOCK, BLOCK=BLOCK)
