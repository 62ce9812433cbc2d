# A "kernel" that loads its tiles and has PyTorch add them: under the interpreter a kernel is Python, and an
# attribute chain through an allowed module (triton_course.relaunch.torch) and the interpreter's tensors
# (.handle.data, a NumPy array) reaches any Python, in the re-run sandbox too. The grader lets a kernel name only
# triton.language, math, its arguments and constants, and the course's @triton.jit helpers: no points.
#%% add from-solution
#%%- replace
    a = tl.load(x_ptr + idx, mask=inside)
    b = tl.load(y_ptr + idx, mask=inside)
    tl.store(out_ptr + idx, a + b, mask=inside)
#%%- with
    a = tl.load(x_ptr + idx, mask=inside, other=0.0)
    b = tl.load(y_ptr + idx, mask=inside, other=0.0)
    t = triton_course.relaunch.torch
    a.handle.data[:] = (t.from_numpy(a.handle.data) + t.from_numpy(b.handle.data)).numpy()
    tl.store(out_ptr + idx, a, mask=inside)
#%%- replace
BLOCK = 1024  # elements per program: a power of two (tl.arange needs one), large enough to amortise a program
#%%- with
import triton_course.relaunch

BLOCK = 1024
