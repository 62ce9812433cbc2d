# Right values, but the kernel writes h = x + residual back into residual (a production habit): inputs changed.
#%% traffic from-solution
#%% roofline from-solution
#%% fused from-solution
#%%- replace
    tl.store(out_ptr + offsets, (y * tl.sigmoid(y)).to(out_ptr.dtype.element_ty), mask=inside)
#%%- with
    tl.store(r_ptr + offsets, h.to(r_ptr.dtype.element_ty), mask=inside)  # keep h for the next layer
    tl.store(out_ptr + offsets, (y * tl.sigmoid(y)).to(out_ptr.dtype.element_ty), mask=inside)
