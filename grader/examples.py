"""Example submissions, built from short answer files so that they follow the notebooks as they change.

An answer file ``tests/submissions/<assignment>/<student>.py`` holds the code a student typed into the
solution cells, one section per cell::

    # what this student did (the first comment lines describe the submission)
    #%% add
    ...the source of the cell whose grade_id is "add"...
    #%% other_cell from-solution
    (a section marked from-solution takes that cell from the solution notebook)

A file without sections is an untouched notebook. :func:`build_submissions` writes
``SUBMITTED/<student>/<assignment>/<assignment>.ipynb`` from the *student* notebook, as a student
would hand it in.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from grader.course import EXAMPLE_SUBMISSIONS, solution_notebook, student_notebook

_SECTION = re.compile(r"^#%% (\S+)( from-solution)?\s*$", re.M)


def parse_answers(text: str) -> dict[str, str | None]:
    """grade_id -> cell source (None: take the solution's cell)."""
    parts = _SECTION.split(text)
    answers: dict[str, str | None] = {}
    for i in range(1, len(parts), 3):
        grade_id, from_solution, body = parts[i], parts[i + 1], parts[i + 2]
        answers[grade_id] = None if from_solution else body.strip("\n")
    return answers


def describe(answer_file: Path) -> str:
    """The first comment line of an answer file."""
    first = answer_file.read_text().splitlines()[:1]
    return first[0].lstrip("# ").strip() if first else ""


def apply_answers(assignment: str, answers: dict[str, str | None]) -> nbformat.NotebookNode:
    """The student notebook with the given solution cells replaced."""
    nb = nbformat.read(student_notebook(assignment), as_version=4)
    solution = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source
                for c in nbformat.read(solution_notebook(assignment), as_version=4).cells}
    by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    for grade_id, source in answers.items():
        if grade_id not in by_id:
            raise KeyError(f"{assignment} has no cell with grade_id {grade_id!r}")
        by_id[grade_id].source = solution[grade_id] if source is None else source
    return nb


def answer_files(assignment: str, root: Path = EXAMPLE_SUBMISSIONS) -> list[Path]:
    return sorted((root / assignment).glob("*.py"))


def build_submissions(assignment: str, submitted: Path, root: Path = EXAMPLE_SUBMISSIONS) -> list[str]:
    """Write every example submission of ``assignment`` under ``submitted``; return the student names."""
    students = []
    for f in answer_files(assignment, root):
        nb = apply_answers(assignment, parse_answers(f.read_text()))
        dest = submitted / f.stem / assignment / f"{assignment}.ipynb"
        dest.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, dest)
        students.append(f.stem)
    return students
