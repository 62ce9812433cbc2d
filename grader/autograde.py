"""Grade submissions with nbgrader, each in a course directory of its own.

The flow of one run (:func:`grade_all`):

1. **Snapshot.** Every submitted notebook is read once into memory (bytes and SHA-256). Grading uses
   these bytes, so a submission that rewrites another student's file on disk changes nothing. Nothing is
   followed out of ``SUBMITTED``: a notebook (or student or assignment folder) that is a link, a special or
   oversized file, or no notebook at all scores 0 with a message that quotes none of it
   (:mod:`grader.submitted_files`).
2. **Resume.** A submission whose record file ``DIR/records/<assignment>/<student>.json`` exists with
   the same SHA-256 is not graded again (``force=True`` re-grades). Records are written as each
   submission finishes, so a crash mid-class loses no graded work.
3. **Calibrate.** The GPU copy bandwidth is measured once per GPU (``COURSE_COPY_GBPS``); without a GPU
   every performance check reports ``not_graded``.
4. **Template.** For each assignment, ``nbgrader generate_assignment`` fills a fresh gradebook in a
   private temporary folder (outside ``DIR``), together with the release's trusted import lines (once per
   process and source: :class:`GradingTemplate`).
5. **Grade.** Each submission runs as one picklable :class:`GradingJob`: in a local thread pool
   (``workers`` at a time; with more workers than GPUs, several submissions share a GPU under
   :mod:`grader.gpu_lock`), or on a Ray cluster (:mod:`grader.cluster`: the job carries the notebook, the
   packed template, the seed and the calibrated bandwidth as data). :func:`run_job` copies the template
   and *only* the submission's notebook into a fresh workspace, repairs stripped nbgrader metadata from the release, runs real
   ``nbgrader autograde`` in a child process under a wall-clock limit (with
   :class:`grader.execute.CourseExecute`: trusted state, kernel-death recovery, output cap), reads the
   points from the autograded notebook, cross-checks them with the gradebook, and generates the
   feedback HTML with the hidden tests removed.
6. **Verify.** After each submission the grader checks that the submitted notebooks and the record
   files are unchanged on disk; anything changed is put back and reported.
"""

from __future__ import annotations

import hashlib
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import nbformat

from grader import settings
from grader.course import REPO_ROOT, SOLUTIONS, solution_notebook
from grader.execute import (SANDBOX_DIR_ENV, SANDBOX_ENV, SANDBOX_SLOT_ENV, SEED_FILE_ENV, SOURCE_NOTEBOOK_ENV,
                            STARTED_FILE_ENV, is_test)
from grader.nbgrader_cli import CONFIG_FILE, prepare_course_dir, run_nbgrader
from grader.records import (Protected, load_record, record_path, run_info, run_secret, sha256, sign_record,
                            submission_seed)
from grader.repair import meta as _meta
from grader.repair import repair_notebook
from grader.judge import Seed
from grader.results import GradeRecord
from grader.submitted_files import Refused, parse_notebook, read_submission
from triton_course.grading import NOT_GRADED

if TYPE_CHECKING:
    from grader.cluster import JobResources

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


@dataclass(frozen=True)
class GradedCell:
    grade_id: str
    points: float


def graded_cells(assignment: str) -> list[GradedCell]:
    """The autograded test cells of an assignment, from its source notebook."""
    nb = nbformat.read(solution_notebook(assignment), as_version=4)
    return [GradedCell(c.metadata["nbgrader"]["grade_id"], float(c.metadata["nbgrader"]["points"]))
            for c in nb.cells if is_test(c)]


def _short_name(s: Submission) -> str:
    """A short folder name for a submission's workspace: the sandbox's sockets live under it, and a socket's path
    may hold at most 107 bytes, however long the student id an LMS gives."""
    return hashlib.sha256(f"{s.assignment}/{s.student}".encode()).hexdigest()[:12]


