"""Regenerate the student notebooks (``notebooks/``) from the solution notebooks (``solutions/``), in every edition.

nbgrader's ``generate_assignment`` does the work: it replaces every ``### BEGIN SOLUTION`` region
with the stub, removes ``### BEGIN HIDDEN TESTS`` regions, clears outputs and records checksums.
We run it in a throw-away course directory, so releasing never touches a gradebook, then write the
result in nbformat's canonical form. Each other edition (``notebooks/zh/``) is the English student notebook
with its prose translated (:func:`grader.translations.translated_notebook`): the same code, grade ids and
checksums of test cells. :func:`drift` regenerates into a temporary folder and lists every file that differs
from what is committed: the test suite fails on any drift.
"""

from __future__ import annotations

import filecmp
import shutil
import tempfile
from pathlib import Path

import nbformat

from grader.course import NOTEBOOKS, assignments, copy_source_notebook
from grader.nbgrader_cli import prepare_course_dir, run_nbgrader
from grader.translations import TRANSLATED, catalogue_path, translated_notebook


class ReleaseError(RuntimeError):
    """nbgrader refused to generate a student notebook; the message carries its log."""


def normalise(path: Path) -> None:
    """Rewrite a notebook without outputs or execution counts, in nbformat's canonical JSON."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    nbformat.write(nb, path)


def generate(ids: list[str] | None = None, dest: Path = NOTEBOOKS) -> list[Path]:
    """Generate the student version of each assignment into ``dest/<id>/``; return the files written."""
    ids = ids or assignments()
    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="course-release-") as tmp:
        root = Path(tmp)
        prepare_course_dir(root)
        for a in ids:
            copy_source_notebook(a, root)   # the notebook alone: the chapter's tests and answer files stay
            result = run_nbgrader(root, "generate_assignment", a, "--force", "--no-db")
            if result.returncode != 0:
                raise ReleaseError(f"nbgrader generate_assignment {a} failed:\n{result.log}")
            target = dest / a
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(root / "notebooks" / a, target)
            for nb in sorted(target.glob("*.ipynb")):
                normalise(nb)
            written += sorted(p for p in target.rglob("*") if p.is_file())
            written += _translate(a, target, dest)
    return written


def edition_folder(dest: Path, language: str) -> Path:
    """Where the notebooks of ``language``'s edition go under ``dest`` (``dest/zh``)."""
    return dest / TRANSLATED[language]


def _translate(assignment: str, english: Path, dest: Path) -> list[Path]:
    """Write each other edition of the English student notebook(s) in ``english``; return the files written."""
    written = []
    for language in TRANSLATED:
        target = edition_folder(dest, language) / assignment
        if target.exists():
            shutil.rmtree(target)
        if not catalogue_path(assignment, language).exists():
            continue   # a chapter no one has begun to translate has no edition yet (the translation check says so)
        target.mkdir(parents=True)
        for path in sorted(english.glob("*.ipynb")):
            nb = translated_notebook(assignment, language, nbformat.read(path, as_version=4))
            nbformat.write(nb, target / path.name)
            written.append(target / path.name)
    return written


def _files(folder: Path) -> set[Path]:
    return {p.relative_to(folder) for p in folder.rglob("*") if p.is_file()} if folder.exists() else set()


def drift(ids: list[str] | None = None, committed: Path = NOTEBOOKS) -> list[str]:
    """Files of ``committed`` (``notebooks/``) that differ from a fresh generation: missing, changed, extra."""
    ids = ids or assignments()
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="course-drift-") as tmp:
        fresh = Path(tmp)
        generate(ids, fresh)
        folders = [Path(a) for a in ids] + [Path(TRANSLATED[lang]) / a for lang in TRANSLATED for a in ids]
        for folder in folders:
            made = {folder / p for p in _files(fresh / folder)}
            have = {folder / p for p in _files(committed / folder)}
            problems += [f"missing: notebooks/{p}" for p in sorted(made - have)]
            problems += [f"not generated from solutions/: notebooks/{p}" for p in sorted(have - made)]
            problems += [f"differs from the generator's output: notebooks/{p}" for p in sorted(made & have)
                         if not filecmp.cmp(fresh / p, committed / p, shallow=False)]
    return problems
