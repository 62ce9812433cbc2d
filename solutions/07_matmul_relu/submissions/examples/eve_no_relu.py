# Forgets the ReLU: a plain matmul, negative outputs everywhere.
#%% matmul_relu from-solution
#%%- replace
    # Epilogue: ReLU on the float32 sum, one conversion, one masked store.
    acc = tl.maximum(acc, 0.0)
#%%- with
    # Epilogue: ReLU on the float32 sum, one conversion, one masked store.
