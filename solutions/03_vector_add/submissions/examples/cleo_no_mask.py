# Loads and stores without a mask: stores past the end of the output on ragged sizes.
#%% add from-solution
#%%- replace
BLOCK = 1024  # elements per program: a power of two (tl.arange needs one), large enough to amortise a program
#%%- with
BLOCK = 1024
#%%- replace
    first = tl.program_id(0) * BLOCK
    idx = first + tl.arange(0, BLOCK)
    inside = idx < n_elements
    a = tl.load(x_ptr + idx, mask=inside)
    b = tl.load(y_ptr + idx, mask=inside)
    tl.store(out_ptr + idx, a + b, mask=inside)
#%%- with
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + idx, tl.load(x_ptr + idx) + tl.load(y_ptr + idx))
