# A correct, masked kernel: full marks (the bandwidth check needs a GPU).
#%% add from-solution
