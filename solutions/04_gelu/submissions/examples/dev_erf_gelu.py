# Computes the exact GELU (with erf, built from an approximation) instead of the tanh form the chapter asks for.
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
    x = tl.load(x_ptr + idx, mask=inside).to(tl.float32)
    y = 0.5 * x * (1.0 + erf(x * 0.7071067811865476))
    tl.store(out_ptr + idx, y.to(out_ptr.dtype.element_ty), mask=inside)
#%%- replace
    return tl.where(a >= 0, t, -t)
#%%- with
    return tl.where(a >= 0, t, -t)


@triton.jit
def erf(z):
    # Abramowitz and Stegun 7.1.26 (|error| < 1.5e-7)
    s = tl.where(z >= 0, 1.0, -1.0)
    z = tl.abs(z)
    t = 1.0 / (1.0 + 0.3275911 * z)
    p = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return s * (1.0 - p * tl.exp(-z * z))
