"""Where the course's files are."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from triton_course.i18n import SOURCE_LANGUAGE
from triton_course.links import CONFIG_NAME, notebook_path, read_config
from triton_course.links import CHAPTERS as PACKAGED_CHAPTERS


def course_root() -> Path:
    """The course directory: ``$COURSE_ROOT`` if set; else the checkout this package lies in; else (the
    grader installed from its wheel) the working folder, an instructor's repository holding ``solutions/``."""
    if os.environ.get("COURSE_ROOT"):
        return Path(os.environ["COURSE_ROOT"]).resolve()
    checkout = Path(__file__).resolve().parent.parent
    return checkout if (checkout / "solutions").is_dir() else Path.cwd().resolve()


REPO_ROOT = course_root()
SOLUTIONS = REPO_ROOT / "solutions"
NOTEBOOKS = REPO_ROOT / "notebooks"
#: The chapters of this course directory: its own ``course.toml``'s ``[chapters]`` (a course that added one is
#: graded with it, whatever the installed helpers list), else the list the helpers were installed with.
CHAPTERS: dict[str, str] = (read_config(REPO_ROOT / CONFIG_NAME).chapters if (REPO_ROOT / CONFIG_NAME).is_file()
                            else PACKAGED_CHAPTERS)

#: What a chapter folder ``solutions/<id>/`` holds besides its source notebook ``<id>.ipynb`` (which alone is
#: released to students and copied into a grading course directory):
#:
#: * ``test_<id>.py``: the chapter's tests (pytest collects them from ``solutions/`` as from ``tests/``);
#: * ``submissions/examples/<student>.py``: answer files, a correct one (``ada_correct``) and typical mistakes;
#: * ``submissions/attacks/<student>.py``: the trust corpus, one submission per known way to earn unearned points;
#: * ``measure.py``: what ``python tests/gpu/measure.py <id>`` measures on a GPU;
#: * ``records/*.json``: the figures measured on a GPU that the chapter quotes, each with its command.
EXAMPLES, ATTACKS = "examples", "attacks"


def assignments() -> list[str]:
    """Chapters that have a solution notebook, in course order (``course.toml``'s ``[chapters]``)."""
    return [a for a in CHAPTERS if solution_notebook(a).exists()]


def chapter_folder(assignment: str) -> Path:
    """``solutions/<id>/``: everything of one chapter."""
    return SOLUTIONS / assignment


def solution_notebook(assignment: str) -> Path:
    return chapter_folder(assignment) / f"{assignment}.ipynb"


def student_notebook(assignment: str, language: str = SOURCE_LANGUAGE) -> Path:
    """The released notebook of ``assignment`` in the edition of ``language`` (``notebooks/zh/...`` for Chinese)."""
    return REPO_ROOT / notebook_path(assignment, language)


def answers_folder(assignment: str, kind: str = EXAMPLES) -> Path:
    """The folder of a chapter's answer files: ``kind`` is ``"examples"`` (one mistake each, and a correct one)
    or ``"attacks"`` (submissions that try to earn points they did not earn)."""
    if kind not in (EXAMPLES, ATTACKS):
        raise ValueError(f"answer files are {EXAMPLES!r} or {ATTACKS!r}, not {kind!r}")
    return chapter_folder(assignment) / "submissions" / kind


def example_submissions(assignment: str) -> Path:
    """The folder of a chapter's example answer files."""
    return answers_folder(assignment, EXAMPLES)


def attack_submissions(assignment: str) -> Path:
    """The folder of a chapter's attack corpus."""
    return answers_folder(assignment, ATTACKS)


def records_folder(assignment: str) -> Path:
    """``solutions/<id>/records/``: the GPU measurements a chapter quotes."""
    return chapter_folder(assignment) / "records"


def copy_source_notebook(assignment: str, course_dir: Path) -> Path:
    """Copy the chapter's source notebook, and nothing else of its folder (tests, answer files, records), to
    ``course_dir/solutions/<id>/``, where nbgrader generates or grades from it; return the copy."""
    dest = course_dir / "solutions" / assignment
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(solution_notebook(assignment), dest / solution_notebook(assignment).name)
    return dest / solution_notebook(assignment).name
