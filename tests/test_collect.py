"""``collect``: LMS downloads into nbgrader's ``submitted/`` layout, keeping the LMS's own ids (no nbgrader
run here; tests/test_export.py takes the same archives through autograde and export).

The file names follow what the LMSs write (see grader/collect.py for their source): Canvas
``<sortable name>[_LATE]_<user id>_<file id>_<file name>`` and ``[LATE_]anon_<anonymous id>_...``;
Moodle ``<Full Name>_<participant id>_assignsubmission_file[_]/<file>`` or, without folders,
``<Full Name>_<participant id>_assignsubmission_file_<file>``.
"""

from __future__ import annotations

import json
import zipfile

import nbformat
import pytest

from grader.collect import collect, identify, identity_of, same_name_groups, student_of
from grader.course import example_submissions
from grader.examples import apply_answers, parse_answers
from tests.safety.transforms import TRANSFORMS

A = "03_vector_add"


def _ada():
    return apply_answers(A, parse_answers((example_submissions(A) / "ada_correct.py").read_text()))


@pytest.mark.parametrize("entry, folder, lms, lms_id, kind, late", [
    # Canvas: the user id (not the file id after it) is the student
    ("doejane_12345_678_03_vector_add.ipynb", "doejane_canvas12345", "canvas", "12345", "canvas_user_id", False),
    ("doejane_LATE_12346_679_03_vector_add.ipynb", "doejane_canvas12346", "canvas", "12346", "canvas_user_id", True),
    ("anon_Xy12Z_680_vector.ipynb", "anon_canvasanonXy12Z", "canvas", "Xy12Z", "canvas_anonymous_id", False),
    ("LATE_anon_Xy12Z_681_vector.ipynb", "anon_canvasanonXy12Z", "canvas", "Xy12Z", "canvas_anonymous_id", True),
    # Moodle 4.1+ folders, 3.x folders (trailing underscore), flat files, blind marking
    ("Jane Doe_501_assignsubmission_file/03_vector_add.ipynb", "janedoe_moodle501", "moodle", "501",
     "moodle_participant_id", False),
    ("Jane Doe_502_assignsubmission_file_/work/03_vector_add.ipynb", "janedoe_moodle502", "moodle", "502",
     "moodle_participant_id", False),
    ("Jane Doe_503_assignsubmission_file_03_vector_add.ipynb", "janedoe_moodle503", "moodle", "503",
     "moodle_participant_id", False),
    ("Participant_504_assignsubmission_file/lab.ipynb", "participant_moodle504", "moodle", "504",
     "moodle_participant_id", False),
    # no LMS: the first part of the name
    ("dana_lab3.ipynb", "dana", "", "", "", False),
    ("Ben Bit/03_vector_add.ipynb", "benbit", "", "", "", False),
    ("ada.ipynb", "ada", "", "", "", False),
])
def test_lms_file_names_give_the_lms_id(entry, folder, lms, lms_id, kind, late):
    ident = identify(entry)
    assert (ident.folder, ident.lms, ident.lms_id, ident.id_kind, ident.late) == (folder, lms, lms_id, kind, late)
    back = identity_of(folder)  # what autograde's and export's only input, the folder name, says
    assert (back.lms, back.lms_id, back.id_kind) == (lms, lms_id, kind)


def test_names_that_are_not_submissions():
    assert student_of("__MACOSX/._doejane_1_2_x.ipynb") is None
    assert student_of(".hidden_1_2_x.ipynb") is None
    assert student_of("doejane_1_2_notes.txt") is None
    assert student_of("../../etc_x.ipynb") is None


def test_two_students_of_one_name_stay_two():
    a, b = identify("doejane_12345_1_x.ipynb"), identify("doejane_12346_2_x.ipynb")
    assert a.folder != b.folder and a.name == b.name
    assert [[i.folder for i in g] for g in same_name_groups([a, b])] == [["doejane_canvas12345", "doejane_canvas12346"]]
    # the same id twice (a resubmission) is one student, not a same-name pair
    assert same_name_groups([a, identify("doejane_12345_3_x-1.ipynb")]) == []


