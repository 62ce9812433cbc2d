"""One submission as a picklable job, and the function that grades it in any worker (the local pool of
:mod:`grader.autograde` or a Ray task of :mod:`grader.cluster`).

:class:`GradingJob` carries everything a worker needs as data; :func:`run_job` copies the grading template and
*only* the submission's notebook into a fresh workspace, repairs stripped nbgrader metadata from the release,
runs real ``nbgrader autograde`` in a child process under a wall-clock limit (with
:class:`grader.execute.CourseExecute`), reads the points from the autograded notebook, cross-checks them with the
gradebook, and generates the feedback HTML with the hidden tests removed. :func:`calibrate_gpus` measures the
copy bandwidth every job of a run is held to; :func:`pack_folder` and :func:`unpack_folder` carry a grading
template to a worker as bytes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from grader.course import REPO_ROOT
from grader.execute import (SANDBOX_DIR_ENV, SANDBOX_ENV, SANDBOX_SLOT_ENV, SEED_FILE_ENV, SOURCE_NOTEBOOK_ENV,
                            STARTED_FILE_ENV)
from grader.judge_calls import Seed
from grader.nbgrader_cli import run_nbgrader
from grader.repair import meta as _meta
from grader.repair import repair_notebook
from grader.results import GradeRecord
from grader.submitted_files import Refused, parse_notebook
from triton_course.grading import NOT_GRADED

#: Wall-clock limit for one submission (all its cells together), seconds.
SUBMISSION_TIMEOUT_S = 30 * 60
#: A kernel that never answered its first message is the machine's fault, not the submission's: try
#: again. The evidence is a file the grader's own process writes when the kernel first answers (before
#: any student code runs), never text that the student's code could print.
KERNEL_START_RETRIES = 2
#: GPU indices as NVML and nvidia-smi number them (PCI order), in calibration, jobs and the GPU lock alike.
GPU_ORDER = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


@dataclass(frozen=True)
class Submission:
    student: str
    assignment: str
    notebook: Path


# ---------------------------------------------------------------------------------------------------
# One submission: a picklable job and the function that runs it (in any worker)
# ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GradingJob:
    """Everything a worker needs to grade one submission (plain data, so any executor can ship it)."""

    student: str
    assignment: str
    notebook: bytes
    template: str                 # path of the GradingTemplate root
    workspace: str                # a fresh folder for this submission (removed first if it exists)
    cells: tuple[tuple[str, float], ...]
    timeout_s: float = SUBMISSION_TIMEOUT_S
    cell_timeout_s: float | None = None
    env: dict[str, str] = field(default_factory=dict)
    feedback: bool = True
    seed_hex: str = ""            # this submission's secret seed (never sent into the sandbox)
    sandboxed: bool = True
    slot: int = 0                 # sandbox slot: its own uid, so limits are not shared


@dataclass
class JobResult:
    records: list[GradeRecord]
    notes: list[str]
    autograded: bytes | None = None
    feedback_html: bytes | None = None
    log: str = ""
    seconds: float | None = None    # wall time of run_job
    meta: dict = field(default_factory=dict)  # sandbox, seed hash: what the grader's own process recorded


def _message_of(cell) -> tuple[str, str]:
    """(kind, text) of a test cell's outputs: "error", "crashed", "timeout", "not_graded" or ""."""
    outputs = cell.get("outputs", [])
    errors = [o for o in outputs if o.get("output_type") == "error"]
    errors.sort(key=lambda o: o.get("ename") not in ("CellTimeoutError", "KernelDied", "NotRun"))
    if errors:
        ename = errors[0].get("ename", "Error")
        if ename == "CellTimeoutError":
            return "timeout", "CellTimeoutError: this test ran past the per-cell time limit (an infinite loop?)"
        kind = "crashed" if ename in ("KernelDied", "NotRun") else "error"
        return kind, f"{ename}: {errors[0].get('evalue', '')}".strip()[:2000]
    for out in outputs:
        if out.get("output_type") == "stream" and out.get("name") == "stderr":
            return "error", "the test wrote to stderr: " + "".join(out.get("text", ""))[:500]
    for out in outputs:
        text = "".join(out.get("text", "")) if out.get("output_type") == "stream" else ""
        if text.lstrip().startswith(NOT_GRADED):
            return "not_graded", text.strip()[:2000]
    return "", ""


def all_cells(job: GradingJob, status: str, message: str, notes: list[str] | None = None) -> JobResult:
    """Every cell of the job with the same status and message, and 0 points."""
    return JobResult([GradeRecord(job.student, job.assignment, g, 0.0, p, status, message) for g, p in job.cells],
                     notes or [])


