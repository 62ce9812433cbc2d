"""The instructor's report of a small class graded on this GPU: measured speed against target, from the
records the grader keeps (``performance``), and the page itself.

    python tests/gpu/gpu_class_report.py [--out DIR]

Grades, with ``python -m grader autograde`` (sandboxed, one worker), a few example submissions of
03_vector_add (GB/s) and 04_gelu (GB/s, one kernel that moves twice the bytes), then writes the page with
``python -m grader report --html``. Records in ``DIR/gpu_class_report.json``: device, versions, date, the
command, wall time, each submission's ``performance`` entries (the verdict's figures and every timed
round) and its total; and the page as ``DIR/gpu_class_report.html`` (self-contained). Takes about
3 minutes on one H200 (six submissions of about 20 s, plus set-up).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

CLASS = {
    "03_vector_add": ["ada_correct", "mia_noisy", "fay_torch_result"],
    "04_gelu": ["ada_correct", "eve_clone_twice_the_bytes", "cleo_naive_tanh"],
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(ROOT / "tests" / "gpu" / "records"))
    args = p.parse_args(argv)
    import torch
    import triton

    if not torch.cuda.is_available():
        print("this measures grading on a GPU: it needs a CUDA GPU", file=sys.stderr)
        return 2
    from grader.examples import build_submissions

    work = Path(tempfile.mkdtemp(prefix="gpu-class-report-"))
    start = time.perf_counter()
    dirs = []
    for assignment, students in CLASS.items():
        submitted = work / "submitted" / assignment
        built = build_submissions(assignment, submitted)
        for extra in set(built) - set(students):
            shutil.rmtree(submitted / extra)
        out = work / "graded" / assignment
        proc = subprocess.run([sys.executable, "-m", "grader", "autograde", str(submitted), "--assignment", assignment,
                               "--out", str(out), "--workers", "1", "--no-feedback", "--no-progress"],
                              cwd=ROOT, capture_output=True, text=True)
        print(proc.stdout[-2000:], proc.stderr[-2000:])
        if proc.returncode != 0:
            return proc.returncode
        dirs.append(out)
    page = work / "report.html"
    proc = subprocess.run([sys.executable, "-m", "grader", "report", *map(str, dirs), "--html", str(page)],
                          cwd=ROOT, capture_output=True, text=True)
    print(proc.stdout[-3000:], proc.stderr[-2000:])
    if proc.returncode != 0:
        return proc.returncode
    wall = time.perf_counter() - start
    submissions = []
    for d in dirs:
        for f in sorted((d / "records").glob("*/*.json")):
            rec = json.loads(f.read_text())
            submissions.append({"assignment": f.parent.name, "student": f.stem,
                                "points": sum(r["points"] for r in rec["records"]),
                                "max_points": sum(r["max_points"] for r in rec["records"]),
                                "performance": rec.get("performance", []), "run": rec.get("run", {})})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "what": "a small class graded on this GPU, and the instructor's report page made from its records",
        "command": "python tests/gpu/gpu_class_report.py",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "wall_s": round(wall, 1),
        "submissions": submissions,
    }
    (out / "gpu_class_report.json").write_text(json.dumps(record, indent=2) + "\n")
    shutil.copy(page, out / "gpu_class_report.html")
    print(f"{'assignment':<14} {'student':<28} {'points':>8}  speed")
    for s in submissions:
        speed = "; ".join(f"{e.get('achieved', '-')} / {e.get('target', '-')} {e.get('unit', '')} ({e['state']})"
                          for e in s["performance"])
        print(f"{s['assignment']:<14} {s['student']:<28} {s['points']:>4g}/{s['max_points']:<3g}  {speed}")
    print(f"wrote {out / 'gpu_class_report.json'} and {out / 'gpu_class_report.html'} in {wall:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
