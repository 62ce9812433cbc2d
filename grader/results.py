"""Grade records and the files an instructor reads: grades.json, grades.csv and a summary table."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

#: Every status a record can have.
STATUSES = ("passed", "partial", "failed", "error", "timeout", "not_graded", "missing")


@dataclass(frozen=True)
class GradeRecord:
    """One graded test cell of one student's submission."""

    student: str
    assignment: str
    grade_id: str
    points: float
    max_points: float
    status: str      # one of STATUSES
    message: str     # why: the error a test raised, "NOT GRADED ..." for performance checks without a GPU

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}")


def write_json(records: list[GradeRecord], path: Path) -> None:
    path.write_text(json.dumps([asdict(r) for r in records], indent=2) + "\n")


def read_json(path: Path) -> list[GradeRecord]:
    return [GradeRecord(**r) for r in json.loads(path.read_text())]


def totals(records: list[GradeRecord]) -> list[dict[str, object]]:
    """Points per (student, assignment), with the points that could not be graded on this machine."""
    acc: dict[tuple[str, str], dict[str, object]] = {}
    for r in records:
        row = acc.setdefault((r.student, r.assignment), {"student": r.student, "assignment": r.assignment,
                                                         "points": 0.0, "max_points": 0.0,
                                                         "not_graded_points": 0.0, "statuses": defaultdict(int)})
        row["points"] += r.points
        row["max_points"] += r.max_points
        if r.status == "not_graded":
            row["not_graded_points"] += r.max_points
        row["statuses"][r.status] += 1
    return [acc[k] for k in sorted(acc)]


def write_csv(records: list[GradeRecord], path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", "assignment", "points", "max_points", "not_graded_points"])
        for row in totals(records):
            w.writerow([row["student"], row["assignment"], f"{row['points']:g}", f"{row['max_points']:g}",
                        f"{row['not_graded_points']:g}"])


def summary_table(records: list[GradeRecord]) -> str:
    """The table printed at the end of a run: one line per submission."""
    rows = totals(records)
    if not rows:
        return "no submissions graded"
    w = max(7, *(len(str(r["student"])) for r in rows))
    lines = [f"{'student':<{w}}  {'assignment':<16} {'points':>12}  tests"]
    for r in rows:
        st = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in sorted(r["statuses"].items()))
        pts = f"{r['points']:g} / {r['max_points']:g}"
        lines.append(f"{r['student']:<{w}}  {r['assignment']:<16} {pts:>12}  {st}")
    ng = sum(r["not_graded_points"] for r in rows)
    if ng:
        lines.append(f"NOT GRADED: {ng:g} points of checks that need a GPU (speed, and correctness at GPU sizes) were "
                     "not awarded on this machine.")
    return "\n".join(lines)
