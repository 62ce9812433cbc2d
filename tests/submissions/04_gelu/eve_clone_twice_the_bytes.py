# Copies x into the output first, then applies GELU in place: right values, twice the bytes (fails the GPU bandwidth check).
#%% gelu from-solution
#%%- replace
BLOCK = 1024       # elements per program
#%%- with
BLOCK = 1024
#%%- replace
    e = tl.exp(-2.0 * tl.abs(a))        # in (0, 1]: cannot overflow
    t = (1.0 - e) / (1.0 + e)           # tanh(|a|)
#%%- with
    e = tl.exp(-2.0 * tl.abs(a))
    t = (1.0 - e) / (1.0 + e)
#%%- replace
    a = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    y = 0.5 * x * (1.0 + stable_tanh(a))
#%%- with
    y = 0.5 * x * (1.0 + stable_tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
#%%- replace
    out = torch.empty_like(x)
    n = x.numel()
    gelu_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK)
#%%- with
    out = x.clone()
    n = out.numel()
    gelu_kernel[(triton.cdiv(n, BLOCK),)](out, out, n, BLOCK=BLOCK)
