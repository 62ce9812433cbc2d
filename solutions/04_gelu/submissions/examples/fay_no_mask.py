# Loads without a mask (the store is masked): every value is right, but on a GPU the last block reads past the end of x.
#%% gelu from-solution
#%%- replace
    start = tl.program_id(0) * BLOCK
    idx = start + tl.arange(0, BLOCK)
    # The full blocks, masked with a multiple of BLOCK: the compiler can prove the mask constant over
    # groups of lanes and loads 16 bytes per instruction even when n_elements is odd (see the appendix).
    n_full = n_elements // BLOCK * BLOCK
    full = idx < n_full                      # all true in a full block, all false in the last, partial one
    x = tl.load(x_ptr + idx, mask=full).to(tl.float32)
    y = 0.5 * x * (1.0 + stable_tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    tl.store(out_ptr + idx, y.to(out_ptr.dtype.element_ty), mask=full)
    if start >= n_full:                      # the last block, partial: element by element
        inside = idx < n_elements
        x = tl.load(x_ptr + idx, mask=inside).to(tl.float32)
        y = 0.5 * x * (1.0 + stable_tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
        tl.store(out_ptr + idx, y.to(out_ptr.dtype.element_ty), mask=inside)
#%%- with
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = idx < n_elements
    x = tl.load(x_ptr + idx).to(tl.float32)
    y = 0.5 * x * (1.0 + stable_tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    tl.store(out_ptr + idx, y.to(out_ptr.dtype.element_ty), mask=inside)
