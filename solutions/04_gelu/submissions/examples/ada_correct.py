# A correct kernel with an overflow-free tanh: full marks (the bandwidth check needs a GPU).
#%% gelu from-solution
