# A causal bound in block units: a key block is kept for a query row when it *starts* at or before the row,
# so inside the diagonal block a row also sees the later keys of that block. Exact only where BLOCK_N is 1.
#%% offsets from-solution

#%% copy_heads from-solution

#%% attention from-solution
#%%- replace
                keep = keep & (offs_n[None, :] <= offs_m[:, None])
#%%- with
                keep = keep & (start_n <= offs_m[:, None])
