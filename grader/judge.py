"""The judge: runs the hidden tests in the grader's own process and calls into the student's kernel only
for outputs.

The hidden test cells of the *source* notebook (restored by nbgrader, never taken from the submission)
are executed here, in a namespace built from trusted code only: the cells of the source notebook tagged
``judge`` (the chapter's references, hints, tolerances and input makers), the course's ``triton_course`` as the
grader has it, and one proxy per graded function (:class:`StudentFunction`). Calling a proxy sends the
arguments as bytes to :func:`triton_course.harness.serve` in the student's kernel and reads back the output, the
arguments after the call and evidence about the call (:mod:`grader.judge_calls`); a speed check times it through
the timing it carries (``judge_timing``, :mod:`grader.judge_timing`). So:

* inputs are made here, from a secret per-run seed (:class:`Seed`) that never leaves this process: each
  test cell draws from its own stream, derived from the seed and its grade_id, so every input can be
  reproduced by a regrade that has the seed, and none can be predicted by the student's code;
* references are computed here, from copies taken before the call;
* whatever the student's process prints, displays or returns is data: only the judge's comparison and
  the policy of :func:`grader.judge_calls.work_problems` turn it into points;
* hidden test code, references and seeds never enter the student's process.
"""

from __future__ import annotations

import ast
import contextlib
import io
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

import triton_course
from grader.judge_calls import (CallResult, InProcessTransport, JudgeCalls, RemoteFunction, Seed,  # noqa: F401
                                StudentCrashed, StudentTimeout, Transport, output_budget, work_problems)
from grader.gpu_lock import Reclaimed, reclaim_gpu_memory
from grader.judge_timing import ProxyTiming
from grader.relauncher import Relauncher
from triton_course.checks import CheckFailed
from triton_course.device import current
from triton_course.integrity import KernelSource

# The line to the student's kernel (Seed, Transport, CallResult, work_problems and the rest) is grader.judge_calls;
# its names are imported here too, where the judge's users have always found them.

# ---------------------------------------------------------------------------------------------------
# The proxies and the trusted namespace
# ---------------------------------------------------------------------------------------------------


class StudentFunction(RemoteFunction):
    """A graded function of the student's notebook, called through the harness (see module docs), carrying the
    judge's timing of it: the speed checks of :mod:`triton_course.grading` time it through ``judge_timing``."""

    @property
    def judge_timing(self) -> ProxyTiming:
        """Verified timed rounds in the student's kernel, the yardstick timed here (:mod:`grader.judge_timing`)."""
        return ProxyTiming(self)


class Student:
    """``student.NAME`` is the proxy of the notebook's function NAME."""

    def __init__(self, session: JudgeSession):
        self._session = session

    def __getattr__(self, name: str) -> StudentFunction:
        if name.startswith("_"):
            raise AttributeError(name)
        return StudentFunction(self._session, name)


class JudgeSession(JudgeCalls):
    """The judge of one submission: its seed, its line to the student's kernel (:class:`grader.judge_calls.JudgeCalls`),
    its trusted namespace."""

    def __init__(self, transport: Transport, seed: Seed | None = None, call_timeout_s: float = 300.0,
                 relauncher: Relauncher | None = None, allowed_kernels: set[str] | None = None):
        super().__init__(transport, seed, call_timeout_s, relauncher, allowed_kernels)
        self.base: dict[str, Any] = {}

    # -- the namespace ---------------------------------------------------------------------------------
    def build_namespace(self, judge_cells: list[str], graded_functions: list[str],
                        kernels: dict[str, str] | None = None) -> list[str]:
        """Run the source notebook's ``judge`` cells here; bind the graded functions to proxies.

        Returns problems (a judge cell that failed: a bug of the course, reported, never the student's)."""
        ns: dict[str, Any] = {"__name__": "__judge__", "torch": torch, "device": current(),
                              "student": Student(self), "triton_course": triton_course}
        for name in graded_functions:
            ns[name] = StudentFunction(self, name)
        problems = []
        torch.manual_seed(self.seed.key("judge-cells"))
        for i, source in enumerate(judge_cells):
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    exec(compile(source, f"<judge cell {i}>", "exec"), ns)
            except Exception as exc:
                problems.append(f"judge cell {i}: {type(exc).__name__}: {exc}")
        for name in graded_functions:  # a judge cell must not replace a proxy
            ns[name] = StudentFunction(self, name)
        for name, src in (kernels or {}).items():  # kernels as source text, for static checks only
            ns[name] = KernelSource(name, src)
        self.base = ns
        return problems

    def namespace_for(self, grade_id: str) -> dict[str, Any]:
        torch.manual_seed(self.seed.key("test", grade_id))
        if torch.cuda.is_available():
            torch.cuda.manual_seed_all(self.seed.key("test-cuda", grade_id))
        return dict(self.base)


# ---------------------------------------------------------------------------------------------------
# Running one hidden test cell
# ---------------------------------------------------------------------------------------------------

@dataclass
class TestOutcome:
    """What a hidden test cell produced: printed text, a score (last expression) or an error."""

    stdout: str = ""
    score: Any = None
    error: tuple[str, str] | None = None
    crashed: str | None = None
    timeout: str | None = None
    notes: list[str] = field(default_factory=list)


