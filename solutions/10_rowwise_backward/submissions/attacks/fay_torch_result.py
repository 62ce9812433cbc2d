# PyTorch's autograd computes the gradients and no backward kernel is launched: no correctness point.
#%% softmax_backward from-solution
#%%- replace
        softmax_backward_kernel[(y2.shape[0],)](y2, dy2, dx, y2.shape[1], y2.stride(0), dy2.stride(0), dx.stride(0),
                                                BLOCK_N=block_n, num_warps=num_warps)
#%%- with
        dx.copy_(torch._softmax_backward_data(dy2, y2, -1, y2.dtype))
#%% rmsnorm_backward from-solution
#%%- replace
    dx = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M == 0 or N == 0:
#%%- with
    with torch.enable_grad():
        xl, wl = x2.detach().float().requires_grad_(), weight.detach().float().requires_grad_()
        dxl, dwl = torch.autograd.grad(torch.nn.functional.rms_norm(xl, (N,), wl, 1e-6), (xl, wl), dy2.float())
    return dxl.to(x.dtype).reshape(x.shape), dwl
    dx = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M == 0 or N == 0:
#%% autograd from-solution
