# add_kernel is masked, but add hands the last, partial block to a second kernel whose loads have no mask (its store is masked): every value is right, and on a GPU that kernel reads past the end of x and y. The mask test reads every kernel add launched: it loses that test only.
#%% add from-solution
#%%- replace
    tl.store(out_ptr + idx, a + b, mask=inside)
#%%- with
    tl.store(out_ptr + idx, a + b, mask=inside)


@triton.jit
def add_tail_kernel(x_ptr, y_ptr, out_ptr, n_elements, start, BLOCK: tl.constexpr):
    idx = start + tl.arange(0, BLOCK)
    tl.store(out_ptr + idx, tl.load(x_ptr + idx) + tl.load(y_ptr + idx), mask=idx < n_elements)
#%%- replace
    add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
#%%- with
    full = n // BLOCK
    if full:
        add_kernel[(full,)](x, y, out, n, BLOCK=BLOCK)
    if n % BLOCK:
        add_tail_kernel[(1,)](x, y, out, n, full * BLOCK, BLOCK=BLOCK)
