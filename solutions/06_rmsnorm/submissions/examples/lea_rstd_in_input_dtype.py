# Allocates rstd in the input's dtype: float16 for a float16 x, where the backward pass wants float32.
#%% rmsnorm from-solution
#%% rmsnorm_with_rstd from-solution
#%%- replace
    rstd = torch.empty(M, dtype=torch.float32, device=x.device)
#%%- with
    rstd = torch.empty(M, dtype=x.dtype, device=x.device)
