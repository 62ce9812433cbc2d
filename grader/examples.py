"""Example submissions, built from short answer files so that they follow the notebooks as they change.

An answer file ``solutions/<assignment>/submissions/examples/<student>.py`` (or ``.../attacks/``) holds the code a student typed into the
solution cells, one section per cell::

    # what this student did (the first comment lines describe the submission)
    #%% add
    ...the source of the cell whose grade_id is "add"...
    #%% other_cell from-solution
    (a section marked from-solution takes that cell from the solution notebook)
    #%% kernel_cell from-solution
    #%%- replace
    ...lines of the solution's cell...
    #%%- with
    ...what this student wrote instead...

A from-solution section may hold replace/with pairs: the solution's cell with each block replaced
(each must occur exactly once), so that a typical mistake is written as the few lines it changes and
follows the solution as it evolves. A file without sections is an untouched notebook. :func:`build_submissions` writes
``SUBMITTED/<student>/<assignment>/<assignment>.ipynb`` from the *student* notebook, as a student
would hand it in.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from grader.course import EXAMPLES, answers_folder, solution_notebook, student_notebook

_SECTION = re.compile(r"^#%% (\S+)( from-solution)?\s*$", re.M)
_EDIT = re.compile(r"^#%%- (replace|with)\s*$", re.M)

#: What an answer file says of one cell: its source, None (the solution's cell), or the solution's cell
#: with (old, new) blocks replaced.
Answer = str | None | tuple[tuple[str, str], ...]


def _edits(body: str) -> tuple[tuple[str, str], ...]:
    parts = _EDIT.split(body)
    if parts[0].strip():
        raise ValueError("a from-solution section holds only '#%%- replace' / '#%%- with' blocks")
    pairs = list(zip(parts[1::2], parts[2::2]))
    if [k for k, _ in pairs] != ["replace", "with"] * (len(pairs) // 2) or len(pairs) % 2:
        raise ValueError("'#%%- replace' and '#%%- with' blocks must alternate")
    return tuple((old.strip("\n"), new.strip("\n")) for (_, old), (_, new) in zip(pairs[::2], pairs[1::2]))


def parse_answers(text: str) -> dict[str, Answer]:
    """grade_id -> what the answer file says of that cell (see :data:`Answer`)."""
    parts = _SECTION.split(text)
    answers: dict[str, Answer] = {}
    for i in range(1, len(parts), 3):
        grade_id, from_solution, body = parts[i], parts[i + 1], parts[i + 2]
        if not from_solution:
            answers[grade_id] = body.strip("\n")
        else:
            answers[grade_id] = _edits(body) if body.strip() else None
    return answers


def solution_code(source: str) -> str:
    """A solution cell as a student would have typed it: without nbgrader's region markers."""
    return "\n".join(line for line in source.split("\n")
                     if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))


def answer_source(answer: Answer, solution_source: str, grade_id: str = "?") -> str:
    """The cell source an answer stands for, given the solution's source of that cell."""
    if isinstance(answer, str):
        return answer
    source = solution_code(solution_source)
    if answer is None:
        return source
    for old, new in answer:
        if source.count(old) != 1:
            raise ValueError(f"cell {grade_id}: the block to replace occurs {source.count(old)} times in the "
                             f"solution (it must occur once):\n{old}")
        source = source.replace(old, new)
    return source


def describe(answer_file: Path) -> str:
    """The first comment line of an answer file."""
    first = answer_file.read_text().splitlines()[:1]
    return first[0].lstrip("# ").strip() if first else ""


def apply_answers(assignment: str, answers: dict[str, Answer], language: str = "en") -> nbformat.NotebookNode:
    """The student notebook (of the edition of ``language``) with the given solution cells replaced."""
    nb = nbformat.read(student_notebook(assignment, language), as_version=4)
    solution = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source
                for c in nbformat.read(solution_notebook(assignment), as_version=4).cells}
    by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    for grade_id, answer in answers.items():
        if grade_id not in by_id:
            raise KeyError(f"{assignment} has no cell with grade_id {grade_id!r}")
        by_id[grade_id].source = answer_source(answer, solution[grade_id], grade_id)
    return nb


def answer_files(assignment: str, kind: str = EXAMPLES) -> list[Path]:
    """The answer files of a chapter: ``kind`` "examples" or "attacks" (:func:`grader.course.answers_folder`)."""
    return sorted(answers_folder(assignment, kind).glob("*.py"))


def build_submissions(assignment: str, submitted: Path, kind: str = EXAMPLES) -> list[str]:
    """Write every answer file of ``assignment`` (``kind`` "examples" or "attacks") as a submission under
    ``submitted``; return the student names."""
    students = []
    for f in answer_files(assignment, kind):
        nb = apply_answers(assignment, parse_answers(f.read_text()))
        dest = submitted / f.stem / assignment / f"{assignment}.ipynb"
        dest.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, dest)
        students.append(f.stem)
    return students
