"""Static checks of every chapter notebook: clean in git, one shape, valid nbgrader metadata."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import nbformat
import pytest

from grader.course import solution_notebook, student_notebook
from tests.conftest import CHAPTERS, ROOT, main_path
from triton_course.bootstrap import SETUP_CELL, setup_cell
from triton_course.i18n import EDITIONS
from triton_course.links import CHAPTERS as ALL_CHAPTERS
from triton_course.links import badges, read_config

ALL_NOTEBOOKS = sorted((ROOT / "solutions").rglob("*.ipynb")) + sorted((ROOT / "notebooks").rglob("*.ipynb"))


def _meta(cell):
    return cell.metadata.get("nbgrader", {})


def test_there_is_a_notebook_per_chapter_folder():
    editions = {folder for folder in EDITIONS.values() if folder}
    for folder in ("solutions", "notebooks", *(f"notebooks/{e}" for e in editions)):
        for d in (ROOT / folder).iterdir():
            if d.is_dir() and not (folder == "notebooks" and d.name in editions):
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
    assert badges(chapter) in header.source, "the Colab/ModelScope links must match triton_course.links"
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert first_code.source == SETUP_CELL, "the first code cell must be triton_course.bootstrap.SETUP_CELL"
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
def test_every_main_path_is_at_most_1800_words_in_order_before_its_appendix(chapter):
    """The markdown before "## Appendix" (the main path) is at most 1,800 words and keeps the chapter's order:
    goals, background, TODO, self-check, experiment, (benchmark,) takeaways. GPU detail lives in the appendix,
    which names the records it quotes."""
    cells, appendix = main_path(chapter)
    assert appendix, f"{chapter} has no '## Appendix' cell"
    main = "\n".join(cells)
    assert len(main.split()) <= 1800, f"{chapter}'s main path has {len(main.split())} words"
    order = ["**Goals.**", "## Background", "## TODO", "## Self-check", "## Experiment"]
    order += ["## Benchmark"] if chapter >= "03" else []
    positions = [main.find(heading) for heading in order + ["## What to take away"]]
    assert -1 not in positions and positions == sorted(positions), dict(zip(order + ["takeaways"], positions))
    assert "/records/" in "\n".join(appendix), f"{chapter}'s appendix names no record"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_appendix_is_at_most_1000_words(chapter):
    """An appendix teaches: at most 1,000 words of what a student learns from. Dated changes, failed designs and
    timing-method debates live in the lab's notes (lab/notes/<id>.md), not in the notebook."""
    _, appendix = main_path(chapter)
    words = len("\n".join(appendix).split())
    assert words <= 1000, f"{chapter}'s appendix has {words} words (at most 1,000; the rest belongs in lab/notes/)"


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


def test_notebooks_readme_and_docs_agree_with_course_toml():
    """`python -m grader config --check`: links, setup cells, setup blocks, repository URLs, version."""
    from grader.course_config import reconcile

    found = reconcile(ROOT, write=False)
    assert not found, "\n".join(f"{d.path.relative_to(ROOT)}: {d.what}" for d in found) + \
        "\nrun `python -m grader config --apply` (then `python -m grader release`)"


def test_a_fork_changes_course_toml_and_config_apply_rewrites_the_rest(tmp_path):
    """A fork edits course.toml only: `config --apply` rewrites links, setup cells, docs and the version, and a
    second run (or --check) finds nothing left."""
    chapter = CHAPTERS[0]
    for folder in ("solutions", "notebooks"):
        shutil.copytree(ROOT / folder / chapter, tmp_path / folder / chapter)
    (tmp_path / "docs" / "zh").mkdir(parents=True)
    for name in ("README.md", "docs/students.md", "docs/zh/README.md", "docs/zh/students.md", "pyproject.toml",
                 "course.toml"):
        shutil.copy2(ROOT / name, tmp_path / name)
    toml = (tmp_path / "course.toml").read_text()
    for old, new in (('url = "https://github.com/triton-course/triton-kernels-course"',
                      'url = "https://github.com/a-fork/kernels-course"'), ('branch = "main"', 'branch = "spring"'),
                     ('student = "triton-kernels-course"', 'student = "fork-kernels"'), ('version = "', 'version = "7.')):
        assert old in toml, f"course.toml no longer has {old!r}: update this test"
        toml = toml.replace(old, new)
    (tmp_path / "course.toml").write_text(toml)
    fork = read_config(tmp_path / "course.toml")

    cli = [sys.executable, "-m", "grader", "config", "--root", str(tmp_path)]
    check = subprocess.run([*cli, "--check"], capture_output=True, text=True, cwd=ROOT)
    assert check.returncode == 1 and "the setup cell" in check.stdout and "the links of" in check.stdout, check.stdout
    apply = subprocess.run([*cli, "--apply"], capture_output=True, text=True, cwd=ROOT)
    assert apply.returncode == 0, apply.stdout + apply.stderr
    for folder in ("solutions", "notebooks"):
        nb = nbformat.read(tmp_path / folder / chapter / f"{chapter}.ipynb", as_version=4)
        assert badges(chapter, fork) in nb.cells[0].source and "a-fork/kernels-course/blob/spring/" in nb.cells[0].source
        setup = next(c for c in nb.cells if c.cell_type == "code").source
        assert setup == setup_cell(fork) and "'fork-kernels'" in setup and f"'{fork.version}'" in setup
    readme = (tmp_path / "README.md").read_text()
    assert badges(chapter, fork) in readme and "pip install fork-kernels==7." in readme
    for guide in ("docs/students.md", "docs/zh/students.md"):   # both editions of the students' guide
        students = (tmp_path / guide).read_text()
        assert "triton-course/triton-kernels-course" not in students and "a-fork/kernels-course" in students
        assert "pip install fork-kernels==7." in students, guide
    assert badges(chapter, fork, "zh_CN") in (tmp_path / "docs" / "zh" / "README.md").read_text()
    assert badges(chapter, fork, "zh_CN") in readme   # the README links both editions
    assert f'version = "{fork.version}"' in (tmp_path / "pyproject.toml").read_text()
    again = subprocess.run([*cli, "--check"], capture_output=True, text=True, cwd=ROOT)
    assert again.returncode == 0, again.stdout


def test_config_names_a_broken_course_toml_without_a_traceback(tmp_path):
    (tmp_path / "course.toml").write_text('[course]\nversion = "1.0"\n')
    proc = subprocess.run([sys.executable, "-m", "grader", "config", "--check", "--root", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and "[repository] url" in proc.stdout and "Traceback" not in proc.stderr


#: A model answer is code a student can read as the answer to the exercise (CONTRIBUTING.md).
MAX_SOLUTION_LINES = 150


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_solution_is_a_model_answer(chapter):
    """At most MAX_SOLUTION_LINES lines inside the chapter's ### BEGIN/END SOLUTION regions, and nothing in the
    notebook asks whether the grader is recording the call (the course's fastest kernels live in
    triton_course.matmul_fast and attention_fast, outside the exercise)."""
    nb = nbformat.read(ROOT / "solutions" / chapter / f"{chapter}.ipynb", as_version=4)
    lines, inside = 0, False
    for cell in nb.cells:
        for line in cell.source.splitlines():
            if "### BEGIN SOLUTION" in line:
                inside = True
            elif "### END SOLUTION" in line:
                inside = False
            elif inside:
                lines += 1
    assert lines <= MAX_SOLUTION_LINES, f"{chapter}: {lines} lines of solution"
    assert "recording_launches" not in "\n".join(c.source for c in nb.cells if c.cell_type == "code")
