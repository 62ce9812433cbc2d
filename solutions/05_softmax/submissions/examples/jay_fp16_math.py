# Keeps float16 inputs in float16: the max, x - max, exp (tl.exp takes float32 only, so its result is cast
# back to x's dtype), the sum and the division all round to float16. Three roundings instead of one: about
# one float16 element in ten is more than half a unit in the last place off (float32 inputs are unaffected).
#%% softmax from-solution
#%%- replace
                other=float("-inf"), eviction_policy="evict_first" if STREAM else "").to(tl.float32)
    row_max = tl.max(x, axis=1)
    e = tl.exp(x - row_max[:, None])
#%%- with
                other=float("-inf"), eviction_policy="evict_first" if STREAM else "")
    row_max = tl.max(x, axis=1)
    e = tl.exp((x - row_max[:, None]).to(tl.float32)).to(x.dtype)
#%% softmax_long from-solution
