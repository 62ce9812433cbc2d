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
5. **Grade.** Each submission runs as one picklable :class:`grader.jobs.GradingJob`: in a local thread pool
   (``workers`` at a time; with more workers than GPUs, several submissions share a GPU under
   :mod:`grader.gpu_lock`), or on a Ray cluster (:mod:`grader.cluster`: the job carries the notebook, the
   packed template, the seed and the calibrated bandwidth as data). :func:`grader.jobs.run_job` copies the template
   and *only* the submission's notebook into a fresh workspace, repairs stripped nbgrader metadata from the release, runs real
   ``nbgrader autograde`` in a child process under a wall-clock limit (with
   :class:`grader.execute.CourseExecute`: trusted state, kernel-death recovery, output cap), reads the
   points from the autograded notebook, cross-checks them with the gradebook, and generates the
   feedback HTML with the hidden tests removed.
6. **Verify.** After each submission the grader checks that the submitted notebooks and the record
   files are unchanged on disk; anything changed is put back and reported.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import nbformat

from grader import settings
from grader.cluster import JobResources, grade_on_ray
from grader.course import copy_source_notebook, solution_notebook
from grader.execute import is_test
from grader.jobs import (GPU_ORDER, KERNEL_START_RETRIES, SUBMISSION_TIMEOUT_S, GradingJob,  # noqa: F401
                         JobResult, Submission, all_cells, calibrate_gpus, pack_folder, run_job, unpack_folder)
from grader.nbgrader_cli import CONFIG_FILE, prepare_course_dir, run_nbgrader
from grader.records import (Protected, load_record, record_path, run_info, run_secret, sha256, sign_record,
                            submission_seed)
from grader.results import GradeRecord
from grader.submitted_files import Refused, parse_notebook, read_submission

# One submission's job (GradingJob, run_job, the GPU calibration) is grader.jobs, shared with grader.cluster; its
# names are imported here too, where the grader's users have always found them.

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
        copy_source_notebook(assignment, root)   # never the chapter's answer files, tests or records
        result = run_nbgrader(root, "generate_assignment", assignment, "--force")
        if result.returncode != 0:
            raise RuntimeError(f"could not generate {assignment} for grading:\n{result.log}")
        self._made[key] = pack_folder(root)

    @property
    def release(self) -> Path:
        return self.root / "notebooks" / self.assignment / f"{self.assignment}.ipynb"


def template_source_hash(assignment: str) -> str:
    """SHA-256 of what a grading template is made from: the assignment's source notebook (the one file of its
    folder that :func:`grader.course.copy_source_notebook` copies), the course directory's nbgrader_config.py and
    the settings module it applies."""
    h = hashlib.sha256(CONFIG_FILE.encode())
    h.update(Path(settings.__file__).read_bytes())
    h.update(solution_notebook(assignment).read_bytes())
    return h.hexdigest()


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
              resources: JobResources | None = None) -> list[GradeRecord]:
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
    snapshot, results, todo = _resume(subs, out, secret, force, protected)
    bar = _progress_bar(len(subs), len(subs) - len(todo)) if progress else None
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
        job_settings = dict(timeout_s=timeout_s, cell_timeout_s=cell_timeout_s, feedback=feedback, sandboxed=sandboxed)
        with contextlib.closing(_graded(todo, snapshot, secret, protected, job_settings, ray_address, resources,
                                        workers, executor)) as graded:
            for s, res, keep in graded:
                finish(s, res, keep)
    if bar is not None:
        bar.close()
    return [r for s in subs for r in results[s]]


def _resume(subs: list[Submission], out: Path, secret: bytes, force: bool, protected: Protected
            ) -> tuple[dict[Submission, bytes | None], dict[Submission, list[GradeRecord]], list[Submission]]:
    """(the bytes of each submitted notebook, or None where it could not be read; the records of the submissions
    not to grade: unread, or graded already with the same bytes unless ``force``; the submissions to grade).
    Every notebook read and every record kept is remembered by ``protected``."""
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
    return snapshot, results, todo


def _progress_bar(total: int, done: int) -> Any:
    """A tqdm bar on stderr, or None without tqdm."""
    try:
        from tqdm import tqdm
        return tqdm(total=total, initial=done, unit="submission", file=sys.stderr, dynamic_ncols=True, smoothing=0.1)
    except ImportError:  # tqdm is in the grader's extras; without it the per-submission lines remain
        return None


def _graded(todo: list[Submission], snapshot: dict[Submission, bytes | None], secret: bytes, protected: Protected,
            job_settings: dict[str, Any], ray_address: str | None, resources: JobResources | None, workers: int,
            executor: Executor | None) -> Iterator[tuple[Submission, JobResult, bool]]:
    """Grade ``todo`` (on the Ray cluster at ``ray_address``, or here: :func:`_grade_locally`) from templates made
    in a private temporary folder, removed at the end; yield (submission, result, keep) as results come back.
    ``job_settings``: the :class:`GradingJob` fields every job shares (time limits, feedback, sandboxed)."""
    private = Path(tempfile.mkdtemp(prefix="course-grading-"))
    try:
        templates = {a: GradingTemplate(private / "templates" / a, a) for a in sorted({s.assignment for s in todo})}

        def job_for(s: Submission, template: str, env: dict[str, str]) -> GradingJob:
            return GradingJob(s.student, s.assignment, snapshot[s], template,
                              str(private / "work" / _short_name(s)),
                              tuple((c.grade_id, c.points) for c in graded_cells(s.assignment)),
                              job_settings["timeout_s"], job_settings["cell_timeout_s"], env, job_settings["feedback"],
                              seed_hex=submission_seed(secret, s.assignment, s.student),
                              sandboxed=job_settings["sandboxed"])

        if ray_address is not None:
            packed = {a: pack_folder(t.root) for a, t in templates.items()}
            shutil.rmtree(private / "templates")  # the jobs carry them: nothing of this machine's disk is read
            jobs = {s: job_for(s, "", {}) for s in todo}
            yield from grade_on_ray(ray_address, jobs, packed, resources)
        else:
            for t in templates.values():  # shared by every submission: a notebook must not change them
                for f in t.root.rglob("*"):
                    if f.is_file():
                        protected.remember(f, f.read_bytes())
            yield from _grade_locally(todo, job_for, {a: str(t.root) for a, t in templates.items()}, private,
                                      workers, executor)
    finally:
        shutil.rmtree(private, ignore_errors=True)


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
                failed = all_cells(job_for(s, "", {}), "error", f"the grader failed on this submission: {exc!r}"[:1000])
                yield s, failed, False
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
