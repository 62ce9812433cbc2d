# The model answer: full marks (the speed check needs a GPU).
#%% matmul_relu from-solution
