"""Chapter 07's autotuner at 1024^3 on a GPU: which config it picks with Triton's own timer and with the fast path's
``kernel_time`` (CUDA graph replays), each in fresh processes, and how fast the picks run.

    python lab/sweeps/matmul_tuning.py [--runs 3] [--out solutions/07_matmul_relu/records/07_matmul_relu_tuning.json]
        (on a GPU; about a minute on an H200)

At 1024^3 a kernel takes about as long as Python takes to launch it (10 us on an H200). Triton's timer launches
from Python between CUDA events, so the host's pace gets into the times it compares. Each run starts a process
that loads the solution notebook's kernel into the fast path, tunes float16 and bfloat16 at 1024^3 with one timer
(``--timer``, in the worker), records every config's time and the pick, and times the pick beside torch
(``steady_rounds``, 5 rounds).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "lab" / "sweeps"))

OUT = ROOT / "solutions" / "07_matmul_relu" / "records" / "07_matmul_relu_tuning.json"
TIMERS = ("triton's do_bench", "kernel_time (CUDA graphs)")


def worker(timer: str) -> dict:
    """One fresh process: tune at 1024^3 in float16 and bfloat16 with ``timer``; the picks, the times, the speed."""
    import torch

    from grader.course import solution_notebook
    from grader.notebook_code import load_namespace
    from triton_course.bench import steady_rounds
    from triton_course.matmul import matmul_flops, tflops

    from triton_course.matmul_fast import fast_namespace   # the fast path's names
    ns = fast_namespace(load_namespace(solution_notebook("07_matmul_relu")))
    tuned = ns["matmul_relu_tuned"]
    if timer == TIMERS[0]:
        tuned._do_bench = None   # the autotuner's default: triton.testing.do_bench
    out = {}
    for dtype in (torch.float16, torch.bfloat16):
        def make():
            return (torch.randn(1024, 1024, device="cuda", dtype=dtype),
                    torch.randn(1024, 1024, device="cuda", dtype=dtype))
        a, b = make()
        ns["matmul_relu"](a, b)
        times = {str(k.all_kwargs()): round(v[0] * 1e3, 2) for k, v in tuned.configs_timings.items()}
        rounds = steady_rounds({"torch": lambda x, y: torch.relu(x @ y), "pick": ns["matmul_relu"]}, make, rounds=5)
        speed = {n: tflops(matmul_flops(1024, 1024, 1024), statistics.median(t)) for n, t in rounds.items()}
        out[str(dtype).split(".")[-1]] = {"pick": str(tuned.best_config.all_kwargs()), "timed_us": times,
                                          "ratio_pick_to_torch": round(speed["pick"] / speed["torch"], 3)}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--timer", choices=TIMERS, help=argparse.SUPPRESS)   # a worker process
    args = p.parse_args()
    if args.timer:
        print(json.dumps(worker(args.timer)))
        return 0
    from records import provenance

    record = {**provenance("07_matmul_relu: the autotuner's timer at 1024^3", "python lab/sweeps/matmul_tuning.py"),
              "tunings": {}}
    for timer in TIMERS:
        record["tunings"][timer] = []
        for _ in range(args.runs):
            proc = subprocess.run([sys.executable, __file__, "--timer", timer], capture_output=True, text=True)
            if proc.returncode != 0:
                print(proc.stderr[-3000:])
                return 1
            run = json.loads(proc.stdout.strip().splitlines()[-1])
            record["tunings"][timer].append(run)
            print(timer, {d: (r["pick"], r["ratio_pick_to_torch"], sorted(r["timed_us"].values()))
                          for d, r in run.items()}, flush=True)
    record["summary"] = {timer: {d: [run[d]["ratio_pick_to_torch"] for run in runs] for d in ("float16", "bfloat16")}
                         for timer, runs in record["tunings"].items()}
    print(json.dumps(record["summary"]))
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
