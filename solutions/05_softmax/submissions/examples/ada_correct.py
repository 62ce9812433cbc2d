# The reference solution (rows per program, persistent grid, online long-row softmax): full marks.
#%% softmax from-solution
#%% softmax_long from-solution
