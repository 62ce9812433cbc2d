"""Run one nbgrader command in a course directory, in a child process.

A child process keeps nbgrader's global state (and any damage a submission does to the process that
runs it) away from the grader itself, and lets us put a wall-clock limit on a whole submission.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from grader.course import REPO_ROOT

CONFIG_FILE = '''from grader.settings import configure
configure(get_config())  # noqa: F821
'''


#: ``python -m nbgrader``, after which the process ends at once: the gradebook is committed and the notebooks are
#: written by then, and Python's own teardown of PyTorch, Triton and Jupyter's modules cost about 1 s of every
#: submission's autograde on the CPU (tests/test_autograde.py::test_an_nbgrader_command_ends_when_its_work_is_done).
#: Inline, not a module of the grader's: importing the grader package first would cost generate_assignment 1 s more.
NBGRADER_THEN_EXIT = """
import os, sys
from nbgrader.apps.nbgraderapp import main
code = 0
try:
    main()
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
except BaseException:
    import traceback
    traceback.print_exc()
    code = 1
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
"""


@dataclass(frozen=True)
class CommandResult:
    returncode: int | None  # None: killed at the time limit
    log: str


def prepare_course_dir(root: Path) -> None:
    """Make ``root`` an nbgrader course directory with the course's settings."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "nbgrader_config.py").write_text(CONFIG_FILE)


def run_nbgrader(root: Path, *args: str, timeout_s: float | None = None,
                 env: dict[str, str] | None = None) -> CommandResult:
    """``nbgrader ARGS`` with ``root`` as the course directory."""
    full_env = dict(os.environ if env is None else env)
    # nbgrader runs the `alembic` script of its own environment to set up a gradebook
    full_env["PATH"] = os.pathsep.join(p for p in (str(Path(sys.executable).parent), full_env.get("PATH")) if p)
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), full_env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-c", NBGRADER_THEN_EXIT, *args, f"--CourseDirectory.root={root}"]
    setpriv = shutil.which("setpriv")
    if setpriv:  # dies with the grader that started it (a Ray worker killed mid-job leaves no grading behind)
        cmd = [setpriv, "--pdeathsig", "KILL", "--", *cmd]
    try:
        proc = subprocess.run(cmd, cwd=root, env=full_env, capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"") + (exc.stderr or b"") if isinstance(exc.stdout, bytes) else \
            (exc.stdout or "") + (exc.stderr or "")
        return CommandResult(None, out if isinstance(out, str) else out.decode(errors="replace"))
    return CommandResult(proc.returncode, proc.stdout + proc.stderr)

