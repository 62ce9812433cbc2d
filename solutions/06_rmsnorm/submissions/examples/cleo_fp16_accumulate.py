# Squares and sums in the input's precision: float16 rows with |x| > 256 (or large sums) overflow to inf and come out as zeros.
#%% rmsnorm from-solution
#%%- replace
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=ok, other=0.0,
                eviction_policy="evict_first" if STREAM else "").to(tl.float32)
#%%- with
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=ok, other=0.0,
                eviction_policy="evict_first" if STREAM else "")
#%% rmsnorm_with_rstd from-solution
