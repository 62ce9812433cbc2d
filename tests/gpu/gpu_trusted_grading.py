"""Grade a class of honest and dishonest submissions on this GPU with the sandboxed judge, and record it.

    python tests/gpu/gpu_trusted_grading.py ASSIGNMENT[,ASSIGNMENT ...] [--honest ada_correct] [--copies 10]
                                          [--cheats NAME,NAME ...] [--out DIR]

Builds ``--copies`` copies of the honest example submission (``solutions/<ASSIGNMENT>/submissions/examples/``) of each
assignment and the named cheats (from the chapter's ``submissions/examples/`` or ``submissions/attacks/``), grades them all in one
run of :func:`grader.autograde.grade_all` (sandboxed, bandwidth checks included, one worker per GPU), and
writes ``DIR/gpu_trusted_grading_<ASSIGNMENT>.json`` (``..._course.json`` for several assignments): the
device, the versions, the sandbox, the seconds per submission, every student's points and every record.
The file is rewritten after every graded submission, so a run cut short keeps what it graded.
Needs bubblewrap on PATH and a CUDA GPU.
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

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("assignment", help="one assignment id, or several separated by commas")
    p.add_argument("--honest", default="ada_correct")
    p.add_argument("--copies", type=int, default=10)
    p.add_argument("--cheats", default="")
    p.add_argument("--out", default=str(ROOT / "tests" / "gpu" / "records"))
    args = p.parse_args(argv)
    import torch
    import triton

    from grader.autograde import find_submissions, grade_all
    from grader.examples import build_submissions

    if not torch.cuda.is_available():
        print("this records grading on a GPU: it needs a CUDA GPU", file=sys.stderr)
        return 2
    assignments = [a for a in args.assignment.split(",") if a]
    work = Path(tempfile.mkdtemp(prefix="gpu-trusted-"))
    subs, students = [], []
    for assignment in assignments:
        built = work / "built" / assignment
        build_submissions(assignment, built)
        build_submissions(assignment, built, kind="attacks")
        submitted = work / "submitted" / assignment
        names = [f"{args.honest}_{i + 1:02d}" for i in range(args.copies)]
        for name in names:
            shutil.copytree(built / args.honest, submitted / name)
        for cheat in [c for c in args.cheats.split(",") if c and (built / c).is_dir()]:
            shutil.copytree(built / cheat, submitted / cheat)
            names.append(cheat)
        subs += [s for s in find_submissions(submitted, assignment) if s.student in names]
        students += [(assignment, n) for n in names]
    name = assignments[0] if len(assignments) == 1 else "course"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    done: dict[tuple[str, str], list] = {}
    start = time.perf_counter()

    def write() -> dict:
        seconds = {}
        for (a, s) in done:
            f = work / "out" / "records" / a / f"{s}.json"
            if f.is_file():
                seconds[(a, s)] = json.loads(f.read_text())
        honest = [seconds[k]["seconds"] for k in seconds if k[1].startswith(args.honest)]
        totals = {f"{a}/{s}": f"{sum(r.points for r in recs):g} / {sum(r.max_points for r in recs):g}"
                  for (a, s), recs in done.items()}
        record = {
            "what": f"{', '.join(assignments)}: {args.copies} copies of {args.honest} each, and the dishonest "
                    f"submissions {args.cheats or 'none'}, graded in one sandboxed run with the judge",
            "command": f"python tests/gpu/gpu_trusted_grading.py {args.assignment} --copies {args.copies}"
                       + (f" --cheats {args.cheats}" if args.cheats else ""),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "device": torch.cuda.get_device_name(0),
            "torch": torch.__version__,
            "triton": triton.__version__,
            "run": next(iter(seconds.values()))["run"] if seconds else {},
            "graded": f"{len(done)} of {len(students)}",
            "wall_s": round(time.perf_counter() - start, 1),
            "honest_seconds": {"median": round(statistics.median(honest), 1) if honest else None,
                               "min": min(honest, default=None), "max": max(honest, default=None)},
            "seconds": {f"{a}/{s}": v["seconds"] for (a, s), v in seconds.items()},
            "totals": totals,
            # what the judge timed, per submission: its rounds (both clocks, the same-size copy) and its holds of
            # the GPU (what it froze, how long the GPU took to drain)
            "judge_timing": {f"{a}/{s}": {"rounds": v["run"].get("timing"), "holds": v["run"].get("gpu_lock")}
                             for (a, s), v in seconds.items()},
            "records": [r.__dict__ for recs in done.values() for r in recs],
        }
        (out / f"gpu_trusted_grading_{name}.json").write_text(json.dumps(record, indent=2) + "\n")
        return record

    def on_done(sub, recs) -> None:
        done[(sub.assignment, sub.student)] = recs
        print(f"{sub.assignment}/{sub.student:<30} {sum(r.points for r in recs):g} / "
              f"{sum(r.max_points for r in recs):g}", flush=True)
        for r in recs:
            if r.status != "passed":
                print(f"    {r.grade_id}: {r.status} {r.message[:300]!r}", flush=True)
        write()

    grade_all(subs, work / "out", workers=1, feedback=False, on_done=on_done)
    record = write()
    print(f"wall {record['wall_s']:.0f} s; honest submission seconds: {record['honest_seconds']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
