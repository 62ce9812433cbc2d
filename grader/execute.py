"""nbgrader's Execute step, split in two: the student's cells run in a sandboxed kernel, the hidden tests
run here, in the judge.

:class:`CourseExecute` replaces nbgrader's ``Execute`` preprocessor in ``nbgrader autograde`` (see
:mod:`grader.settings`):

* **The student's cells** (every cell that is not a graded test) run in a Jupyter kernel inside the
  sandbox of :mod:`grader.sandbox` (bubblewrap: no network, read-only system, nothing of the course but
  ``triton_course/``), started by :class:`SandboxedKernelManager`. Their outputs are kept for the feedback, cut at
  :attr:`CourseExecute.max_output_bytes` per cell.
* **The graded test cells** never reach the kernel. Their source (restored from the gradebook by
  nbgrader, so never the student's) runs in this process with :func:`grader.judge.run_test_cell`, in the
  namespace of a :class:`grader.judge.JudgeSession`; the graded functions are proxies that call into the
  kernel for outputs only. The test cell's outputs are written here: the judge's messages, and the score
  as an ``execute_result`` when the test computes one. Nothing the student's code prints can reach them.
* **A kernel that dies** (a segfault from an out-of-bounds store in Triton's interpreter, an abort, an
  exit) loses nothing else: the cell -- or the judge's call, named -- gets a ``KernelDied`` error, a fresh
  sandboxed kernel replays the student's cells above it, and grading goes on. After
  :attr:`CourseExecute.max_restarts` deaths the remaining cells are marked as not run; after
  :attr:`CourseExecute.max_memory_kills` kills for the GPU memory it held (a hoarder that takes it again on each
  replay), too.
"""

from __future__ import annotations

import ast
import copy
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from nbclient.exceptions import DeadKernelError
from nbconvert.preprocessors.execute import NotebookClient
from nbformat import read as read_notebook
from nbformat.notebooknode import NotebookNode
from traitlets import Bool, Integer

from nbgrader.preprocessors import Execute

#: Set by the grader: the trusted source notebook (hidden tests, ``judge`` cells) of the assignment.
SOURCE_NOTEBOOK_ENV = "COURSE_SOURCE_NOTEBOOK"
#: Set by the grader: a file holding this submission's secret seed (hex); never visible to the sandbox.
SEED_FILE_ENV = "COURSE_SEED_FILE"
#: Set by the grader: "0" to run the kernel without the sandbox (every record then says so).
SANDBOX_ENV = "COURSE_SANDBOX"
#: Set by the grader: the folder for this submission's sandbox (private to the grader).
SANDBOX_DIR_ENV = "COURSE_SANDBOX_DIR"
#: Set by the grader: which sandbox slot (uid) this submission uses.
SANDBOX_SLOT_ENV = "COURSE_SANDBOX_SLOT"
#: Set by the grader: a file this process writes once the first kernel answered (outside the sandbox).
STARTED_FILE_ENV = "COURSE_KERNEL_STARTED_FILE"

KERNEL_DIED = ("The Python process running this notebook crashed during this cell (for example a Triton "
               "kernel that stores outside its output: an out-of-bounds tl.store without a mask). The grader "
               "started a new kernel, re-ran the cells above this one, and went on with the next cell.")


def _nbgrader(cell) -> dict:
    return cell.metadata.get("nbgrader", {}) if cell.cell_type == "code" else {}


def is_test(cell) -> bool:
    m = _nbgrader(cell)
    return bool(m.get("grade")) and not m.get("solution")


def is_judge_cell(cell) -> bool:
    """A locked cell of definitions that the hidden tests use too (cell tag ``judge``)."""
    return cell.cell_type == "code" and "judge" in cell.metadata.get("tags", [])


def _is_kernel(node: ast.FunctionDef) -> bool:
    return any("jit" in ast.unparse(d) or "autotune" in ast.unparse(d) or "heuristics" in ast.unparse(d)
               for d in node.decorator_list)


def _solution_functions(nb) -> Iterator[tuple[str, ast.FunctionDef]]:
    """(cell source, top-level function definition) for every function of the notebook's solution cells."""
    for cell in nb.cells:
        if not _nbgrader(cell).get("solution"):
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                yield cell.source, node


def submitted_kernels(nb) -> dict[str, str]:
    """name -> source of each Triton kernel defined in the notebook's solution cells (read, never run)."""
    return {node.name: ast.get_source_segment(src, node) or "" for src, node in _solution_functions(nb)
            if _is_kernel(node)}


