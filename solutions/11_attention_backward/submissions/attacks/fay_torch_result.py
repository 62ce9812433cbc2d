# PyTorch computes the result and no kernel is launched: no correctness point.
#%% relu from-solution
#%%- replace
    relu_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, out, x.numel(), BLOCK=BLOCK)
#%%- with
    out.copy_(torch.relu(x))
