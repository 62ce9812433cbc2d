"""Submitted notebooks that are links, special files, too large or not notebooks: refused unread, and no message
quotes them (grader/submitted_files.py, find_submissions and grade_all in grader/autograde.py).

Most tests stop before nbgrader: a refused submission never reaches it. One test grades a linked notebook and an
honest one after it through real autograde. The zip and folder cases of ``collect`` are in tests/test_collect.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
from pathlib import Path

import nbformat
import pytest

import grader.submitted_files as sf
from grader.autograde import find_submissions, grade_all, graded_cells
from grader.course import example_submissions
from grader.examples import apply_answers, parse_answers
from grader.repair import repair_notebook
from grader.submitted_files import Refused, parse_notebook, read_regular_file, read_submission
from tests.safety.links import HONEST_AFTER, LINKED, SECRET, plant_linked_submissions, target_texts

A = "03_vector_add"

#: What each planted submission's refusal says (the class of the problem, never the file's content).
EXPECTED = {
    "lnk_assignment_folder": "the assignment's folder is a symbolic link",
    "lnk_broken_cells": "cell 1 has no metadata object",
    "lnk_fifo_notebook": "is a FIFO (named pipe), not a regular file",
    "lnk_folder_as_notebook": "is a folder, not a regular file",
    "lnk_hard_link_to_honest": "is a hard link",
    "lnk_huge_notebook": f"more than the {sf.MAX_NOTEBOOK_BYTES} bytes",
    "lnk_json_not_notebook": "JSON but not a Jupyter notebook",
    "lnk_notebook_to_etc_passwd": "the submitted notebook is a symbolic link",
    "lnk_notebook_to_honest": "the submitted notebook is a symbolic link",
    "lnk_notebook_to_host_file": "the submitted notebook is a symbolic link",
    "lnk_student_folder": "the student's folder is a symbolic link",
    "lnk_text_not_notebook": "it is not JSON",
}


@pytest.fixture(autouse=True)
def _never_block():
    """A grader that opened the FIFO would wait forever for a writer: fail instead."""
    def stop(*_):
        raise TimeoutError("blocked: something opened a FIFO or read without end")
    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _honest_bytes() -> bytes:
    nb = apply_answers(A, parse_answers((example_submissions(A) / "ada_correct.py").read_text()))
    return nbformat.writes(nb).encode()


@pytest.fixture
def planted(tmp_path) -> Path:
    honest = tmp_path / "honest.ipynb"
    honest.write_bytes(_honest_bytes())
    submitted = tmp_path / "submitted"
    submitted.mkdir()
    assert plant_linked_submissions(submitted, A, honest) == list(LINKED)
    return submitted


def _quotes_a_target(text: str) -> bool:
    return any(t in text for t in target_texts()) or "second line of the host file" in text


def _read_and_parse(path: Path):
    return parse_notebook(read_submission(path))


def test_every_planted_submission_is_refused_with_its_reason_and_the_honest_one_is_read(planted):
    subs = {s.student: s for s in find_submissions(planted, A)}
    assert set(subs) == set(LINKED) | {HONEST_AFTER}  # linked student folders are listed, not skipped
    assert set(EXPECTED) == set(LINKED)
    for student in LINKED:
        with pytest.raises(Refused) as refused:
            _read_and_parse(subs[student].notebook)
        assert EXPECTED[student] in str(refused.value), (student, str(refused.value))
        assert not _quotes_a_target(str(refused.value)), student
    assert _read_and_parse(subs[HONEST_AFTER].notebook).cells


def test_a_linked_folder_is_not_looked_into(tmp_path):
    """A student folder that links elsewhere is never listed: its submission is the usual path, refused on read,
    not the lone notebook found behind the link."""
    elsewhere = tmp_path / "elsewhere" / A
    elsewhere.mkdir(parents=True)
    (elsewhere / "other_name.ipynb").write_bytes(_honest_bytes())
    submitted = tmp_path / "submitted"
    submitted.mkdir()
    (submitted / "sam").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (submitted / "tom").mkdir()
    (submitted / "tom" / A).symlink_to(elsewhere, target_is_directory=True)
    subs = find_submissions(submitted, A)
    assert [(s.student, s.notebook) for s in subs] == [
        ("sam", submitted / "sam" / A / f"{A}.ipynb"), ("tom", submitted / "tom" / A / f"{A}.ipynb")]


def test_a_lone_notebook_under_another_name_that_is_a_link_is_refused(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    folder = tmp_path / "submitted" / "uma" / A
    folder.mkdir(parents=True)
    (folder / "mine.ipynb").symlink_to(secret)
    [sub] = find_submissions(tmp_path / "submitted", A)
    assert sub.notebook == folder / "mine.ipynb"
    with pytest.raises(Refused, match="the submitted notebook is a symbolic link"):
        read_submission(sub.notebook)


def test_device_and_socket_files_are_refused_unopened(tmp_path):
    with pytest.raises(Refused, match="is a character device, not a regular file"):
        read_regular_file(Path("/dev"), ["null"])
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(tmp_path / "sock.ipynb"))
        with pytest.raises(Refused, match="is a socket, not a regular file"):
            read_regular_file(tmp_path, ["sock.ipynb"])


def test_a_missing_notebook_is_missing_not_refused(tmp_path):
    (tmp_path / "s" / "ann").mkdir(parents=True)
    with pytest.raises(FileNotFoundError):
        read_submission(tmp_path / "s" / "ann" / A / f"{A}.ipynb")


def _swap_after_check(monkeypatch, swap) -> None:
    """Run ``swap(name, dir_fd)`` right after the reader's lstat of a name: the race a link could win."""
    real = os.stat

    def stat_then_swap(name, *args, dir_fd=None, follow_symlinks=True):
        st = real(name, *args, dir_fd=dir_fd, follow_symlinks=follow_symlinks)
        if dir_fd is not None and not follow_symlinks:
            swap(name, dir_fd)
        return st
    monkeypatch.setattr(sf.os, "stat", stat_then_swap)


