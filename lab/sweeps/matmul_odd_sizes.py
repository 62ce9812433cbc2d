"""Chapter 07's matmul_relu at sizes whose rows do not start on 16-byte boundaries, against cuBLAS and against the
exercise's kernel that the reference ran there before.

    python lab/sweeps/matmul_odd_sizes.py [--out solutions/07_matmul_relu/records/07_matmul_relu_odd_sizes.json]
        (on a GPU: about 2 minutes on an H200)
    python lab/sweeps/matmul_odd_sizes.py --dry-run
        (anywhere; without a GPU under Triton's interpreter: every path against float64 at small sizes, the
        copies and the Hopper kernel called directly, since there the launcher keeps such rows on the exercise's
        kernel)

The question. With K odd, a row of ``a`` is an odd number of 2-byte elements long, and every other row starts 2
bytes past a 16-byte boundary; with N odd, so do the rows of ``b`` and ``c``. The copy engine (TMA) cannot read such
rows, ``cp.async`` cannot copy 16 bytes at a time from them, and the exercise's kernel falls back to one element per
load: about 100 TFLOP/s on an H200, where aligned sizes reach 600-760. cuBLAS falls off the same cliff. The
reference now copies ``a`` and ``b`` onto 128-byte rows (``realigned``: 2·(M·K + K·N)·s bytes), runs its Hopper
kernel (``matmul_relu_tma_kernel``, or its Gluon kernel of 192 x 192 tiles where those fill the waves better:
``gluon_pays``), computes ``c`` in padded rows where N·s is not a multiple of 16, and copies it into ``c`` (2·M·N·s
bytes more). At each shape, side by side in ``triton_course.bench.steady_rounds`` (medians of interleaved rounds on
fresh inputs): torch's relu(a @ b), the reference (chapter 07's fast path, ``triton_course.matmul_fast``), the
exercise's kernel autotuned over the fast path's configs (what the reference ran at these sizes before), and the
copies alone (the realignment of ``a`` and ``b`` and the copy out of the padded ``c``). Every output is checked against float64.
"""

from __future__ import annotations

import argparse
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

from grader.course import solution_notebook  # noqa: E402
from grader.notebook_code import load_namespace  # noqa: E402
from triton_course.matmul import matmul_flops, tolerance  # noqa: E402

OUT = ROOT / "solutions" / "07_matmul_relu" / "records" / "07_matmul_relu_odd_sizes.json"
GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
DEVICE = "cuda" if GPU else "cpu"

#: (name, m, n, k, b = w.t(), dtype): K odd (a's rows), N odd (b's and c's rows), both; one size the small-problem
#: rule keeps on the exercise's kernel (1001^3: 32 tiles of 128 x 256, under half of the H200's SMs).
GPU_SHAPES = [("3001x2999x3007", 3001, 2999, 3007, False, torch.float16),
              ("3001x2999x3007 B^T", 3001, 2999, 3007, True, torch.float16),
              ("3001x2999x3007 bf16", 3001, 2999, 3007, False, torch.bfloat16),
              ("2047^3", 2047, 2047, 2047, False, torch.float16),
              ("4095^3", 4095, 4095, 4095, False, torch.float16),
              ("4096x4096x4095", 4096, 4096, 4095, False, torch.float16),
              ("4096x4095x4096", 4096, 4095, 4096, False, torch.float16),
              ("8191^3", 8191, 8191, 8191, False, torch.float16),
              ("1001^3", 1001, 1001, 1001, False, torch.float16)]
CPU_SHAPES = [("45x71x33", 45, 71, 33, False, torch.float16), ("45x71x33 B^T", 45, 71, 33, True, torch.float16),
              ("33x95x130", 33, 95, 130, False, torch.float16)]


def operands(m, n, k, transpose_b, dtype):
    a = torch.randn(m, k, device=DEVICE, dtype=dtype)
    b = torch.randn(n, k, device=DEVICE, dtype=dtype).t() if transpose_b else torch.randn(k, n, device=DEVICE,
                                                                                            dtype=dtype)
    return a, b


def variants(ns) -> dict:
    """name -> fn(a, b), each returning relu(a @ b) or, for the copies, what they produce."""
    def exercise_kernel(a, b):
        (M, K), N = a.shape, b.shape[1]
        c = torch.empty((M, N), device=a.device, dtype=a.dtype)
        ns["matmul_relu_tuned"][lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)](
            a, b, c, M, N, K, *a.stride(), *b.stride(), N, 1, ALIGNED=False)
        return c

    def copies(a, b):
        rows = b.t() if ns["b_transposed"](b) else b
        ns["realigned"](a), ns["realigned"](rows)
        out = ns["padded_rows"](a.shape[0], b.shape[1], like=a)
        return ns["copy_rows"](out, torch.empty(out.shape, device=a.device, dtype=a.dtype))

    def copies_then_hopper(a, b):
        """The reference's path for such rows on a GPU, called directly: the interpreter keeps them off it."""
        grid, meta, state = ns["tma_plan"](a, b, ns["choose_tile"](a, b, ["128x256x64 s3w8"]))
        c = torch.empty((a.shape[0], b.shape[1]), device=a.device, dtype=a.dtype)
        return ns["tma_launch"](a, b, c, grid, meta, state)

    fns = {"torch": lambda a, b: torch.relu(a @ b), "reference": ns["matmul_relu"],
           "exercise kernel (before)": exercise_kernel, "copies alone": copies}
    if not GPU:
        fns["copies + Hopper kernel"] = copies_then_hopper
    return fns


