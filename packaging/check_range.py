"""Run the chapters' hidden tests with another Triton and NumPy than the project's environment has.

    python packaging/check_range.py TRITON:NUMPY [TRITON:NUMPY ...] [--venvs DIR]

For each pair it makes (once) a virtual environment under ``--venvs`` (default ``.venv/range/``) holding
only ``triton==TRITON`` and ``numpy==NUMPY``, installed by pip from the configured index, and seeing
everything else (torch, nbgrader, pytest...) in the running interpreter's site-packages through a
``.pth`` file. There it runs ``pytest -k range_check tests/test_packaging.py`` on the CPU: every
chapter's reference answer against its hidden tests, through the grader's judge, and the loop that
Triton 3.5/3.6 with NumPy 2.4 used to break. ``make test-range`` runs the pairs of the Makefile
(the oldest Triton of the range, and requirements/gpu.txt's pairing); ``make test`` runs the newest
with the whole suite. Exit status: the number of pairs that failed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAIR = re.compile(r"^(\d+(?:\.\d+)+):(\d+(?:\.\d+)+)$")


def range_venv(venvs: Path, triton: str, numpy: str) -> Path:
    """The virtual environment of one pair, made if missing; returns its python."""
    where = venvs / f"triton-{triton}-numpy-{numpy}"
    python = where / "bin" / "python"
    stamp = where / ".installed"
    if stamp.exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    # the project's packages after the pair's own, as a site directory: its own .pth files run too, the
    # editable install's among them (it maps the helpers in utils/ to their import name, triton_course)
    (Path(purelib) / "project_packages.pth").write_text(
        f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--disable-pip-version-check",
                    f"triton=={triton}", f"numpy=={numpy}"], check=True)
    stamp.touch()
    return python


def check_pair(venvs: Path, triton: str, numpy: str, pytest_args: list[str]) -> bool:
    start = time.perf_counter()
    python = range_venv(venvs, triton, numpy)
    made = time.perf_counter() - start
    versions = subprocess.run([str(python), "-c", "import triton, numpy; print(triton.__version__, numpy.__version__)"],
                              capture_output=True, text=True, check=True).stdout.split()
    if versions != [triton, numpy]:
        print(f"{python} has triton {versions[0]} and numpy {versions[1]}, not {triton} and {numpy}")
        return False
    proc = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "range_check",
                           "tests/test_packaging.py", *pytest_args], cwd=ROOT,
                          env={**os.environ, "COURSE_RANGE_CHECK": "1"})
    print(f"triton {triton} + numpy {numpy}: {'passed' if proc.returncode == 0 else 'FAILED'} "
          f"(environment {made:.0f} s, tests {time.perf_counter() - start - made:.0f} s)", flush=True)
    return proc.returncode == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pairs", nargs="+", metavar="TRITON:NUMPY")
    parser.add_argument("--venvs", type=Path, default=ROOT / ".venv" / "range")
    parser.add_argument("--pytest-args", default="", help="more pytest arguments, one string (e.g. '-n 2')")
    args = parser.parse_args(argv)
    bad = [p for p in args.pairs if not PAIR.match(p)]
    if bad:
        parser.error(f"expected TRITON:NUMPY versions such as 3.5.1:2.4.6, got {' '.join(bad)}")
    failed = 0
    for pair in args.pairs:
        triton, numpy = PAIR.match(pair).groups()
        failed += not check_pair(args.venvs, triton, numpy, args.pytest_args.split())
    return failed


if __name__ == "__main__":
    sys.exit(main())
