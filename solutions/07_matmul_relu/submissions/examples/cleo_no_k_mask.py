# Masks rows and columns but not K: loads past K on ragged K give wrong values (NaN from the guard).
#%% matmul_relu from-solution
#%%- replace
        a = tl.load(a_ptrs, mask=row_ok & (rk[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < k_left) & col_ok, other=0.0)
#%%- with
        a = tl.load(a_ptrs, mask=row_ok, other=0.0)
        b = tl.load(b_ptrs, mask=col_ok, other=0.0)
