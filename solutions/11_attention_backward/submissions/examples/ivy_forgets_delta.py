# Writes dS = P * dP, forgetting the softmax Jacobian's D = rowsum(dO * O): dv is right, dq and dk are wrong. The hint
# names the missing D term.
#%% forward from-solution

#%% backward from-solution
#%%- replace
        dst = pt * (dpt - delta[None, :])
#%%- with
        dst = pt * dpt
#%%- replace
        ds = p * (dp - delta[:, None])
#%%- with
        ds = p * dp

#%% autograd from-solution
