# Blinds the student process's operator log through the path it takes once torch._dynamo is imported: a
# stand-in torch._dynamo module, and torch._disable_dynamo replaced by a wrapper that runs every operator
# unlogged. Then PyTorch's x + y behind a launch that writes nothing. The log sees no PyTorch at all; the
# grader re-runs the launches alone and grades what they compute: no points.
#%% add from-solution
#%%- replace
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
    return out
#%%- with
    import sys
    import types

    sys.modules.setdefault("torch._dynamo", types.ModuleType("torch._dynamo"))
    torch._disable_dynamo = lambda fn, recursive=True: (
        lambda mode, func, types, args=(), kwargs=None: func(*args, **(kwargs or {})))
    out = torch.empty_like(x)
    add_kernel[(1,)](x, y, out, 0, BLOCK=BLOCK)  # launches, computes nothing
    out.copy_(x + y)
    return out
