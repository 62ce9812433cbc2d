# mask=True, through a name (the store is masked): a constant mask is the same for every element, so on a GPU the last block reads past the end of x and y. Loses the mask test only.
#%% add from-solution
#%%- replace
    a = tl.load(x_ptr + idx, mask=inside)
    b = tl.load(y_ptr + idx, mask=inside)
#%%- with
    everywhere = True
    a = tl.load(x_ptr + idx, mask=everywhere)
    b = tl.load(y_ptr + idx, mask=True)
