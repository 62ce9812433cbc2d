"""The lab's tests import the course (``tests.conftest``, ``grader``, ``triton_course``) from the repository root."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