#: Seconds waited before each new try of a test cell that ran out of GPU memory: the memory other submissions'
#: processes held may be back by then (their caches are released after every call and every test cell, and the
#: processes of a submission over its share are killed before the wait: grader.gpu_lock.GpuLock.reclaim_memory).
OUT_OF_MEMORY_WAITS_S = (5.0, 20.0)


#: How an allocation that failed on the GPU reads in an error's message: PyTorch's allocator, Triton's launcher, the
#: CUDA runtime and driver, and the libraries PyTorch calls, which allocate their own workspace (on an H100 shared
#: with a submission that held 73 GiB, an honest 09 lost ten points to ``CUBLAS_STATUS_ALLOC_FAILED when calling
#: cublasCreate(handle)`` before this list named it: tests/gpu/records/gpu_class_throughput_09_memory_hog.json).
OUT_OF_MEMORY_SIGNS = ("OutOfMemoryError", "CUDA out of memory", "[CUDA]: out of memory", "CUDA error: out of memory",
                       "CUDA_ERROR_OUT_OF_MEMORY", "cudaErrorMemoryAllocation", "CUBLAS_STATUS_ALLOC_FAILED",
                       "CUBLASLT_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED", "CUSOLVER_STATUS_ALLOC_FAILED",
                       "CUFFT_ALLOC_FAILED", "CUSPARSE_STATUS_ALLOC_FAILED")


def ran_out_of_gpu_memory(outcome: TestOutcome) -> bool:
    """The test failed because an allocation on the GPU failed, in the judge or in the student's call."""
    if outcome.error is None:
        return False
    ename, evalue = outcome.error
    return ename == "OutOfMemoryError" or any(sign in evalue for sign in OUT_OF_MEMORY_SIGNS)


def release_cached_gpu_memory() -> None:
    """Give the GPU back what PyTorch keeps cached in the judge's process (the references of large tests)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def run_test_cell_on_a_shared_gpu(source: str, ns: dict[str, Any], name: str = "hidden test",
                                  waits: tuple[float, ...] = OUT_OF_MEMORY_WAITS_S,
                                  sleep: Callable[[float], Any] = time.sleep,
                                  reclaim: Callable[[], Sequence[Reclaimed]] | None = None) -> TestOutcome:
    """:func:`run_test_cell`, tried again (after each of ``waits``) while it fails only for want of GPU memory.

    Several submissions are graded at once on one GPU: an honest test must not lose its points because another
    process held memory at that moment. Before each new try the judge gives back its own cached memory and asks the
    GPU lock to reclaim memory from any submission on the GPU that holds more than its share (``reclaim``:
    :func:`grader.gpu_lock.reclaim_gpu_memory` unless given: its processes are killed, :mod:`grader.gpu_lock`),
    this one's own included. Each try draws fresh inputs and checks everything again, so a try earns nothing a
    first try could not; a kernel that needs more memory than the GPU has fails every try, with the last one's
    message and a note of the tries (and of the submissions memory was reclaimed from: how many, never whose)."""
    reclaim = reclaim or reclaim_gpu_memory
    outcome = run_test_cell(source, ns, name)
    tries, own = 1, False
    others: set[int] = set()   # judges of the submissions memory was reclaimed from
    for wait in waits:
        if not ran_out_of_gpu_memory(outcome):
            break
        release_cached_gpu_memory()
        try:
            taken = reclaim()
        except Exception as exc:   # a fault of the grader's own: it must not cost the test its try
            print(f"course-gpu-lock: reclaiming GPU memory failed: {type(exc).__name__}: {exc}", file=sys.stderr,
                  flush=True)
            taken = []
        others |= {r.owner for r in taken if not r.own}
        own = own or any(r.own for r in taken)
        sleep(wait)
        outcome = run_test_cell(source, ns, name)
        tries += 1
    release_cached_gpu_memory()
    if tries > 1:
        outcome.notes.append(f"tried {tries} times: the GPU ran out of memory"
                             + (" every time" if ran_out_of_gpu_memory(outcome) else " before"))
    if others:
        outcome.notes.append(f"before trying again, the grader reclaimed GPU memory from {len(others)} other "
                             "submission(s) graded on this GPU at the same time, which held more than their share")
    if own:
        outcome.notes.append("this notebook's own processes held more than its share of the GPU's memory, which "
                             "is shared by the submissions graded on it at once: the grader stopped them")
    return outcome


def run_test_cell(source: str, ns: dict[str, Any], name: str = "hidden test") -> TestOutcome:
    """Execute trusted test code in ``ns``; the value of a final expression is the score."""
    outcome = TestOutcome()
    buf = io.StringIO()
    try:
        tree = ast.parse(source)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            exec(compile(tree, f"<{name}>", "exec"), ns)
            if last is not None:
                outcome.score = eval(compile(ast.Expression(last.value), f"<{name}>", "eval"), ns)
    except StudentCrashed as exc:
        outcome.crashed = str(exc)
    except StudentTimeout as exc:
        outcome.timeout = str(exc)
    except CheckFailed as exc:
        outcome.error = ("CheckFailed", str(exc))
    except AssertionError as exc:
        outcome.error = ("AssertionError", str(exc) or "a check of this test failed")
    except Exception as exc:  # the student's answer made a trusted check fail in an unexpected way
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == f"<{name}>"]
        where = f" (hidden test line {frames[-1].lineno})" if frames else ""
        outcome.error = (type(exc).__name__, f"{exc}{where}")
    outcome.stdout = buf.getvalue()[-20_000:]
    return outcome
