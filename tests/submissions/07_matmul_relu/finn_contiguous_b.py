# Indexes b as if it were row-major (k * N + n) instead of using its strides: transposed b fails.
#%% matmul_relu from-solution
#%%- replace
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
#%%- with
    b_ptrs = b_ptr + rk[:, None] * N + rn[None, :]  # assumes b is row-major
#%%- replace
        b_ptrs += BLOCK_K * stride_bk
#%%- with
        b_ptrs += BLOCK_K * N