def test_collect_validates_each_notebook(tmp_path):
    ada = nbformat.writes(_ada()).encode()
    stripped = nbformat.writes(TRANSFORMS["nora_stripped_metadata"](_ada())).encode()
    other = nbformat.writes(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")])).encode()
    z = tmp_path / "lms.zip"
    with zipfile.ZipFile(z, "w") as f:
        f.writestr("ada_111_222_vector_add.ipynb", ada)
        f.writestr("Ben Bit_333_assignsubmission_file/03_vector_add.ipynb", stripped)
        f.writestr("cy_444_9_other_course.ipynb", other)
        f.writestr("cy_444_10_broken.ipynb", b"{not json")
        f.writestr("__MACOSX/._ada_111_222.ipynb", b"junk")
        f.writestr("readme.txt", b"hello")
    out = tmp_path / "submitted"
    report = collect(z, A, out)
    assert (out / "ada_canvas111" / A / f"{A}.ipynb").read_bytes() == ada
    assert (out / "benbit_moodle333" / A / f"{A}.ipynb").exists()
    assert not (out / "cy_canvas444").exists()
    by = {c.source: c for c in report}
    assert any("metadata was stripped" in p for p in by["Ben Bit_333_assignsubmission_file/03_vector_add.ipynb"].problems)
    assert "not a notebook of" in by["cy_444_9_other_course.ipynb"].problems[0]
    assert "not a readable notebook" in by["cy_444_10_broken.ipynb"].problems[0]
    saved = json.loads((out / "collect_report.json").read_text())
    assert saved["students"]["ada_canvas111"] == {
        "lms": "canvas", "lms_id": "111", "id_kind": "canvas_user_id", "name": "ada", "late": False,
        "accepted": True, "source": "ada_111_222_vector_add.ipynb", "sources": ["ada_111_222_vector_add.ipynb"],
        "problems": []}
    assert saved["students"]["benbit_moodle333"]["name"] == "Ben Bit"
    cy = saved["students"]["cy_canvas444"]
    assert not cy["accepted"] and cy["lms_id"] == "444" and len(cy["sources"]) == 2 and cy["problems"]
    assert {f["source"] for f in saved["files"]} >= {"ada_111_222_vector_add.ipynb", "cy_444_10_broken.ipynb"}


def test_collect_keeps_same_name_students_apart_and_says_so(tmp_path):
    ada = nbformat.writes(_ada()).encode()
    z = tmp_path / "canvas.zip"
    with zipfile.ZipFile(z, "w") as f:
        f.writestr("doejane_12345_900_03_vector_add.ipynb", ada)
        f.writestr("doejane_LATE_12346_901_03_vector_add.ipynb", ada)
    out = tmp_path / "submitted"
    report = collect(z, A, out)
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["doejane_canvas12345", "doejane_canvas12346"]
    assert all(any("same name" in p and "kept apart" in p for p in c.problems) for c in report)
    saved = json.loads((out / "collect_report.json").read_text())
    assert saved["same_name"] == [["doejane_canvas12345", "doejane_canvas12346"]]
    assert saved["students"]["doejane_canvas12346"]["late"] is True


def test_collect_from_a_folder(tmp_path):
    src = tmp_path / "mail"
    src.mkdir()
    nbformat.write(_ada(), src / "dana_lab3.ipynb")
    report = collect(src, A, tmp_path / "submitted")
    assert [c.student for c in report if c.accepted] == ["dana"]
    assert (tmp_path / "submitted" / "dana" / A / f"{A}.ipynb").exists()
    saved = json.loads((tmp_path / "submitted" / "collect_report.json").read_text())
    assert saved["students"]["dana"]["lms"] == "" and saved["students"]["dana"]["lms_id"] == ""


def test_a_long_name_gives_a_short_folder_and_keeps_the_full_name():
    """The folder ends up in the grader's socket paths (at most 107 bytes): the id tells students apart."""
    ident = identify("Maria Fernanda Gonzalez Rodriguez_1234567_assignsubmission_file/03_vector_add.ipynb")
    assert ident.folder == "mariafernand_moodle1234567" and ident.name == "Maria Fernanda Gonzalez Rodriguez"
    assert identify("gonzalezrodriguezmariafernanda_10000000012345_1_x.ipynb").folder == \
        "gonzalezrodr_canvas10000000012345"


# --- entries that are not a notebook file of the student's own: refused unread, never quoted ---------------

def _zip_special(z: zipfile.ZipFile, name: str, mode: int, data: bytes) -> None:
    """An entry with a Unix file type in its ``external_attr`` (what ``zip --symlinks`` writes for a link)."""
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = mode << 16
    z.writestr(info, data)


def _no_secret_in(out) -> None:
    from tests.safety.links import target_texts

    report = (out / "collect_report.json").read_text()
    assert not any(t in report for t in target_texts()), report
    for f in (p for p in out.rglob("*") if p.is_file()):
        assert not any(t.encode() in f.read_bytes() for t in target_texts()), f


def test_collect_refuses_links_special_files_and_escaping_names_in_a_zip(tmp_path):
    import stat

    from tests.safety.links import SECRET

    ada = nbformat.writes(_ada()).encode()
    z = tmp_path / "lms.zip"
    with zipfile.ZipFile(z, "w") as f:
        _zip_special(f, "eve_1_2_03_vector_add.ipynb", stat.S_IFLNK | 0o777, b"/etc/passwd")
        _zip_special(f, "Lin Kay_3_assignsubmission_file/03_vector_add.ipynb", stat.S_IFLNK | 0o777, b"../../x")
        _zip_special(f, "fifo_4_5_03_vector_add.ipynb", stat.S_IFIFO | 0o644, b"")
        _zip_special(f, "dev_6_7_03_vector_add.ipynb", stat.S_IFCHR | 0o644, b"")
        _zip_special(f, "notes_link", stat.S_IFLNK | 0o777, b"/etc")
        f.writestr("../../evil_8_9_03_vector_add.ipynb", ada)
        f.writestr("/abs_10_11_03_vector_add.ipynb", ada)
        f.writestr("a/../../b_12_13_03_vector_add.ipynb", ada)
        f.writestr("C:\\Users\\b_14_15_03_vector_add.ipynb", ada)
        f.writestr("ned_16_17_03_vector_add.ipynb", SECRET.encode() + b"\nroot:x:0:0:root:/root:/bin/bash\n")
        _zip_special(f, "zed_99_98_03_vector_add.ipynb", stat.S_IFREG | 0o644, ada)  # the honest one, last
    out = tmp_path / "out" / "submitted"
    report = collect(z, A, out)
    by = {c.source: c for c in report}
    assert [c.student for c in report if c.accepted] == ["zed_canvas99"]
    assert (out / "zed_canvas99" / A / f"{A}.ipynb").read_bytes() == ada
    for name in ("eve_1_2_03_vector_add.ipynb", "Lin Kay_3_assignsubmission_file/03_vector_add.ipynb",
                 "notes_link"):
        assert "a symbolic link in the archive" in by[name].problems[0] and not by[name].accepted
    assert "a FIFO (named pipe) in the archive" in by["fifo_4_5_03_vector_add.ipynb"].problems[0]
    assert "a character device in the archive" in by["dev_6_7_03_vector_add.ipynb"].problems[0]
    for name in ("../../evil_8_9_03_vector_add.ipynb", "/abs_10_11_03_vector_add.ipynb",
                 "a/../../b_12_13_03_vector_add.ipynb", "C:\\Users\\b_14_15_03_vector_add.ipynb"):
        assert "leaves the folder" in by[name].problems[0] and not by[name].accepted
    assert "not JSON" in by["ned_16_17_03_vector_add.ipynb"].problems[0]
    saved = json.loads((out / "collect_report.json").read_text())
    assert not saved["students"]["eve_canvas1"]["accepted"] and saved["students"]["eve_canvas1"]["problems"]
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["zed_canvas99"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["submitted"]  # nothing written beside it
    _no_secret_in(out)


def test_collect_refuses_a_zip_entry_too_large_to_be_a_notebook(tmp_path, monkeypatch):
    """Refused by the size the entry claims, before it is unpacked (the limit made small to keep the zip small)."""
    import grader.collect as collect_module

    monkeypatch.setattr(collect_module, "MAX_NOTEBOOK_BYTES", 1000)
    z = tmp_path / "lms.zip"
    with zipfile.ZipFile(z, "w", compression=zipfile.ZIP_DEFLATED) as f:
        f.writestr("big_1_2_03_vector_add.ipynb", b" " * 5000)
    report = collect(z, A, tmp_path / "submitted")
    assert "5000 bytes, more than the 1000 bytes" in report[0].problems[0] and not report[0].accepted


def test_collect_from_a_folder_follows_no_link_and_reads_no_special_file(tmp_path):
    import os

    from tests.safety.links import SECRET

    host = tmp_path / "host"
    (host / "folder").mkdir(parents=True)
    (host / "secret.txt").write_text(SECRET + "\n")
    nbformat.write(_ada(), host / "folder" / "sam_lab.ipynb")
    nbformat.write(_ada(), host / "honest_elsewhere.ipynb")
    src = tmp_path / "mail"
    (src / "Mo Lee").mkdir(parents=True)
    (src / "eve_lab.ipynb").symlink_to(host / "secret.txt")
    (src / "pat_lab.ipynb").symlink_to("/etc/passwd")
    (src / "Kim Link").symlink_to(host / "folder", target_is_directory=True)  # a linked student folder
    os.link(host / "honest_elsewhere.ipynb", src / "hal_lab.ipynb")
    os.mkfifo(src / "fifo_lab.ipynb")
    (src / "Mo Lee" / "lab.ipynb").symlink_to(host / "honest_elsewhere.ipynb")
    (src / "ned_lab.ipynb").write_text(SECRET)
    nbformat.write(_ada(), src / "zed_lab.ipynb")
    report = collect(src, A, tmp_path / "submitted")
    by = {c.source: c for c in report}
    assert [c.student for c in report if c.accepted] == ["zed"]
    for name in ("eve_lab.ipynb", "pat_lab.ipynb", "Kim Link", "Mo Lee/lab.ipynb"):
        assert by[name].problems[0].startswith("a symbolic link, not a regular file"), by[name]
    assert "hard link" in by["hal_lab.ipynb"].problems[0]
    assert "a FIFO (named pipe), not a regular file" in by["fifo_lab.ipynb"].problems[0]
    assert "not JSON" in by["ned_lab.ipynb"].problems[0]
    assert "Kim Link/sam_lab.ipynb" not in by  # nothing behind the linked folder was listed
    _no_secret_in(tmp_path / "submitted")
