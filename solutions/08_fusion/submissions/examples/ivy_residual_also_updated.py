# Returns a new h, and also writes it into residual (to save the caller a copy): every output right, but the
# caller's residual is changed. The feedback says exactly that, and nothing else.
#%% traffic from-solution
#%% roofline from-solution
#%% fused from-solution
#%%- replace
    tl.store(h_ptr + offsets, h.to(h_ptr.dtype.element_ty), mask=inside, cache_modifier=".cs" if STREAM else "")
#%%- with
    tl.store(h_ptr + offsets, h.to(h_ptr.dtype.element_ty), mask=inside, cache_modifier=".cs" if STREAM else "")
    tl.store(r_ptr + offsets, h.to(r_ptr.dtype.element_ty), mask=inside)  # ... and in place, for the caller
