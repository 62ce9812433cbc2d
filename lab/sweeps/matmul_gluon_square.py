"""Chapter 07's tiles of 192 x 192 in Gluon (the reference's kernel where they fill the waves best), timed.

    python lab/sweeps/matmul_gluon_square.py [--out solutions/07_matmul_relu/records/07_matmul_relu_gluon_square.json]
        (on an H200, Triton 3.6 or later: checks every launch against float64, then times them beside torch)
    python lab/sweeps/matmul_gluon_square.py --dry-run
        (anywhere with Triton 3.6 or later: compiles the kernel for sm_90 with b row-major and b = w.t(), and at
        two, three and four stages; prints registers, spills and shared memory)

The kernel is ``matmul_relu_gluon_kernel`` of chapter 07's fast path (``triton_course.matmul_fast``). Why
192 x 192: a tile's loads per step of K are its rows of a plus its columns of b, so requests per multiply-add fall
as (BM + BN) / (BM * BN): 0.0130 at 192 x 128 (matmul_gluon.py), 0.0104 at 192 x 192, where each 128-byte row piece
of a misaligned operand is two requests (3000^3). And at 3000^3 the tiles fill the waves: 16 x 16 = 256 tiles
are two waves of 132 programs, the second 94% full, where the notebook's 128 x 256 make 288 (a third wave of 24).
Timed: the reference (which takes this kernel at 3000^3), the kernel at 2, 3 and 4 stages, GROUP_M, 128 programs
instead of 132, b as given or copied onto 128-byte rows, and the kernel alone on operands already copied.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "lab" / "sweeps"))

import records  # noqa: E402

import torch  # noqa: E402
import triton  # noqa: E402

GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
OUT = ROOT / "solutions" / "07_matmul_relu" / "records" / "07_matmul_relu_gluon_square.json"


import triton_course.matmul_fast as NB  # noqa: E402 -- the fast path: its Gluon kernel

if not NB.GLUON:
    raise SystemExit(f"Gluon is not here in the form chapter 07 needs (triton {triton.__version__})")
gl = NB.gl


def descriptors(a, rows, c):
    """Boxes of 64 x 64 of a, of b's rows (w's for b = w.t()) and of c, as the notebook's gluon_launch makes them."""
    box = gl.NVMMASharedLayout.get_default_for([64, 64], gl.float16 if a.dtype == torch.float16 else gl.bfloat16)
    return [NB.GluonDescriptor.from_tensor(t, [64, 64], box) for t in (a, rows, c)]


def launch(a, b, stages: int = 4, group_m: int = 8, programs: int | None = None):
    """relu(a @ b) by the notebook's kernel (a, and b or its w, with 16-byte aligned rows), without its copies."""
    (M, K), N = a.shape, b.shape[1]
    b_t = b.stride(0) == 1 and b.stride(1) != 1
    c = torch.empty(M, N, device=a.device, dtype=a.dtype)
    programs = programs or torch.cuda.get_device_properties(a.device).multi_processor_count
    grid = (min(programs, triton.cdiv(M, 192) * triton.cdiv(N, 192)),)
    NB.matmul_relu_gluon_kernel[grid](*descriptors(a, b.t() if b_t else b, c), M, N, K, B_T=b_t, STAGES=stages,
                                      GROUP_M=group_m, num_warps=4)
    return c


def compile_report(b_t: bool, stages: int) -> dict:
    """The kernel compiled for sm_90 here: registers, spill stack, shared memory."""
    base = torch.empty(512, 512, dtype=torch.float16)
    meta = dict(B_T=b_t, STAGES=stages, GROUP_M=8, num_warps=4)
    usage = records.gluon_sm90_usage(NB.matmul_relu_gluon_kernel, [*descriptors(base, base, base), "i32", "i32",
                                                                    "i32"], meta)
    return {"launch": f"192x192 s{stages}" + (" B^T" if b_t else ""), **usage}


