"""Chapter 06's RMSNorm with ``1 / sqrt`` or with ``rsqrt``, beside torch.compile and Liger-Kernel in one run.

    python lab/sweeps/rmsnorm_rsqrt.py [--out lab/records/06_rmsnorm_rsqrt.json]
        (on a GPU: about 2 minutes on an H200; Liger-Kernel 0.8.5 when installed, as for peers.py)
    python lab/sweeps/rmsnorm_rsqrt.py --dry-run
        (anywhere; without a GPU under Triton's interpreter: both kernels against float64 at small sizes)

The reference computes ``rstd = 1.0 / tl.sqrt(mean_sq + eps)``: a correctly rounded square root and a correctly
rounded division, each a sequence of instructions, once per row in every thread that holds part of the row.
Liger-Kernel's RMSNorm, which led the reference by 2-5% at 262144 rows of 64 (lab/records/peers.json), takes
``rsqrt``, one special-function instruction (relative error about 2^-23, far below float16's and bfloat16's
rounding and within float32's tolerances here). On short rows a thread holds few elements per row, so the
per-row sequence weighs. This probe times, at peers.py's RMSNorm shapes, side by side on the same inputs
(``triton_course.bench.steady_rounds``, medians of 7 interleaved rounds): the notebook's ``rmsnorm``, the same
notebook with that one line changed to ``tl.math.rsqrt(mean_sq + eps)``, torch.compile, Liger-Kernel and a
copy of the same bytes. Both kernels are checked against float64 first.

Recorded on an H200 (lab/records/06_rmsnorm_rsqrt.json): rsqrt is no faster anywhere (0.98-1.00 of the 1/sqrt
kernel's GB/s), so the per-row arithmetic is not what Liger-Kernel leads by at 262144 x 64.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "lab" / "sweeps")]

import nbformat  # noqa: E402
import torch  # noqa: E402

import peers  # noqa: E402
from records import provenance  # noqa: E402
from grader.course import solution_notebook  # noqa: E402
from grader.notebook_code import exec_cell, load_namespace  # noqa: E402
from triton_course.bench import METHOD, gbps, steady_rounds  # noqa: E402

OUT = ROOT / "lab" / "records" / "06_rmsnorm_rsqrt.json"
GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
LINE = "rstd = 1.0 / tl.sqrt(mean_sq + eps)"
RSQRT = "rstd = tl.math.rsqrt(mean_sq + eps)"


def namespaces() -> tuple[dict, dict]:
    """The solution notebook's code as it is, and a second copy whose kernel cell computes rstd with rsqrt."""
    notebook = solution_notebook("06_rmsnorm")
    as_is, with_rsqrt = load_namespace(notebook), load_namespace(notebook)
    cell = next(c.source for c in nbformat.read(notebook, as_version=4).cells if "def rmsnorm_kernel" in c.source)
    assert cell.count(LINE) == 1, f"the kernel no longer reads {LINE!r}"
    exec_cell(cell.replace(LINE, RSQRT), "<rmsnorm_rsqrt>", with_rsqrt)
    return as_is, with_rsqrt


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args()
    as_is, with_rsqrt = namespaces()
    dry = args.dry_run or not GPU
    device = "cpu" if dry else "cuda"
    shapes = [(37, 1000, torch.float32), (70, 64, torch.float32), (5, 5120, torch.float16)] if dry else \
        peers.SHAPES["rmsnorm"]
    lt = None if dry else peers._liger()
    rows, wrong = [], []
    for m, n, dtype in shapes:
        x, w = torch.randn(m, n, device=device, dtype=dtype), torch.randn(n, device=device, dtype=dtype)
        want = peers.expected("rmsnorm", (x, w))[0]
        errors = {name: float((ns["rmsnorm"](x, w).double() - want).abs().max())
                  for name, ns in (("reference", as_is), ("reference, rsqrt", with_rsqrt))}
        scale = float(want.abs().max())
        ok = errors["reference, rsqrt"] <= 1.5 * errors["reference"] + 1e-6 * scale
        print(f"{m}x{n} {str(dtype)[6:]:<9} max error: 1/sqrt {errors['reference']:.3g}, rsqrt "
              f"{errors['reference, rsqrt']:.3g} {'correct' if ok else 'WRONG'}", flush=True)
        if not ok:
            wrong.append(f"{m}x{n} {dtype}")
        if dry:
            continue
        fns = {"reference": as_is["rmsnorm"], "reference, rsqrt": with_rsqrt["rmsnorm"],
               **{k: v for k, v in peers.peers("rmsnorm", n, dtype, lt).items() if k != "torch eager (F.rms_norm)"},
               "same-size copy": lambda x, *rest: x.clone()}
        times = steady_rounds(fns, peers.inputs("rmsnorm", m, n, dtype), rounds=peers.ROUNDS)
        element = x.element_size()
        nbytes = {k: (2 * m * n * element if k == "same-size copy" else peers.traffic("rmsnorm", m, n, element))
                  for k in fns}
        rate = {k: round(gbps(nbytes[k], statistics.median(t)), 1) for k, t in times.items()}
        best_peer = max((k for k in rate if k not in ("reference", "reference, rsqrt", "same-size copy")),
                        key=rate.get)
        row = {"rows": m, "width": n, "dtype": str(dtype)[6:], "max_error": errors, "gbps": rate,
               "best_peer": best_peer,
               "ratio_to_best_peer": {k: round(rate[k] / rate[best_peer], 3)
                                      for k in ("reference", "reference, rsqrt")},
               "rsqrt_over_reference": round(rate["reference, rsqrt"] / rate["reference"], 3)}
        rows.append(row)
        print(f"  GB/s: " + ", ".join(f"{k} {v}" for k, v in rate.items())
              + f"; to {best_peer}: 1/sqrt {row['ratio_to_best_peer']['reference']}, rsqrt "
              f"{row['ratio_to_best_peer']['reference, rsqrt']}", flush=True)
    if dry:
        return 1 if wrong else 0
    summary = [f"{r['rows']}x{r['width']} {r['dtype']}: rsqrt / 1/sqrt {r['rsqrt_over_reference']}; to the best peer "
               f"({r['best_peer']}) 1/sqrt {r['ratio_to_best_peer']['reference']}, rsqrt "
               f"{r['ratio_to_best_peer']['reference, rsqrt']}" for r in rows]
    record = {**provenance("06_rmsnorm: rstd by 1/sqrt or by rsqrt", "python lab/sweeps/rmsnorm_rsqrt.py"),
              "liger_kernel": getattr(__import__("liger_kernel"), "__version__", "?") if lt else None,
              "method": METHOD + f"; medians of {peers.ROUNDS} interleaved rounds",
              "summary": summary, "wrong": wrong, "rows": rows}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print("\n".join(summary))
    print("wrote", args.out)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
