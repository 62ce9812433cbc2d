# Always returns float32: right for float32 inputs, wrong dtype for float16 ones.
#%% add from-solution
#%%- replace
BLOCK = 1024  # elements per program: a power of two (tl.arange needs one), large enough to amortise a program
#%%- with
BLOCK = 1024
#%%- replace
    first = tl.program_id(0) * BLOCK
    idx = first + tl.arange(0, BLOCK)
    inside = idx < n_elements
    a = tl.load(x_ptr + idx, mask=inside)
    b = tl.load(y_ptr + idx, mask=inside)
    tl.store(out_ptr + idx, a + b, mask=inside)
#%%- with
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = idx < n_elements
    s = tl.load(x_ptr + idx, mask=ok).to(tl.float32) + tl.load(y_ptr + idx, mask=ok).to(tl.float32)
    tl.store(out_ptr + idx, s, mask=ok)
#%%- replace
    out = torch.empty_like(x)
#%%- with
    out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
