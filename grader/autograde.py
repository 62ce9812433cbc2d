"""Grade submissions with nbgrader, each in a course directory of its own.

For one run and one assignment, :class:`GradingTemplate` generates the assignment once into a gradebook.
Each submission is then graded in a copy of that template (``DIR/work/<student>``): its own gradebook,
its own child process, a wall-clock limit. One submission that loops, crashes its kernel or scribbles on
its folder cannot touch another's grade. Scores come from the gradebook; the status and message of each
test come from the autograded notebook (the error a test raised, or the NOT GRADED line of a
performance check that had no GPU).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import nbformat

from grader.course import REPO_ROOT, SOLUTIONS, solution_notebook
from grader.nbgrader_cli import prepare_course_dir, run_nbgrader
from grader.results import GradeRecord
from utils.grading import NOT_GRADED

#: Wall-clock limit for one submission (all its cells together), seconds.
SUBMISSION_TIMEOUT_S = 30 * 60


@dataclass(frozen=True)
class Submission:
    student: str
    assignment: str
    notebook: Path


@dataclass(frozen=True)
class GradedCell:
    grade_id: str
    points: float


def graded_cells(assignment: str) -> list[GradedCell]:
    """The autograded test cells of an assignment, from its source notebook."""
    nb = nbformat.read(solution_notebook(assignment), as_version=4)
    return [GradedCell(c.metadata["nbgrader"]["grade_id"], float(c.metadata["nbgrader"]["points"]))
            for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")
            and not c.metadata["nbgrader"].get("solution")]


def find_submissions(submitted: Path, assignment: str, student: str | None = None) -> list[Submission]:
    """``SUBMITTED/<student>/<assignment>/*.ipynb``; a lone notebook under another name is accepted."""
    subs = []
    for sdir in sorted(p for p in submitted.iterdir() if p.is_dir()):
        if student is not None and sdir.name != student:
            continue
        adir = sdir / assignment
        notebooks = sorted(adir.glob("*.ipynb")) if adir.is_dir() else []
        named = adir / f"{assignment}.ipynb"
        chosen = named if named in notebooks else (notebooks[0] if len(notebooks) == 1 else None)
        subs.append(Submission(sdir.name, assignment, chosen if chosen else named))
    return subs


class GradingTemplate:
    """A course directory in which the assignment has been generated into a fresh gradebook."""

    def __init__(self, root: Path, assignment: str):
        self.root = root
        self.assignment = assignment
        if root.exists():
            shutil.rmtree(root)
        prepare_course_dir(root)
        shutil.copytree(SOLUTIONS / assignment, root / "solutions" / assignment,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
        result = run_nbgrader(root, "generate_assignment", assignment, "--force")
        if result.returncode != 0:
            raise RuntimeError(f"could not generate {assignment} for grading:\n{result.log}")


def _message_of(cell) -> tuple[str, str]:
    """(kind, text) of a test cell's outputs: ("error", ...), ("not_graded", ...) or ("", "")."""
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            text = f"{out.get('ename', 'Error')}: {out.get('evalue', '')}".strip()
            return "error", text[:2000]
        if out.get("output_type") == "stream" and out.get("name") == "stderr":
            return "error", "the test wrote to stderr: " + "".join(out.get("text", ""))[:500]
    for out in cell.get("outputs", []):
        text = "".join(out.get("text", "")) if out.get("output_type") == "stream" else ""
        if text.lstrip().startswith(NOT_GRADED):
            return "not_graded", text.strip()[:2000]
    return "", ""


def _records_for_failure(sub: Submission, cells: list[GradedCell], status: str, message: str) -> list[GradeRecord]:
    return [GradeRecord(sub.student, sub.assignment, c.grade_id, 0.0, c.points, status, message) for c in cells]


def grade_one(template: GradingTemplate, sub: Submission, work: Path,
              timeout_s: float = SUBMISSION_TIMEOUT_S, env: dict[str, str] | None = None) -> list[GradeRecord]:
    """Autograde one submission in ``work/<student>`` and return one record per graded cell."""
    cells = graded_cells(sub.assignment)
    if not sub.notebook.exists():
        return _records_for_failure(sub, cells, "missing", f"no notebook found at {sub.notebook}")
    ws = work / sub.student
    if ws.exists():
        shutil.rmtree(ws)
    shutil.copytree(template.root, ws)
    target = ws / "submitted" / sub.student / sub.assignment / f"{sub.assignment}.ipynb"
    target.parent.mkdir(parents=True)
    shutil.copyfile(sub.notebook, target)
    result = run_nbgrader(ws, "autograde", sub.assignment, f"--student={sub.student}", "--force",
                          timeout_s=timeout_s, env=env)
    (ws / "autograde.log").write_text(result.log)
    graded_nb = ws / "autograded" / sub.student / sub.assignment / f"{sub.assignment}.ipynb"
    if result.returncode is None:
        return _records_for_failure(sub, cells, "timeout", f"the submission ran past {timeout_s:.0f} s")
    if result.returncode != 0 or not graded_nb.exists():
        tail = "\n".join(result.log.strip().splitlines()[-15:])
        return _records_for_failure(sub, cells, "error", f"nbgrader autograde failed:\n{tail}")
    return _read_scores(ws, sub, cells, graded_nb)


def _read_scores(ws: Path, sub: Submission, cells: list[GradedCell], graded_nb: Path) -> list[GradeRecord]:
    from nbgrader.api import Gradebook

    nb = nbformat.read(graded_nb, as_version=4)
    by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    records = []
    with Gradebook(f"sqlite:///{ws / 'gradebook.db'}") as gb:
        scores = {g.name: g for g in gb.find_submission_notebook(sub.assignment, sub.assignment, sub.student).grades}
        for c in cells:
            grade = scores.get(c.grade_id)
            points = float(grade.score) if grade is not None and grade.score is not None else 0.0
            kind, message = _message_of(by_id[c.grade_id]) if c.grade_id in by_id else ("error", "test cell missing")
            if kind == "not_graded":
                status = "not_graded"
            elif points >= c.points:
                status = "passed"
            elif points > 0:
                status = "partial"
            else:
                status = "failed"
            records.append(GradeRecord(sub.student, sub.assignment, c.grade_id, points, c.points, status, message))
    return records


def calibrate_copy_bandwidth() -> str | None:
    """Measure this machine's GPU copy bandwidth once per run (in a child process); None without a GPU.

    Every submission of the run is then held to the same ceiling (``COURSE_COPY_GBPS``), so a noisy
    calibration cannot favour one student over another.
    """
    if os.environ.get("COURSE_COPY_GBPS"):
        return os.environ["COURSE_COPY_GBPS"]
    code = ("import utils, sys\n"
            "if utils.current().interpreted: sys.exit(3)\n"
            "from utils.bench import copy_bandwidth; print(copy_bandwidth())")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        return None
    return proc.stdout.strip().splitlines()[-1]


def grade_all(subs: Iterable[Submission], out: Path, *, workers: int = 1,
              on_done: Callable[[Submission, list[GradeRecord]], None] | None = None) -> list[GradeRecord]:
    """Grade every submission (``workers`` at a time) under ``out/work``; records in submission order."""
    subs = list(subs)
    env = dict(os.environ)
    gbps = calibrate_copy_bandwidth()
    if gbps:
        env["COURSE_COPY_GBPS"] = gbps
    templates = {a: GradingTemplate(out / "templates" / a, a) for a in sorted({s.assignment for s in subs})}

    def job(sub: Submission) -> list[GradeRecord]:
        records = grade_one(templates[sub.assignment], sub, out / "work" / sub.assignment, env=env)
        if on_done:
            on_done(sub, records)
        return records

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        results = list(pool.map(job, subs))
    return [r for records in results for r in records]
