# Uses tl.exp2 but passes sm_scale without log2(e) folded in: every softmax is taken at sm_scale * ln 2.
#%% offsets from-solution

#%% copy_heads from-solution

#%% attention from-solution
#%%- replace
                           H, N, sm_scale * LOG2E, CAUSAL=bool(causal), HEAD_DIM=D, **config.launch)
#%%- with
                           H, N, sm_scale, CAUSAL=bool(causal), HEAD_DIM=D, **config.launch)
