"""pytest's set-up for the chapters' own tests (``solutions/<id>/test_<id>.py``): the suite's, from tests/conftest.py
(the repository root on ``sys.path``, Triton's interpreter chosen before any test imports Triton)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.conftest import *  # noqa: E402,F401,F403
