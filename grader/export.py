"""Grades in a file an LMS imports: ``python -m grader export DIR [DIR ...] --format canvas|moodle|csv``.

``DIR`` is an autograde output folder (``grades.json``); several folders (one per assignment) make one
file. Students are matched by the LMS's own ids, which ``collect`` keeps in each student's folder name
and in ``SUBMITTED/collect_report.json`` (:mod:`grader.collect`). Pass ``--submitted SUBMITTED`` to
take the names from that report and to list the students whose files were rejected; pass ``--roster``
(the LMS's own export, see below) to fill the columns the download does not carry (SIS ids, section,
e-mail) and to list every enrolled student, with or without a submission.

Formats, and the documentation followed:

* ``canvas``: Canvas's gradebook import (Grades > Import), the format of its gradebook export:
  ``Student, ID, SIS User ID, SIS Login ID, Section``, then one column per assignment named as Canvas
  names it, ``<title> (<assignment id>)``, and a second row ``    Points Possible``. Canvas matches each
  row by ``ID`` (the Canvas user id of the download's file names), then SIS User ID, SIS Login ID, then
  the name; a column whose title matches no assignment creates one, with the points of the Points
  Possible row; an empty cell leaves the grade as it is (no submission is not a 0). Followed: Canvas's
  own importer and exporter, ``lib/gradebook_importer.rb`` and ``lib/gradebook_exporter.rb`` in
  github.com/instructure/canvas-lms (header detection, ID matching, the Points Possible row, blank
  cells), and Ohio State's "Import CSV File for Carmen Grades"
  (https://teaching.resources.osu.edu/toolsets/carmencanvas/guides/calculating-final-grades/import-csv-file-carmen-grades),
  which follows Instructure's "How do I import grades in the Gradebook?"
  (https://community.canvaslms.com/t5/Instructor-Guide/How-do-I-import-grades-in-the-Gradebook/ta-p/807). Roster: Canvas's gradebook export (Grades > Export), for the SIS columns, the section and the
  assignment's column title with its id.
* ``moodle``: the assignment's offline grading worksheet, uploaded with "Upload grading worksheet"
  (enable the "Offline grading worksheet" feedback type in the assignment's settings): ``Identifier``
  (``Participant <participant id>``, the id of the download's folder names), ``Full name``, ``Email
  address``, ``Status``, ``Grade``, ``Maximum Grade``, ``Grade can be changed``, ``Last modified
  (submission)``, ``Last modified (grade)``. Moodle matches the Identifier, skips an empty Grade, a grade
  above the assignment's maximum grade, and a grade changed in Moodle after the file's ``Last modified
  (grade)``. One worksheet per assignment (Moodle's participant ids belong to one assignment). The
  ``Feedback comments`` column is left out on purpose: Moodle would overwrite existing comments with
  the file's empty ones. Followed: MoodleDocs "Assignment settings" (Feedback types: Offline grading
  worksheet, https://docs.moodle.org/en/Assignment_settings) and "Grade import"
  (https://docs.moodle.org/en/Grade_import), and Moodle's importer
  ``mod/assign/feedback/offline/importgradeslib.php`` and ``locallib.php`` in github.com/moodle/moodle
  (the three columns it requires: Identifier, Grade, Last modified (grade)). Roster: the worksheet as
  Moodle downloads it ("Download grading worksheet"), for the full names and e-mail addresses.
* ``csv``: one row per student and assignment: the folder, the LMS and its id, the name, points,
  maximum, the points not graded, and what happened (graded, no submission, rejected at collection).

Performance checks that could not be graded on the grading machine (no GPU) are never counted silently:
``export`` refuses to write an LMS file while any grade has such points, unless ``--allow-not-graded``
is given; then those points are 0 in the file, and the command says for whom. The ``csv`` format
always has a ``not_graded_points`` column.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from dataclasses import dataclass
from pathlib import Path

from grader.collect import Identity, identity_of, read_report
from grader.results import read_json, totals

FORMATS = ("canvas", "moodle", "csv")
CANVAS_HEADER = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
CANVAS_POINTS_POSSIBLE = "    Points Possible"
MOODLE_HEADER = ["Identifier", "Full name", "Email address", "Status", "Grade", "Maximum Grade",
                 "Grade can be changed", "Last modified (submission)", "Last modified (grade)"]
MOODLE_PARTICIPANT = "Participant "
CSV_HEADER = ["student", "lms", "lms_id", "id_kind", "name", "assignment", "points", "max_points",
              "not_graded_points", "state"]


class ExportError(Exception):
    """The grades cannot be written in this format as they are (the message says why and what to do)."""


@dataclass
class Grade:
    """One student's grade for one assignment (``points`` None: no gradable submission: an empty cell)."""

    identity: Identity
    assignment: str
    points: float | None
    max_points: float
    not_graded_points: float = 0.0
    state: str = "graded"


