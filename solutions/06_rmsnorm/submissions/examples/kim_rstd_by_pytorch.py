# The kernel writes y; rstd is computed by PyTorch afterwards: right values, but not the kernel's work, and it
# reads x a second time.
#%% rmsnorm from-solution
#%% rmsnorm_with_rstd from-solution
#%%- replace
    return out.reshape(x.shape), rstd.reshape(x.shape[:-1])
#%%- with
    rstd = torch.rsqrt(x2.float().pow(2).mean(-1) + eps)
    return out.reshape(x.shape), rstd.reshape(x.shape[:-1])