@pytest.mark.parametrize("what", ["link", "other_file", "link_to_folder"])
def test_a_file_swapped_between_check_and_open_is_refused(tmp_path, monkeypatch, what):
    """lstat sees a regular file (or folder); before the open, it becomes a link to the host file, or another
    file: the open does not follow the link, and the opened file must be the one lstat saw."""
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    nb = tmp_path / "s" / "bea" / A / f"{A}.ipynb"
    nb.parent.mkdir(parents=True)
    nb.write_bytes(_honest_bytes())
    replacement = tmp_path / "replacement"
    replacement.write_text(SECRET)
    target = nb if what != "link_to_folder" else nb.parent

    def swap(name, dir_fd):
        if name == target.name:
            if target.is_dir():
                shutil.rmtree(target)
            else:
                target.unlink()
            if what == "other_file":
                os.rename(replacement, target)
            else:
                target.symlink_to(secret if what == "link" else tmp_path, target_is_directory=what != "link")

    _swap_after_check(monkeypatch, swap)
    with pytest.raises(Refused, match="changed while the grader opened it") as refused:
        read_submission(nb)
    assert SECRET not in str(refused.value)


def test_a_file_is_refused_past_the_limit_by_its_size_and_by_what_it_holds(tmp_path):
    """The size fstat gives is checked first; the read itself stops past the limit too, for a file that holds
    more than its size says (as /proc's files do, whose size is 0) or grows while it is read."""
    f = tmp_path / "big.ipynb"
    f.write_bytes(b"x" * 100)
    assert read_regular_file(tmp_path, ["big.ipynb"], limit=100) == b"x" * 100
    f.write_bytes(b"x" * 101)
    with pytest.raises(Refused, match="is 101 bytes, more than the 100 bytes"):
        read_regular_file(tmp_path, ["big.ipynb"], limit=100)
    assert os.stat("/proc/self/status").st_size == 0
    with pytest.raises(Refused, match="grew past the 10 bytes"):
        read_regular_file(Path("/proc/self"), ["status"], limit=10)


