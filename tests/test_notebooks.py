"""Static checks of every chapter notebook: clean in git, one shape, valid nbgrader metadata."""

from __future__ import annotations

import re

import nbformat
import pytest

from grader.course import solution_notebook, student_notebook
from tests.conftest import CHAPTERS, ROOT
from utils.bootstrap import SETUP_CELL
from utils.links import CHAPTERS as ALL_CHAPTERS
from utils.links import badges

ALL_NOTEBOOKS = sorted((ROOT / "solutions").rglob("*.ipynb")) + sorted((ROOT / "notebooks").rglob("*.ipynb"))


def _meta(cell):
    return cell.metadata.get("nbgrader", {})


def test_there_is_a_notebook_per_chapter_folder():
    for folder in ("solutions", "notebooks"):
        for d in (ROOT / folder).iterdir():
            if d.is_dir():
                assert d.name in ALL_CHAPTERS, f"{folder}/{d.name} is not a chapter id"
                assert (d / f"{d.name}.ipynb").exists(), f"{folder}/{d.name} must hold {d.name}.ipynb"


@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_committed_notebooks_carry_no_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not dirty, f"{path.name}: cells {dirty} carry outputs or execution counts"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_header_links_and_setup_cell(chapter):
    nb = nbformat.read(solution_notebook(chapter), as_version=4)
    header = nb.cells[0]
    assert header.cell_type == "markdown" and header.source.startswith(f"# {chapter[:2]} ·")
    assert badges(chapter) in header.source, "the Colab/ModelScope links must match utils.links"
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert first_code.source == SETUP_CELL, "the first code cell must be utils.bootstrap.SETUP_CELL"
    assert _meta(first_code).get("locked"), "the setup cell must be read-only"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_chapter_has_the_course_shape(chapter):
    """Goals, a traffic or FLOP budget, a TODO, a self-check, and what to take away."""
    text = "\n".join(c.source for c in nbformat.read(solution_notebook(chapter), as_version=4).cells
                     if c.cell_type == "markdown")
    for heading in ("**Goals.**", "## TODO", "## Self-check", "## What to take away"):
        assert heading in text, f"{chapter} lacks {heading!r}"
    assert re.search(r"## .*(budget|traffic|FLOP|bytes)", text, re.I), f"{chapter} lacks a traffic/FLOP budget"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_nbgrader_metadata_is_consistent(chapter):
    nb = nbformat.read(solution_notebook(chapter), as_version=4)
    ids = [_meta(c)["grade_id"] for c in nb.cells if _meta(c)]
    assert len(ids) == len(set(ids)), f"duplicate grade_id in {chapter}"
    tests = [c for c in nb.cells if _meta(c).get("grade") and not _meta(c).get("solution")]
    solutions = [c for c in nb.cells if _meta(c).get("solution")]
    assert tests and solutions
    for c in tests:
        assert c.cell_type == "code" and _meta(c)["locked"] and _meta(c)["points"] > 0
        assert "### BEGIN HIDDEN TESTS" in c.source, f"{_meta(c)['grade_id']}: hidden tests stay hidden"
    for c in solutions:
        assert c.source.count("### BEGIN SOLUTION") == c.source.count("### END SOLUTION") >= 1
    for c in nb.cells:
        if not _meta(c).get("solution"):
            assert "### BEGIN SOLUTION" not in c.source, "solution regions belong in solution cells"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_student_notebook_hides_solutions_and_tests(chapter):
    nb = nbformat.read(student_notebook(chapter), as_version=4)
    text = "\n".join(c.source for c in nb.cells)
    assert "### BEGIN SOLUTION" not in text and "### BEGIN HIDDEN TESTS" not in text
    assert "raise NotImplementedError()" in text


def test_readme_lists_every_chapter_with_its_links():
    readme = (ROOT / "README.md").read_text()
    for chapter in CHAPTERS:
        assert badges(chapter) in readme, f"README lacks the links of {chapter}"
