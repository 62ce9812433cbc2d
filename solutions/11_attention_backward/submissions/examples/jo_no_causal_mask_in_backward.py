# Masks the causal forward but not the backward: P is recomputed there, so keys after a query get weight inside the
# diagonal blocks. Non-causal tests pass; the causal test fails, with the hint that the backward needs the mask again.
#%% forward from-solution

#%% backward from-solution
#%%- replace
        if CAUSAL:
            keep = keep & (offs_n[:, None] <= offs_m[None, :])
#%%- with

#%%- replace
        if CAUSAL:
            keep = keep & (offs_n[None, :] <= offs_m[:, None])
#%%- with


#%% autograd from-solution
