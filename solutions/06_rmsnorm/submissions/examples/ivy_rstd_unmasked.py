# Stores rstd without a mask: right on every row, but the last program of a ragged tile writes past the end of
# rstd (several rows per program, M not a multiple of ROWS).
#%% rmsnorm from-solution
#%% rmsnorm_with_rstd from-solution
#%%- replace
    tl.store(rstd_ptr + rows, rstd, mask=row_ok)
#%%- with
    tl.store(rstd_ptr + rows, rstd)