@dataclass
class Export:
    """What was written, and what the instructor must know about it."""

    files: list[Path]
    rows: int
    left_out: list[str]
    notes: list[str]


# ---------------------------------------------------------------------------------------------------
# Reading the grades and the ids
# ---------------------------------------------------------------------------------------------------

def load_grades(dirs: list[Path], submitted: list[Path] = ()) -> tuple[list[Grade], list[list[str]]]:
    """The grades of ``dirs``, each with its student's LMS identity; and the same-name groups collect saw."""
    mapping: dict[str, dict] = {}
    rejected: dict[tuple[str, str], dict] = {}
    twins: list[list[str]] = []
    for sub in submitted:
        report = read_report(sub)
        if not report:
            raise ExportError(f"{sub} has no collect_report.json: pass the folder `python -m grader collect` wrote")
        for folder, info in report.get("students", {}).items():
            mapping[folder] = info
            if not info.get("accepted"):
                rejected[(folder, report.get("assignment", ""))] = info
        twins += report.get("same_name", [])
    grades: list[Grade] = []
    seen: set[tuple[str, str]] = set()
    for d in dirs:
        if not (d / "grades.json").is_file():
            raise ExportError(f"{d} has no grades.json: is it an autograde output folder (--out of autograde)?")
        records = read_json(d / "grades.json")
        missing = {(r.student, r.assignment) for r in records if r.status == "missing"}
        for row in totals(records):
            key = (str(row["student"]), str(row["assignment"]))
            seen.add(key)
            ident = identity_of(key[0], mapping)
            if key in missing and row["statuses"].get("missing", 0) == sum(row["statuses"].values()):
                grades.append(Grade(ident, key[1], None, float(row["max_points"]), 0.0, "no submission"))
            else:
                grades.append(Grade(ident, key[1], float(row["points"]), float(row["max_points"]),
                                    float(row["not_graded_points"])))
    max_by_assignment = {g.assignment: g.max_points for g in grades}
    for (folder, assignment), info in sorted(rejected.items()):
        if (folder, assignment) not in seen and assignment in max_by_assignment:
            why = (info.get("problems") or [", ".join(info.get("sources", []))])[0]
            grades.append(Grade(identity_of(folder, mapping), assignment, None, max_by_assignment[assignment], 0.0,
                                f"rejected at collection ({why})"))
    return grades, twins


def _not_graded_problem(grades: list[Grade]) -> list[str]:
    return [f"{g.identity.folder} ({g.assignment}): {g.not_graded_points:g} point(s) not graded"
            for g in grades if g.not_graded_points]


def _safe(text: str) -> str:
    """A name cell that a spreadsheet will not take for a formula (as Canvas's own exporter does for '=')."""
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text


def _fmt(points: float | None) -> str:
    return "" if points is None else f"{points:.2f}"


# ---------------------------------------------------------------------------------------------------
# Canvas
# ---------------------------------------------------------------------------------------------------

_TITLE_ID = re.compile(r"^(?P<title>.*) \((?P<id>\d+)\)$")


@dataclass
class CanvasRoster:
    """Canvas's gradebook export: the students' columns by Canvas user id, and the assignment columns."""

    students: dict[str, dict[str, str]]
    assignment_columns: list[str]
    points_possible: dict[str, str]

    @classmethod
    def read(cls, path: Path) -> "CanvasRoster":
        rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8-sig"))))
        if not rows or rows[0][:2] != ["Student", "ID"] or "Section" not in rows[0]:
            raise ExportError(f"{path} is not a Canvas gradebook export (its header should start with "
                              "Student, ID, ... Section)")
        header = rows[0]
        section = header.index("Section")
        students, points = {}, {}
        for row in rows[1:]:
            if row and "Points Possible" in row[0]:
                points = dict(zip(header, row))
                continue
            if not row or len(row) < 2 or not row[1].strip().isdigit():
                continue
            cells = dict(zip(header, row))
            students[row[1].strip()] = {k: cells.get(k, "") for k in CANVAS_HEADER}
        return cls(students, header[section + 1:], points)

    def column_for(self, title: str) -> str | None:
        for h in self.assignment_columns:
            m = _TITLE_ID.match(h)
            if h == title or (m and m["title"] == title):
                return h
        return None


