# The copy kernel masks its load but not its store: the rows past N of one head land in the first rows of the
# next head (and past the end of the output after the last head). Right only when BLOCK_M divides N.
#%% offsets from-solution

#%% copy_heads from-solution
#%%- replace
    tl.store(y_base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], block, mask=rows)
#%%- with
    tl.store(y_base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], block)
#%% attention from-solution
