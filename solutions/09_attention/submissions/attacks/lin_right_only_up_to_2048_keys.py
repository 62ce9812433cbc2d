# Right on every sequence up to 2,048 keys and wrong past them: its key loop stops at key 2,048, so a longer row
# never sees its last keys. Every correctness test of up to 3 * 128 + 45 keys passes; the long-sequence test (4,096
# keys and more) fails on a GPU with a message naming the size, and under the interpreter it is NOT GRADED, never
# passed. Its timed outputs (N = 4,096) are wrong too: no speed points on a GPU.
#%% offsets from-solution

#%% copy_heads from-solution

#%% attention from-solution
#%%- replace
    for start_n in range(lo, hi, BLOCK_N):
#%%- with
    for start_n in range(lo, tl.minimum(hi, 2048), BLOCK_N):
