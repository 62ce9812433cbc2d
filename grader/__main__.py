"""Command line of the course grader.

    python -m grader release [ID ...] [--check]      regenerate notebooks/ from solutions/ (or check drift)
    python -m grader collect ZIP --assignment ID --out SUBMITTED
                                                     unpack an LMS download into SUBMITTED/<student>/<ID>/
    python -m grader autograde SUBMITTED --assignment ID [--student S] [--workers N] --out DIR
                              [--force] [--timeout S] [--cell-timeout S] [--no-feedback] [--no-progress]
                              [--unsandboxed] [--ray ADDRESS [--per-gpu K] [--cpus-per-job C]
                              [--memory-per-job GB]]
                                                     grade: DIR/grades.json, grades.csv, feedback/, records/
                                                     (--ray: on a running Ray cluster; see docs/scale.md)
    python -m grader report DIR [DIR ...] [--csv FILE] [--html FILE]
                                                     every student's totals over several runs; --html: the
                                                     instructor's page (pass rates, points, speed, flags)
    python -m grader export DIR [DIR ...] --format canvas|moodle|csv [--out FILE] [--submitted SUBMITTED ...]
                              [--roster FILE] [--title ASSIGNMENT=TITLE ...] [--allow-not-graded]
                                                     grades in a file the LMS imports, matched by its ids
    python -m grader translations update|check [ID ...]
                                                     keep each edition's catalogues in step with the English
    python -m grader demo [--out DIR] [--assignment ID ...]
                                                     release, build the example submissions, grade them
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from grader import release
from grader.autograde import SUBMISSION_TIMEOUT_S, Submission, find_submissions, grade_all
from grader.course import assignments
from grader.examples import build_submissions
from grader.results import GradeRecord, read_json, summary_table, write_csv, write_json


def _progress(total: int):
    done = [0]

    def on_done(sub: Submission, records: list[GradeRecord]) -> None:
        done[0] += 1
        pts = sum(r.points for r in records)
        mx = sum(r.max_points for r in records)
        print(f"[{done[0]}/{total}] {sub.student} {sub.assignment}: {pts:g}/{mx:g}", flush=True)

    return on_done


def _grade(subs: list[Submission], out: Path, workers: int, args: argparse.Namespace | None = None) -> list[GradeRecord]:
    out.mkdir(parents=True, exist_ok=True)
    opts = {}
    if args is not None:
        opts = dict(force=args.force, timeout_s=args.timeout, cell_timeout_s=args.cell_timeout,
                    feedback=not args.no_feedback, progress=not args.no_progress,
                    sandboxed=not args.unsandboxed)
        if getattr(args, "ray", None):
            from grader.cluster import JobResources

            opts.update(ray_address=args.ray, resources=JobResources(
                cpus=args.cpus_per_job, per_gpu=args.per_gpu, memory_gb=args.memory_per_job))
    start = time.perf_counter()
    records = grade_all(subs, out, workers=workers, on_done=_progress(len(subs)), **opts)
    wall = time.perf_counter() - start
    where = f"on the Ray cluster at {args.ray}" if getattr(args, "ray", None) else f"{workers} worker(s)"
    print(f"graded {len(subs)} submission(s) in {wall:.0f} s ({wall / max(1, len(subs)):.1f} s each, {where})")
    write_json(records, out / "grades.json")
    write_csv(records, out / "grades.csv")
    print(summary_table(records))
    print(f"grades: {out / 'grades.json'}, totals: {out / 'grades.csv'}")
    return records


def cmd_new_chapter(args: argparse.Namespace) -> int:
    from grader.course import REPO_ROOT
    from grader.new_chapter import create

    try:
        files = create(REPO_ROOT, args.id, args.title)
    except ValueError as exc:
        print(f"new-chapter: {exc}", file=sys.stderr)
        return 2
    for path in files:
        print(f"wrote {path.relative_to(REPO_ROOT)}")
    print(f"registered {args.id} in course.toml. Next: python -m grader config --apply && "
          f"python -m grader release {args.id}; then replace the ReLU exercise with the chapter's own "
          "(CONTRIBUTING.md, \"Adding a chapter\").")
    return 0


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
    from grader.cluster import ClusterError
    from grader.sandbox import SandboxUnavailable

    try:
        _grade(subs, Path(args.out), args.workers, args)
    except (SandboxUnavailable, ClusterError) as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    from grader.collect import collect

    report = collect(Path(args.zip), args.assignment, Path(args.out))
    for c in report:
        mark = "ok " if c.accepted else "-- "
        print(f"{mark}{c.student or '?':<16} {c.source}" + "".join(f"\n      {p}" for p in c.problems))
    n = len({c.student for c in report if c.accepted})
    from grader.collect import read_report

    for group in read_report(Path(args.out)).get("same_name", []):
        print(f"same name, different LMS ids, kept apart: {', '.join(group)}")
    print(f"{n} submission(s) of {args.assignment} under {args.out}; details in {Path(args.out) / 'collect_report.json'}")
    return 0 if n else 1


def cmd_report(args: argparse.Namespace) -> int:
    records = [r for d in args.dirs for r in read_json(Path(d) / "grades.json")]
    print(summary_table(records))
    if args.csv:
        write_csv(records, Path(args.csv))
        print(f"totals: {args.csv}")
    if args.html:
        from grader.report import flags, write_html

        subs = write_html([Path(d) for d in args.dirs], Path(args.html))
        print(f"report: {args.html} ({len(subs)} submission(s), {len(flags(subs))} flagged for review)")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from grader.export import ExportError, export, parse_titles

    out = Path(args.out or f"grades-{args.format}.csv")
    try:
        result = export([Path(d) for d in args.dirs], args.format, out,
                        submitted=[Path(s) for s in args.submitted or []],
                        roster=Path(args.roster) if args.roster else None, titles=parse_titles(args.title or []),
                        allow_not_graded=args.allow_not_graded)
    except ExportError as exc:
        print(f"export: {exc}", file=sys.stderr)
        return 2
    for line in result.notes:
        print(line)
    for line in result.left_out:
        print(f"left out: {line}")
    print(f"wrote {result.rows} student row(s) to {', '.join(map(str, result.files))}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    out = Path(args.out or tempfile.mkdtemp(prefix="course-demo-"))
    ids = args.assignment or assignments()
    print("1. generating the student notebooks from solutions/")
    release.generate(ids)
    print("2. building the example submissions from solutions/<id>/submissions/examples/")
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
    a.add_argument("--workers", type=int, default=1,
                   help="submissions graded at once on this machine; above the number of GPUs, several share "
                        "each GPU (correctness shared, timing alone)")
    a.add_argument("--out", required=True)
    a.add_argument("--force", action="store_true", help="re-grade submissions already graded in DIR")
    a.add_argument("--timeout", type=float, default=SUBMISSION_TIMEOUT_S, help="seconds per submission")
    a.add_argument("--cell-timeout", type=float, default=None, help="seconds per cell (default: course setting)")
    a.add_argument("--no-feedback", action="store_true", help="skip the feedback HTML")
    a.add_argument("--no-progress", action="store_true", help="no progress bar")
    a.add_argument("--unsandboxed", action="store_true",
                   help="grade without the bubblewrap sandbox (student code runs with your permissions; every "
                        "record says so)")
    a.add_argument("--ray", metavar="ADDRESS",
                   help="grade on a running Ray cluster (what ray.init takes: HOST:PORT of its head); --workers "
                        "is then ignored, the cluster's resources decide")
    a.add_argument("--per-gpu", type=int, default=4,
                   help="--ray: submissions sharing one GPU for correctness work (timing holds it alone)")
    a.add_argument("--cpus-per-job", type=float, default=2.0, help="--ray: CPUs each submission asks for")
    a.add_argument("--memory-per-job", type=float, default=12.0,
                   help="--ray: GiB each submission asks for (its sandbox's memory cap is 2 GiB less)")
    a.set_defaults(fn=cmd_autograde)

    c = sub.add_parser("collect", help="unpack an LMS zip of notebooks into SUBMITTED/<student>/<assignment>/")
    c.add_argument("zip")
    c.add_argument("--assignment", required=True)
    c.add_argument("--out", required=True)
    c.set_defaults(fn=cmd_collect)

    rp = sub.add_parser("report", help="totals of one or more autograde output folders")
    rp.add_argument("dirs", nargs="+")
    rp.add_argument("--csv", help="also write the totals here")
    rp.add_argument("--html", help="write the instructor's page here (one self-contained HTML file)")
    rp.set_defaults(fn=cmd_report)

    ex = sub.add_parser("export", help="grades in a file Canvas or Moodle imports (or a plain CSV)")
    ex.add_argument("dirs", nargs="+", help="autograde output folders")
    ex.add_argument("--format", required=True, choices=("canvas", "moodle", "csv"))
    ex.add_argument("--out", help="the file to write (moodle with several assignments: a folder); "
                                  "default grades-FORMAT.csv")
    ex.add_argument("--submitted", action="append",
                    help="a folder written by `collect` (its collect_report.json has the names); repeatable")
    ex.add_argument("--roster", help="the LMS's own export: Canvas's gradebook CSV, or Moodle's grading worksheet")
    ex.add_argument("--title", action="append", help="ASSIGNMENT=TITLE: the assignment's title in Canvas")
    ex.add_argument("--allow-not-graded", action="store_true",
                    help="write grades whose performance checks were not graded (no GPU) as 0 for those points")
    ex.set_defaults(fn=cmd_export)

    d = sub.add_parser("demo", help="release, build the example submissions and grade them")
    d.add_argument("--out")
    d.add_argument("--assignment", action="append", help="only this chapter (repeatable)")
    d.add_argument("--workers", type=int, default=2)
    d.set_defaults(fn=cmd_demo)

    nc = sub.add_parser("new-chapter", help="a new chapter folder solutions/ID/ from the template, registered in "
                                             "course.toml")
    nc.add_argument("id", help="e.g. 10_layer_norm")
    nc.add_argument("title")
    nc.set_defaults(fn=cmd_new_chapter)

    from grader import course_config, translations

    course_config.add_parser(sub)  # python -m grader config --check | --apply: notebooks and docs from course.toml
    translations.add_parser(sub)   # python -m grader translations update | check: the other editions

    args = p.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
