# Every rule right: full marks.
#%% occupancy from-solution
#%% waves from-solution
#%% access_patterns from-solution