def write_canvas(grades: list[Grade], out: Path, titles: dict[str, str], roster: CanvasRoster | None) -> Export:
    assignments = sorted({g.assignment for g in grades})
    columns = []
    notes = []
    for a in assignments:
        title = titles.get(a, a)
        column = roster.column_for(title) if roster else None
        if roster and column is None:
            notes.append(f"{a}: no column titled {title!r} in the roster; Canvas will create an assignment "
                         f"{title!r} worth {max(g.max_points for g in grades if g.assignment == a):g} points "
                         "(use --title ASSIGNMENT=TITLE to name an existing one)")
        columns.append(column or title)
    rows: dict[str, dict] = {}
    left_out = []
    for g in grades:
        ident = g.identity
        if ident.id_kind != "canvas_user_id":
            why = ("an anonymous id (anonymous grading): Canvas's import needs the user id"
                   if ident.id_kind == "canvas_anonymous_id" else
                   f"no Canvas user id (its folder is not from a Canvas download{': ' + ident.lms if ident.lms else ''})")
            left_out.append(f"{ident.folder} ({g.assignment}): {why}")
            continue
        row = rows.setdefault(ident.lms_id, {"Student": ident.name or ident.folder, "ID": ident.lms_id,
                                             "SIS User ID": "", "SIS Login ID": "", "Section": "", "grades": {}})
        row["grades"][g.assignment] = g
    if roster:
        for uid, cells in roster.students.items():
            row = rows.setdefault(uid, {**cells, "grades": {}})
            row.update({k: v for k, v in cells.items() if k != "ID"})
        blank = [row["Student"] for row in rows.values() if not row["grades"]]
        if blank:
            notes.append(f"{len(blank)} student(s) of the roster have no grade here: empty cells ({'; '.join(blank[:10])})")
        unknown = [uid for uid in rows if uid not in roster.students]
        for uid in unknown:
            notes.append(f"Canvas user {uid} ({rows[uid]['Student']}) is not in the roster: Canvas will look the id up")
    maxima = {a: max(g.max_points for g in grades if g.assignment == a) for a in assignments}
    possible = [f"{maxima[a]:.2f}" for a in assignments]
    for i, (a, column) in enumerate(zip(assignments, columns)):
        theirs = roster.points_possible.get(column, "").strip() if roster else ""
        if theirs:  # never change an existing assignment's points through the import
            possible[i] = theirs
            try:
                differs = abs(float(theirs.replace(",", ".")) - maxima[a]) > 1e-9
            except ValueError:
                differs = True
            if differs:
                notes.append(f"{a}: Canvas's {column!r} is worth {theirs} points and the grades are out of "
                             f"{maxima[a]:g}: change its points in Canvas first, or the grades mean something else")
    with out.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(CANVAS_HEADER + columns)
        w.writerow([CANVAS_POINTS_POSSIBLE, "", "", "", ""] + possible)
        for uid, row in sorted(rows.items(), key=lambda kv: (kv[1]["Student"].lower(), kv[0])):
            cells = [_safe(row["Student"]), uid, row["SIS User ID"], row["SIS Login ID"], row["Section"]]
            w.writerow(cells + [_fmt(row["grades"][a].points) if a in row["grades"] else "" for a in assignments])
    return Export([out], len(rows), left_out, notes)


# ---------------------------------------------------------------------------------------------------
# Moodle
# ---------------------------------------------------------------------------------------------------

def read_moodle_roster(path: Path) -> dict[str, dict[str, str]]:
    """A grading worksheet downloaded from Moodle: its rows by participant id."""
    rows = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8-sig"))))
    if not rows or "Identifier" not in rows[0]:
        raise ExportError(f"{path} is not a Moodle grading worksheet (it has no Identifier column)")
    out = {}
    for row in rows:
        ident = row.get("Identifier", "")
        if ident.startswith(MOODLE_PARTICIPANT.strip()):
            out[ident[len(MOODLE_PARTICIPANT.strip()):].strip()] = row
    return out


def moodle_time(when: dt.datetime) -> str:
    """A date as Moodle writes it in the worksheet (``userdate``), which its upload reads back."""
    return when.strftime("%A, %d %B %Y, %I:%M %p")


