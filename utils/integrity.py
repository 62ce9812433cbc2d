"""Counting Triton launches: evidence of whose work a result is.

* :class:`KernelLaunches` -- counts Triton kernel launches (compiled or interpreted) made inside a block,
  and records the storages the launches received. :func:`triton_course.checks.check` uses it when asked
  (``COURSE_REQUIRE_KERNEL=1``), and the grader's harness (:mod:`triton_course.harness`) reports it to the judge:
  a function that returns the right values without launching a Triton kernel (say ``x + y`` in PyTorch)
  earns nothing.
* :class:`LaunchesPerCall` -- the same count set against the number of calls while a kernel is timed:
  the performance checks give nothing to a function that skips its launch on repeated calls.
* :class:`OperatorLog` -- the PyTorch operators a call ran outside its Triton launches, and where its output
  came from: what the harness (:mod:`triton_course.harness`, :mod:`triton_course.timing_harness`) reports.
* :func:`note_launches`, :func:`launched_kernels` -- which kernels a function's checked calls launched (as
  Triton kernel objects, or as :class:`KernelSource` where the grader re-ran them), for
  :func:`triton_course.static.check_masked_loads`.

All of this runs in the student's process, so it is evidence, never the defence: the verdict is decided
by the grader's judge in another process (:mod:`grader.judge`), which checks every output itself.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

#: Set by the grader: checks require that the student's function launched a Triton kernel.
REQUIRE_KERNEL_ENV = "COURSE_REQUIRE_KERNEL"

#: Modules whose attributes are restored before each graded cell (those that are importable).
GUARDED_MODULES = (
    "builtins", "math", "time", "statistics", "numpy", "numpy.testing", "torch", "torch.testing",
    "torch.cuda", "torch.nn.functional", "triton", "triton.testing", "triton.language",
    "triton_course", "triton_course.checks", "triton_course.grading", "triton_course.bench", "triton_course.device", "triton_course.inputs",
    "triton_course.integrity",
)
#: Classes whose methods are restored (a patched method is put back, an added one removed).
GUARDED_CLASSES = ("torch.Tensor", "torch.cuda.Event", "numpy.ndarray")


def require_kernel_default() -> bool:
    """Whether checks must see a Triton launch (the grader sets ``COURSE_REQUIRE_KERNEL=1``)."""
    return os.environ.get(REQUIRE_KERNEL_ENV, "0") == "1"


# ---------------------------------------------------------------------------------------------------
# Counting Triton launches
# ---------------------------------------------------------------------------------------------------

def _launch_points() -> list[tuple[type, str]]:
    """The methods through which a Triton kernel is launched: ``JITFunction.run`` when compiled; under the
    interpreter ``InterpretedFunction.run`` (Triton 3.6 on), or ``GridExecutor.__call__`` (Triton 3.5, whose
    ``kernel[grid]`` returns a GridExecutor)."""
    points = []
    for mod, name, methods in (("triton.runtime.jit", "JITFunction", ("run",)),
                               ("triton.runtime.interpreter", "InterpretedFunction", ("run",)),
                               ("triton.runtime.interpreter", "GridExecutor", ("__call__",))):
        try:
            cls = getattr(importlib.import_module(mod), name)
        except Exception:  # an older or newer Triton without this class
            continue
        points += [(cls, m) for m in methods if m in cls.__dict__]
    interpreted_run = any(cls.__name__ == "InterpretedFunction" for cls, _ in points)
    # where InterpretedFunction.run exists it calls the GridExecutor itself: count the launch once
    return [(cls, m) for cls, m in points if not (interpreted_run and cls.__name__ == "GridExecutor")]


_DEPTH = threading.local()


def received_storages(values: tuple) -> set[int]:
    """The storages (data pointers) of the tensors among a launch's arguments, and of the tensors inside
    Triton's own argument objects: a host ``TensorDescriptor`` hands its ``base`` to the kernel as surely as
    a pointer does."""
    found = set()
    for v in values:
        if hasattr(v, "untyped_storage"):
            found.add(v.untyped_storage().data_ptr())
        elif dataclasses.is_dataclass(v) and not isinstance(v, type) and type(v).__module__.startswith("triton."):
            found |= received_storages(tuple(getattr(v, f.name) for f in dataclasses.fields(v)))
    return found


def inside_launch() -> bool:
    """Whether this thread is inside a Triton launch (whose own PyTorch calls are not the student's)."""
    return getattr(_DEPTH, "n", 0) > 0


_RECORDING = [0]


def recording_launches() -> bool:
    """Whether a :class:`KernelLaunches` with a launch record is open: the grader is recording a graded call, to
    re-run its Triton kernels from their source (chapter 09's reference then leaves its Gluon path, which that
    re-run does not rebuild, to the Triton kernel it is graded on). It tells a notebook no more than the
    grader's ``COURSE_REQUIRE_KERNEL=1`` does, and what is graded is still only the recorded launches' re-run."""
    return _RECORDING[0] > 0


class KernelLaunches:
    """Context manager: ``count`` is the number of Triton kernel launches made inside the block, and
    ``written`` the storages (data pointers) of every tensor those launches received. With a ``record``
    (:class:`triton_course.relaunch.LaunchRecord`), each launch is also written into it before it runs."""

    def __init__(self, record: Any = None) -> None:
        self.count = 0
        self.written: set[int] = set()
        #: every kernel launched inside the block, once each (Triton's kernel objects; for Triton 3.5's
        #: GridExecutor, the function it runs): what triton_course.static reads the masks of
        self.kernels: list[Any] = []
        self.record = record
        self._saved: list[tuple[type, str, Callable[..., Any]]] = []

    def __enter__(self) -> "KernelLaunches":
        if self.record is not None:
            _RECORDING[0] += 1
        for cls, method in _launch_points():
            original = cls.__dict__[method]
            self._saved.append((cls, method, original))

            def run(fn_self, *args, _original=original, **kwargs):
                step = None
                if not kwargs.get("warmup", False):
                    self.count += 1
                    self.written.update(received_storages((*args, *kwargs.values())))
                    kernel = fn_self.fn if type(fn_self).__name__ == "GridExecutor" else fn_self
                    if not any(kernel is k for k in self.kernels):
                        self.kernels.append(kernel)
                    if self.record is not None and not inside_launch():
                        step = self._record(fn_self, args, kwargs)
                _DEPTH.n = getattr(_DEPTH, "n", 0) + 1
                try:
                    return _original(fn_self, *args, **kwargs)
                except BaseException:
                    if step is not None:
                        step["raised"] = True   # an autotuner's config that does not fit, say: not re-run
                    raise
                finally:
                    _DEPTH.n -= 1

            setattr(cls, method, run)
        return self

    def __exit__(self, *exc: object) -> None:
        for cls, method, original in reversed(self._saved):
            setattr(cls, method, original)
        self._saved.clear()
        if self.record is not None:
            _RECORDING[0] -= 1

    def _record(self, fn_self: Any, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
        """One launch into the record: ``JITFunction.run``/``InterpretedFunction.run`` take the grid as a
        keyword; Triton 3.5's ``GridExecutor`` holds the kernel and the grid itself."""
        if type(fn_self).__name__ == "GridExecutor":
            step = self.record.on_launch(fn_self.fn, args, kwargs, grid=fn_self.grid)
            if "grid_callable" in step:
                fn_self.grid = step["grid_callable"]
            return step
        return self.record.on_launch(fn_self, args, kwargs)


class LaunchesPerCall:
    """A wrapper of ``fn`` that counts its calls, and, as a context manager, the Triton launches made
    meanwhile. A function timed many times in a row on a few input sets could return a cached result
    instead of launching its kernel again; what it would show is the speed of a dictionary lookup.
    ``launches < calls`` after the timing catches that."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.calls = 0
        self._launches = KernelLaunches()

    @property
    def launches(self) -> int:
        return self._launches.count

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        return self.fn(*args)

    def __enter__(self) -> "LaunchesPerCall":
        self._launches.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._launches.__exit__(*exc)


# ---------------------------------------------------------------------------------------------------
# Evidence: which PyTorch operators a call ran outside its Triton launches, and where its output came from
# ---------------------------------------------------------------------------------------------------

class OperatorLog:
    """Context manager recording the ATen operators run outside Triton launches, and data provenance.

    ``ops`` counts operators by name. ``storages`` are the data pointers this call may legitimately
    produce an output from: its inputs, fresh allocations, views and copies of those, and buffers passed
    to a Triton launch. ``unknown_copies`` counts copies whose source is none of these (a tensor built from
    NumPy or Python, say).
    """

    FRESH = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
             "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full"}
    COPIES = {"copy_", "_to_copy", "clone", "contiguous", "to"}
    OUTSIDE = {"lift_fresh", "lift_fresh_copy"}

    def __init__(self, inputs: list[Any], launches: KernelLaunches, record: Any = None):
        self.ops: dict[str, int] = {}
        self.record = record   # a triton_course.relaunch.LaunchRecord: every operator is also written into it
        self.known: set[int] = {t.untyped_storage().data_ptr() for t in inputs}
        self.launches = launches
        self.unknown_copies = 0
        self._mode = None

    def is_known(self, t: Any) -> bool:
        ptr = t.untyped_storage().data_ptr()
        return ptr in self.known or ptr in self.launches.written

    def __enter__(self) -> "OperatorLog":
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        log = self

        class _Mode(TorchDispatchMode):
            @classmethod
            def _should_skip_dynamo(cls) -> bool:
                """PyTorch would wrap ``__torch_dispatch__`` in ``torch._disable_dynamo``, whose first call imports
                ``torch._dynamo`` (2 s of CPU in every graded process). It is done below, and only where
                ``torch._dynamo`` is imported already: without it, torch.compile cannot be tracing the call."""
                return False

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if "torch._dynamo" in sys.modules:
                    return _record_outside_dynamo(self, func, types, args, kwargs)
                return _record(self, func, types, args, kwargs)

        def _record(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if inside_launch():
                return out
            name = func.overloadpacket.__name__
            log.ops[name] = log.ops.get(name, 0) + 1
            if log.record is not None:
                log.record.on_op(func, args, kwargs, out)
            if name in log.COPIES:
                src = args[1] if name == "copy_" else args[0]
                if isinstance(src, torch.Tensor) and src.device.type != "meta" and not log.is_known(src):
                    log.unknown_copies += 1
            # fresh allocations are known; views and copies are known when their source is (so data
            # lifted from NumPy or Python by lift_fresh never becomes known by being viewed or copied)
            source_known = bool(args) and isinstance(args[0], torch.Tensor) and log.is_known(args[0])
            if name in log.FRESH or (name not in log.OUTSIDE and source_known and
                                     (name in log.COPIES or _is_view(func))):
                for t in (out if isinstance(out, (tuple, list)) else (out,)):
                    if isinstance(t, torch.Tensor) and t.device.type != "meta":
                        log.known.add(t.untyped_storage().data_ptr())
            return out

        _record_outside_dynamo = torch._disable_dynamo(_record, recursive=True)
        self._mode = _Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._mode.__exit__(*exc)


def _is_view(func) -> bool:
    try:
        return bool(func._schema.returns) and any(r.alias_info is not None for r in func._schema.returns)
    except Exception:
        return False


# ---------------------------------------------------------------------------------------------------
# Which kernels a function's checked calls launched
# ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class KernelSource:
    """The source of a kernel of a handed-in notebook, read by the grader (never run)."""

    name: str
    src: str


_LAUNCHED: "weakref.WeakKeyDictionary[Any, list[object]]" = weakref.WeakKeyDictionary()


def note_launches(fn: object, kernels: Iterable[object]) -> None:
    """Remember that a call of ``fn`` launched ``kernels`` (Triton kernel objects, or :class:`KernelSource`).

    :func:`triton_course.checks.check` notes each call of a notebook function; the grader's judge notes, for its
    proxy of a student's function, the kernels of each launch record it re-ran and accepted."""
    try:
        seen = _LAUNCHED.setdefault(fn, [])
    except TypeError:      # an object that cannot be weakly referenced (a builtin): nothing to remember it by
        return
    for kernel in kernels:
        if not any(kernel is k or (isinstance(k, KernelSource) and kernel == k) for k in seen):
            seen.append(kernel)


def launched_kernels(fn: object) -> list[object]:
    """Every kernel the noted calls of ``fn`` launched (:func:`note_launches`), first launch first."""
    try:
        return list(_LAUNCHED.get(fn, []))
    except TypeError:
        return []
