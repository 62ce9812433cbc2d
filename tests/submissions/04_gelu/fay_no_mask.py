# Loads without a mask (the store is masked): every value is right, but on a GPU the last block reads past the end of x.
#%% gelu from-solution
#%%- replace
BLOCK = 1024       # elements per program
#%%- with
BLOCK = 1024
#%%- replace
    x = tl.load(x_ptr + idx, mask=inside).to(tl.float32)
#%%- with
    x = tl.load(x_ptr + idx).to(tl.float32)
