"""Chapter 09's attention against SDPA, every call replayed from a CUDA graph: the ratios of issue 15's point 2
with no host in the timed region, and an A/A test of the method on attention itself.

    python lab/sweeps/attention_graphs.py [--out solutions/09_attention/records/09_attention_graphs.json]
        (on a GPU: about 3 minutes on an H200)
    python lab/sweeps/attention_graphs.py --dry-run
        (anywhere; without a GPU under Triton's interpreter: the functions it times, against float64)

The launch sweeps of chapter 09 time with ``triton_course.bench.steady_rounds``, which put two timings of the
notebook's own launch in one round up to 8% apart (solutions/09_attention/records/09_attention_d128_wide.json), more than the gaps they
choose between. Here every function's calls are captured once in a CUDA graph and the graphs are replayed in a new
random order each round (lab/sweeps/graph_timing.py's ``graph_rounds``: one memory-bound launch within 0.6% of
itself there). At each case (D = 64 and 128, causal or not) and N from 1024 to 16384, float16, Z = 4, H = 2048 / D:
SDPA (cuDNN's kernels on Hopper), the notebook's attention at its own launch (``HOPPER_CONFIGS``) twice (the A/A
pair: how far the method puts one function from itself), and at D = 128 without a mask the 128 x 128 launch that
serves N <= 2048 there, at every N. Every function is checked against float64 first.
"""

from __future__ import annotations

import argparse
import json
import math
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

from triton_course.attention import (AttentionConfig, attention_reference, pinned_config,  # noqa: E402
                                     through_launch_table)
from triton_course.attention_fast import fast_namespace  # noqa: E402

OUT = ROOT / "solutions" / "09_attention" / "records" / "09_attention_graphs.json"
GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
CASES = [(64, False), (64, True), (128, False), (128, True)]
NS_N = (1024, 2048, 4096, 8192, 16384)
Z = 4
#: at D = 128 without a mask, the table's launch for N <= 2048, timed at every N
SHORT_LAUNCH = AttentionConfig(128, 128, 8, 3, tma=True)


def functions(ns: dict, d: int, causal: bool) -> dict:
    def table(q, k, v):
        return ns["attention"](q, k, v, causal)

    def again(q, k, v):   # the same call under another name: a second graph, at another place in each round
        return ns["attention"](q, k, v, causal)

    fns = {"notebook table": table, "notebook table, again": again}
    if (d, causal) == (128, False):
        def short(q, k, v):
            with pinned_config(SHORT_LAUNCH):
                return ns["attention"](q, k, v, causal)
        fns["tma 128x128 w8 s3"] = short
    return fns


def inputs(z, h, n, d, dtype=torch.float16, device="cuda"):
    return tuple(torch.randn(z, h, n, d, device=device, dtype=dtype) for _ in range(3))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args()
    dry = args.dry_run or not GPU
    ns = fast_namespace()   # chapter 09's fast path (the solution notebook's code when the record was made)
    ns["attention"] = through_launch_table(ns["attention"])   # the table's launches, never the Gluon path
    rows, wrong, failed = [], [], {}
    for d, causal in CASES:
        fns = functions(ns, d, causal)
        for z, h, n in ([(1, 2, 48)] if dry else [(2, 4, 1000), (1, 2, 4096)]):
            q, k, v = inputs(z, h, n, 16 if dry else d, torch.float32 if dry else torch.float16,
                             "cpu" if dry else "cuda")
            want = attention_reference(q.double(), k.double(), v.double(), causal)
            for name, fn in fns.items():
                err = float((fn(q, k, v).double() - want).abs().max())
                ok = err <= (1e-4 if dry else 2e-2)
                print(f"D={d:<3} causal={causal!s:<5} N={n:<5} {name:<22} {'correct' if ok else 'WRONG'}"
                      f" (max error {err:.2e})", flush=True)
                if not ok:
                    wrong.append([name, d, causal, n, err])
        if dry:
            continue
        from graph_timing import METHOD, attention_against_sdpa
        for row, times in attention_against_sdpa(fns, inputs, d=d, causal=causal, z=Z, h=2048 // d, ns=NS_N,
                                                 failed=failed):
            tf = row["tflops"]
            row["a_a_gap"] = round(abs(tf["notebook table"] / tf["notebook table, again"] - 1), 4)
            row["round_spread"] = {k: round((max(t) - min(t)) / statistics.median(t), 3) for k, t in times.items()}
            rows.append(row)
            n = row["N"]
            print(f"D={d:<3} causal={causal!s:<5} N={n:5}: SDPA {tf['SDPA']:6.1f}  notebook {tf['notebook table']:6.1f}"
                  f" ({row['ratio_to_sdpa']['notebook table']:.3f}), again {tf['notebook table, again']:6.1f}"
                  f" (A/A {row['a_a_gap']:.2%})", flush=True)
    if dry:
        return 1 if wrong else 0
    summary = []
    for d, causal in CASES:
        mine = [r for r in rows if (r["D"], r["causal"]) == (d, causal)]
        for name in [k for k in mine[0]["tflops"] if k != "SDPA"]:
            ratios = [r["ratio_to_sdpa"][name] for r in mine]
            summary.append(f"D={d}{', causal' if causal else ''}, {name}: / SDPA "
                           + ", ".join(f"N={r['N']} {x}" for r, x in zip(mine, ratios))
                           + f" (worst {min(ratios)}, geometric mean "
                           + f"{math.exp(statistics.fmean(map(math.log, ratios))):.3f})")
    record = {**records.provenance("09_attention against SDPA, replayed from CUDA graphs",
                                   "python lab/sweeps/attention_graphs.py"),
              "method": METHOD + "; float16, Z = 4, H = 2048 / D; TFLOP/s = 4 Z H N^2 D (halved when causal) / "
                                 "median time; rounds: 7",
              "sdpa_backend": "cuDNN attention on Hopper (solutions/09_attention/records/09_attention_focus.json names its kernels)",
              "largest_a_a_gap": max(r["a_a_gap"] for r in rows),
              "wrong": wrong, "failed": failed, "summary": summary, "rows": rows}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print("\n".join(summary))
    print("wrote", records.shown_path(args.out))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
