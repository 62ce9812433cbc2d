# A correct submission: full marks on every test gradable without a GPU.
#%% offsets from-solution

#%% attention from-solution