def graded_functions(source_notebook) -> list[str]:
    """Names of the plain functions the solution cells define (not Triton kernels): what tests call."""
    return list(dict.fromkeys(node.name for _, node in _solution_functions(source_notebook) if not _is_kernel(node)))


class SandboxedKernelManager(AsyncKernelManager):
    """A Jupyter kernel started inside a :class:`grader.sandbox.Sandbox`, talking over ``ipc`` sockets."""

    def __init__(self, sandbox, **kwargs):
        super().__init__(**kwargs)
        self.sandbox = sandbox

    def format_kernel_cmd(self, extra_arguments=None):
        return self.sandbox.wrap(super().format_kernel_cmd(extra_arguments))

    def write_connection_file(self, **kwargs):
        result = super().write_connection_file(**kwargs)
        if self.sandbox.uid is not None and self.connection_file:
            os.chown(self.connection_file, self.sandbox.uid, self.sandbox.uid)
        return result

    async def _async_interrupt_kernel(self) -> None:
        # bwrap does not pass SIGINT on: ask the kernel itself (kernel protocol's interrupt_request)
        msg = self.session.msg("interrupt_request", content={})
        self._connect_control_socket()
        self.session.send(self._control_socket, msg)

    interrupt_kernel = _async_interrupt_kernel


class KernelTransport:
    """Runs :func:`triton_course.harness.serve` in the kernel of a :class:`CourseExecute`, for the judge."""

    def __init__(self, executor: "CourseExecute", exchange: Path, device: str, uid: int | None):
        self.executor = executor
        self.exchange = exchange
        self.device = device
        self.uid = uid

    def prepare(self, folder: Path) -> None:
        if self.uid is not None:
            os.chown(folder, self.uid, self.uid)

    def run(self, folder: Path, timeout_s: float) -> None:
        from grader.judge_calls import StudentCrashed, StudentTimeout

        ex = self.executor
        code = f"import triton_course.harness as _course_harness\n_course_harness.serve({str(folder)!r})\ndel _course_harness"
        saved = ex.timeout
        ex.timeout = int(timeout_s)
        try:
            msg_id = ex.kc.execute(code, silent=True, store_history=False)
            reply = ex.wait_for_reply(msg_id)
        except DeadKernelError:
            raise StudentCrashed(ex._session.in_flight or "a call") from None
        finally:
            ex.timeout = saved
        if reply is None:
            raise StudentTimeout(f"{ex._session.in_flight}: the call ran past {timeout_s:.0f} s and was interrupted "
                                 "(an infinite loop?)")


class KernelRestart(Exception):
    """The kernel died during a judge's call: restart it after this cell."""


