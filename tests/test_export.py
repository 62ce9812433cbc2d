"""Grades an LMS imports: Canvas and Moodle downloads, two students of the same name in each, through
``collect``, real ``nbgrader autograde`` and ``export``.

The archives are named as the LMSs name them (grader/collect.py cites their code): Canvas's flat
``<sortable name>[_LATE]_<user id>_<file id>_<file>``, Moodle's folders
``<Full Name>_<participant id>_assignsubmission_file/``. Each holds two "Jane Doe"s (one correct, one
with a float32 output that fails the fp16 test) and a student whose only notebook is not of this
assignment (rejected at collection: an empty cell, not 0). The exported files are checked column by
column against the formats the importers read: Canvas's ``lib/gradebook_importer.rb`` (``Student, ID,
SIS User ID, SIS Login ID, Section``, assignment columns, a ``Points Possible`` row) and Moodle's
``mod/assign/feedback/offline/importgradeslib.php`` (``Identifier`` = ``Participant <id>``, ``Grade``,
``Last modified (grade)``).
"""

from __future__ import annotations

import csv
import datetime as dt
import zipfile
from pathlib import Path

import nbformat
import pytest

from grader.__main__ import main
from grader.autograde import find_submissions, grade_all, graded_cells
from grader.collect import collect, read_report
from grader.course import example_submissions
from grader.examples import apply_answers, parse_answers
from grader.export import (CANVAS_HEADER, CSV_HEADER, MOODLE_HEADER, ExportError, export, moodle_time,
                           read_moodle_roster)
from grader.results import write_json

A = "03_vector_add"
pytestmark = [pytest.mark.notebook, pytest.mark.xdist_group("lms_export")]  # one graded class per run
#: chapter 03's points, as its solution notebook gives them (the LMS files' "Points Possible")
POSSIBLE = f"{sum(c.points for c in graded_cells('03_vector_add')):.2f}"
#: its points that need a GPU (the bandwidth, and correctness at GPU sizes): not graded on the CPU
NOT_GRADED_HERE = "{:.2f}".format(sum(c.points for c in graded_cells("03_vector_add")
                                      if c.grade_id.endswith(("_bandwidth", "_gpu_sizes"))))

CANVAS_ARCHIVE = {  # entry -> answer file (None: a notebook of another course)
    "doejane_12345_90001_03_vector_add.ipynb": "ada_correct",
    "doejane_LATE_12346_90002_03_vector_add.ipynb": "eve_float32_out",
    "leeann_12348_90003_my_notes.ipynb": None,
}
MOODLE_ARCHIVE = {
    "Jane Doe_501_assignsubmission_file/03_vector_add.ipynb": "ada_correct",
    "Jane Doe_502_assignsubmission_file/03_vector_add.ipynb": "eve_float32_out",
    "Ann Lee_503_assignsubmission_file/notes.ipynb": None,
}
# Canvas's gradebook export of the same course (Grades > Export), as the roster.
CANVAS_ROSTER = """\
Student,ID,SIS User ID,SIS Login ID,Section,Vector add (4242),Current Score,Unposted Current Score,Final Score,Unposted Final Score
    Points Possible,,,,,7.00,(read only),(read only),(read only),(read only)
"Doe, Jane",12345,S001,jdoe1,Triton 101 A,,,,,
"Doe, Jane",12346,S002,jdoe2,Triton 101 B,,,,,
"Lee, Ann",12348,S003,alee,Triton 101 A,,,,,
"Park, Sam",12349,S004,spark,Triton 101 A,,,,,
"""
# Moodle's grading worksheet of the assignment ("Download grading worksheet"), as the roster.
MOODLE_ROSTER = """\
Identifier,"Full name","Email address",Status,Grade,"Maximum Grade","Grade can be changed","Last modified (submission)","Last modified (grade)","Feedback comments"
"Participant 501","Jane Doe",jane.doe@example.edu,"Submitted for grading",,7.00,Yes,"Monday, 23 November 2026, 9:12 AM",-,
"Participant 502","Jane Doe",jane.doe2@example.edu,"Submitted for grading",,7.00,Yes,"Monday, 23 November 2026, 9:40 AM",-,
"Participant 503","Ann Lee",ann.lee@example.edu,"Submitted for grading",,7.00,Yes,"Monday, 23 November 2026, 8:01 AM",-,
"Participant 504","Sam Park",sam.park@example.edu,"No submission",,7.00,Yes,-,-,
"""


