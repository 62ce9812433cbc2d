# A correct submission, except that attention() never returns for a causal call on one query: the causal test
# (which starts with N = 1) hits the per-cell time limit; every other test still runs. A class's throughput
# (tests/gpu/gpu_class_throughput.py) grades it with the honest copies: its hang is part of the class rate.
#%% offsets from-solution

#%% copy_heads from-solution

#%% attention from-solution
#%%- replace
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
#%%- with
    while causal and N == 1:
        pass
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
