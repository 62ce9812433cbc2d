"""Grading a class on a Ray cluster (``python -m grader autograde ... --ray ADDRESS``).

The driver (the instructor's ``autograde`` process) connects to a running cluster with ``ray.init(ADDRESS)``
and sends one Ray task per submission. Everything a task needs travels as data, so no filesystem is shared:

* the :class:`grader.jobs.GradingJob`: the notebook's bytes, the hidden tests' seed, the cells and their
  points, the limits, and the GPU copy bandwidth measured once for the run (by a task on a GPU of the
  cluster, so that every submission is held to one ceiling);
* the grading template (gradebook, source notebook, release), packed once per assignment into a gzipped
  tar and put in Ray's object store once; each task unpacks it into a private temporary folder of its node.

A task runs :func:`grader.jobs.run_job` exactly as the local pool (:mod:`grader.autograde`) does: real
``nbgrader autograde``, every submission in its bubblewrap sandbox, the hidden tests in the judge. The result
(records, notes, the autograded notebook, the feedback page, the log) goes back to the driver, which alone writes
``DIR`` and signs the records. Each record's ``run`` names the node, GPU and versions that graded it.

**Resources.** Each task asks Ray for what one submission needs (:class:`JobResources`): CPUs, memory (the
sandbox's memory cap plus the grader's own processes), and on a cluster with GPUs a fraction of one GPU,
so that several submissions share a GPU for their correctness work. A timed loop still holds its GPU alone:
each node keeps a node-local :mod:`grader.gpu_lock` folder, and the other sandboxes on that GPU are frozen
while a kernel is timed. On a cluster without GPUs the tasks ask for none, and performance is
``not_graded`` as on any CPU machine.

**Failures.** Ray retries a task (``max_retries``) only on a system failure that the driver observes: the
worker process died or its node was lost. An exception raised by the grader's code is never retried, and
nothing a submission prints is evidence of anything (:data:`grader.jobs.KERNEL_START_RETRIES` keeps its
own rule). A submission whose worker died on every try is reported as an error and left unrecorded, so the
next run grades it again; each graded submission is recorded once, when its one result comes back.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from grader.jobs import GPU_ORDER, GradingJob, JobResult, Submission, all_cells, calibrate_gpus, run_job, unpack_folder

#: A folder of each node for the grader's node-local state: GPU locks, sandbox slots, job workspaces.
#: Never visible inside a sandbox. Default: ``<temp dir of the worker>/course-grader``.
NODE_DIR_ENV = "COURSE_NODE_DIR"
#: Memory of the grader's own processes for one submission (nbgrader, the judge), on top of the sandbox's cap.
GRADER_MEMORY_BYTES = 2 << 30
#: Sandbox uids per node (slot i runs as grader.sandbox.BASE_UID + i).
MAX_SLOTS = 256
TASK_NAME = "grade_submission"


@dataclass(frozen=True)
class JobResources:
    """What one submission's task asks the cluster for."""

    cpus: float = 2.0       # the judge and the student's kernel take turns; Triton compiles on one core each
    per_gpu: int = 4        # submissions sharing one GPU (each asks for 1/per_gpu of a GPU)
    memory_gb: float = 12.0  # Ray's ``memory`` resource; the sandbox's cap is this less GRADER_MEMORY_BYTES
    retries: int = 2        # tries after a worker or node died (system failures only)

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gb * (1 << 30))

    @property
    def sandbox_memory_bytes(self) -> int:
        return max(1 << 30, self.memory_bytes - GRADER_MEMORY_BYTES)

    def options(self, gpus_in_cluster: bool) -> dict:
        """The task's ``.options(...)``: its resources, its retries and its name."""
        opts = {"num_cpus": self.cpus, "memory": self.memory_bytes, "max_retries": self.retries,
                "retry_exceptions": False, "name": TASK_NAME}
        if gpus_in_cluster:
            opts["num_gpus"] = 1.0 / max(1, self.per_gpu)
        return opts


# ---------------------------------------------------------------------------------------------------
# On a worker
# ---------------------------------------------------------------------------------------------------

def node_dir() -> Path:
    folder = Path(os.environ.get(NODE_DIR_ENV) or Path(tempfile.gettempdir()) / "course-grader")
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return folder


