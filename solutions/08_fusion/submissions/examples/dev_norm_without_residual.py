# Adds the residual but takes the mean of squares over x alone: the norm forgets the residual.
#%% traffic from-solution
#%% roofline from-solution
#%% fused from-solution
#%%- replace
    inv_rms = tl.math.rsqrt(tl.sum(h * h, axis=1) / n_cols + eps)
#%%- with
    inv_rms = tl.math.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)
