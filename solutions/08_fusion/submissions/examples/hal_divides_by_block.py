# Divides the sum of squares by BLOCK_N, the padded block, instead of N: right only when N is a power of two.
#%% traffic from-solution
#%% roofline from-solution
#%% fused from-solution
#%%- replace
    inv_rms = tl.math.rsqrt(tl.sum(h * h, axis=1) / n_cols + eps)
#%%- with
    inv_rms = tl.math.rsqrt(tl.sum(h * h, axis=1) / BLOCK_N + eps)