def find_submissions(submitted: Path, assignment: str, student: str | None = None) -> list[Submission]:
    """``SUBMITTED/<student>/<assignment>/*.ipynb``; a lone notebook under another name is accepted.

    A student's folder or assignment folder that is a symbolic link is listed but never looked into: its
    submission is the usual path, which :func:`grader.submitted_files.read_submission` then refuses."""
    subs = []
    for sdir in sorted(p for p in submitted.iterdir() if p.is_symlink() or p.is_dir()):
        if student is not None and sdir.name != student:
            continue
        adir = sdir / assignment
        real_dir = not sdir.is_symlink() and not adir.is_symlink() and adir.is_dir()
        notebooks = sorted(adir.glob("*.ipynb")) if real_dir else []
        named = adir / f"{assignment}.ipynb"
        chosen = named if named in notebooks else (notebooks[0] if len(notebooks) == 1 else None)
        subs.append(Submission(sdir.name, assignment, chosen if chosen else named))
    return subs


class GradingTemplate:
    """A course directory in which the assignment has been generated into a fresh gradebook.

    ``nbgrader generate_assignment`` (and the gradebook it sets up) costs seconds of CPU, so a process makes each
    template once: a later run in the same process (a server grading several classes, the test suite) unpacks the
    one it made, kept packed in this process's memory (nothing of it on disk between runs, also after a kill), as
    long as the solution folder and the nbgrader settings it was made from are byte for byte the same."""

    _made: dict[tuple[str, str], bytes] = {}
    _lock = threading.Lock()

    def __init__(self, root: Path, assignment: str):
        self.root = root
        self.assignment = assignment
        if root.exists():
            shutil.rmtree(root)
        key = (assignment, template_source_hash(assignment))
        with self._lock:
            made = self._made.get(key)
            if made is not None:
                unpack_folder(made, root)
            else:
                self._generate(key)

    def _generate(self, key: tuple[str, str]) -> None:
        root, assignment = self.root, self.assignment
        prepare_course_dir(root)
        shutil.copytree(SOLUTIONS / assignment, root / "solutions" / assignment,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
        result = run_nbgrader(root, "generate_assignment", assignment, "--force")
        if result.returncode != 0:
            raise RuntimeError(f"could not generate {assignment} for grading:\n{result.log}")
        self._made[key] = pack_folder(root)

    @property
    def release(self) -> Path:
        return self.root / "notebooks" / self.assignment / f"{self.assignment}.ipynb"


def template_source_hash(assignment: str) -> str:
    """SHA-256 of what a grading template is made from: the assignment's solution folder (names and bytes), the
    course directory's nbgrader_config.py and the settings module it applies."""
    h = hashlib.sha256(CONFIG_FILE.encode())
    h.update(Path(settings.__file__).read_bytes())
    folder = SOLUTIONS / assignment
    for f in sorted(p for p in folder.rglob("*") if p.is_file()
                    and not {".ipynb_checkpoints", "__pycache__"} & set(p.relative_to(folder).parts)):
        h.update(str(f.relative_to(folder)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


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


def _all(job: GradingJob, status: str, message: str, notes: list[str] | None = None) -> JobResult:
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
        return _all(job, "error", f"the submission is not a readable notebook: {exc}")
    template = Path(job.template)
    release = nbformat.read(template / "notebooks" / job.assignment / f"{job.assignment}.ipynb", as_version=4)
    notes, looks_right = repair_notebook(nb, release)
    if not looks_right:
        return _all(job, "error", f"this notebook has none of the cells of {job.assignment} (wrong assignment, or "
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
        return JobResult(_all(job, "timeout", f"the submission ran past its {job.timeout_s:.0f} s limit").records,
                         notes, log=result.log)
    if result.returncode != 0 or not graded_nb.exists():
        tail = "\n".join(result.log.strip().splitlines()[-15:])
        return JobResult(_all(job, "error", f"nbgrader autograde failed:\n{tail}").records, notes, log=result.log)
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
                                                                     "gpu_lock")})


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


# ---------------------------------------------------------------------------------------------------
# The run: calibration, resume, the pool, verification
# ---------------------------------------------------------------------------------------------------

def calibrate_copy_bandwidth() -> str | None:
    """Measure this machine's GPU copy bandwidth once per run (in a child process); None without a GPU.

    Every submission of the run is then held to the same ceiling (``COURSE_COPY_GBPS``), so a noisy
    calibration cannot favour one student over another.
    """
    per_gpu = calibrate_gpus()
    return per_gpu[0] if per_gpu else None


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


def _with_notes(records: list[GradeRecord], notes: list[str]) -> list[GradeRecord]:
    if not notes:
        return records
    tail = " | ".join(notes)
    return [GradeRecord(r.student, r.assignment, r.grade_id, r.points, r.max_points, r.status,
                        (r.message + ("\n" if r.message else "") + "NOTE: " + tail)[:4000]) for r in records]


def _gpu_slots(n_workers: int, gbps: list[str]) -> queue.Queue | None:
    """One slot per worker: a GPU index and its calibrated bandwidth (None on a CPU-only machine)."""
    if not gbps:
        return None
    q: queue.Queue = queue.Queue()
    for w in range(n_workers):
        q.put((w % len(gbps), gbps[w % len(gbps)]))
    return q


def grade_all(subs: Iterable[Submission], out: Path, *, workers: int = 1,
              on_done: Callable[[Submission, list[GradeRecord]], None] | None = None,
              executor: Executor | None = None, force: bool = False, feedback: bool = True,
              timeout_s: float = SUBMISSION_TIMEOUT_S, cell_timeout_s: float | None = None,
              progress: bool = False, sandboxed: bool = True, ray_address: str | None = None,
              resources: "JobResources | None" = None) -> list[GradeRecord]:
    """Grade every submission and return the records in submission order.

    Where the jobs run: ``ray_address`` set, on that Ray cluster (:mod:`grader.cluster`; ``resources`` is what
    each job asks for); else ``executor``, any :class:`concurrent.futures.Executor` whose workers see this
    machine's files; else a thread pool of ``workers`` threads. With more workers than GPUs, several
    submissions share each GPU: correctness work shared, every timed loop alone (:mod:`grader.gpu_lock`).
    Already graded submissions (same notebook bytes, a record the grader signed) are skipped unless
    ``force``; each result is recorded as it comes back, so an interrupted run resumes where it stopped.
    """
    subs = list(subs)
    if sandboxed and ray_address is None:  # on a cluster each worker checks its own node
        from grader.sandbox import SandboxUnavailable, unavailable_reason

        reason = unavailable_reason()
        if reason:
            raise SandboxUnavailable(f"cannot grade: {reason}")
    out.mkdir(parents=True, exist_ok=True)
    secret = run_secret(out)
    run = run_info(sandboxed)
    protected = Protected()
    snapshot: dict[Submission, bytes | None] = {}
    unread: dict[Submission, tuple[str, str]] = {}  # (status, message) of a notebook that was not read
    for s in subs:
        snapshot[s], unread[s] = _snapshot(s)
        if snapshot[s] is not None:
            protected.remember(s.notebook, snapshot[s])

    results: dict[Submission, list[GradeRecord]] = {}
    todo: list[Submission] = []
    for s in subs:
        data = snapshot[s]
        cells = graded_cells(s.assignment)
        if data is None:
            status, message = unread[s]
            results[s] = [GradeRecord(s.student, s.assignment, c.grade_id, 0.0, c.points, status, message)
                          for c in cells]
            continue
        path = record_path(out, s.assignment, s.student)
        saved = None if force else load_record(path, sha256(data), secret)
        if saved is not None:
            results[s] = _with_notes(*saved)
            protected.remember(path, path.read_bytes())
        else:
            todo.append(s)

    bar = None
    if progress:
        try:
            from tqdm import tqdm
            bar = tqdm(total=len(subs), initial=len(subs) - len(todo), unit="submission", file=sys.stderr,
                       dynamic_ncols=True, smoothing=0.1)
        except ImportError:  # tqdm is in the grader's extras; without it the per-submission lines remain
            bar = None
    for s in subs:
        if s in results and on_done and s not in todo:
            on_done(s, results[s])

    def finish(s: Submission, res: JobResult, keep: bool = True) -> None:
        """One result is back: check the protected files, record it (signed), report it."""
        changed = protected.verify()
        if changed:
            res.notes.append("a notebook graded at the same time as this one changed files outside its "
                             f"workspace ({', '.join(changed[:3])}); the grader put them back")
        if keep:  # a failure of the grader or of the machine is not recorded: a rerun grades it again
            _save_outputs(out, s, res, protected)
            from grader.report import performance_of  # speed figures, kept for `grader report`

            record = {"sha256": sha256(snapshot[s]), "records": [asdict(r) for r in res.records],
                      "notes": res.notes, "seconds": res.seconds, "run": {**run, **res.meta},
                      "performance": performance_of(res.autograded)}
            _write_atomically(record_path(out, s.assignment, s.student), sign_record(record, secret), protected)
        results[s] = _with_notes(res.records, res.notes)
        if on_done:
            on_done(s, results[s])
        if bar is not None:
            pts = sum(r.points for r in res.records)
            bar.set_postfix_str(f"{s.student}: {pts:g}")
            bar.update(1)

    if todo:
        private = Path(tempfile.mkdtemp(prefix="course-grading-"))
        try:
            templates = {a: GradingTemplate(private / "templates" / a, a) for a in sorted({s.assignment for s in todo})}

            def job_for(s: Submission, template: str, env: dict[str, str]) -> GradingJob:
                return GradingJob(s.student, s.assignment, snapshot[s], template,
                                  str(private / "work" / _short_name(s)),
                                  tuple((c.grade_id, c.points) for c in graded_cells(s.assignment)),
                                  timeout_s, cell_timeout_s, env, feedback,
                                  seed_hex=submission_seed(secret, s.assignment, s.student), sandboxed=sandboxed)

            if ray_address is not None:
                from grader.cluster import grade_on_ray

                packed = {a: pack_folder(t.root) for a, t in templates.items()}
                shutil.rmtree(private / "templates")  # the jobs carry them: nothing of this machine's disk is read
                jobs = {s: job_for(s, "", {}) for s in todo}
                for s, res, keep in grade_on_ray(ray_address, jobs, packed, resources):
                    finish(s, res, keep)
            else:
                for t in templates.values():  # shared by every submission: a notebook must not change them
                    for f in t.root.rglob("*"):
                        if f.is_file():
                            protected.remember(f, f.read_bytes())
                for s, res, keep in _grade_locally(todo, job_for, {a: str(t.root) for a, t in templates.items()},
                                                   private, workers, executor):
                    finish(s, res, keep)
        finally:
            shutil.rmtree(private, ignore_errors=True)
    if bar is not None:
        bar.close()
    return [r for s in subs for r in results[s]]


def _snapshot(s: Submission) -> tuple[bytes | None, tuple[str, str]]:
    """The bytes of a submitted notebook, read without following links (:func:`read_submission`) and parsed
    once here (a file that is no notebook needs no template and no worker), or None and the (status, message)
    of its records: "missing", or "error" with why it was refused (quoting none of the file)."""
    try:
        data = read_submission(s.notebook)
    except Refused as exc:
        return None, ("error", f"not graded: {exc}")
    except (FileNotFoundError, NotADirectoryError):
        return None, ("missing", f"no notebook found at {s.notebook}")
    except OSError as exc:
        return None, ("error", f"the notebook at {s.notebook} could not be read ({type(exc).__name__})")
    try:
        parse_notebook(data)
    except Refused as exc:
        return None, ("error", f"not graded: the submission is not a readable notebook: {exc}")
    return data, ("", "")


def _write_atomically(path: Path, data: bytes, protected: Protected) -> None:
    """A record appears whole or not at all: a grader killed while writing leaves no half record."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    protected.remember(path, data)


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


def _grade_locally(todo: list[Submission], job_for: Callable[[Submission, str, dict[str, str]], GradingJob],
                   templates: dict[str, str], private: Path, workers: int,
                   executor: Executor | None) -> Iterator[tuple[Submission, JobResult, bool]]:
    """Grade on this machine: a thread pool (each worker bound to a GPU, several per GPU when there are more
    workers than GPUs), or the caller's executor. Yields (submission, result, keep) as results come back."""
    env = {**os.environ, **GPU_ORDER}
    env.pop("COURSE_COPY_GBPS", None)
    gbps = calibrate_gpus()
    workers = max(1, workers)
    if gbps and executor is None and workers > len(gbps):
        # several submissions per GPU: correctness work shares it; a timed loop holds it alone and the other
        # sandboxes on it are frozen meanwhile (grader.gpu_lock)
        from grader.gpu_lock import LOCK_DIR_ENV

        env[LOCK_DIR_ENV] = str(private / "gpu-locks")
        per_gpu = -(-workers // len(gbps))
        print(f"{workers} workers on {len(gbps)} GPU(s): up to {per_gpu} submissions share a GPU; each timed loop "
              "holds its GPU alone, with the other submissions on it frozen", file=sys.stderr)
    slots = _gpu_slots(workers, gbps) if executor is None else None
    sandbox_slots: queue.Queue = queue.Queue()
    for w in range(workers):
        sandbox_slots.put(w)
    if gbps and executor is not None:
        env["COURSE_COPY_GBPS"] = gbps[0]

    def local(job: GradingJob) -> JobResult:
        slot = sandbox_slots.get()
        try:
            job = replace(job, slot=slot)
            if slots is None:
                return run_job(job)
            gpu, bw = slots.get()
            visible = [d for d in job.env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
            device = visible[gpu] if gpu < len(visible) else str(gpu)
            try:
                return run_job(replace(job, env={**job.env, "CUDA_VISIBLE_DEVICES": device, "COURSE_COPY_GBPS": bw}))
            finally:
                slots.put((gpu, bw))
        finally:
            sandbox_slots.put(slot)

    pool = executor or ThreadPoolExecutor(max_workers=workers)
    try:
        futures: dict[Future, Submission] = {}
        for s in todo:
            job = job_for(s, templates[s.assignment], env)
            futures[pool.submit(local if executor is None else run_job, job)] = s
        for fut in as_completed(futures):
            s = futures[fut]
            try:
                yield s, fut.result(), True
            except Exception as exc:  # a failure of the grader itself: report it, go on, grade it again next run
                yield s, _all(job_for(s, "", {}), "error", f"the grader failed on this submission: {exc!r}"[:1000]), False
    finally:
        if executor is None:
            pool.shutdown(wait=True)


def _save_outputs(out: Path, s: Submission, res: JobResult, protected: Protected) -> None:
    """What an instructor looks at afterwards: the autograded notebook, the log, the feedback."""
    work = out / "work" / s.assignment / s.student
    protected.write(work / "autograde.log", res.log.encode())
    if res.autograded:
        protected.write(work / f"{s.assignment}.ipynb", res.autograded)
    if res.feedback_html:
        protected.write(out / "feedback" / s.student / f"{s.assignment}.html", res.feedback_html)


def grade_one(template: GradingTemplate, sub: Submission, work: Path,
              timeout_s: float = SUBMISSION_TIMEOUT_S, env: dict[str, str] | None = None) -> list[GradeRecord]:
    """Autograde one submission in ``work/<student>`` (no resume, no feedback) and return its records."""
    cells = graded_cells(sub.assignment)
    data, (status, message) = _snapshot(sub)
    if data is None:
        return [GradeRecord(sub.student, sub.assignment, c.grade_id, 0.0, c.points, status, message) for c in cells]
    job = GradingJob(sub.student, sub.assignment, data, str(template.root),
                     str(work / sub.student), tuple((c.grade_id, c.points) for c in cells), timeout_s, None,
                     dict(env or os.environ), False)
    res = run_job(job)
    return _with_notes(res.records, res.notes)
