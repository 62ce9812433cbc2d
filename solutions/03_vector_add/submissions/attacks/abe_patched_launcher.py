# A kernel that stores x alone, behind Triton's launcher patched (for the compiled and the interpreted
# kernel) so that "launching" it runs PyTorch's x + y instead, inside the launch, where the operator log
# does not look. The re-run uses Triton's own launcher and runs the kernel as written: no points.
#%% add from-solution
#%%- replace
BLOCK = 1024  # elements per program: a power of two (tl.arange needs one), large enough to amortise a program
#%%- with
BLOCK = 1024

import triton.runtime.interpreter as _interp
import triton.runtime.jit as _jit


def _launch_pytorch(self, *args, grid, warmup, **kwargs):
    if not warmup:
        x, y, out = args[0], args[1], args[2]
        out.copy_(x + y)


for _cls in (_jit.JITFunction, getattr(_interp, "InterpretedFunction", None)):
    if _cls is not None and "run" in _cls.__dict__:
        _cls.run = _launch_pytorch
#%%- replace
    tl.store(out_ptr + idx, a + b, mask=inside)
#%%- with
    tl.store(out_ptr + idx, a, mask=inside)
