# PyTorch's x + y computed in another thread, behind a launch that writes nothing: the operator log is
# per thread, so the student's own process sees no PyTorch at all. The grader re-runs the launches alone
# and grades what they compute: no points.
#%% add from-solution
#%%- replace
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
    return out
#%%- with
    import threading

    out = torch.empty_like(x)
    add_kernel[(1,)](x, y, out, 0, BLOCK=BLOCK)  # launches, computes nothing
    helper = threading.Thread(target=lambda: out.copy_(x + y))
    helper.start()
    helper.join()
    return out
