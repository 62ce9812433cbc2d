"""The course's three ways of timing a call, side by side on the same work: ``triton_course.bench.steady_rounds``
(back to back behind a GPU sleep), ``graph_timing.graph_rounds`` (replayed from CUDA graphs) and
``timing_position.rounds_with_sleep`` (steady_rounds' protocol with the sleep under the caller's control). All
three size their input rotation and their rounds with ``bench.rotating_sets`` and ``bench.call_plan``.

    python lab/sweeps/timing_paths.py --out lab/records/timing_paths.json   (on a GPU, under a minute)

Work: a clone and an ``x + 1`` of 64 M float32 values (256 MiB read and 256 MiB written a call), beside
``bench.copy_bandwidth`` (triton.testing.do_bench of a 1 GiB copy). Each path should land near that copy.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "lab" / "sweeps"))

import triton_course  # noqa: E402,F401  -- picks the backend before triton is imported

import torch  # noqa: E402
import triton  # noqa: E402

N = 64 * 2**20
ROUNDS = 5


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / "lab" / "records" / "timing_paths.json")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("timing_paths.py needs a CUDA GPU", file=sys.stderr)
        return 2
    import graph_timing
    import timing_position
    from records import shown_path
    from triton_course import bench

    def make():
        return (torch.randn(N, device="cuda"),)

    fns = {"clone": lambda x: x.clone(), "add1": lambda x: x + 1}
    sets = bench.rotating_sets(make, make(), 4 * N)
    plans = {name: bench.call_plan(fn, sets)[0] for name, fn in fns.items()}
    copy = bench.copy_bandwidth()
    paths = {"steady_rounds": bench.steady_rounds(fns, make, rounds=ROUNDS),
             "graph_rounds": graph_timing.graph_rounds(fns, make, rounds=ROUNDS),
             "rounds_with_sleep": timing_position.rounds_with_sleep(fns, make, ROUNDS, None)[0]}
    gbps = {path: {name: round(bench.gbps(8 * N, statistics.median(t[name])), 1) for name in fns}
            for path, t in paths.items()}
    record = {"what": "the course's three timing paths on the same 256 MiB clone and x + 1, beside copy_bandwidth",
              "command": f"python lab/sweeps/timing_paths.py --out {shown_path(args.out)}",
              "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
              "rounds": ROUNDS, "input_sets": len(sets), "calls_per_round": plans,
              "copy_bandwidth_gbps": round(copy, 1), "gbps": gbps}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    for path, row in gbps.items():
        print(f"{path:<18} " + "  ".join(f"{name} {v:7.0f} GB/s" for name, v in row.items())
              + f"   (copy_bandwidth {copy:.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
