# Caps BLOCK_N at 16384 to save registers and loads one tile per row, without looping over the rest:
# right on every row up to 16384 elements, wrong (and partly unwritten) on wider rows.
#%% traffic from-solution
#%% roofline from-solution
#%% fused from-solution
#%%- replace
    block_n = triton.next_power_of_2(n_cols)
#%%- with
    block_n = min(triton.next_power_of_2(n_cols), 16384)
