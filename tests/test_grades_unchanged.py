"""Moving each chapter into one folder (and the grader's refactoring with it) changed no grade.

``tests/grades_unchanged/before.json`` was recorded by ``tests/record_grades.py`` on the commit before the move
(3e532e0), ``after.json`` on the moved tree: every hidden test's outcome for every example submission of every
chapter. Chapters 07 and 09 got new exercises in the same change (model answers instead of the course's fastest
kernels): their examples were rewritten with them, so for those two the test asks only that each example still
fails exactly the tests it failed before. The attack corpus is graded in the sandbox by tests/test_grader_safety.py
and the chapters' tests, whose verdicts did not change either.
"""

from __future__ import annotations

import json

import pytest

from grader.course import example_submissions
from tests.conftest import CHAPTERS, ROOT
from tests.record_grades import grade_one

FOLDER = ROOT / "tests" / "grades_unchanged"
BEFORE = json.loads((FOLDER / "before.json").read_text())["grades"]
AFTER = json.loads((FOLDER / "after.json").read_text())["grades"]
#: Chapters whose exercise changed with the move.
NEW_EXERCISES = {"07_matmul_relu", "09_attention"}
#: The one example that fails more than it did: gia sums in float16 in the pointer kernel. Under the interpreter
#: the old solution took its Hopper path (tensor descriptors: HOPPER = device.interpreted) wherever the rows
#: allowed it, so gia's edited pointer kernel ran at fewer of the tests' shapes; the model answer has one kernel,
#: and gia's float16 sum now fails the transposed views too. A mistake losing one more test; no honest answer changed.
FAILS_MORE = {("07_matmul_relu", "gia_fp16_accumulator"): {"test_transposed_views"}}


def _failed(outcomes: dict[str, str] | str) -> set[str] | str:
    return outcomes if isinstance(outcomes, str) else {gid for gid, o in outcomes.items() if o != "passed"}


@pytest.mark.parametrize("chapter", sorted(set(BEFORE) - NEW_EXERCISES))
def test_every_example_keeps_every_grade(chapter):
    assert AFTER[chapter] == BEFORE[chapter]


@pytest.mark.parametrize("chapter", sorted(NEW_EXERCISES))
def test_the_rewritten_examples_fail_what_they_failed_before(chapter):
    before, after = BEFORE[chapter]["examples"], AFTER[chapter]["examples"]
    assert set(after) == set(before)
    for student in before:
        assert _failed(after[student]) == _failed(before[student]) | FAILS_MORE.get((chapter, student), set()), student


def test_the_record_covers_every_example_of_the_moved_chapters():
    """after.json is not stale: it holds every chapter the move covered (before.json's), each with exactly the
    example files it has now. Chapters added since (10, 11) were never moved; their own tests grade their examples."""
    assert set(AFTER) == set(BEFORE) and set(BEFORE) <= set(CHAPTERS)
    for chapter in BEFORE:
        assert set(AFTER[chapter]["examples"]) == {f.stem for f in example_submissions(chapter).glob("*.py")}, chapter


@pytest.mark.parametrize("student", ["ada_correct", "ben_untouched", "dev_floor_grid", "kim_tamper"])
def test_grading_chapter_03_again_gives_the_recorded_grades(student):
    """The record against the grader as it is: a few of chapter 03's examples graded again now."""
    assert grade_one("03_vector_add", student, "examples", 300) == AFTER["03_vector_add"]["examples"][student]
