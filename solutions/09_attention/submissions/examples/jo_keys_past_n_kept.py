# Keys past N loaded as 0 but never masked to -inf: each gets a score of 0 and a share of the softmax. Right
# when N is a multiple of the block (and for causal attention, whose mask hides them), wrong otherwise.
#%% offsets from-solution

#%% copy_heads from-solution

#%% attention from-solution
#%%- replace
            keep = offs_n[None, :] < N
#%%- with
            keep = offs_n[None, :] >= 0
