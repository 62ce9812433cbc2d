# A slow add (tiny blocks) that claims 10x the traffic in `traffic_bytes`: the judge counts the bytes itself.
#%% add from-solution
#%%- replace
BLOCK = 1024  # elements per program: a power of two (tl.arange needs one), large enough to amortise a program
#%%- with
BLOCK = 16


def traffic_bytes(n, element_size):
    return 30 * n * element_size


BANDWIDTH_TARGET = 0.0
