# Ignores sm_scale and always scales by 1/sqrt(D): right by default, wrong when a caller passes a scale.
#%% offsets from-solution

#%% copy_heads from-solution

#%% attention from-solution
#%%- replace
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
#%%- with
    sm_scale = 1.0 / math.sqrt(D)
