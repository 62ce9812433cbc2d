# The production habit (vLLM's fused_add_rms_norm): writes h = x + residual back into residual and returns that
# tensor as h. Right values, but the caller's residual is changed and h is not a new tensor.
#%% traffic from-solution
#%% roofline from-solution
#%% fused from-solution
#%%- replace
    tl.store(h_ptr + offsets, h.to(h_ptr.dtype.element_ty), mask=inside, cache_modifier=".cs" if STREAM else "")
#%%- with
    tl.store(r_ptr + offsets, h.to(r_ptr.dtype.element_ty), mask=inside)  # h in place, into residual
#%%- replace
    return y, h
#%%- with
    return y, residual
