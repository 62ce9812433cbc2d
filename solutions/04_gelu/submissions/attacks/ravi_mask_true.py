# A mask made by tl.full of True (the stores are masked): a constant mask is the same for every element, so on a GPU the last block reads past the end of x. Loses the shapes test (which holds the mask check) only.
#%% gelu from-solution
#%%- replace
    x = tl.load(x_ptr + idx, mask=full).to(tl.float32)
#%%- with
    keep = tl.full((BLOCK,), 1, tl.int1)
    x = tl.load(x_ptr + idx, mask=keep).to(tl.float32)
#%%- replace
        x = tl.load(x_ptr + idx, mask=inside).to(tl.float32)
#%%- with
        x = tl.load(x_ptr + idx, mask=keep).to(tl.float32)
