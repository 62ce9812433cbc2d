"""Is torch.compile one kernel at RMSNorm 262144 x 64 float16? Several fresh processes, each with its own empty
Inductor and Triton caches, compile peers.py's torch.compile peer and time it beside chapter 06's reference and
a copy of the same bytes, replayed from CUDA graphs (graph_timing.graph_rounds).

    python lab/sweeps/compile_draws.py --processes 4 --out solutions/06_rmsnorm/records/06_rmsnorm_compile_draws.json
        (on one H200: about two minutes; needs a CUDA GPU)

Inductor autotunes its reduction kernels when it first runs them, by timing candidate launch configurations, so
two processes may keep different kernels for the same code. peers.py and norms_gaps.py each compile their own:
this is how far apart those draws land, and where the reference sits against each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHAPE = (262144, 64)


def one_draw() -> dict:
    """In this process: compile, time, and return GB/s of the reference, torch.compile and the copy."""
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "lab" / "sweeps"))
    import torch

    import graph_timing
    import peers
    from grader.course import solution_notebook
    from grader.notebook_code import load_namespace

    ns = load_namespace(solution_notebook("06_rmsnorm"))
    m, n = SHAPE
    fns = {"reference": ns["rmsnorm"], "torch.compile": peers.peers("rmsnorm", n, torch.float16, None)["torch.compile"],
           "same-size copy": lambda x, w: x * 1}

    def make():
        return (torch.randn(m, n, device="cuda", dtype=torch.float16), torch.randn(n, device="cuda", dtype=torch.float16))

    times = graph_timing.graph_rounds(fns, make, rounds=7)
    nbytes = 2 * m * n * 2 + n * 2
    return {name: round(nbytes / (statistics.median(ms) * 1e-3) / 1e9, 1) for name, ms in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(one_draw()))
        return
    import torch
    import triton

    if not torch.cuda.is_available():
        sys.exit("compile_draws.py times CUDA graphs: it needs a CUDA GPU")
    draws = []
    for i in range(args.processes):
        caches = Path(tempfile.mkdtemp(prefix=f"draw{i}-"))
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"),
               "TRITON_CACHE_DIR": str(caches / "triton")}
        out = subprocess.run([sys.executable, __file__, "--child", "--out", "-"], env=env, capture_output=True,
                             text=True, timeout=300)
        if out.returncode != 0:
            sys.exit(f"draw {i} failed:\n{out.stderr[-3000:]}")
        draw = json.loads(out.stdout.strip().splitlines()[-1])
        draws.append(draw)
        print(f"process {i}: {draw}", flush=True)
    tc = [d["torch.compile"] for d in draws]
    record = {
        "chapter": "06_rmsnorm: torch.compile's kernel at 262144 x 64 float16, compiled afresh in separate processes",
        "command": f"python lab/sweeps/compile_draws.py --processes {args.processes} --out solutions/06_rmsnorm/records/{args.out.name}",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
        "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
        "method": "graph_timing.graph_rounds in each process (7 rounds, medians); each process with empty Inductor "
                  "and Triton caches of its own",
        "shape": list(SHAPE), "dtype": "float16",
        "draws_gbps": draws,
        "torch_compile_spread": round(max(tc) / min(tc), 3),
        "reference_over_torch_compile": [round(d["reference"] / d["torch.compile"], 3) for d in draws],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: record[k] for k in ("torch_compile_spread", "reference_over_torch_compile")}))


if __name__ == "__main__":
    main()
