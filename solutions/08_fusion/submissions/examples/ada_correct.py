# Every function and the fused kernel as in the solution: full marks (the bandwidth check needs a GPU).
#%% traffic from-solution
#%% roofline from-solution
#%% fused from-solution
