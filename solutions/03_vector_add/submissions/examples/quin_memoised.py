# Caches each result by its inputs' addresses: right values, and a kernel launch only the first time a pair
# of tensors is seen. The bandwidth check times add many times on a few input sets, so a cache would look
# faster than memory; the grader counts launches per timed call and gives the bandwidth points nothing.
#%% add from-solution
#%%- replace
@triton.jit
def add_kernel(
#%%- with
_results = {}


@triton.jit
def add_kernel(
#%%- replace
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
    return out
#%%- with
    key = (x.data_ptr(), y.data_ptr(), x.shape, x.dtype)
    if key not in _results:
        out = torch.empty_like(x)
        n = x.numel()
        add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
        _results[key] = (x, y, out)  # the inputs are kept too, so that no new tensor reuses their addresses
    return _results[key][2]
