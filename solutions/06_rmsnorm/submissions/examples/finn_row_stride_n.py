# Addresses row r at r * N: wrong for sliced inputs whose rows are not back to back.
#%% rmsnorm from-solution
#%%- replace
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=ok, other=0.0,
                eviction_policy="evict_first" if STREAM else "").to(tl.float32)
#%%- with
    x = tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=ok, other=0.0,
                eviction_policy="evict_first" if STREAM else "").to(tl.float32)
#%% rmsnorm_with_rstd from-solution