def take_slot(folder: Path) -> tuple[int, int]:
    """A sandbox slot no other job of this node holds: (slot, the open lock file to close when done)."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    for slot in range(MAX_SLOTS):
        fd = os.open(folder / f"slot{slot}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return slot, fd
        except BlockingIOError:
            os.close(fd)
    raise RuntimeError(f"all {MAX_SLOTS} sandbox slots of this node are taken")


def _sweep(jobs: Path) -> None:
    """Remove the workspaces of jobs whose worker died (their folder names carry the worker's pid)."""
    for d in jobs.glob("job-*"):
        try:
            pid = int(d.name.split("-")[1])
            os.kill(pid, 0)
        except (ValueError, IndexError):
            continue
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except PermissionError:
            pass


def worker_info() -> dict[str, str]:
    """Where a submission was graded: the node, its GPU and the versions (without starting CUDA here)."""
    from importlib.metadata import PackageNotFoundError, version

    from grader.gpu_lock import device_name

    info = {"node": socket.gethostname()}
    try:
        import ray

        if ray.is_initialized():  # in a Ray task (asking outside one would start a local Ray)
            info["ray_node"] = ray.get_runtime_context().get_node_id()[:16]
    except Exception:
        pass
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    info["gpu"] = (device_name(visible) or f"GPU {visible}") if visible else "none (Triton interpreter)"
    for pkg in ("torch", "triton", "nbgrader", "numpy", "ray"):
        try:
            info[pkg] = version(pkg)
        except PackageNotFoundError:
            info[pkg] = "absent"
    info["python"] = sys.version.split()[0]
    return info


def grade_here(job: GradingJob, template: bytes, sandbox_memory_bytes: int, gpu: bool) -> JobResult:
    """Grade one job on this node: unpack the template into a private folder, take a sandbox slot, run it.

    Raises (never retried) when this node cannot make a sandbox; everything the submission does is in the
    result, as with the local pool."""
    from grader.gpu_lock import LOCK_DIR_ENV
    from grader.sandbox import MEMORY_ENV, SandboxUnavailable, unavailable_reason

    if job.sandboxed:
        reason = unavailable_reason()
        if reason:
            raise SandboxUnavailable(f"node {socket.gethostname()} cannot grade: {reason}")
    base = node_dir()
    _sweep(base / "jobs")
    (base / "jobs").mkdir(exist_ok=True, mode=0o700)
    slot, slot_fd = take_slot(base / "slots")
    work = Path(tempfile.mkdtemp(prefix=f"job-{os.getpid()}-", dir=base / "jobs"))
    try:
        os.chmod(work, 0o755)  # the sandbox's uid traverses it to its exchange folder
        template_dir = unpack_folder(template, work / "template")
        env = {**os.environ, **job.env, MEMORY_ENV: str(sandbox_memory_bytes)}
        if gpu:
            env[LOCK_DIR_ENV] = str(base / "gpu-locks")
        else:
            env.pop(LOCK_DIR_ENV, None)
        res = run_job(replace(job, template=str(template_dir), workspace=str(work / "work"), slot=slot, env=env))
        res.meta.update(worker_info())
        return res
    finally:
        shutil.rmtree(work, ignore_errors=True)
        os.close(slot_fd)


def _grade_task(job: GradingJob, template: bytes, sandbox_memory_bytes: int) -> JobResult:
    """The body of the Ray task (``ray::grade_submission`` in the process list of a worker)."""
    import ray

    return grade_here(job, template, sandbox_memory_bytes, gpu=bool(ray.get_gpu_ids()))


def _calibrate_task() -> list[str]:
    return calibrate_gpus()


# ---------------------------------------------------------------------------------------------------
# On the driver
# ---------------------------------------------------------------------------------------------------

class ClusterError(RuntimeError):
    """The cluster cannot grade this class (unreachable, or no node fits one job); the message says why."""


def _check_fits(ray, resources: JobResources, gpus: bool) -> None:
    """Refuse at once, with the numbers, when no node can run one job (Ray would wait for ever)."""
    asks = resources.options(gpus)
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    fits = [n for n in nodes if n.get("CPU", 0) >= asks["num_cpus"] and n.get("memory", 0) >= asks["memory"]
            and n.get("GPU", 0) >= asks.get("num_gpus", 0)]
    if not fits:
        have = "; ".join(f"{n.get('CPU', 0):g} CPUs, {n.get('memory', 0) / 2**30:.1f} GiB, {n.get('GPU', 0):g} GPUs"
                         for n in nodes) or "no node"
        raise ClusterError(f"no node of the cluster can run one grading job ({asks['num_cpus']:g} CPUs, "
                           f"{resources.memory_gb:g} GiB of memory{', a GPU' if gpus else ''}); the nodes have: "
                           f"{have}. Lower --cpus-per-job or --memory-per-job, or add nodes.")


def grade_on_ray(address: str, jobs: dict[Submission, GradingJob], templates: dict[str, bytes],
                 resources: JobResources | None = None) -> Iterator[tuple[Submission, JobResult, bool]]:
    """Run every job on the cluster at ``address``; yield (submission, result, keep) as each comes back
    (``keep`` False: the grader or the machine failed, so the submission must not be recorded as graded)."""
    import ray
    from ray.exceptions import RayError, RayTaskError

    resources = resources or JobResources()
    try:
        ray.init(address=address, log_to_driver=False, logging_level="warning")
    except Exception as exc:
        raise ClusterError(f"cannot reach the Ray cluster at {address!r}: {exc}") from None
    try:
        gpus = ray.cluster_resources().get("GPU", 0) > 0
        _check_fits(ray, resources, gpus)
        env = dict(GPU_ORDER)
        if gpus:  # one ceiling for the whole class, measured on a GPU of the cluster
            calibrate = ray.remote(_calibrate_task).options(num_gpus=1, num_cpus=1, name="calibrate_gpu")
            gbps = ray.get(calibrate.remote())
            if gbps:
                env["COURSE_COPY_GBPS"] = gbps[0]
        refs_of_templates = {a: ray.put(data) for a, data in templates.items()}
        task = ray.remote(_grade_task).options(**resources.options(gpus))
        pending = {}
        for sub, job in jobs.items():
            ref = task.remote(replace(job, env={**job.env, **env}), refs_of_templates[job.assignment],
                              resources.sandbox_memory_bytes)
            pending[ref] = sub
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                sub = pending.pop(ref)
                job = jobs[sub]
                try:
                    yield sub, ray.get(ref), True
                except RayTaskError as exc:  # the grader's code raised on the worker: not retried
                    cause = exc.cause if getattr(exc, "cause", None) is not None else exc
                    yield sub, all_cells(job, "error", f"the grader failed on this submission on its worker: "
                                                  f"{type(cause).__name__}: {cause}"[:1000]), False
                except RayError as exc:      # the worker or its node died on every try
                    yield sub, all_cells(job, "error", f"the machine grading this submission failed "
                                                  f"{resources.retries + 1} time(s) ({type(exc).__name__}); it "
                                                  "was not graded and the next run grades it again"), False
    finally:
        ray.shutdown()
