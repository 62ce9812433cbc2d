# An online softmax_long whose running sum is never rescaled: when a chunk raises a lane's running max from m to
# m_new, it adds the chunk's exp(x - m_new) to a sum still taken against the older maxima, without first multiplying
# that sum by exp(m - m_new). Right on every row that fits in one chunk, wrong on rows of several: it loses the
# extension's correctness tests here on the CPU (and its test at GPU sizes, not graded here, on a GPU). softmax is
# the solution's and keeps its points.
#%% softmax from-solution
#%% softmax_long from-solution
#%%- replace
        run_sum = run_sum * tl.exp(run_max - pivot) + tl.exp(x - pivot)
#%%- with
        run_sum = run_sum + tl.exp(x - pivot)   # never multiplied by exp(run_max - pivot): the rescale is missing
