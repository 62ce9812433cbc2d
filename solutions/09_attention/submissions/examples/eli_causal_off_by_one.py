# Causal mask off by one (key < query): a query no longer sees its own key, and row 0 sees none.
#%% offsets from-solution

#%% copy_heads from-solution

#%% attention from-solution
#%%- replace
                keep = keep & (offs_n[None, :] <= offs_m[:, None])
#%%- with
                keep = keep & (offs_n[None, :] < offs_m[:, None])
