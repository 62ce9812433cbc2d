# Applies ReLU to the partial sums inside the K loop: right only when K fits in one step.
#%% matmul_relu from-solution
#%%- replace
        b = tl.load(b_ptrs, mask=(rk[:, None] < k_left) & col_ok, other=0.0)
        acc = tl.dot(a, b, acc)
#%%- with
        b = tl.load(b_ptrs, mask=(rk[:, None] < k_left) & col_ok, other=0.0)
        acc = tl.dot(a, b, acc)
        acc = tl.maximum(acc, 0.0)  # ReLU on every partial sum
#%%- replace
    # Epilogue: ReLU on the float32 sum, one conversion, one masked store.
    acc = tl.maximum(acc, 0.0)
#%%- with
    # Epilogue: ReLU on the float32 sum, one conversion, one masked store.
