"""What the sandbox costs per submission: the same notebooks graded sandboxed and unsandboxed, interleaved.

    python tests/gpu/gpu_sandbox_overhead.py ASSIGNMENT [--honest ada_correct] [--copies 3] [--out DIR]

Grades ``--copies`` copies of an honest example submission (``solutions/<ASSIGNMENT>/submissions/examples/``) in three
ways (sandboxed, unsandboxed, unsandboxed with an empty Triton cache per submission), one run of
:func:`grader.autograde.grade_all` per way and one submission at a time, with the whole per-submission pipeline of :func:`grader.autograde.grade_all` (nbgrader autograde,
the judge, the bandwidth checks, the feedback). The unsandboxed runs share the grader's Triton cache, so
from the second copy on they reuse the kernels the first one compiled: that is what grading looked like
before the sandbox, and the reason for the third way, which pays every compilation as a sandbox does.

Writes ``DIR/gpu_sandbox_overhead_<ASSIGNMENT>.json``: per submission and mode, the job's seconds and where
they went (kernel start, the student's cells, the judge's cells, nbgrader itself), from the grader's own
clock (``course_grader.seconds`` in the autograded notebook).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

MODES = ("sandboxed", "unsandboxed", "unsandboxed_cold_cache")


def breakdown(notebook: Path, seconds: float) -> dict:
    """Where one job's seconds went, from the grader's per-cell clock in the autograded notebook."""
    meta = json.loads(notebook.read_text()).get("metadata", {}).get("course_grader", {})
    parts: dict[str, float] = {}
    cells = []
    for index, kind, s in meta.get("seconds", []):
        parts[kind] = round(parts.get(kind, 0.0) + s, 2)
        cells.append((s, index, kind))
    parts["nbgrader and feedback"] = round(seconds - sum(parts.values()), 2)
    return {"seconds": seconds, "parts": parts,
            "slowest_cells": [{"cell": i, "kind": k, "s": s} for s, i, k in sorted(cells, reverse=True)[:6]]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("assignment")
    p.add_argument("--honest", default="ada_correct")
    p.add_argument("--copies", type=int, default=3)
    p.add_argument("--out", default=str(ROOT / "tests" / "gpu" / "records"))
    args = p.parse_args(argv)
    import torch
    import triton

    from grader.autograde import find_submissions, grade_all
    from grader.examples import build_submissions

    if not torch.cuda.is_available():
        print("this measures grading on a GPU: it needs a CUDA GPU", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="gpu-overhead-"))
    build_submissions(args.assignment, work / "built")
    rows: dict[str, list[dict]] = {m: [] for m in MODES}
    points: dict[str, list[str]] = {m: [] for m in MODES}
    for mode in MODES:   # one run of grade_all per mode: its set-up (calibration, template) is paid once
        names = [f"{args.honest}_{mode}_{i + 1:02d}" for i in range(args.copies)]
        for name in names:
            shutil.copytree(work / "built" / args.honest, work / "submitted" / name)
        subs = [s for s in find_submissions(work / "submitted", args.assignment) if s.student in names]
        saved_cache = os.environ.get("TRITON_CACHE_DIR")

        def fresh_cache(sub, records) -> None:   # the next submission of the cold mode starts empty
            if mode == "unsandboxed_cold_cache":
                os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-cold-")

        fresh_cache(None, None)
        try:
            graded = grade_all(subs, work / mode, sandboxed=(mode == "sandboxed"), feedback=True,
                               on_done=fresh_cache)
        finally:
            if saved_cache is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = saved_cache
        for name in names:
            rec = json.loads((work / mode / "records" / args.assignment / f"{name}.json").read_text())
            nb = work / mode / "work" / args.assignment / name / f"{args.assignment}.ipynb"
            rows[mode].append(breakdown(nb, rec["seconds"]))
            mine = [r for r in graded if r.student == name]
            points[mode].append(f"{sum(r.points for r in mine):g} / {sum(r.max_points for r in mine):g}")
            print(f"{name:<44} {rec['seconds']:6.1f} s  {points[mode][-1]}  {rows[mode][-1]['parts']}", flush=True)
            for r in mine:
                if r.status != "passed":
                    print(f"    {r.grade_id}: {r.status} {r.message[:300]!r}", flush=True)
    medians = {m: round(statistics.median(r["seconds"] for r in rows[m]), 2) for m in MODES}
    record = {
        "what": f"{args.assignment}: {args.copies} copies of {args.honest}, each graded sandboxed, unsandboxed, and "
                "unsandboxed with an empty Triton cache, one submission at a time; seconds per job "
                "(nbgrader autograde with the judge and bandwidth checks, then the feedback)",
        "command": f"python tests/gpu/gpu_sandbox_overhead.py {args.assignment} --copies {args.copies}",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
        "median_seconds": medians,
        "sandbox_overhead": {"vs_unsandboxed": round(medians["sandboxed"] / medians["unsandboxed"] - 1, 3),
                             "vs_unsandboxed_cold_cache":
                                 round(medians["sandboxed"] / medians["unsandboxed_cold_cache"] - 1, 3)},
        "points": points,
        "jobs": rows,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"gpu_sandbox_overhead_{args.assignment}.json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({k: record[k] for k in ("median_seconds", "sandbox_overhead")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
