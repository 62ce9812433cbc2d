# Copies x into the output first, then applies GELU in place: right values, twice the bytes (fails the GPU bandwidth check).
#%% gelu from-solution
#%%- replace
    out = torch.empty_like(x)
    n = x.numel()
    if n:
        gelu_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK)
#%%- with
    out = x.clone()
    n = out.numel()
    if n:
        gelu_kernel[(triton.cdiv(n, BLOCK),)](out, out, n, BLOCK=BLOCK)
