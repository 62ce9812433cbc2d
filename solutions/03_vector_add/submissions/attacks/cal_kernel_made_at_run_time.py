# Writes, at every call, a new kernel whose source holds the answer as constants (computed by PyTorch
# first), and launches it: a real Triton kernel that computes nothing. The grader re-runs only kernels
# that the notebook defines: no points.
#%% add from-solution
#%%- replace
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
    return out
#%%- with
    import linecache
    import threading

    answer = []
    helper = threading.Thread(target=lambda: answer.extend((x + y).reshape(-1).tolist()))
    helper.start()
    helper.join()
    lines = ["def baked(out_ptr):"] + [f"    tl.store(out_ptr + {i}, {v!r})" for i, v in enumerate(answer)]
    source = "\n".join(lines) + "\n"
    name = f"<baked {len(linecache.cache)}>"
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    space = {"tl": tl}
    exec(compile(source, name, "exec"), space)
    out = torch.empty_like(x)
    triton.jit(space["baked"])[(1,)](out)
    return out
