"""Command line of the course grader.

    python -m grader release [ID ...] [--check]      regenerate notebooks/ from solutions/ (or check drift)
    python -m grader autograde SUBMITTED --assignment ID [--student S] [--workers N] --out DIR
    python -m grader demo [--out DIR] [--assignment ID ...]
                                                     release, build the example submissions, grade them
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from grader import release
from grader.autograde import Submission, find_submissions, grade_all
from grader.course import assignments
from grader.examples import build_submissions
from grader.results import GradeRecord, summary_table, write_csv, write_json


def _progress(total: int):
    done = [0]

    def on_done(sub: Submission, records: list[GradeRecord]) -> None:
        done[0] += 1
        pts = sum(r.points for r in records)
        mx = sum(r.max_points for r in records)
        print(f"[{done[0]}/{total}] {sub.student} {sub.assignment}: {pts:g}/{mx:g}", flush=True)

    return on_done


def _grade(subs: list[Submission], out: Path, workers: int) -> list[GradeRecord]:
    out.mkdir(parents=True, exist_ok=True)
    records = grade_all(subs, out, workers=workers, on_done=_progress(len(subs)))
    write_json(records, out / "grades.json")
    write_csv(records, out / "grades.csv")
    print(summary_table(records))
    print(f"grades: {out / 'grades.json'}, totals: {out / 'grades.csv'}")
    return records


def cmd_release(args: argparse.Namespace) -> int:
    ids = args.ids or assignments()
    if args.check:
        problems = release.drift(ids)
        for p in problems:
            print(p)
        print("notebooks/ is up to date" if not problems else
              "notebooks/ differs from solutions/: run `python -m grader release`")
        return 1 if problems else 0
    for path in release.generate(ids):
        print(f"wrote {path}")
    return 0


def cmd_autograde(args: argparse.Namespace) -> int:
    subs = find_submissions(Path(args.submitted), args.assignment, args.student)
    if not subs:
        print(f"no submissions for {args.assignment} under {args.submitted}", file=sys.stderr)
        return 2
    _grade(subs, Path(args.out), args.workers)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    out = Path(args.out or tempfile.mkdtemp(prefix="course-demo-"))
    ids = args.assignment or assignments()
    print("1. generating the student notebooks from solutions/")
    release.generate(ids)
    print("2. building the example submissions from tests/submissions/")
    subs = []
    for a in ids:
        for student in build_submissions(a, out / "submitted"):
            subs += find_submissions(out / "submitted", a, student)
    print(f"3. autograding {len(subs)} submissions")
    _grade(subs, out, args.workers)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("release", help="regenerate the student notebooks from the solutions")
    r.add_argument("ids", nargs="*", help="assignment ids (default: all)")
    r.add_argument("--check", action="store_true", help="only report drift; exit 1 if any")
    r.set_defaults(fn=cmd_release)

    a = sub.add_parser("autograde", help="grade SUBMITTED/<student>/<assignment>/<notebook>.ipynb")
    a.add_argument("submitted")
    a.add_argument("--assignment", required=True)
    a.add_argument("--student")
    a.add_argument("--workers", type=int, default=1)
    a.add_argument("--out", required=True)
    a.set_defaults(fn=cmd_autograde)

    d = sub.add_parser("demo", help="release, build the example submissions and grade them")
    d.add_argument("--out")
    d.add_argument("--assignment", action="append", help="only this chapter (repeatable)")
    d.add_argument("--workers", type=int, default=2)
    d.set_defaults(fn=cmd_demo)

    args = p.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
