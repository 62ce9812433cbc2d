# Knows when the grader records a graded call (triton_course.integrity.recording_launches, which chapter 09's
# reference reads to leave its Gluon path aside) and computes the sum with PyTorch only off the record, launching a
# kernel that writes nothing on it. What is graded is the re-run of the recorded launches: no points.
#%% add from-solution
#%%- replace
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
    return out
#%%- with
    from triton_course.integrity import recording_launches

    out = torch.empty_like(x)
    add_kernel[(1,)](x, y, out, 0, BLOCK=BLOCK)  # launches, computes nothing
    if not recording_launches():
        out.copy_(x + y)  # off the record: the right answer, by PyTorch
    return out