def summary(cases: list[dict]) -> list[str]:
    """Per case: torch, the reference, and the kernel's fastest launch, as shares of torch's speed."""
    lines = []
    for case in cases:
        us = {name: row["us"] for name, row in case["rows"].items()}
        timed = {n: t for n, t in us.items() if n.startswith("gluon")}
        best = min(timed, key=timed.get)
        lines.append(f"{case['case']}: torch {us['torch']} us, reference {us['reference']} us "
                     f"({round(us['torch'] / us['reference'], 3)}); fastest: {best} {us[best]} us "
                     f"({round(us['torch'] / us[best], 3)})")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args()
    reports = [compile_report(False, s) for s in (4, 3, 2)] + [compile_report(True, 4)]
    for r in reports:
        print(r)
    if args.dry_run or not GPU:
        return 0
    from grader.course import solution_notebook
    from grader.notebook_code import load_namespace
    from triton_course.matmul import matmul_flops

    from triton_course.matmul_fast import fast_namespace   # the fast path's names
    ns = fast_namespace(load_namespace(solution_notebook("07_matmul_relu")))
    record = {**records.provenance("07_matmul_relu: Gluon tiles of 192 x 192",
                                   "python lab/sweeps/matmul_gluon_square.py"),
              "method": "triton_course.bench.steady_rounds: medians of 7 interleaved rounds, fresh inputs",
              "compile": reports, "cases": []}
    ok = True
    cases = [("3000^3", (3000, 3000, 3000), torch.float16, False),
             ("3000^3 bf16", (3000, 3000, 3000), torch.bfloat16, False),
             ("3000^3 B^T", (3000, 3000, 3000), torch.float16, True),
             ("4096^3", (4096, 4096, 4096), torch.float16, False),
             ("4000x3000x5000", (4000, 3000, 5000), torch.float16, False)]
    for label, (m, n, k), dtype, b_t in cases:
        def make():
            a = torch.randn(m, k, device="cuda", dtype=dtype)
            return a, (torch.randn(n, k, device="cuda", dtype=dtype).t() if b_t
                       else torch.randn(k, n, device="cuda", dtype=dtype))

        def copied(b):
            return ns["realigned"](b.t()).t() if b_t else ns["realigned"](b)
        fns = {"torch": lambda a, b: torch.relu(a @ b), "reference": lambda a, b: ns["matmul_relu"](a, b)}
        variants = [(4, 8, None)]
        if label == "3000^3":
            variants += [(4, 4, None), (4, 16, None), (4, 8, 128), (3, 8, None), (2, 8, None)]
        for stages, gm, progs in variants:
            name = f"gluon 192x192 s{stages}, GROUP_M {gm}" + (f", {progs} programs" if progs else "")
            fns[f"{name}, b copied"] = (lambda a, b, s=stages, g=gm, p=progs: launch(a, copied(b), s, g, p))
            fns[f"{name}, b as given"] = lambda a, b, s=stages, g=gm, p=progs: launch(a, b, s, g, p)
        kept = {}

        def alone(a, b, which):
            key = (a.data_ptr(), b.data_ptr(), which)
            if key not in kept:
                kept[key] = (ns["realigned"](a) if "a" in which else a, copied(b) if "b" in which else b)
            return launch(*kept[key])
        fns["timing only: copy of b"] = lambda a, b: copied(b)
        for which in ("b", "ab"):
            fns[f"timing only: 192x192 s4 alone, {which} on 128-byte rows"] = (
                lambda a, b, which=which: alone(a, b, which))
        a, b = make()
        checks, good = records.check_products(fns, a, b, label)
        ok &= good
        rows = records.timed_rows({name: fn for name, fn in fns.items() if checks[name]["correct"]}, make,
                                  matmul_flops(m, n, k), label)
        record["cases"].append({"case": label, "shape": [m, n, k], "dtype": str(dtype).split(".")[-1],
                                "b": "w.t()" if b_t else "row-major", "checks": checks, "rows": rows})
    records.write_with_summary(record, summary(record["cases"]), args.out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
