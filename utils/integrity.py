"""Counting Triton launches: evidence of whose work a result is.

* :class:`KernelLaunches` -- counts Triton kernel launches (compiled or interpreted) made inside a block,
  and records the storages the launches received. :func:`triton_course.checks.check` uses it when asked
  (``COURSE_REQUIRE_KERNEL=1``), and the grader's harness (:mod:`triton_course.harness`) reports it to the judge:
  a function that returns the right values without launching a Triton kernel (say ``x + y`` in PyTorch)
  earns nothing.
* :class:`LaunchesPerCall` -- the same count set against the number of calls while a kernel is timed:
  the performance checks give nothing to a function that skips its launch on repeated calls.

All of this runs in the student's process, so it is evidence, never the defence: the verdict is decided
by the grader's judge in another process (:mod:`grader.judge`), which checks every output itself.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import threading
from collections.abc import Callable
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
