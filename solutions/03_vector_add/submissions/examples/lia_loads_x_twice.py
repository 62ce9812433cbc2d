# Loads x twice (a copy-paste slip: y_ptr is never read): every output is 2x, and the hint names it.
#%% add from-solution
#%%- replace
    b = tl.load(y_ptr + idx, mask=inside)
#%%- with
    b = tl.load(x_ptr + idx, mask=inside)
