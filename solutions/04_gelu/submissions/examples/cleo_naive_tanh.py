# tanh written as (e^{2a} - 1) / (e^{2a} + 1): inf / inf = NaN from x of about 10.06 on.
#%% gelu from-solution
#%%- replace
    e = tl.exp(-2.0 * tl.abs(a))        # in (0, 1]: cannot overflow
    t = (1.0 - e) / (1.0 + e)           # tanh(|a|)
    return tl.where(a >= 0, t, -t)
#%%- with
    e2a = tl.exp(2.0 * a)
    return (e2a - 1.0) / (e2a + 1.0)
