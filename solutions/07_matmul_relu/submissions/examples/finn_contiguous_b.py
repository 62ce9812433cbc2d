# Indexes b as if it were row-major (k * N + n) instead of using its strides: transposed b fails.
#%% matmul_relu from-solution
#%%- replace
    b_rows, b_cols = rk * stride_bk, rn * stride_bn
#%%- with
    b_rows, b_cols = rk * N, rn  # assumes b is row-major
#%%- replace
        b_ptrs += BLOCK_K * stride_bk
#%%- with
        b_ptrs += BLOCK_K * N
