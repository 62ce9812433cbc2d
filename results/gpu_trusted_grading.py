"""Grade a class of honest and dishonest submissions on this GPU with the sandboxed judge, and record it.

    python results/gpu_trusted_grading.py ASSIGNMENT [--honest ada_correct] [--copies 10]
                                          [--cheats NAME,NAME ...] [--out DIR]

Builds ``--copies`` copies of the honest example submission (``tests/submissions/<ASSIGNMENT>/``) and the
named cheats (from ``tests/submissions/`` or ``tests/safety/``), grades them all in one run of
:func:`grader.autograde.grade_all` (sandboxed, bandwidth checks included, one worker per GPU), and writes
``DIR/gpu_trusted_grading_<ASSIGNMENT>.json``: the device, the versions, the sandbox, the seconds per
submission, every student's points and every record. Needs bubblewrap on PATH and a CUDA GPU.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("assignment")
    p.add_argument("--honest", default="ada_correct")
    p.add_argument("--copies", type=int, default=10)
    p.add_argument("--cheats", default="")
    p.add_argument("--out", default=str(ROOT / "results"))
    args = p.parse_args(argv)
    import torch
    import triton

    from grader.autograde import find_submissions, grade_all
    from grader.examples import build_submissions
    from tests.safety.transforms import SAFETY_ANSWERS

    if not torch.cuda.is_available():
        print("this records grading on a GPU: it needs a CUDA GPU", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="gpu-trusted-"))
    built = work / "built"
    build_submissions(args.assignment, built)
    build_submissions(args.assignment, built, root=SAFETY_ANSWERS)
    submitted = work / "submitted"
    students = []
    for i in range(args.copies):
        name = f"{args.honest}_{i + 1:02d}"
        shutil.copytree(built / args.honest, submitted / name)
        students.append(name)
    for cheat in [c for c in args.cheats.split(",") if c]:
        shutil.copytree(built / cheat, submitted / cheat)
        students.append(cheat)
    subs = [s for s in find_submissions(submitted, args.assignment) if s.student in students]
    start = time.perf_counter()
    records = grade_all(subs, work / "out", workers=1, feedback=False)
    wall = time.perf_counter() - start
    per = {}
    for f in (work / "out" / "records" / args.assignment).glob("*.json"):
        per[f.stem] = json.loads(f.read_text())
    honest = [per[s]["seconds"] for s in students if s.startswith(args.honest) and s in per]
    totals = {s: f"{sum(r.points for r in records if r.student == s):g} / "
                 f"{sum(r.max_points for r in records if r.student == s):g}" for s in students}
    record = {
        "what": f"{args.assignment}: {args.copies} copies of {args.honest} and {len(students) - args.copies} "
                "dishonest submissions, graded in one sandboxed run with the judge",
        "command": f"python results/gpu_trusted_grading.py {args.assignment} --copies {args.copies} "
                   f"--cheats {args.cheats}",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "run": next(iter(per.values()))["run"] if per else {},
        "wall_s": round(wall, 1),
        "honest_seconds": {"median": round(statistics.median(honest), 1) if honest else None,
                           "min": min(honest, default=None), "max": max(honest, default=None)},
        "totals": totals,
        "records": [r.__dict__ for r in records],
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"gpu_trusted_grading_{args.assignment}.json").write_text(json.dumps(record, indent=2) + "\n")
    for s in students:
        print(f"{s:<34} {totals[s]}")
        for r in records:
            if r.student == s and r.status not in ("passed",):
                print(f"    {r.grade_id}: {r.status} {r.message[:220]!r}")
    print(f"wall {wall:.0f} s; honest submission seconds: {record['honest_seconds']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
