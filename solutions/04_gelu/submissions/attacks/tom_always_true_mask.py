# Loads masked with idx >= start, which every offset of the block satisfies (the stores are masked): the mask masks nothing, so on a GPU the last block reads past the end of x. Loses the shapes test (which holds the mask check) only.
#%% gelu from-solution
#%%- replace
    x = tl.load(x_ptr + idx, mask=full).to(tl.float32)
#%%- with
    x = tl.load(x_ptr + idx, mask=idx >= start).to(tl.float32)
#%%- replace
        x = tl.load(x_ptr + idx, mask=inside).to(tl.float32)
#%%- with
        x = tl.load(x_ptr + idx, mask=(idx >= start) | inside).to(tl.float32)
