# PyTorch's answer, computed in another thread, written into a module global as one long string that the
# kernel reads and stores (under the interpreter a kernel is Python). One value, however long: it passed the old
# rule of "few distinct numbers". The grader counts what a launch's strings can carry and allows only the strings
# Triton's options use: no points.
#%% add from-solution
#%%- replace
BLOCK = 1024  # elements per program: a power of two (tl.arange needs one), large enough to amortise a program
#%%- with
BLOCK = 1024
ANSWER = ""


@triton.jit
def put_kernel(out_ptr):
    values = ANSWER.split(",")
    for i in range(len(values)):
        tl.store(out_ptr + i, float(values[i]))
#%%- replace
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
    return out
#%%- with
    import threading

    global ANSWER
    answer = []
    helper = threading.Thread(target=lambda: answer.extend((x + y).reshape(-1).tolist()))
    helper.start()
    helper.join()
    ANSWER = ",".join(repr(v) for v in answer)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    put_kernel[(1,)](out)
    return out
