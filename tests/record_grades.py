"""Grade every example submission of every chapter on the CPU and write one JSON of the outcomes.

    .venv/bin/python tests/record_grades.py --out grades.json [--chapters 03_vector_add ...] [--jobs 2]

Each submission is graded by ``tests.conftest.run_with_answers`` (the judge in a process of its own, killed
after ``--timeout`` seconds: an infinite loop of the corpus is cut there), and each hidden test's outcome is reduced to what a grade depends on:
``passed``, ``partial: <score>``, the exception's class (``CheckFailed``, ``AssertionError`` ...), ``crashed``,
or, for the whole submission, ``timeout`` / ``died``. Messages are left out: they quote random inputs.

Two such files, written before and after a change that should not change a grade (a move of files, say),
must be equal: ``tests/test_grades_unchanged.py`` holds them to each other.

The attack corpus is not graded here: it runs a submission's code in this machine's processes, without the
sandbox, and some attacks write to the checkout, kill processes or loop forever. The attacks are graded in the
sandbox by the suite (tests/test_grader_safety.py, the chapters' tests), whose verdicts the change must keep.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

_CHILD = """
import json, sys
from tests.conftest import run_with_answers
chapter, student, kind = sys.argv[1], sys.argv[2], sys.argv[3]
print("OUTCOMES " + json.dumps(run_with_answers(chapter, student, kind)))
"""


def reduce_outcome(outcome: str) -> str:
    """The part of one hidden test's outcome that a grade depends on."""
    if outcome == "passed":
        return "passed"
    if outcome.startswith("partial: "):
        return outcome.split(" (", 1)[0]
    if outcome.startswith("crashed"):
        return "crashed"
    return outcome.split(":", 1)[0]


def grade_one(chapter: str, student: str, kind: str, timeout_s: float) -> dict[str, str] | str:
    """The reduced outcome of each hidden test for one submission, or "timeout"/"died" for the whole of it."""
    try:
        done = subprocess.run([sys.executable, "-c", _CHILD, chapter, student, kind], cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return "timeout"
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("OUTCOMES ")), None)
    if line is None:
        return "died"
    return {gid: reduce_outcome(o) for gid, o in sorted(json.loads(line[len("OUTCOMES "):]).items())}


def submissions(chapters: list[str]) -> list[tuple[str, str, str]]:
    """(chapter, "examples", student) of every example answer file."""
    from grader.course import EXAMPLES, answers_folder

    return [(chapter, EXAMPLES, f.stem) for chapter in chapters for f in sorted(answers_folder(chapter).glob("*.py"))]


def main() -> int:
    from grader.course import assignments

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--chapters", nargs="*", default=None)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=150)
    args = ap.parse_args()
    subs = submissions(args.chapters or assignments())
    with ThreadPoolExecutor(args.jobs) as pool:
        graded = list(pool.map(lambda s: grade_one(s[0], s[2], s[1], args.timeout), subs))
    result: dict[str, dict[str, dict[str, object]]] = {}
    for (chapter, kind, student), outcome in zip(subs, graded):
        result.setdefault(chapter, {}).setdefault(kind, {})[student] = outcome
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(f"{len(subs)} submissions graded into {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