@pytest.mark.parametrize("data, reason", [
    (SECRET.encode("utf-16"), "not UTF-8 text"),
    (SECRET.encode(), "not JSON"),
    (b"[" * 200_000 + b"]" * 200_000, "not JSON"),                       # deeper than the parser recurses
    (json.dumps([SECRET]).encode(), "JSON but not a Jupyter notebook"),
    (json.dumps({"nbformat": 99, "cells": [SECRET]}).encode(), "not a notebook nbformat can read"),
    (json.dumps({"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": SECRET}).encode(),
     "not a notebook nbformat can read"),
    (json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": SECRET}).encode(),
     "its cells are not a list"),
    (json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": [SECRET], "cells": []}).encode(),
     "its metadata is not a JSON object"),
    (json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "source": "", "metadata": {"nbgrader": {"grade_id": [SECRET]}}, "outputs": []}]}
     ).encode(),
     "cell 0 has an nbgrader grade_id that is not text"),
    (json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "id": [SECRET], "source": "", "metadata": {}, "outputs": []}]}).encode(),
     "cell 0 has an id that is not text"),
])
def test_what_is_not_a_notebook_is_named_and_never_quoted(data, reason):
    with pytest.raises(Refused, match=reason) as refused:
        parse_notebook(data)
    assert SECRET[:12] not in str(refused.value)


def test_repair_declines_a_notebook_without_the_structure_it_relies_on():
    release = nbformat.reads(_honest_bytes().decode(), as_version=4)
    broken = nbformat.from_dict({"nbformat": 4, "nbformat_minor": 5, "metadata": {},
                                 "cells": [{"cell_type": "code", "source": SECRET, "metadata": [SECRET]}]})
    notes, looks_right = repair_notebook(broken, release)
    assert not looks_right and notes == ["not a valid notebook: cell 0 has no metadata object"]


def test_grade_all_gives_each_refused_submission_zero_and_a_clean_message(planted):
    """No refused submission reaches nbgrader, so this class of refusals alone grades in a moment."""
    subs = [s for s in find_submissions(planted, A) if s.student in LINKED]
    records = grade_all(subs, planted.parent / "out", workers=1, sandboxed=False, feedback=False)
    cells = {c.grade_id for c in graded_cells(A)}
    by: dict[str, dict] = {}
    for r in records:
        by.setdefault(r.student, {})[r.grade_id] = r
    assert set(by) == set(LINKED)
    for student, recs in by.items():
        assert set(recs) == cells, student
        for r in recs.values():
            assert r.points == 0 and r.status == "error", r
            assert r.message.startswith("not graded: ") and EXPECTED[student] in r.message, r
            assert not _quotes_a_target(r.message), r
    assert not (planted.parent / "out" / "records").exists()  # nothing graded, nothing to resume


@pytest.mark.notebook
def test_a_linked_notebook_and_an_honest_one_after_it_through_real_autograde(tmp_path):
    """The issue's case end to end: a notebook linked to /etc/passwd gets 0 and quotes none of it; the honest
    student graded after it keeps every point."""
    submitted = tmp_path / "submitted"
    (submitted / "eve" / A).mkdir(parents=True)
    (submitted / "eve" / A / f"{A}.ipynb").symlink_to("/etc/passwd")
    (submitted / "zed" / A).mkdir(parents=True)
    (submitted / "zed" / A / f"{A}.ipynb").write_bytes(_honest_bytes())
    records = grade_all(find_submissions(submitted, A), tmp_path / "out", workers=1, feedback=False)
    eve = [r for r in records if r.student == "eve"]
    zed = [r for r in records if r.student == "zed"]
    assert eve and all(r.points == 0 and r.status == "error" and "symbolic link" in r.message for r in eve)
    assert not any(_quotes_a_target(r.message) for r in eve)
    assert zed and all(r.status in ("passed", "not_graded") for r in zed)
    assert sum(r.points for r in zed) == sum(r.max_points for r in zed if r.status == "passed") > 0
