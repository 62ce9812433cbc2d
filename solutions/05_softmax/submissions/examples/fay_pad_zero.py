# Padding lanes loaded as 0 instead of -inf: they add exp(-max) to every sum.
#%% softmax from-solution
#%%- replace
                other=float("-inf"), eviction_policy="evict_first" if STREAM else "").to(tl.float32)
#%%- with
                other=0.0, eviction_policy="evict_first" if STREAM else "").to(tl.float32)
#%% softmax_long from-solution
