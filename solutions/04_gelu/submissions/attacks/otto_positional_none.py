# None as the positional mask (the stores are masked): every value is right, but on a GPU the last block reads past the end of x. Loses the shapes test (which holds the mask check) only.
#%% gelu from-solution
#%%- replace
    x = tl.load(x_ptr + idx, mask=full).to(tl.float32)
#%%- with
    x = tl.load(x_ptr + idx, None).to(tl.float32)
#%%- replace
        x = tl.load(x_ptr + idx, mask=inside).to(tl.float32)
#%%- with
        x = tl.load(x_ptr + idx, None).to(tl.float32)
