# Computes the exact GELU (with erf, built from an approximation) instead of the tanh form the chapter asks for.
#%% gelu from-solution
#%%- replace
BLOCK = 1024       # elements per program
#%%- with
BLOCK = 1024
#%%- replace
    e = tl.exp(-2.0 * tl.abs(a))        # in (0, 1]: cannot overflow
    t = (1.0 - e) / (1.0 + e)           # tanh(|a|)
#%%- with
    e = tl.exp(-2.0 * tl.abs(a))
    t = (1.0 - e) / (1.0 + e)
#%%- replace
    return tl.where(a >= 0, t, -t)
#%%- with
    return tl.where(a >= 0, t, -t)


@triton.jit
def erf(z):
    # Abramowitz and Stegun 7.1.26 (|error| < 1.5e-7)
    s = tl.where(z >= 0, 1.0, -1.0)
    z = tl.abs(z)
    t = 1.0 / (1.0 + 0.3275911 * z)
    p = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return s * (1.0 - p * tl.exp(-z * z))
#%%- replace
    a = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    y = 0.5 * x * (1.0 + stable_tanh(a))
#%%- with
    y = 0.5 * x * (1.0 + erf(x * 0.7071067811865476))
