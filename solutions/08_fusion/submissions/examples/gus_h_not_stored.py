# Fuses away h: writes y only, as the old 2.33x prediction assumed. Fewer bytes, but the residual stream the next
# block needs is never written.
#%% traffic from-solution
#%% roofline from-solution
#%% fused from-solution
#%%- replace
    tl.store(h_ptr + offsets, h.to(h_ptr.dtype.element_ty), mask=inside, cache_modifier=".cs" if STREAM else "")
#%%- with
    pass                                                              # h stays in registers
