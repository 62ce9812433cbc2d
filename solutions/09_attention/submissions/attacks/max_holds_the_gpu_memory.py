# A correct fused attention whose cell also keeps nearly all of the GPU's free memory in a global (all but 256 MiB
# of what is free when the cell runs), for as long as the notebook runs. Several submissions graded at once on one
# GPU would then run out of memory in test after test, however often they tried. The judge whose test runs out asks
# the GPU lock to reclaim memory before it tries again (grader.gpu_lock.GpuLock.reclaim_memory): this notebook holds
# more than its share, so its processes are killed, its feedback says why, and its kernel restarts (its replayed
# cells take the memory again and are killed again at the next test that runs out, until its restarts are spent).
# It loses the tests it was stopped in; the honest submissions graded beside it should keep every point (to be seen
# on a GPU: tests/gpu/gpu_class_throughput.py grades it with 09's class). Under Triton's interpreter, on the CPU, it
# allocates nothing and keeps every point it can earn there.
#%% offsets from-solution

#%% copy_heads from-solution

#%% attention from-solution
#%%- replace
LOG2E = 1.4426950408889634  # exp(x) == exp2(x * LOG2E)
#%%- with
LOG2E = 1.4426950408889634  # exp(x) == exp2(x * LOG2E)


def _take_the_gpu_memory():
    """All of the GPU's free memory but 256 MiB (1 GiB if that fails), as one tensor; None on the CPU."""
    if not torch.cuda.is_available():
        return None
    free = torch.cuda.mem_get_info()[0]
    for left in (256 << 20, 1 << 30):
        try:
            return torch.empty(max(0, free - left), dtype=torch.uint8, device="cuda")
        except torch.cuda.OutOfMemoryError:
            pass
    return None


HOARD = _take_the_gpu_memory()   # kept: never freed while the notebook runs
