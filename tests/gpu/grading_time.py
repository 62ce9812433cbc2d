"""Measure how long the autograder takes per submission, and record it in tests/gpu/records/grading_time.json.

    python tests/gpu/grading_time.py [--chapter ID] [--students a,b,...] [--workers N] [--course | --course-only]
                                   [--out FILE]

Part 1 grades the example submissions of one chapter (``solutions/<ID>/submissions/examples/``, default 03_vector_add)
with ``grade_all`` (calibration, template, nbgrader autograde, feedback: the whole pipeline). Part 2
(``--course``) grades one student who hands in every chapter's solution: the whole course. Each part
records the wall time, the number of submissions, and the seconds between consecutive finished
submissions (the per-submission cost once the run is set up). The JSON is rewritten after every finished
submission, so a run cut short (by ``timeout``, say) keeps what it measured.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from grader.autograde import calibrate_gpus, find_submissions, grade_all  # noqa: E402
from grader.course import assignments, solution_notebook  # noqa: E402
from grader.examples import apply_answers, build_submissions  # noqa: E402


def _timed(subs, out: Path, workers: int, progress=None) -> dict[str, object]:
    """Grade ``subs`` and time it; ``progress(finished)`` is called after every finished submission with
    what is known so far, so that a run cut short keeps what it measured."""
    stamps: list[float] = []
    finished: list[str] = []
    start = time.perf_counter()

    def done(s, r) -> None:
        stamps.append(time.perf_counter())
        try:
            job = json.loads((out / "records" / s.assignment / f"{s.student}.json").read_text()).get("seconds")
        except (OSError, ValueError):
            job = None
        line = (f"[{stamps[-1] - start:6.1f} s] {s.student}/{s.assignment}: {sum(x.points for x in r):g} / "
                f"{sum(x.max_points for x in r):g} points, {sorted({x.status for x in r})}, job {job} s")
        print(line, flush=True)
        finished.append(line)
        if progress is not None:
            progress({"unfinished_run": f"{len(finished)} of {len(subs)} submissions graded so far",
                      "finished": finished})

    records = grade_all(subs, out, workers=workers, on_done=done)
    wall = time.perf_counter() - start
    job_s = {}
    for f in (out / "records").rglob("*.json"):
        data = json.loads(f.read_text())
        job_s[f"{f.stem}/{f.parent.name}"] = data.get("seconds")
    gaps = [b - a for a, b in zip([start] + stamps[:-1], stamps)]
    per_student: dict[str, float] = {}
    for r in records:
        per_student[f"{r.student}/{r.assignment}"] = per_student.get(f"{r.student}/{r.assignment}", 0.0) + r.points
    return {"submissions": len(subs), "workers": workers, "wall_s": round(wall, 1),
            "s_per_submission_overall": round(wall / max(1, len(subs)), 1),
            "s_between_finished_submissions_median": round(statistics.median(gaps[1:] or gaps), 1) if gaps else None,
            "first_finished_after_s": round(gaps[0], 1) if gaps else None,
            "points": per_student,
            "seconds_per_submission_job": job_s,
            "statuses": sorted({r.status for r in records}),
            "records": [f"{r.student} {r.assignment} {r.grade_id}: {r.status} {r.points:g}/{r.max_points:g} "
                        f"{r.message.splitlines()[0][:160] if r.message else ''}" for r in records]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chapter", default="03_vector_add")
    p.add_argument("--students", default="", help="comma-separated answer files to use (default: all)")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--course", action="store_true", help="also grade one student's whole course")
    p.add_argument("--course-only", action="store_true", help="only the whole course")
    p.add_argument("--out", default=str(ROOT / "tests" / "gpu" / "records" / "grading_time.json"))
    args = p.parse_args(argv)
    import torch
    import triton

    out = Path(args.out)
    record: dict[str, object] = {
        "what": "autograder wall time per submission (python -m grader pipeline: calibration, template, "
                "nbgrader autograde, feedback)",
        "command": "python tests/gpu/grading_time.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU (Triton interpreter)",
        "gpus": torch.cuda.device_count(), "cpus": os.cpu_count(),
        "torch": torch.__version__, "triton": triton.__version__,
        "copy_gbps_per_gpu": calibrate_gpus(),
        "parts": {},
    }

    def save() -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(record, indent=2) + "\n")

    work = Path(tempfile.mkdtemp(prefix="grading-time-"))
    if not args.course_only:
        names = build_submissions(args.chapter, work / "submitted")
        wanted = [s for s in args.students.split(",") if s] or names
        subs = [s for s in find_submissions(work / "submitted", args.chapter) if s.student in wanted]
        part = f"{args.chapter} examples"
        record["parts"][part] = _timed(subs, work / "out", args.workers,
                                       lambda p: (record["parts"].__setitem__(part, p), save()))
        save()
        print(json.dumps(record["parts"], indent=1), flush=True)
    if args.course or args.course_only:
        course = []
        for a in assignments():
            nb = solution_notebook(a)
            import nbformat
            sol = nbformat.read(nb, as_version=4)
            answers = {c.metadata["nbgrader"]["grade_id"]: None for c in sol.cells
                       if c.metadata.get("nbgrader", {}).get("solution")}
            dest = work / "course" / "student" / a / f"{a}.ipynb"
            dest.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(apply_answers(a, answers), dest)
            course += find_submissions(work / "course", a)
        part = "whole course, one student"
        record["parts"][part] = _timed(course, work / "course_out", args.workers,
                                       lambda p: (record["parts"].__setitem__(part, p), save()))
        save()
        print(json.dumps(record["parts"]["whole course, one student"], indent=1), flush=True)
    import shutil
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
