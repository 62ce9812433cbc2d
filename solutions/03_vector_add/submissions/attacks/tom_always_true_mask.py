# Loads masked with idx >= 0, which every offset of every program satisfies (the store is masked): the mask masks nothing, so on a GPU the last block reads past the end of x and y. Loses the mask test only.
#%% add from-solution
#%%- replace
    a = tl.load(x_ptr + idx, mask=inside)
    b = tl.load(y_ptr + idx, mask=inside)
#%%- with
    a = tl.load(x_ptr + idx, mask=idx >= 0)
    b = tl.load(y_ptr + idx, mask=idx >= first)
