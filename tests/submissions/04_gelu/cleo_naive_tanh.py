# tanh written as (e^{2a} - 1) / (e^{2a} + 1): inf / inf = NaN from x of about 10.5 on.
#%% gelu from-solution
#%%- replace
BLOCK = 1024       # elements per program
#%%- with
BLOCK = 1024
#%%- replace
    e = tl.exp(-2.0 * tl.abs(a))        # in (0, 1]: cannot overflow
    t = (1.0 - e) / (1.0 + e)           # tanh(|a|)
    return tl.where(a >= 0, t, -t)
#%%- with
    e2a = tl.exp(2.0 * a)
    return (e2a - 1.0) / (e2a + 1.0)
#%%- replace
    a = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    y = 0.5 * x * (1.0 + stable_tanh(a))
#%%- with
    y = 0.5 * x * (1.0 + stable_tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