def run_job(job: GradingJob) -> JobResult:
    """Grade one submission in its own workspace; never raises for anything the submission does."""
    import time

    start = time.perf_counter()
    res = _run_job(job)
    res.seconds = round(time.perf_counter() - start, 2)
    return res


def _run_job(job: GradingJob) -> JobResult:
    try:
        nb = parse_notebook(job.notebook)
    except Refused as exc:  # says what is wrong without quoting the file: it may not be the student's
        return all_cells(job, "error", f"the submission is not a readable notebook: {exc}")
    template = Path(job.template)
    release = nbformat.read(template / "notebooks" / job.assignment / f"{job.assignment}.ipynb", as_version=4)
    notes, looks_right = repair_notebook(nb, release)
    if not looks_right:
        return all_cells(job, "error", f"this notebook has none of the cells of {job.assignment} (wrong assignment, or "
                                  "its nbgrader metadata and cell ids are gone): not graded", notes)
    ws = Path(job.workspace)
    if ws.exists():
        shutil.rmtree(ws)
    shutil.copytree(template, ws, ignore=shutil.ignore_patterns("notebooks"))
    target = ws / "submitted" / job.student / job.assignment / f"{job.assignment}.ipynb"
    target.parent.mkdir(parents=True)
    nbformat.write(nb, target)
    env = dict(job.env)
    env[SOURCE_NOTEBOOK_ENV] = str(ws / "solutions" / job.assignment / f"{job.assignment}.ipynb")
    seed_file = ws / "seed.hex"
    seed_file.write_text(job.seed_hex or Seed().hex())
    os.chmod(seed_file, 0o600)
    env[SEED_FILE_ENV] = str(seed_file)
    env[SANDBOX_ENV] = "1" if job.sandboxed else "0"
    env[SANDBOX_DIR_ENV] = str(ws / "sandbox")
    env[SANDBOX_SLOT_ENV] = str(job.slot)
    started = ws / "kernel-started"
    env[STARTED_FILE_ENV] = str(started)
    extra = [f"--Execute.timeout={int(job.cell_timeout_s)}"] if job.cell_timeout_s else []
    for attempt in range(1 + KERNEL_START_RETRIES):
        started.unlink(missing_ok=True)
        result = run_nbgrader(ws, "autograde", job.assignment, f"--student={job.student}", "--force", *extra,
                              timeout_s=job.timeout_s, env=env)
        if result.returncode == 0 or started.exists():
            break
        notes.append(f"the Jupyter kernel failed to start (attempt {attempt + 1}); graded again")
    graded_nb = ws / "autograded" / job.student / job.assignment / f"{job.assignment}.ipynb"
    if result.returncode is None:
        return JobResult(all_cells(job, "timeout", f"the submission ran past its {job.timeout_s:.0f} s limit").records,
                         notes, log=result.log)
    if result.returncode != 0 or not graded_nb.exists():
        tail = "\n".join(result.log.strip().splitlines()[-15:])
        return JobResult(all_cells(job, "error", f"nbgrader autograde failed:\n{tail}").records, notes, log=result.log)
    res = _read_scores(ws, job, graded_nb, notes)
    res.log = result.log
    res.autograded = graded_nb.read_bytes()
    if job.feedback:
        fb = run_nbgrader(ws, "generate_feedback", job.assignment, f"--student={job.student}", "--force",
                          timeout_s=300, env=env)
        html = ws / "feedback" / job.student / job.assignment / f"{job.assignment}.html"
        if fb.returncode == 0 and html.exists():
            from grader.feedback import leaks
            source = nbformat.read(ws / "solutions" / job.assignment / f"{job.assignment}.ipynb", as_version=4)
            leaked = leaks(html, source)
            if leaked:
                res.notes.append("feedback withheld: it would have shown hidden test code")
            else:
                res.feedback_html = html.read_bytes()
    return res


