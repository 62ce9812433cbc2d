"""What a program of chapter 09's attention pays once, and what each key block costs it, against SDPA's kernel:
why short sequences (N = 1024) stand furthest behind at D = 128.

    python lab/sweeps/attention_fixed_cost.py [--out solutions/09_attention/records/09_attention_fixed_cost.json]
        (on a GPU: about a minute on an H200)
    python lab/sweeps/attention_fixed_cost.py --dry-run
        (anywhere; without a GPU under Triton's interpreter: the launch it times, against float64)

At D = 128 without a mask the notebook's launch for N <= 2048 runs 128 x 128 blocks, one program per SM. Every
run here has the same number of programs, 1056 = 8 full waves of the H200's 132 SMs, with N from 256 to 4096 and
as many heads as that takes (Z = 1, H = 1056 / (N / 128)): so the time of a run is 8 times that of one program,
and a program visits N / 128 key blocks. A straight line through time per program against key blocks per program
(least squares) splits it into what a program pays once (the intercept: waiting for q and its first key blocks,
the final normalisation and store) and what each key block costs (the slope). SDPA (cuDNN) runs the same shapes;
its kernel takes 64-row blocks, several per SM, so its line is of the run's time / 8 as well: per 128 query rows
an SM serves, not per program of its own.
Timed with lab/sweeps/graph_timing.py's ``graph_rounds`` (CUDA graphs, no host in the timed region).
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
import torch.nn.functional as F  # noqa: E402

from triton_course.attention import AttentionConfig, attention_reference, pinned_config  # noqa: E402
from triton_course.attention_fast import fast_namespace  # noqa: E402

OUT = ROOT / "solutions" / "09_attention" / "records" / "09_attention_fixed_cost.json"
GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
LAUNCH = AttentionConfig(128, 128, 8, 3, tma=True)   # the table's D = 128 launch for N <= 2048
D, PROGRAMS, WAVES = 128, 1056, 8
NS_N = (256, 512, 1024, 2048, 4096)


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through (xs, ys)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args()
    dry = args.dry_run or not GPU
    ns = fast_namespace()   # chapter 09's fast path (the solution notebook's code when the record was made)

    def notebook(q, k, v):
        with pinned_config(LAUNCH):
            return ns["attention"](q, k, v, False)

    if dry:   # the interpreter: the launch against float64 on one small case
        q, k, v = (torch.randn(1, 2, 256, 16) for _ in range(3))
        err = float((notebook(q, k, v) - attention_reference(q, k, v, False)).abs().max())
        print(f"128x128 w8 s3: {'correct' if err < 1e-4 else 'WRONG'} (max error {err:.2e})")
        return 0 if err < 1e-4 else 1
    from graph_timing import METHOD, graph_rounds
    fns = {"notebook 128x128 w8 s3": notebook,
           "SDPA": lambda q, k, v: F.scaled_dot_product_attention(q, k, v)}
    rows = []
    for n in NS_N:
        h = PROGRAMS // (n // 128)

        def make(_h=h, _n=n):
            return tuple(torch.randn(1, _h, _n, D, device="cuda", dtype=torch.float16) for _ in range(3))

        q, k, v = make()
        for name, fn in fns.items():
            err = float((fn(q, k, v).double() - attention_reference(q.double(), k.double(), v.double())).abs().max())
            assert err < 2e-2, (name, n, err)
        times = graph_rounds(fns, make, rounds=7)
        us = {name: statistics.median(t) * 1e3 for name, t in times.items()}
        rows.append({"N": n, "H": h, "key_blocks_per_program": n // 128,
                     "us_per_call": {k2: round(v2, 2) for k2, v2 in us.items()},
                     "us_per_program": {k2: round(v2 / WAVES, 3) for k2, v2 in us.items()},
                     "tflops": {k2: round(4 * h * n * n * D / (v2 * 1e-6) / 1e12, 1) for k2, v2 in us.items()}})
        print(f"N={n:5} H={h:4}: " + ", ".join(f"{k2} {v2:8.1f} us" for k2, v2 in us.items()), flush=True)
    lines = {}
    for name in fns:
        once, per_block = fit([r["key_blocks_per_program"] for r in rows], [r["us_per_program"][name] for r in rows])
        worst = max(abs(once + per_block * r["key_blocks_per_program"] - r["us_per_program"][name])
                    / r["us_per_program"][name] for r in rows)
        lines[name] = {"us_once": round(once, 3), "us_per_key_block": round(per_block, 4),
                       "once_in_key_blocks": round(once / per_block, 2), "largest_misfit": round(worst, 3)}
        print(f"{name}: {once:.2f} us once + {per_block:.3f} us per key block "
              f"(once = {once / per_block:.1f} key blocks; the line misses a point by at most {worst:.1%})")
    record = {**records.provenance("09_attention: what a program pays once and per key block, D = 128",
                                   "python lab/sweeps/attention_fixed_cost.py"),
              "method": METHOD + f"; float16, D = {D}, no mask, Z = 1, {PROGRAMS} programs of 128 query rows "
                                 f"({WAVES} waves of 132 SMs) at every N; time per program = time per call / {WAVES}",
              "launch": LAUNCH.describe(), "lines": lines, "rows": rows}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print("wrote", records.shown_path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
