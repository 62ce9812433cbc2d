"""What chapter 07's Hopper path pays to copy b onto 128-byte rows, and which tile its copy kernel uses.

    python lab/sweeps/realign_copy.py   (on a GPU, under a minute on an H200;
                                             writes solutions/07_matmul_relu/records/07_matmul_relu_realign_copy.json)

The reference copies b (w for b = w.t()) into the first columns of a wider tensor whose rows start on 128-byte
boundaries when they do not (``realigned`` in ``triton_course.matmul_fast``). At the sweep's misaligned shapes (b of
3000 x 3000 and 5000 x 3000) it times, with ``triton_course.bench.steady_rounds`` on the same rotating inputs:
torch's strided ``copy_`` into the wide tensor (what ``realigned`` did first), the fast path's
``copy_rows_kernel`` at several tiles (rows x bytes of each row, 4 warps), and ``realigned`` itself; and a
same-size contiguous copy (``torch.clone``) for the ceiling. GB/s count the bytes read and written once.
"""
from __future__ import annotations

import contextlib
import io
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "lab" / "sweeps"))

import torch  # noqa: E402
import triton  # noqa: E402

from grader.course import solution_notebook  # noqa: E402
from grader.notebook_code import load_namespace  # noqa: E402
from triton_course.bench import METHOD, gbps, steady_rounds  # noqa: E402
from records import provenance  # noqa: E402

OUT = ROOT / "solutions" / "07_matmul_relu" / "records" / "07_matmul_relu_realign_copy.json"
SHAPES = [(3000, 3000, torch.float16), (5000, 3000, torch.float16), (3000, 3000, torch.bfloat16)]
TILES = [(4, 1024), (8, 512), (8, 1024), (16, 512), (16, 1024), (8, 2048), (32, 256)]
ROUNDS = 7


def main() -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        from triton_course.matmul_fast import fast_namespace   # the fast path's names
        ns = fast_namespace(load_namespace(solution_notebook("07_matmul_relu")))
    kernel, realigned, boundary = ns["copy_rows_kernel"], ns["realigned"], ns["ROW_BOUNDARY"]

    def wide_like(b):
        per_row = boundary // b.element_size()
        return torch.empty((b.shape[0], triton.cdiv(b.shape[1], per_row) * per_row), device=b.device, dtype=b.dtype)

    def torch_copy(b):
        return wide_like(b)[:, :b.shape[1]].copy_(b)

    def with_tile(rows, row_bytes):
        def run(b):
            (R, C), size = b.shape, b.element_size()
            wide = wide_like(b)
            kernel[(triton.cdiv(R, rows), triton.cdiv(C, row_bytes // size))](
                b, wide, R, C, b.stride(0), wide.stride(0), BLOCK_R=rows, BLOCK_C=row_bytes // size,
                ALIGN=16 // size)
            return wide[:, :C]
        return run

    fns = {"torch copy_ (strided)": torch_copy, "realigned (notebook)": realigned, "contiguous clone": torch.clone}
    fns.update({f"kernel {r}x{c}B": with_tile(r, c) for r, c in TILES})
    rows = []
    for R, C, dtype in SHAPES:
        probe = torch.randn(R, C, device="cuda").to(dtype)
        checked = {name: bool(torch.equal(fn(probe), probe)) for name, fn in fns.items()}
        times = steady_rounds(fns, lambda: (torch.randn(R, C, device="cuda").to(dtype),), rounds=ROUNDS)
        nbytes = 2 * R * C * probe.element_size()
        row = {"rows": R, "cols": C, "dtype": str(dtype).replace("torch.", ""), "bytes": nbytes,
               "equal_to_input": checked,
               "us": {n: round(1e3 * statistics.median(t), 2) for n, t in times.items()},
               "gbps": {n: round(gbps(nbytes, statistics.median(t)), 1) for n, t in times.items()}}
        rows.append(row)
        print(f"{R}x{C} {row['dtype']}:", ", ".join(f"{n} {v:.1f} us" for n, v in row["us"].items()), flush=True)
    OUT.write_text(json.dumps({
        **provenance("07_matmul_relu: the copy of b onto 128-byte rows", "python lab/sweeps/realign_copy.py"),
        "method": METHOD, "rounds": ROUNDS, "notebook_copy_tile": list(ns["COPY_TILE"]), "rows": rows}, indent=1) + "\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
