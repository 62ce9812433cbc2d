# The model answer.
#%% forward from-solution

#%% backward from-solution

#%% autograd from-solution