def _notebook(student: str | None) -> bytes:
    if student is None:
        return nbformat.writes(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('hi')")])).encode()
    answers = parse_answers((example_submissions(A) / f"{student}.py").read_text())
    return nbformat.writes(apply_answers(A, answers)).encode()


def _zip(path: Path, entries: dict[str, str | None]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, student in entries.items():
            z.writestr(name, _notebook(student))
    return path


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Both archives collected, and graded together by real nbgrader autograde into one DIR."""
    tmp = tmp_path_factory.mktemp("lms")
    canvas, moodle = tmp / "submitted-canvas", tmp / "submitted-moodle"
    collect(_zip(tmp / "canvas.zip", CANVAS_ARCHIVE), A, canvas)
    collect(_zip(tmp / "moodle.zip", MOODLE_ARCHIVE), A, moodle)
    out = tmp / "graded"
    subs = find_submissions(canvas, A) + find_submissions(moodle, A)
    records = grade_all(subs, out, workers=2, feedback=False)
    write_json(records, out / "grades.json")  # as `python -m grader autograde` does
    return {"tmp": tmp, "canvas": canvas, "moodle": moodle, "out": out, "records": records}


def _points(records, student):
    return sum(r.points for r in records if r.student == student)


def _rows(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def test_same_name_students_stay_apart_through_collect_and_autograde(graded):
    for sub, twins in ((graded["canvas"], ["doejane_canvas12345", "doejane_canvas12346"]),
                       (graded["moodle"], ["janedoe_moodle501", "janedoe_moodle502"])):
        report = read_report(sub)
        assert report["same_name"] == [twins]
        assert sorted(p.name for p in sub.iterdir() if p.is_dir()) == twins  # the rejected student has no folder
        assert [report["students"][t]["accepted"] for t in twins] == [True, True]
    records = graded["records"]
    by = {(r.student, r.grade_id): r for r in records}
    for right, wrong in (("doejane_canvas12345", "doejane_canvas12346"), ("janedoe_moodle501", "janedoe_moodle502")):
        assert by[(right, "test_add_fp16")].status == "passed"
        assert by[(wrong, "test_add_fp16")].status == "failed"
        assert _points(records, right) == 5 and _points(records, wrong) < 5  # 2 bandwidth points not graded here


def test_export_refuses_ungraded_performance_points_unless_allowed(graded, capsys):
    out = graded["tmp"] / "refused.csv"
    assert main(["export", str(graded["out"]), "--format", "canvas", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "not graded" in err and "--allow-not-graded" in err and not out.exists()


def test_canvas_file_has_canvas_columns_and_ids(graded, capsys):
    out = graded["tmp"] / "canvas.csv"
    assert main(["export", str(graded["out"]), "--format", "canvas", "--out", str(out),
                 "--submitted", str(graded["canvas"]), "--allow-not-graded"]) == 0
    printed = capsys.readouterr().out
    rows = _rows(out)
    assert rows[0] == CANVAS_HEADER + [A]
    assert rows[1] == ["    Points Possible", "", "", "", "", POSSIBLE]
    records = graded["records"]
    students = {r[1]: r for r in rows[2:]}
    assert len(rows) - 2 == len(students) == 3  # one row per student
    assert students["12345"] == ["doejane", "12345", "", "", "", f"{_points(records, 'doejane_canvas12345'):.2f}"]
    assert students["12346"] == ["doejane", "12346", "", "", "", f"{_points(records, 'doejane_canvas12346'):.2f}"]
    assert students["12348"][5] == ""  # rejected at collection: empty, not 0
    assert "NOT GRADED" in printed and "kept apart" in printed
    assert "janedoe_moodle501" in printed and "left out" in printed  # the Moodle students are not Canvas's


def test_canvas_file_with_the_gradebook_export_as_roster(graded, capsys):
    roster = graded["tmp"] / "canvas-gradebook.csv"
    roster.write_text(CANVAS_ROSTER)
    out = graded["tmp"] / "canvas-roster.csv"
    assert main(["export", str(graded["out"]), "--format", "canvas", "--out", str(out), "--roster", str(roster),
                 "--title", f"{A}=Vector add", "--allow-not-graded"]) == 0
    rows = _rows(out)
    assert rows[0] == CANVAS_HEADER + ["Vector add (4242)"]  # Canvas's own column: no new assignment
    assert rows[1] == ["    Points Possible", "", "", "", "", "7.00"]   # as the roster says
    records = graded["records"]
    assert rows[2:] == [
        ["Doe, Jane", "12345", "S001", "jdoe1", "Triton 101 A", f"{_points(records, 'doejane_canvas12345'):.2f}"],
        ["Doe, Jane", "12346", "S002", "jdoe2", "Triton 101 B", f"{_points(records, 'doejane_canvas12346'):.2f}"],
        ["Lee, Ann", "12348", "S003", "alee", "Triton 101 A", ""],
        ["Park, Sam", "12349", "S004", "spark", "Triton 101 A", ""],   # enrolled, never submitted
    ]


def test_moodle_worksheet_has_moodle_columns_and_participant_ids(graded, capsys):
    out = graded["tmp"] / "moodle.csv"
    when = dt.datetime(2026, 11, 24, 15, 5)
    result = export([graded["out"]], "moodle", out, submitted=[graded["moodle"]], allow_not_graded=True, now=when)
    rows = _rows(out)
    assert rows[0] == MOODLE_HEADER
    records = graded["records"]
    stamp = "Tuesday, 24 November 2026, 03:05 PM"
    assert moodle_time(when) == stamp
    assert rows[1:] == [
        ["Participant 503", "Ann Lee", "", "", "", POSSIBLE, "Yes", "", stamp],
        ["Participant 501", "Jane Doe", "", "", f"{_points(records, 'janedoe_moodle501'):.2f}", POSSIBLE, "Yes", "", stamp],
        ["Participant 502", "Jane Doe", "", "", f"{_points(records, 'janedoe_moodle502'):.2f}", POSSIBLE, "Yes", "", stamp],
    ]
    assert any("doejane_canvas12345" in x for x in result.left_out)

    roster = graded["tmp"] / "worksheet.csv"
    roster.write_text(MOODLE_ROSTER)
    assert set(read_moodle_roster(roster)) == {"501", "502", "503", "504"}
    export([graded["out"]], "moodle", out, roster=roster, allow_not_graded=True, now=when)
    by_id = {r[0]: r for r in _rows(out)[1:]}
    assert by_id["Participant 501"][1:4] == ["Jane Doe", "jane.doe@example.edu", "Submitted for grading"]
    assert by_id["Participant 502"][2] == "jane.doe2@example.edu"
    assert by_id["Participant 504"][4] == "" and by_id["Participant 504"][1] == "Sam Park"


def test_plain_csv_states_not_graded_points(graded):
    out = graded["tmp"] / "plain.csv"
    export([graded["out"]], "csv", out, submitted=[graded["canvas"], graded["moodle"]])
    rows = _rows(out)
    assert rows[0] == CSV_HEADER
    by = {r[0]: dict(zip(CSV_HEADER, r)) for r in rows[1:]}
    assert by["doejane_canvas12345"]["lms_id"] == "12345" and by["doejane_canvas12345"]["not_graded_points"] == NOT_GRADED_HERE
    assert by["janedoe_moodle502"]["name"] == "Jane Doe" and by["janedoe_moodle502"]["id_kind"] == "moodle_participant_id"
    assert by["leeann_canvas12348"]["points"] == "" and by["leeann_canvas12348"]["state"].startswith("rejected")
    assert by["annlee_moodle503"]["points"] == ""


def test_formula_like_names_are_not_formulas(tmp_path):
    out = tmp_path / "g"
    out.mkdir()
    (out / "grades.json").write_text(
        '[{"student": "x_canvas7", "assignment": "a", "grade_id": "t", "points": 1.0, "max_points": 1.0, '
        '"status": "passed", "message": ""}]')
    sub = tmp_path / "s"
    sub.mkdir()
    (sub / "collect_report.json").write_text(
        '{"assignment": "a", "students": {"x_canvas7": {"lms": "canvas", "lms_id": "7", "id_kind": "canvas_user_id", '
        '"name": "=HYPERLINK(\\"http://x\\")", "accepted": true}}, "same_name": [], "files": []}')
    export([out], "canvas", tmp_path / "c.csv", submitted=[sub])
    assert _rows(tmp_path / "c.csv")[2][0].startswith("'=")
    with pytest.raises(ExportError, match="no grades.json"):
        export([tmp_path / "s"], "canvas", tmp_path / "d.csv")


def test_moodle_worksheets_one_per_assignment(tmp_path):
    dirs = []
    for a, pid in (("03_vector_add", "501"), ("04_gelu", "733")):
        d = tmp_path / a
        d.mkdir()
        (d / "grades.json").write_text(
            f'[{{"student": "janedoe_moodle{pid}", "assignment": "{a}", "grade_id": "t", "points": 2.0, '
            '"max_points": 3.0, "status": "partial", "message": ""}]')
        dirs.append(d)
    result = export(dirs, "moodle", tmp_path / "sheets.csv")
    assert sorted(p.name for p in (tmp_path / "sheets").iterdir()) == ["moodle-worksheet-03_vector_add.csv",
                                                                      "moodle-worksheet-04_gelu.csv"]
    assert _rows(tmp_path / "sheets" / "moodle-worksheet-04_gelu.csv")[1][:6] == \
        ["Participant 733", "janedoe", "", "", "2.00", "3.00"]
    assert len(result.files) == 2
