"""Shared fixtures. The whole suite runs on a machine without a GPU, through Triton's interpreter."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MPLBACKEND", "Agg")

from grader.course import assignments  # noqa: E402

CHAPTERS = assignments()


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


def chapter_params():
    """One pytest parameter per chapter that has a solution notebook."""
    return pytest.mark.parametrize("chapter", CHAPTERS)


def run_with_answers(chapter: str, student: str) -> dict[str, str]:
    """Execute a chapter's solution notebook in this process with ``student``'s answer cells (from
    tests/submissions/) in place of the solution cells; return each graded test's outcome: "passed" or
    the error it raised. Much faster than nbgrader, for checking that each example mistake fails the
    test it should; the chapters' tests still send some submissions through real autograde."""
    import nbformat

    from grader.course import EXAMPLE_SUBMISSIONS, solution_notebook
    from grader.examples import answer_source, parse_answers

    answers = parse_answers((EXAMPLE_SUBMISSIONS / chapter / f"{student}.py").read_text())
    nb = nbformat.read(solution_notebook(chapter), as_version=4)
    ns: dict[str, object] = {"__name__": "__main__"}
    outcomes = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code":
            continue
        source = cell.source
        if meta.get("solution") and meta["grade_id"] in answers:
            source = answer_source(answers[meta["grade_id"]], cell.source, meta["grade_id"])
        try:
            exec(compile(source, f"<{meta.get('grade_id', 'cell')}>", "exec"), ns)
            outcome = "passed"
        except Exception as exc:  # a failing self-check or test is what we are looking for
            outcome = f"{type(exc).__name__}: {exc}"
        if meta.get("grade") and not meta.get("solution"):
            outcomes[meta["grade_id"]] = outcome
    return outcomes
