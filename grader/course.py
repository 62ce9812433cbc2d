"""Where the course's files are."""

from __future__ import annotations

from pathlib import Path

from utils.links import CHAPTERS

REPO_ROOT = Path(__file__).resolve().parent.parent
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
