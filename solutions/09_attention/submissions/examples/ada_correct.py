# A correct submission: full marks on every test gradable without a GPU.
#%% offsets from-solution

#%% copy_heads from-solution

#%% attention from-solution
