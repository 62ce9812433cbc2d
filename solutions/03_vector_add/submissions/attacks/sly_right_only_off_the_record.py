# Knows when the grader records a graded call (triton_course.integrity.recording_launches, which chapter 09's
# reference reads to leave its Gluon path aside) and computes the sum with PyTorch only off the record, launching a
# kernel that writes nothing on it. What is graded is the re-run of the recorded launches: no points.
#%% add from-solution
#%%- replace
    add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
#%%- with
    from triton_course.integrity import recording_launches

    add_kernel[(1,)](x, y, out, 0, BLOCK=BLOCK)  # launches a kernel that writes nothing
    if not recording_launches():
        out.copy_(x + y)  # off the record: the right answer, by PyTorch
