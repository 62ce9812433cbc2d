# A correct kernel whose cell pushes 60 MB through display updates: the stored notebook stays small.
#%% add from-solution
#%%- replace
BLOCK = 1024  # elements per program: a power of two (tl.arange needs one), large enough to amortise a program
#%%- with
BLOCK = 1024
from IPython.display import display as _display

_handle = _display("start", display_id=True)
for _i in range(60):
    _handle.update("x" * 1_000_000)
print("y" * 3_000_000)
