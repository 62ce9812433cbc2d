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
