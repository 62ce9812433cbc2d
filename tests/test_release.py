"""notebooks/ is exactly what the generator makes from solutions/, and the drift check can fail."""

from __future__ import annotations

import shutil

import nbformat

from grader import release
from grader.course import NOTEBOOKS
from tests.conftest import CHAPTERS


def test_committed_student_notebooks_match_the_generator():
    problems = release.drift(CHAPTERS)
    assert not problems, "run `python -m grader release`:\n" + "\n".join(problems)


def test_drift_is_detected(tmp_path):
    chapter = CHAPTERS[0]
    committed = tmp_path / "notebooks"
    shutil.copytree(NOTEBOOKS, committed)
    path = committed / chapter / f"{chapter}.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells[0].source += "\nedited by hand"
    nbformat.write(nb, path)
    (committed / chapter / "stray.ipynb").write_text(path.read_text())
    zh = committed / "zh" / chapter / f"{chapter}.ipynb"   # the Chinese edition, edited by hand
    nb = nbformat.read(zh, as_version=4)
    nb.cells[3].source += "\n手工改动"
    nbformat.write(nb, zh)
    problems = release.drift([chapter], committed=committed)
    assert any("differs from the generator" in p and f"notebooks/{chapter}/" in p for p in problems)
    assert any("differs from the generator" in p and f"notebooks/zh/{chapter}/" in p for p in problems)
    assert any("not generated from solutions/" in p and "stray.ipynb" in p for p in problems)


def test_generate_clears_solutions(tmp_path):
    chapter = CHAPTERS[0]
    written = [p for p in release.generate([chapter], tmp_path) if p.suffix == ".ipynb"]
    assert written == [tmp_path / chapter / f"{chapter}.ipynb", tmp_path / "zh" / chapter / f"{chapter}.ipynb"]
    for path in written:   # both editions
        text = path.read_text()
        assert "### BEGIN SOLUTION" not in text and "### BEGIN HIDDEN TESTS" not in text and "NotImplementedError" in text
