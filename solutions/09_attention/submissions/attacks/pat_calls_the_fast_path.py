# Hands every call to the course's fast path (triton_course.attention_fast.fast_attention, the appendix's Hopper kernels)
# instead of its own kernel: the answers are right, but they come from kernels the notebook does not define, which a
# graded call may not launch. Every attention test earns 0, with the rule's words; the offsets and the copy keep theirs.
#%% offsets from-solution

#%% copy_heads from-solution

#%% attention from-solution
#%%- replace
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
#%%- with
    from triton_course.attention_fast import fast_attention

    return fast_attention(q, k, v, causal, sm_scale)
