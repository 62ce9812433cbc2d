# PyTorch behind a token launch: one empty Triton kernel per call, then `x + y`. Earns nothing anywhere.
#%% add from-solution
#%%- replace
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
    return out
#%%- with
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(1,)](x, y, out, 0, BLOCK=BLOCK)  # launches, computes nothing
    return x + y
