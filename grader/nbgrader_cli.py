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
    cmd = [sys.executable, "-m", "nbgrader", *args, f"--CourseDirectory.root={root}"]
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
