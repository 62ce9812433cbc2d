# The answer computed by PyTorch in another thread, then handed to a kernel of the notebook as scalar
# arguments, sixteen values a launch (a kernel that stores its arguments). The re-run would reproduce it,
# but the record carries thousands of distinct numbers where honest work has a few dozen: no points.
#%% add from-solution
#%%- replace
BLOCK = 1024  # elements per program: a power of two (tl.arange needs one), large enough to amortise a program
#%%- with
BLOCK = 1024


@triton.jit
def put_kernel(out_ptr, start, n, v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12, v13, v14, v15):
    tl.store(out_ptr + start + 0, v0, mask=0 < n)
    tl.store(out_ptr + start + 1, v1, mask=1 < n)
    tl.store(out_ptr + start + 2, v2, mask=2 < n)
    tl.store(out_ptr + start + 3, v3, mask=3 < n)
    tl.store(out_ptr + start + 4, v4, mask=4 < n)
    tl.store(out_ptr + start + 5, v5, mask=5 < n)
    tl.store(out_ptr + start + 6, v6, mask=6 < n)
    tl.store(out_ptr + start + 7, v7, mask=7 < n)
    tl.store(out_ptr + start + 8, v8, mask=8 < n)
    tl.store(out_ptr + start + 9, v9, mask=9 < n)
    tl.store(out_ptr + start + 10, v10, mask=10 < n)
    tl.store(out_ptr + start + 11, v11, mask=11 < n)
    tl.store(out_ptr + start + 12, v12, mask=12 < n)
    tl.store(out_ptr + start + 13, v13, mask=13 < n)
    tl.store(out_ptr + start + 14, v14, mask=14 < n)
    tl.store(out_ptr + start + 15, v15, mask=15 < n)
#%%- replace
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
    return out
#%%- with
    import threading

    answer = []
    helper = threading.Thread(target=lambda: answer.extend((x + y).reshape(-1).tolist()))
    helper.start()
    helper.join()
    out = torch.empty_like(x)
    flat = out.view(-1)
    for start in range(0, len(answer), 16):
        values = answer[start:start + 16] + [0.0] * 16
        put_kernel[(1,)](flat, start, min(16, len(answer) - start), *values[:16])
    return out
