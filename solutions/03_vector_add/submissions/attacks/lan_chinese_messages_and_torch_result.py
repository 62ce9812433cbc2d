# Switches the helpers to Chinese (set_language and TRITON_COURSE_LANGUAGE, in its own process) and returns PyTorch's
# x + y behind a token launch, hoping a verdict read from translated text passes: the judge decides in its own
# process, in English, from its own comparisons. No correctness point.
#%% add from-solution
#%%- replace
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
    return out
#%%- with
    import os

    from triton_course.i18n import set_language

    os.environ["TRITON_COURSE_LANGUAGE"] = "zh_CN"
    set_language("zh_CN")
    out = torch.empty_like(x)
    add_kernel[(1,)](x, y, out, 0, BLOCK=BLOCK)  # launches, computes nothing
    out.copy_(x + y)
    return out
