"""PEP 517 backend of this folder's wheel; the work is in ../course_packaging.py (shared by both wheels)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from course_packaging import backend  # noqa: E402

globals().update(backend(Path(__file__).resolve().parent.name))
