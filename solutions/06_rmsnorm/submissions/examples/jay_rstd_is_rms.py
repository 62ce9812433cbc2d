# Saves the row's rms, sqrt(mean + eps), as rstd instead of its inverse: y is right, rstd is not.
#%% rmsnorm from-solution
#%% rmsnorm_with_rstd from-solution
#%%- replace
    tl.store(rstd_ptr + rows, rstd, mask=row_ok)
#%%- with
    tl.store(rstd_ptr + rows, 1.0 / rstd, mask=row_ok)