def plan_of(ns, a, b) -> dict:
    """What the reference's launcher chose for (a, b): the kernel and, on the Hopper path, the copies."""
    key = next(k for k in ns["LAUNCHES"] if k[:4] == (a.shape[0], b.shape[1], a.shape[1], a.dtype)
               and k[4] == a.stride() and k[5] == b.stride())
    _, meta, state = ns["LAUNCHES"][key]
    if state is None:
        return {"kernel": "matmul_relu_kernel", "tile": f"{meta['BLOCK_M']}x{meta['BLOCK_N']}x{meta['BLOCK_K']}"}
    kernel = "matmul_relu_gluon_kernel" if state.get("gluon") else "matmul_relu_tma_kernel"
    width = meta["BLOCK_N"] + meta.get("EXTRA_N", 0)
    return {"kernel": kernel, "tile": f"{meta['BLOCK_M']}x{width}x{meta['BLOCK_K']}",
            **{k: state[k] for k in ("realign_a", "realign_b", "pad_c", "split")}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args()
    dry = args.dry_run or not GPU
    from triton_course.matmul_fast import fast_namespace   # the fast path's names
    ns = fast_namespace(load_namespace(solution_notebook("07_matmul_relu")))
    fns = variants(ns)
    rows, wrong = [], []
    for name, m, n, k, transpose_b, dtype in (CPU_SHAPES if dry else GPU_SHAPES):
        a, b = operands(m, n, k, transpose_b, dtype)
        want = torch.relu(a.double() @ b.double())
        atol, rtol = tolerance(dtype)
        checks = {}
        for label, fn in fns.items():
            if label == "copies alone" or (dry and label == "torch"):
                continue
            got = fn(a, b)
            err = float((got.double() - want).abs().max())
            ok = (got.shape == want.shape and got.is_contiguous()
                  and torch.allclose(got.double(), want, atol=atol, rtol=rtol))
            checks[label] = {"max_abs_error": round(err, 4), "correct": ok}
            if not ok and label != "torch":   # torch's own rounding is recorded, not ours to fix
                wrong.append([name, label, err])
        plan = plan_of(ns, a, b)
        print(f"{name:22} plan {plan}  " + "  ".join(f"{lab}: {'ok' if c['correct'] else 'WRONG'}"
                                                      for lab, c in checks.items()), flush=True)
        if dry:
            continue
        from triton_course.bench import steady_rounds
        times = steady_rounds(fns, lambda: operands(m, n, k, transpose_b, dtype), rounds=7)
        us = {lab: round(statistics.median(t) * 1e3, 2) for lab, t in times.items()}
        flops = matmul_flops(m, n, k)
        row = {"name": name, "m": m, "n": n, "k": k, "transpose_b": transpose_b, "dtype": str(dtype).split(".")[-1],
               "plan": plan, "checks": checks, "us": us,
               "tflops": {lab: round(flops / (v * 1e-6) / 1e12, 1) for lab, v in us.items() if lab != "copies alone"},
               "ratio_to_torch": {lab: round(us["torch"] / v, 3) for lab, v in us.items() if lab != "copies alone"}}
        rows.append(row)
        print(f"{'':22} us {us}  ratio to torch {row['ratio_to_torch']}", flush=True)
    if dry:
        return 1 if wrong else 0
    summary = [f"{r['name']}: reference {r['tflops']['reference']} TFLOP/s ({r['ratio_to_torch']['reference']} of "
               f"torch's {r['tflops']['torch']}), before {r['tflops']['exercise kernel (before)']}; copies "
               f"{r['us']['copies alone']} of the reference's {r['us']['reference']} us" for r in rows]
    record = {**records.provenance("07_matmul_relu: sizes whose rows do not start on 16-byte boundaries",
                                   "python lab/sweeps/matmul_odd_sizes.py"),
              "method": "triton_course.bench.steady_rounds: medians of 7 interleaved rounds, fresh inputs",
              "summary": summary, "wrong": wrong,
              "torch_outside_tolerance": {r["name"]: r["checks"]["torch"]["max_abs_error"] for r in rows
                                          if not r["checks"]["torch"]["correct"]},
              "rows": rows}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print("\n".join(summary))
    print("wrote", args.out)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
