# RMSNorm's dx treats rstd as a constant: rstd * w * dy, without the term that rstd's dependence on the row brings.
#%% softmax_backward from-solution
#%% rmsnorm_backward from-solution
#%%- replace
        dx = rstd[:, None] * (wdy - x * (rstd * rstd * c)[:, None])
#%%- with
        dx = rstd[:, None] * wdy
#%% autograd from-solution
