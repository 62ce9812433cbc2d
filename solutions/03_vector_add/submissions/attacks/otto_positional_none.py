# None as the positional mask (the store is masked): every value is right, but on a GPU the last block reads past the end of x and y. Loses the mask test only.
#%% add from-solution
#%%- replace
    a = tl.load(x_ptr + idx, mask=inside)
    b = tl.load(y_ptr + idx, mask=inside)
#%%- with
    a = tl.load(x_ptr + idx, None)
    b = tl.load(y_ptr + idx, None)
