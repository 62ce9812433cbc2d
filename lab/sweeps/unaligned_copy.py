"""What chapter 07's copies cost where rows do not start on 16-byte boundaries, and whether another tile or
another walk over the elements copies them faster.

    python lab/sweeps/unaligned_copy.py [--out solutions/07_matmul_relu/records/07_matmul_relu_unaligned_copy.json]
        (on a GPU: under a minute on an H200)
    python lab/sweeps/unaligned_copy.py --dry-run
        (anywhere; without a GPU under Triton's interpreter: every copy checked at a small size)

At odd sizes the reference copies ``a`` (and ``b``) *into* rows that start on 128-byte boundaries, and copies
``c`` *out of* such rows into the contiguous result (``copy_rows``, ``padded_rows`` in ``triton_course.matmul_fast``). One
side of each copy has rows an odd number of 2-byte elements long, so ``copy_rows_kernel`` moves 2 bytes per
instruction (ALIGN = 1). Timed side by side in ``triton_course.bench.steady_rounds``: the notebook's copy, the same
kernel at other tiles (rows x bytes of a row per program), a flat walk over the contiguous side (its loads, or its
stores, 16 bytes at a time; the row of each element found by a division), torch's strided ``copy_``, and a
contiguous clone of the same bytes for the ceiling. GB/s count the bytes read and written once.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "lab" / "sweeps"))

import records  # noqa: E402

records.interpret_if_dry_run()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from grader.course import solution_notebook  # noqa: E402
from grader.notebook_code import load_namespace  # noqa: E402

OUT = ROOT / "solutions" / "07_matmul_relu" / "records" / "07_matmul_relu_unaligned_copy.json"
GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
DEVICE = "cuda" if GPU else "cpu"
TILES = [(8, 1024, 4), (4, 1024, 4), (16, 1024, 4), (32, 256, 4), (64, 128, 4), (2, 2048, 4), (8, 1024, 8),
         (16, 1024, 8)]
FLAT_BLOCKS = [(4096, 4), (8192, 8)]


@triton.jit
def flat_into_rows_kernel(src_ptr, dst_ptr, total, C, stride_dst, BLOCK: tl.constexpr):
    """dst[i // C, i % C] = src[i]: the contiguous source read in one aligned run, 16 bytes per load."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = i < total
    x = tl.load(src_ptr + i, mask=ok)
    r = i // C
    tl.store(dst_ptr + r.to(tl.int64) * stride_dst + (i - r * C), x, mask=ok)


@triton.jit
def flat_out_of_rows_kernel(src_ptr, dst_ptr, total, C, stride_src, BLOCK: tl.constexpr):
    """dst[i] = src[i // C, i % C]: the contiguous destination written in one aligned run, 16 bytes per store."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = i < total
    r = i // C
    x = tl.load(src_ptr + r.to(tl.int64) * stride_src + (i - r * C), mask=ok)
    tl.store(dst_ptr + i, x, mask=ok)


def variants(ns, direction: str) -> dict:
    """name -> fn(src, dst) copying src into dst (dst's rows padded when copying into 128-byte rows)."""
    kernel = ns["copy_rows_kernel"]

    def tiled(rows, row_bytes, warps):
        def run(src, dst):
            (R, C), size = src.shape, src.element_size()
            block_c = row_bytes // size
            kernel[(triton.cdiv(R, rows), triton.cdiv(C, block_c))](
                src, dst, R, C, src.stride(0), dst.stride(0), BLOCK_R=rows, BLOCK_C=block_c, ALIGN=1,
                num_warps=warps)
            return dst
        return run

    def flat(block, warps):
        def run(src, dst):
            (R, C) = src.shape
            grid = (triton.cdiv(R * C, block),)
            if direction == "into 128-byte rows":
                flat_into_rows_kernel[grid](src, dst, R * C, C, dst.stride(0), BLOCK=block, num_warps=warps)
            else:
                flat_out_of_rows_kernel[grid](src, dst, R * C, C, src.stride(0), BLOCK=block, num_warps=warps)
            return dst
        return run

    out = {"copy_rows (notebook)": ns["copy_rows"], "torch copy_": lambda src, dst: dst.copy_(src)}
    out.update({f"tile {r}x{b}B w{w}": tiled(r, b, w) for r, b, w in TILES})
    out.update({f"flat {b} w{w}": flat(b, w) for b, w in FLAT_BLOCKS})
    return out


def operands(ns, direction, R, C, dtype):
    """(src, dst) of one copy: a contiguous matrix into padded rows, or padded rows into a contiguous matrix."""
    plain = torch.randn(R, C, device=DEVICE).to(dtype)
    padded = ns["padded_rows"](R, C, like=plain)
    if direction == "into 128-byte rows":
        return plain, padded
    padded.copy_(plain)
    return padded, torch.empty(R, C, device=DEVICE, dtype=dtype)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args()
    dry = args.dry_run or not GPU
    with contextlib.redirect_stdout(io.StringIO()):
        from triton_course.matmul_fast import fast_namespace   # the fast path's names
        ns = fast_namespace(load_namespace(solution_notebook("07_matmul_relu")))
    shapes = [(45, 77, torch.float16)] if dry else [(3001, 3007, torch.float16), (3001, 2999, torch.float16),
                                                     (8191, 8191, torch.float16)]
    rows, wrong = [], []
    for direction in ("into 128-byte rows", "out of 128-byte rows"):
        fns = variants(ns, direction)
        for R, C, dtype in shapes:
            src, dst = operands(ns, direction, R, C, dtype)
            checks = {}
            for name, fn in fns.items():
                dst.fill_(float("nan"))
                checks[name] = bool(torch.equal(fn(src, dst), src))
                if not checks[name]:
                    wrong.append([direction, R, C, name])
            print(f"{direction} {R}x{C}: " + ", ".join(f"{n} {'ok' if v else 'WRONG'}" for n, v in checks.items()),
                  flush=True)
            if dry:
                continue
            from triton_course.bench import gbps, steady_rounds
            timed = dict(fns, **{"contiguous clone (ceiling)": lambda s, d: s.clone()})
            times = steady_rounds(timed, lambda: operands(ns, direction, R, C, dtype), rounds=7)
            nbytes = 2 * R * C * src.element_size()
            row = {"direction": direction, "rows": R, "cols": C, "dtype": str(dtype).split(".")[-1],
                   "bytes": nbytes, "equal_to_input": checks,
                   "us": {n: round(1e3 * statistics.median(t), 2) for n, t in times.items()},
                   "gbps": {n: round(gbps(nbytes, statistics.median(t)), 1) for n, t in times.items()}}
            rows.append(row)
            best = max((n for n in row["gbps"] if n != "contiguous clone (ceiling)"), key=row["gbps"].get)
            print(f"  notebook {row['gbps']['copy_rows (notebook)']} GB/s, best {best} {row['gbps'][best]}, "
                  f"clone {row['gbps']['contiguous clone (ceiling)']}", flush=True)
    if dry:
        return 1 if wrong else 0
    from triton_course.bench import METHOD
    record = {**records.provenance("07_matmul_relu: copies where rows do not start on 16-byte boundaries",
                                   "python lab/sweeps/unaligned_copy.py"),
              "method": METHOD, "rounds": 7, "notebook_copy_tile": list(ns["COPY_TILE"]), "wrong": wrong,
              "rows": rows}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print("wrote", args.out)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
