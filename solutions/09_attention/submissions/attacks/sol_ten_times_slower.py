# A correct fused attention ten times slower than the model answer: on a GPU it launches its kernel ten times per
# call (each launch recomputes the whole output), as a kernel with tiles too small or its products off the tensor
# cores would. It keeps every correctness and fusion point; on a GPU it reaches about a tenth of SDPA and earns no
# speed points, and under the interpreter the speed tests are NOT GRADED (there it launches once: ten launches
# would only slow the course's own tests).
#%% offsets from-solution

#%% copy_heads from-solution

#%% attention from-solution
#%%- replace
    out = torch.empty_like(q)
    grid = (triton.cdiv(N, config.block_m), Z * H)
    attention_kernel[grid](q, k, v, out, *q.stride(), *k.stride(), *v.stride(), *out.stride(),
                           H, N, sm_scale * LOG2E, CAUSAL=bool(causal), HEAD_DIM=D, **config.launch)
    return out
#%%- with
    out = torch.empty_like(q)
    grid = (triton.cdiv(N, config.block_m), Z * H)
    for _ in range(10 if q.is_cuda else 1):
        attention_kernel[grid](q, k, v, out, *q.stride(), *k.stride(), *v.stride(), *out.stride(),
                               H, N, sm_scale * LOG2E, CAUSAL=bool(causal), HEAD_DIM=D, **config.launch)
    return out
