# Hands every call to the course's fast path (triton_course.matmul_fast.FastMatmulRelu, the appendix's Hopper
# kernels: tensor descriptors, persistent programs, Gluon) instead of launching its own kernel: the products are
# right, but they come from the course's kernels, which a graded call may not launch. Every test whose calls launched one
# of them earns 0, with the rule's words.
#%% matmul_relu from-solution
#%%- replace
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
#%%- with
    from triton_course.matmul_fast import FastMatmulRelu

    return FastMatmulRelu(matmul_relu_kernel)(a, b)
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
