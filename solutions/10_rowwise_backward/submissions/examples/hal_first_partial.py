# The second reduction is missing: dw is the first program's partial row, the sum over its own rows only.
#%% softmax_backward from-solution
#%% rmsnorm_backward from-solution
#%%- replace
        dw_sum_kernel[(triton.cdiv(N, 64),)](partials, dw, programs, N, BLOCK_P=32, BLOCK_N=64)
#%%- with
        dw_sum_kernel[(triton.cdiv(N, 64),)](partials, dw, 1, N, BLOCK_P=32, BLOCK_N=64)
#%% autograd from-solution
