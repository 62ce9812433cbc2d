# Hard-codes eps = 1e-6 in the kernel instead of passing the caller's eps.
#%% rmsnorm from-solution
#%%- replace
    rstd = 1.0 / tl.sqrt(mean_sq + eps)
#%%- with
    rstd = 1.0 / tl.sqrt(mean_sq + 1e-6)
#%% rmsnorm_with_rstd from-solution