def write_moodle(grades: list[Grade], out: Path, roster: dict[str, dict[str, str]] | None,
                 now: dt.datetime | None = None) -> Export:
    assignments = sorted({g.assignment for g in grades})
    if len(assignments) > 1:  # one worksheet per assignment, in a folder (``x.csv`` -> folder ``x``)
        folder = out.parent / out.stem if out.suffix else out
        folder.mkdir(parents=True, exist_ok=True)
        targets = {a: folder / f"moodle-worksheet-{a}.csv" for a in assignments}
    else:
        targets = {assignments[0]: out} if assignments else {}
    stamp = moodle_time(now or dt.datetime.now())
    left_out, notes, files, n = [], [], [], 0
    if roster is not None and len(assignments) > 1:
        raise ExportError("a Moodle roster (grading worksheet) belongs to one assignment: export one DIR at a time")
    for a in assignments:
        rows: dict[str, dict] = {}
        maximum = max(g.max_points for g in grades if g.assignment == a)
        for g in (g for g in grades if g.assignment == a):
            ident = g.identity
            if ident.id_kind != "moodle_participant_id":
                left_out.append(f"{ident.folder} ({a}): no Moodle participant id (its folder is not from a Moodle "
                                "download)")
                continue
            rows[ident.lms_id] = {"Full name": ident.name or ident.folder, "Email address": "", "Status": "",
                                  "Last modified (submission)": "", "grade": g}
        if roster:
            for pid, cells in roster.items():
                row = rows.setdefault(pid, {"grade": None})
                for k in ("Full name", "Email address", "Status", "Last modified (submission)"):
                    row[k] = cells.get(k, row.get(k, ""))
            blank = [row["Full name"] for row in rows.values() if row["grade"] is None]
            if blank:
                notes.append(f"{len(blank)} participant(s) of the worksheet have no grade here: empty Grade "
                             f"({'; '.join(blank[:10])})")
            for pid in rows:
                if pid not in roster:
                    notes.append(f"Participant {pid} ({rows[pid]['Full name']}) is not in the worksheet given as "
                                 "roster: is it this assignment's?")
        with targets[a].open("w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(MOODLE_HEADER)
            for pid, row in sorted(rows.items(), key=lambda kv: (kv[1]["Full name"].lower(), int(kv[0]))):
                g = row["grade"]
                w.writerow([MOODLE_PARTICIPANT + pid, _safe(row["Full name"]), row.get("Email address", ""),
                            row.get("Status", ""), _fmt(g.points if g else None), f"{maximum:.2f}", "Yes",
                            row.get("Last modified (submission)", ""), stamp])
        notes.append(f"{a}: the Moodle assignment's maximum grade must be {maximum:g} (Moodle skips a grade above it)")
        files.append(targets[a])
        n += len(rows)
    return Export(files, n, left_out, notes)


# ---------------------------------------------------------------------------------------------------
# Plain CSV
# ---------------------------------------------------------------------------------------------------

def write_plain(grades: list[Grade], out: Path) -> Export:
    with out.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(CSV_HEADER)
        for g in sorted(grades, key=lambda g: (g.assignment, g.identity.folder)):
            i = g.identity
            w.writerow([i.folder, i.lms, i.lms_id, i.id_kind, _safe(i.name), g.assignment, _fmt(g.points),
                        f"{g.max_points:.2f}", f"{g.not_graded_points:.2f}", g.state])
    return Export([out], len(grades), [], [])


# ---------------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------------

def export(dirs: list[Path], fmt: str, out: Path, *, submitted: list[Path] = (), roster: Path | None = None,
           titles: dict[str, str] | None = None, allow_not_graded: bool = False,
           now: dt.datetime | None = None) -> Export:
    """Write the grades of ``dirs`` to ``out`` in format ``fmt`` (see the module's docstring)."""
    if fmt not in FORMATS:
        raise ExportError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")
    grades, twins = load_grades(dirs, submitted)
    if not grades:
        raise ExportError("no grades in " + ", ".join(map(str, dirs)))
    not_graded = _not_graded_problem(grades)
    if not_graded and fmt != "csv" and not allow_not_graded:
        raise ExportError(
            f"{len(not_graded)} grade(s) hold performance checks that were not graded on the grading machine (no "
            "GPU), for example " + "; ".join(not_graded[:3]) + ". Grade the class on a GPU, or pass "
            "--allow-not-graded to write them as 0 points.")
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "canvas":
        result = write_canvas(grades, out, titles or {}, CanvasRoster.read(roster) if roster else None)
    elif fmt == "moodle":
        result = write_moodle(grades, out, read_moodle_roster(roster) if roster else None, now)
    else:
        if roster:
            raise ExportError("--roster is for the canvas and moodle formats")
        result = write_plain(grades, out)
    empty = [g for g in grades if g.points is None]
    if empty:
        result.notes.append(f"{len(empty)} student(s) with no gradable submission have an empty cell, not 0: "
                            + ", ".join(f"{g.identity.folder} ({g.state})" for g in empty[:10]))
    if not_graded:
        result.notes.append(f"NOT GRADED: {len(not_graded)} grade(s) include points of GPU-only checks that were "
                            "not graded (no GPU); they are 0 here: " + "; ".join(not_graded[:10]))
    for group in twins:
        result.notes.append("students with the same name kept apart by their LMS ids: " + ", ".join(group))
    return result


def parse_titles(pairs: list[str]) -> dict[str, str]:
    titles = {}
    for pair in pairs:
        if "=" not in pair:
            raise ExportError(f"--title takes ASSIGNMENT=TITLE, not {pair!r}")
        a, t = pair.split("=", 1)
        titles[a.strip()] = t.strip()
    return titles
