# "Stabilises" x in place: the kernel writes x - max back into the caller's tensor before taking exp.
#%% softmax from-solution
#%%- replace
    row_max = tl.max(x, axis=1)
#%%- with
    row_max = tl.max(x, axis=1)
    # keep x - max "for later" in x itself: this writes into the caller's tensor
    tl.store(x_ptr + safe_rows[:, None] * x_row_stride + cols[None, :],
             (x - row_max[:, None]).to(x_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])
#%% softmax_long from-solution