class CourseExecute(Execute):
    """nbgrader's Execute with the student's cells in a sandboxed kernel and the tests in the judge."""

    max_restarts = Integer(3, help="kernel deaths survived per notebook").tag(config=True)
    max_memory_kills = Integer(2, help="times the GPU lock may kill a notebook for the GPU memory it holds before "
                                       "its cells are no longer replayed").tag(config=True)
    _memory_kills = 0   # deaths the GPU lock caused for the memory this notebook held (_why_killed), per notebook
    max_output_bytes = Integer(1_000_000, help="output kept per cell, in bytes (-1: no limit)").tag(config=True)
    max_notebook_output_bytes = Integer(8_000_000, help="output kept per notebook, in bytes").tag(config=True)
    sandboxed = Bool(True, help="run the kernel in the bubblewrap sandbox").tag(config=True)

    # -- output cap ------------------------------------------------------------------------------------
    def output(self, outs, msg, display_id, cell_index):
        if self.max_output_bytes >= 0 and msg.get("msg_type") != "error":
            used = self._output_bytes.get(cell_index, 0)
            size = len(json.dumps(msg.get("content", {}), default=str))
            if used + size > self.max_output_bytes or self._notebook_bytes + size > self.max_notebook_output_bytes:
                self._truncated.add(cell_index)
                return None
            self._output_bytes[cell_index] = used + size
            self._notebook_bytes += size
        return super().output(outs, msg, display_id, cell_index)

    def _update_display_id(self, display_id, msg):
        # display updates replace earlier outputs in place: they count against the notebook's budget too
        size = len(json.dumps(msg.get("content", {}), default=str))
        if self.max_output_bytes >= 0 and (size > self.max_output_bytes or
                                           self._notebook_bytes + size > self.max_notebook_output_bytes):
            return None
        self._notebook_bytes += size
        return super()._update_display_id(display_id, msg)

    def handle_comm_msg(self, outs, msg, cell_index):  # widgets are not graded; keep nothing of them
        return None

    # -- the sandbox -----------------------------------------------------------------------------------
    def _new_kernel_manager(self):
        if self._sandbox is None:
            return None  # nbclient makes an ordinary kernel manager
        self._restarts_made += 1
        km = SandboxedKernelManager(self._sandbox, kernel_name=self.kernel_name or "python3",
                                    transport="ipc", ip=str(self._sandbox.exchange / f"k{self._restarts_made}"))
        km.connection_file = str(self._sandbox.exchange / f"kernel-{self._restarts_made}.json")
        return km

    # -- running the notebook --------------------------------------------------------------------------
    def _run_cell(self, cell, resources, index: int, replay: bool = False):
        start = time.perf_counter()
        try:
            self._run_cell_untimed(cell, resources, index, replay)
        finally:
            kind = "replay" if replay else ("judge" if is_test(cell) else "student")
            self._seconds.append([index, kind, round(time.perf_counter() - start, 3)])

    def _run_cell_untimed(self, cell, resources, index: int, replay: bool) -> None:
        if is_test(cell):
            if not replay:
                self._judge_cell(cell, index)
            return
        target = copy.deepcopy(cell) if replay else cell
        with self._session.gpu_lock.shared():  # the student's code may use the GPU: never while another times
            self.preprocess_cell(target, resources, index)
        if replay:
            self.nb.cells[index] = cell  # nbclient put the replayed copy in its place
        if not replay and index in self._truncated:
            cell.outputs.append(NotebookNode(output_type="stream", name="stdout", text=(
                f"... output cut at {self.max_output_bytes:,} bytes by the grader ...\n")))

    def _judge_cell(self, cell, index: int) -> None:
        from grader.judge import run_test_cell_on_a_shared_gpu

        grade_id = _nbgrader(cell).get("grade_id", f"cell{index}")
        cell.outputs = []
        if not cell.source.strip():
            return
        outcome = run_test_cell_on_a_shared_gpu(cell.source, self._session.namespace_for(grade_id), grade_id,
                                                reclaim=self._session.gpu_lock.reclaim_memory)
        self.code_cells_executed += 1
        cell.execution_count = self.code_cells_executed
        outs = []
        if outcome.stdout:
            outs.append(NotebookNode(output_type="stream", name="stdout", text=outcome.stdout))
        if outcome.notes:
            outs.append(NotebookNode(output_type="stream", name="stdout",
                                     text="".join(f"[grader] {note}\n" for note in outcome.notes)))
        if outcome.crashed is not None:
            text = self._why_killed() or (
                f"The Python process running this notebook crashed during the grader's call "
                f"{outcome.crashed}. Most likely a Triton kernel stored outside its output (an "
                "out-of-bounds tl.store without a mask), or the code exited. The grader started a new "
                "kernel and went on with the next test.")
            outs.append(NotebookNode(output_type="error", ename="KernelDied", evalue=text,
                                     traceback=[f"KernelDied: {text}"]))
        elif outcome.timeout is not None:
            outs.append(NotebookNode(output_type="error", ename="CellTimeoutError", evalue=outcome.timeout,
                                     traceback=[f"CellTimeoutError: {outcome.timeout}"]))
        elif outcome.error is not None:
            ename, evalue = outcome.error
            outs.append(NotebookNode(output_type="error", ename=ename, evalue=evalue,
                                     traceback=[f"{ename}: {evalue}"]))
        elif outcome.score is not None:
            outs.append(NotebookNode(output_type="execute_result", execution_count=cell.execution_count,
                                     metadata={}, data={"text/plain": repr(outcome.score)}))
        cell.outputs = outs
        if outcome.crashed is not None:
            raise KernelRestart(index)

    def _why_killed(self) -> str | None:
        """The GPU lock's note, when it was the grader that killed the notebook's process (it kept the GPU
        busy while paused for a timing, :mod:`grader.gpu_lock`)."""
        from grader.gpu_lock import is_memory_note, kill_note

        boxes = (getattr(self, "_sandbox", None), getattr(self, "_relaunch_box", None))
        notes = [kill_note(box.staging) for box in boxes if box is not None]
        note = next((n for n in notes if n), None)
        if is_memory_note(note):   # a hoarder's replayed cells would take the memory again: counted, and bounded
            self._memory_kills += 1
        return note

    def preprocess(self, nb, resources=None, km=None):
        began_all = time.perf_counter()  # the judge's imports (PyTorch) included
        from grader.judge import JudgeSession, Seed
        from grader.relauncher import notebook_kernel_shapes

        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        self._output_bytes: dict[int, int] = {}
        self._truncated: set[int] = set()
        self._notebook_bytes = 0
        self._restarts_made = 0
        self._memory_kills = 0
        self._seconds: list[list] = []  # [cell index, "student" | "judge" | "replay" | "kernel start", seconds]
        source_path = os.environ.get(SOURCE_NOTEBOOK_ENV, "")
        source = read_notebook(source_path, as_version=4) if source_path else nb
        seed_file = os.environ.get(SEED_FILE_ENV, "")
        seed = Seed(bytes.fromhex(Path(seed_file).read_text().strip())) if seed_file else Seed()
        gpu = os.environ.get("TRITON_INTERPRET", "0") != "1" and _has_gpu()
        exchange, uid, relauncher = self._make_sandboxes(resources, gpu)
        kernel_shapes = notebook_kernel_shapes(nb)
        if kernel_shapes:   # a chapter with kernels: the re-run process comes up while the student's cells run
            relauncher.start()
        self._session = JudgeSession(KernelTransport(self, exchange, "cuda" if gpu else "cpu", uid), seed,
                                     call_timeout_s=float(self.timeout or 300), relauncher=relauncher,
                                     allowed_kernels=kernel_shapes)
        from grader.gpu_lock import GpuLock

        self._session.gpu_lock = GpuLock.from_env()
        # the student's threads and queued GPU work must not share the GPU with the judge's same-size copy or
        # library product: frozen while the judge times them
        self._session.own_sandboxes = [box.member(judge=False) for box in (self._sandbox, self._relaunch_box)
                                       if box is not None]
        problems = self._session.build_namespace([c.source for c in source.cells if is_judge_cell(c)],
                                                 graded_functions(source), submitted_kernels(nb))
        try:
            crashed = self._run_all_cells(resources)
        finally:
            relauncher.close()
            log = relauncher.log.read_text(errors="replace")[-3000:] if relauncher.log.is_file() else ""
            for box in (self._sandbox, self._relaunch_box):
                if box is not None:
                    box.close()
        self._record_run(crashed, relauncher.describe(), log, seed.fingerprint, problems, began_all)
        self.set_widgets_metadata()
        return self.nb, self.resources

    def _make_sandboxes(self, resources, gpu: bool):
        """(exchange folder, the student's uid, the relauncher): the student's sandbox and the second one the
        launches are re-run in (``self._sandbox``, ``self._relaunch_box``), or plain folders unsandboxed."""
        from grader.relauncher import ProcessRelauncher
        from grader.sandbox import Sandbox

        sandboxed = self.sandboxed and os.environ.get(SANDBOX_ENV, "1") != "0"
        staging = Path(os.environ.get(SANDBOX_DIR_ENV) or Path(resources.get("metadata", {}).get("path", ".")) /
                       ".sandbox")
        if sandboxed:
            env = {k: v for k, v in os.environ.items()
                   if k in ("TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES", "COURSE_COPY_GBPS", "OMP_NUM_THREADS",
                            "COURSE_TEST_ATTACK_ROOT")}
            slot = int(os.environ.get(SANDBOX_SLOT_ENV, "0"))
            self._sandbox = Sandbox(slot=slot, staging=staging, gpu=gpu, env=env)
            exchange, uid = self._sandbox.exchange, self._sandbox.uid
            # the launches are re-run in a second sandbox, which runs none of the notebook's Python
            self._relaunch_box = Sandbox(slot=slot, staging=staging.parent / f"{staging.name}-relaunch", gpu=gpu,
                                         env=env, role="relaunch")
            relauncher = ProcessRelauncher(self._relaunch_box.exchange, wrap=self._relaunch_box.wrap,
                                           uid=self._relaunch_box.uid, log=self._relaunch_box.staging / "relaunch.log",
                                           what=self._relaunch_box.describe())
        else:
            self._sandbox = self._relaunch_box = None
            exchange, uid = staging / "exchange", None
            for folder in (exchange, staging / "relaunch"):
                if folder.exists():
                    shutil.rmtree(folder)
                folder.mkdir(parents=True)
            relauncher = ProcessRelauncher(staging / "relaunch", log=staging / "relaunch.log",
                                           what="a process of its own (unsandboxed)")
        return exchange, uid, relauncher

    def _run_all_cells(self, resources) -> list[int]:
        """Every cell, in a fresh kernel after each death (the student's cells above replayed); the indices of the
        cells the kernel died in."""
        crashed: list[int] = []
        start = 0
        while True:
            index = start
            self.km = self._new_kernel_manager()
            try:
                began = time.perf_counter()
                with self.setup_kernel():
                    info_msg = self.wait_for_reply(self.kc.kernel_info())
                    self._seconds.append([start, "kernel start", round(time.perf_counter() - began, 3)])
                    self.nb.metadata["language_info"] = info_msg["content"]["language_info"]
                    if os.environ.get(STARTED_FILE_ENV):  # trusted evidence that the machine worked
                        Path(os.environ[STARTED_FILE_ENV]).write_text("started")
                    for index in range(0, start):
                        cell = self.nb.cells[index]
                        if cell.cell_type == "code" and index not in crashed:
                            self._run_cell(cell, resources, index, replay=True)
                    for index in range(start, len(self.nb.cells)):
                        self._run_cell(self.nb.cells[index], resources, index)
                return crashed
            except (DeadKernelError, KernelRestart) as exc:
                start = self._after_death(exc, index, crashed)
                if start is None:
                    return crashed

    def _after_death(self, exc: Exception, index: int, crashed: list[int]) -> int | None:
        """Note the kernel's death in cell ``index`` (added to ``crashed``); the cell to go on from in a new
        kernel, or None after :attr:`max_restarts` deaths or :attr:`max_memory_kills` kills for memory (the cells left
        are marked as not run)."""
        cell = self.nb.cells[index]
        if isinstance(exc, DeadKernelError):
            why = self._why_killed() or KERNEL_DIED
            cell.outputs.append(NotebookNode(output_type="error", ename="KernelDied", evalue=why,
                                             traceback=[f"KernelDied: {why}"]))
        crashed.append(index)
        self.log.warning("kernel died in cell %d; restarting", index)
        self.km = None
        self.kc = None
        start = index + 1
        if self._memory_kills >= self.max_memory_kills:
            why = (f"not run: the grader stopped this notebook {self._memory_kills} times for holding more GPU memory "
                   "than a submission may while others' tests ran out of it; its cells are not replayed again")
        elif len(crashed) > self.max_restarts:
            why = f"not run: the kernel died {len(crashed)} times in this notebook"
        else:
            return start
        for later in self.nb.cells[start:]:
            if later.cell_type == "code":
                later.outputs = [NotebookNode(output_type="error", ename="NotRun", evalue=why,
                                              traceback=[f"NotRun: {why}"])]
        return None

    def _record_run(self, crashed: list[int], relaunched_where: str, log: str, seed_sha: str, problems: list[str],
                    began_all: float) -> None:
        """What the grader's own process saw, into the notebook's metadata (``course_grader``)."""
        meta = self.nb.metadata.setdefault("course_grader", {})
        meta["crashed_cells"] = crashed
        meta["sandbox"] = self._sandbox.describe() if self._sandbox is not None else "none (graded unsandboxed)"
        meta["relaunch"] = {"calls": self._session.relaunches, "where": relaunched_where, "log": log}
        meta["seed_sha"] = seed_sha
        meta["judge_problems"] = problems
        meta["seconds"] = self._seconds  # where the grading time went (the grader's own clock)
        meta["phases"] = self._session.phases.summary()  # the judge's calls, re-runs, timing (grader.phases)
        meta["longest_call_s"] = round(self._session.longest_call_seconds, 3)   # one call into the student's kernel
        meta["execute_s"] = round(time.perf_counter() - began_all, 3)  # this step's whole time, in nbgrader's
        meta["timing"] = self._session.timing_rounds  # every timed round: graph or not, both clocks
        meta["gpu_lock"] = self._session.gpu_lock.history  # every timed hold: who else was registered, frozen, drained
        # GPU memory taken back from submissions over their share when a test ran out, and this one's largest holding
        meta["gpu_memory"] = {"reclaims": self._session.gpu_lock.reclaims,
                              "peak_gpu_bytes": self._session.gpu_lock.peak_gpu_bytes,
                              "killed_for_memory": self._memory_kills}
        meta["quiet_while_judge_times"] = [m["name"] for m in self._session.own_sandboxes]


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


