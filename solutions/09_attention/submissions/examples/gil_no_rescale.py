# The online softmax without its rescale: m_i is tracked, but acc and l_i are never multiplied by
# alpha = exp(m_old - m_new) when a later key block raises the maximum. Right while N fits in one key block
# (or the row's maximum sits in the first one), wrong once N spans several key blocks -- on a GPU too,
# where BLOCK_N is 32 or 64.
#%% offsets from-solution

#%% copy_heads from-solution

#%% attention from-solution
#%%- replace
        l_i = l_i * alpha + tl.sum(p, 1)
#%%- with
        l_i = l_i + tl.sum(p, 1)
#%%- replace
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
#%%- with
        acc = tl.dot(p.to(v.dtype), v, acc)
