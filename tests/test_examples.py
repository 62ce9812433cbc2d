"""Answer files: explicit cells, cells taken from the solution, and the solution with a few lines changed."""

from __future__ import annotations

import re

import nbformat
import pytest

from grader.course import student_notebook
from grader.examples import answer_files, answer_source, apply_answers, parse_answers, solution_code
from tests.conftest import CHAPTERS

SOLUTION = "x = 1\n### BEGIN SOLUTION\ny = x + 1\nz = y * 2\n### END SOLUTION\nprint(z)"


def test_sections_explicit_from_solution_and_edited():
    answers = parse_answers("# a student\n#%% a\nprint(1)\n#%% b from-solution\n#%% c from-solution\n"
                            "#%%- replace\nz = y * 2\n#%%- with\nz = y * 3\n")
    assert answers["a"] == "print(1)" and answers["b"] is None
    assert answer_source(answers["b"], SOLUTION) == "x = 1\ny = x + 1\nz = y * 2\nprint(z)"
    assert answer_source(answers["c"], SOLUTION) == "x = 1\ny = x + 1\nz = y * 3\nprint(z)"


def test_an_edit_that_no_longer_matches_the_solution_fails_loudly():
    (edit,) = [parse_answers("#%% c from-solution\n#%%- replace\nw = 0\n#%%- with\nw = 1\n")["c"]]
    with pytest.raises(ValueError, match="occurs 0 times"):
        answer_source(edit, SOLUTION, "c")


def test_unpaired_edit_blocks_are_rejected():
    with pytest.raises(ValueError, match="alternate"):
        parse_answers("#%% c from-solution\n#%%- replace\nz = y * 2\n")


def test_solution_code_drops_only_the_region_markers():
    assert solution_code(SOLUTION).split("\n") == ["x = 1", "y = x + 1", "z = y * 2", "print(z)"]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_answer_file_applies_to_the_current_solution(chapter):
    """Examples and attacks alike (applying an answer file reads it as text; nothing of it runs here): an edit of a
    solution that breaks an attack's answer file fails here, not minutes later in the sandboxed corpus tests."""
    files = answer_files(chapter)
    assert any(f.stem.startswith("ada") for f in files), f"{chapter} needs a correct example submission"
    for f in files + answer_files(chapter, "attacks"):
        nb = apply_answers(chapter, parse_answers(f.read_text()))
        assert nb.cells, f


#: A line of a student template that checks a graded function's inputs (``expect`` / ``expect_float``).
_INPUT_CHECK = re.compile(r"^\s*(return\s+)?expect(_float)?\(")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_examples_keep_the_templates_input_checks(chapter):
    """An example stands for one mistake, so it keeps the input checks the student template gives (a student
    edits around them): one written out before the template took bfloat16 refuses it, and on a GPU it would
    lose the bfloat16 checks for a reason its description never names. The interpreter skips bfloat16, so
    only this comparison catches that here."""
    template = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source
                for c in nbformat.read(student_notebook(chapter), as_version=4).cells}
    stale = []
    for f in answer_files(chapter):
        for grade_id, answer in parse_answers(f.read_text()).items():
            if not isinstance(answer, str):
                continue   # taken from the solution, whose checks the template shares
            typed = {line.strip() for line in answer.splitlines()}
            stale += [f"{f.stem} [{grade_id}]: {line.strip()}" for line in template[grade_id].splitlines()
                      if _INPUT_CHECK.match(line) and line.strip() not in typed]
    assert not stale, "examples without the template's input checks:\n" + "\n".join(stale)
