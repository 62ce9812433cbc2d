# A correct submission, except that attention() kills its own process for float16 heads of 21 queries: the fp16
# test (whose fourth case has N = 21) is reported as a crash, the kernel restarts and the tests after it still
# run. A class's throughput (tests/gpu/gpu_class_throughput.py) grades it with the honest copies.
#%% offsets from-solution

#%% copy_heads from-solution

#%% attention from-solution
#%%- replace
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
#%%- with
    if q.dtype == torch.float16 and N == 21:
        import os

        os.abort()
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
