# Steps between rows by N instead of the row stride: wrong rows for strided inputs.
#%% softmax from-solution
#%%- replace
    x = tl.load(x_ptr + safe_rows[:, None] * x_row_stride + cols[None, :],
#%%- with
    x = tl.load(x_ptr + safe_rows[:, None] * n_cols + cols[None, :],
#%% softmax_long from-solution
