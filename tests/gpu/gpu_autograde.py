"""Grade a chapter's example submissions on this GPU with the real grader, and record the outcome.

    python tests/gpu/gpu_autograde.py ASSIGNMENT [--out DIR]

Runs ``python -m grader demo --assignment ASSIGNMENT`` (release, build the example submissions from
solutions/<id>/submissions/examples/, nbgrader autograde each one, bandwidth checks included) and writes
``DIR/gpu_autograde_<ASSIGNMENT>.json``: the device, versions, wall time and every grade record.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("assignment")
    p.add_argument("--out", default=str(ROOT / "tests" / "gpu" / "records"))
    args = p.parse_args(argv)
    import torch
    import triton
    if not torch.cuda.is_available():
        print("this records GPU grading: it needs a CUDA GPU", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="gpu-autograde-"))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "grader", "demo", "--assignment", args.assignment,
                           "--out", str(work), "--workers", "1"], cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    print(proc.stdout[-3000:], proc.stderr[-3000:])
    if proc.returncode != 0:
        return proc.returncode
    grades = json.loads((work / "grades.json").read_text())
    record = {
        "chapter": f"{args.assignment} graded on a GPU",
        "command": f"python tests/gpu/gpu_autograde.py {args.assignment}",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "copy_gbps_env": "calibrated once per run by the grader (COURSE_COPY_GBPS)",
        "submissions": len({g["student"] for g in grades}),
        "wall_s": round(wall, 1),
        "summary": [f"{s}: {sum(g['points'] for g in grades if g['student'] == s):g} / "
                    f"{sum(g['max_points'] for g in grades if g['student'] == s):g} points"
                    for s in sorted({g["student"] for g in grades})],
        "grades": grades,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"gpu_autograde_{args.assignment}.json").write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
