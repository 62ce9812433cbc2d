# Keeps the running sum in float16 (tl.dot accumulates into a float16 acc): errors grow with K.
#%% matmul_relu from-solution
#%%- replace
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
#%%- with
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16)
    for k0 in range(0, K, BLOCK_K):
