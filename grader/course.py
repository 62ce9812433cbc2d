"""Where the course's files are."""

from __future__ import annotations

import os
from pathlib import Path

from triton_course.links import CHAPTERS


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
EXAMPLE_SUBMISSIONS = REPO_ROOT / "tests" / "submissions"


def assignments() -> list[str]:
    """Chapters that have a solution notebook, in course order."""
    return [a for a in CHAPTERS if (SOLUTIONS / a / f"{a}.ipynb").exists()]


def solution_notebook(assignment: str) -> Path:
    return SOLUTIONS / assignment / f"{assignment}.ipynb"


def student_notebook(assignment: str) -> Path:
    return NOTEBOOKS / assignment / f"{assignment}.ipynb"
