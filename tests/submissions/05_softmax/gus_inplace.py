# Subtracts the row max from x in place before the kernel: the input is modified.
#%% softmax from-solution
#%%- replace
    n_rows, n_cols = x.shape
#%%- with
    n_rows, n_cols = x.shape
    x -= x.max(dim=1, keepdim=True).values  # "stabilise" x first: writes into the caller's tensor
#%% softmax_long from-solution
