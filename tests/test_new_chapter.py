"""Adding a chapter is one folder plus one line: in a copy of the course, ``python -m grader new-chapter`` makes a
tenth chapter from the template; then the course's own commands release it, autograde its example submissions
in the sandbox, run its notebook through nbval and run its own tests, all without a GPU, and the rest of the
course (its registry, README, records) takes it in without a line of code changed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tests.conftest import CHAPTERS, ROOT

pytestmark = pytest.mark.notebook

NEW = "10_relu"


def _copy_course(dest: Path) -> None:
    """The committed files of the course (``git ls-files``; the working tree's version of each)."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split("\n")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file() and not src.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def _run(course: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """A command in the copy, which imports the copy's ``grader`` (the helpers are the checkout's: the template
    needs nothing new of them)."""
    env = dict(os.environ, PYTHONPATH=str(course), MPLBACKEND="Agg", COURSE_ROOT=str(course))
    proc = subprocess.run([sys.executable, *args], cwd=course, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(args)}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    course = tmp_path_factory.mktemp("course")
    _copy_course(course)
    _run(course, "-m", "grader", "new-chapter", NEW, "ReLU")
    _run(course, "-m", "grader", "config", "--apply")
    _run(course, "-m", "grader", "release", NEW)
    return course


def test_the_new_chapter_is_one_folder_and_one_line(course):
    toml = (course / "course.toml").read_text().splitlines()
    assert toml == [*(ROOT / "course.toml").read_text().splitlines(), f'{NEW} = "ReLU"'], "one line added"
    folder = course / "solutions" / NEW
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == [
        f"{NEW}.ipynb", "measure.py", "submissions/attacks/fay_torch_result.py",
        "submissions/examples/ada_correct.py", "submissions/examples/ben_untouched.py", f"test_{NEW}.py"]
    readme = (course / "README.md").read_text()
    assert f"[ReLU](notebooks/{NEW}/{NEW}.ipynb)" in readme, "config --apply adds the chapter's README row"
    assert f"[中文版](notebooks/zh/{NEW}/{NEW}.ipynb)" in readme, "the row links the Chinese edition too"
    zh_readme = (course / "docs" / "zh" / "README.md").read_text()
    assert f"[ReLU](../../notebooks/zh/{NEW}/{NEW}.ipynb)" in zh_readme, "and the Chinese README gets a row"
    assert sorted(p.name for p in (course / "notebooks" / NEW).iterdir()) == [f"{NEW}.ipynb"], \
        "only the notebook is released"
    listed = _run(course, "-c", "from grader.course import assignments; print(' '.join(assignments()))").stdout
    assert listed.split() == [*CHAPTERS, NEW]


def test_its_example_submissions_are_autograded_in_the_sandbox(course, tmp_path):
    _run(course, "-m", "grader", "demo", "--assignment", NEW, "--out", str(tmp_path / "out"), "--workers", "2")
    grades = json.loads((tmp_path / "out" / "grades.json").read_text())
    by = {(g["student"], g["grade_id"]): g for g in grades}
    ada, ben = by[("ada_correct", "test_relu_correct")], by[("ben_untouched", "test_relu_correct")]
    assert ada["points"] == ada["max_points"] == 2 and ben["points"] == 0, (ada, ben)
    assert by[("ada_correct", "test_relu_bandwidth")]["status"] == "not_graded"


def test_its_notebook_passes_nbval_and_its_tests_pass(course):
    nb = course / "solutions" / NEW / f"{NEW}.ipynb"
    out = _run(course, "-m", "pytest", "--nbval-lax", "-p", "no:cacheprovider", "-q", str(nb)).stdout
    assert " passed" in out and " failed" not in out
    out = _run(course, "-m", "pytest", "-q", "-n0", "-p", "no:cacheprovider", str(nb.parent)).stdout
    assert "3 passed" in out, out[-2000:]


def test_a_chapter_with_no_gpu_record_says_so(course):
    said = _run(course, "-c", f"from triton_course.gpus import recorded; print(recorded('{NEW}')[1])").stdout
    assert "no recorded figures" in said and f"solutions/{NEW}/records/{NEW}.json" in said


def test_the_template_is_a_chapter_in_the_course_shape():
    """What CONTRIBUTING.md asks of every chapter, held against the template itself (no copy needed)."""
    from grader.new_chapter import chapter_notebook

    nb = chapter_notebook(NEW, "ReLU")
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]
    assert ids[:2] == ["header", "setup"] and "self_check" in ids
    assert nb.cells[ids.index("judge_defs")].metadata["tags"] == ["judge"], "the hidden tests' definitions"
    tests = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert all(c.source.startswith("### BEGIN HIDDEN TESTS") for c in tests)
    assert any("at_gpu_sizes(" in c.source for c in tests) and any("bandwidth_points(" in c.source for c in tests)
    nbformat.validate(nb)
