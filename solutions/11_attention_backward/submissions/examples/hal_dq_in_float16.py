# Keeps dQ's running sum in float16, rounding it after every key block. Ordinary inputs hide it (the rounding is
# within tolerance); with a scaled loss the partial sums pass 65,504 and overflow to inf while the true dq fits float16.
# Loses the loss-scaled test, with the hint that names the float16 accumulator.
#%% forward from-solution

#%% backward from-solution
#%%- replace
    dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
#%%- with
    dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float16)
#%%- replace
        dq = tl.dot(ds.to(k.dtype), k, dq)
#%%- with
        dq = (dq + tl.dot(ds.to(k.dtype), k)).to(tl.float16)

#%% autograd from-solution
