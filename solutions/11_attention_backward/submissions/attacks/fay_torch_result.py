# Runs its own forward kernel, then has PyTorch compute the gradients (SDPA's forward and backward through autograd)
# and copies them into the outputs. The forward's log-sum-exp test keeps its point; every gradient test earns 0.
#%% forward from-solution

#%% backward from-solution
#%%- replace
    delta_kernel[(triton.cdiv(N, config.block_q), Z * H)](o, do, delta, N, HEAD_DIM=D, BLOCK_M=config.block_q)
#%%- with
    import torch.nn.functional as F
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    with torch.enable_grad():
        out = F.scaled_dot_product_attention(*leaves, is_causal=bool(causal), scale=sm_scale)
    for mine, theirs in zip((dq, dk, dv), torch.autograd.grad(out, leaves, do)):
        mine.copy_(theirs)
    return dq, dk, dv

#%% autograd from-solution