def _read_scores(ws: Path, job: GradingJob, graded_nb: Path, notes: list[str]) -> JobResult:
    """Points from the autograded notebook's outputs (what nbgrader computed), checked with the gradebook."""
    from nbgrader.api import Gradebook
    from nbgrader.utils import determine_grade

    nb = nbformat.read(graded_nb, as_version=4)
    by_id = {_meta(c).get("grade_id"): c for c in nb.cells if _meta(c).get("grade_id")}
    info = dict(nb.metadata.get("course_grader", {}))
    crashed = info.get("crashed_cells", [])
    if info.get("judge_problems"):
        notes = notes + ["the course's own judge cells failed (a bug of the course, reported to the instructor): "
                         + "; ".join(map(str, info["judge_problems"]))[:500]]
    if not job.sandboxed:
        notes = notes + ["graded UNSANDBOXED (the instructor's --unsandboxed): the submission's code ran with the "
                         "grader's own permissions"]
    if crashed:
        notes = notes + [f"the notebook's Python process crashed in {len(crashed)} cell(s) (cell "
                         f"{', '.join(str(i + 1) for i in crashed)}); the grader restarted it and went on."]
    gb_scores: dict[str, tuple[float | None, float | None]] = {}
    try:
        with Gradebook(f"sqlite:///{ws / 'gradebook.db'}") as gb:
            for g in gb.find_submission_notebook(job.assignment, job.assignment, job.student).grades:
                gb_scores[g.name] = (g.auto_score, g.manual_score)
    except Exception as exc:
        notes = notes + [f"the gradebook could not be read ({type(exc).__name__}); points come from the notebook"]
    records, tampered = [], False
    for gid, max_points in job.cells:
        cell = by_id.get(gid)
        if cell is None:
            records.append(GradeRecord(job.student, job.assignment, gid, 0.0, max_points, "error",
                                       "test cell missing from the graded notebook"))
            continue
        auto, _ = determine_grade(cell)
        points = max(0.0, min(float(auto or 0.0), max_points))
        gb_auto, gb_manual = gb_scores.get(gid, (None, None))
        if gb_scores and (gb_manual is not None or gb_auto is None or abs(float(gb_auto) - points) > 1e-9):
            tampered = True
        kind, message = _message_of(cell)
        if kind == "not_graded":
            status, points = "not_graded", 0.0
        elif kind in ("crashed", "timeout"):
            status, points = ("error" if kind == "crashed" else "timeout"), 0.0
        elif points >= max_points:
            status = "passed"
        elif points > 0:
            status = "partial"
        else:
            status = "failed"
        records.append(GradeRecord(job.student, job.assignment, gid, points, max_points, status, message))
    if tampered:
        notes = notes + ["the gradebook was changed while this notebook ran; the points come from the notebook's "
                         "own test outputs, not from the gradebook"]
        _repair_gradebook(ws, job, {r.grade_id: r.points for r in records})
    return JobResult(records, notes, meta={k: info.get(k) for k in ("sandbox", "seed_sha", "relaunch",
                                                                     "quiet_while_judge_times", "timing",
                                                                     "gpu_lock", "gpu_memory")})


def _repair_gradebook(ws: Path, job: GradingJob, points: dict[str, float]) -> None:
    """Write the notebook's points back into the workspace gradebook (the feedback reads them there)."""
    from nbgrader.api import Gradebook

    try:
        with Gradebook(f"sqlite:///{ws / 'gradebook.db'}") as gb:
            for g in gb.find_submission_notebook(job.assignment, job.assignment, job.student).grades:
                if g.name in points:
                    g.manual_score = None
                    g.auto_score = points[g.name]
            gb.db.commit()
    except Exception:
        pass


def pack_folder(root: Path) -> bytes:
    """A folder as the bytes of a gzipped tar (a grading template, sent to cluster workers as data)."""
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=3) as tar:
        tar.add(root, arcname=".")
    return buf.getvalue()


def unpack_folder(data: bytes, dest: Path) -> Path:
    """Undo :func:`pack_folder` into ``dest`` (only plain files and folders, nothing outside ``dest``)."""
    import io
    import tarfile

    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(dest, filter="data")
    return dest


# ---------------------------------------------------------------------------------------------------
# The copy bandwidth every job of a run is held to
# ---------------------------------------------------------------------------------------------------

#: The environments (TRITON_INTERPRET, CUDA_VISIBLE_DEVICES) in which this process's probe found no GPU: a later
#: run in the same process skips the child (it costs seconds of CPU to import torch), since no GPU appears later.
_NO_GPU_IN: set[tuple[str | None, str | None]] = set()


def calibrate_gpus() -> list[str]:
    """Copy bandwidth (GB/s, as text) of every visible GPU, measured in a child process; [] without one."""
    if os.environ.get("COURSE_COPY_GBPS"):
        return [os.environ["COURSE_COPY_GBPS"]]
    where = (os.environ.get("TRITON_INTERPRET"), os.environ.get("CUDA_VISIBLE_DEVICES"))
    if where in _NO_GPU_IN:
        return []
    code = ("import triton_course, sys, torch\n"
            "if triton_course.current().interpreted: sys.exit(3)\n"
            "from triton_course.bench import copy_bandwidth\n"
            "for i in range(torch.cuda.device_count()):\n"
            "    torch.cuda.set_device(i); copy_bandwidth.cache_clear(); print('GBPS', copy_bandwidth())\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT,
                          stdin=subprocess.DEVNULL, env={**os.environ, **GPU_ORDER})
    if proc.returncode == 3:   # Triton's interpreter: no GPU
        _NO_GPU_IN.add(where)
    if proc.returncode != 0:
        return []
    return [ln.split()[1] for ln in proc.stdout.splitlines() if ln.startswith("GBPS ")]
