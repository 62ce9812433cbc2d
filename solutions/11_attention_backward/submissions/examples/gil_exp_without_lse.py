# Recomputes P in the backward as exp(S), forgetting to subtract the log-sum-exp L that the forward saved: P is then
# not the softmax, every row off by its own factor exp(L). dq, dk and dv are all wrong; the hint names the missing L.
#%% forward from-solution

#%% backward from-solution
#%%- replace
        pt = tl.where(keep, tl.exp2(st * qk_scale - lse[None, :] * 1.4426950408889634), 0.0)
#%%- with
        pt = tl.where(keep, tl.exp2(st * qk_scale), 0.0)
#%%- replace
        p = tl.where(keep, tl.exp2(tl.dot(q, tl.trans(k)) * qk_scale - lse[:, None] * 1.4426950408889634), 0.0)
#%%- with
        p = tl.where(keep, tl.exp2(tl.dot(q, tl.trans(k)) * qk_scale), 0.0)

#%% autograd from-solution
