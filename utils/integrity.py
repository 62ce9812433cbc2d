"""Keeping a graded notebook honest: what the autograder installs in the kernel before student code runs.

Three tools:

* :class:`KernelLaunches` -- counts Triton kernel launches (compiled or interpreted) while it is active.
  :func:`utils.checks.check` uses it when the grader asks for it (``COURSE_REQUIRE_KERNEL=1``): a function
  that returns the right values without launching a Triton kernel (say ``x + y`` in PyTorch) fails.
* :class:`LaunchesPerCall` -- the same count set against the number of calls while a kernel is timed:
  the performance checks give nothing to a function that skips its launch on repeated calls.
* :class:`TrustedState` -- a snapshot, taken before any student code runs, of the functions that a
  verdict depends on: the comparison functions of torch and numpy, the timers (``time``, ``torch.cuda``
  events, ``triton.testing.do_bench``), the methods of ``torch.Tensor``, and everything in the course's
  own ``utils`` modules. :meth:`TrustedState.restore` puts every one of them back and rebinds the names
  a hidden test uses (``check_all``, ``reference``...) in the notebook's namespace. The grader calls it
  before every graded cell, and :func:`utils.checks.check` calls it right after the student's function
  returns, so a notebook that monkeypatches ``torch.allclose`` or ``time.perf_counter`` changes nothing.

The kernel that runs a submission also runs the student's code, so nothing here is a sandbox against a
determined attacker who reads this file; it closes the easy doors and the grader reports what it undid.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from collections.abc import Callable
from typing import Any

#: Set by the grader: checks require that the student's function launched a Triton kernel.
REQUIRE_KERNEL_ENV = "COURSE_REQUIRE_KERNEL"

#: Modules whose attributes are restored before each graded cell (those that are importable).
GUARDED_MODULES = (
    "builtins", "math", "time", "statistics", "numpy", "numpy.testing", "torch", "torch.testing",
    "torch.cuda", "torch.nn.functional", "triton", "triton.testing", "triton.language",
    "utils", "utils.checks", "utils.grading", "utils.bench", "utils.device", "utils.inputs",
    "utils.integrity",
)
#: Classes whose methods are restored (a patched method is put back, an added one removed).
GUARDED_CLASSES = ("torch.Tensor", "torch.cuda.Event", "numpy.ndarray")


def require_kernel_default() -> bool:
    """Whether checks must see a Triton launch (the grader sets ``COURSE_REQUIRE_KERNEL=1``)."""
    return os.environ.get(REQUIRE_KERNEL_ENV, "0") == "1"


# ---------------------------------------------------------------------------------------------------
# Counting Triton launches
# ---------------------------------------------------------------------------------------------------

def _launch_classes() -> list[type]:
    classes = []
    for mod, name in (("triton.runtime.jit", "JITFunction"), ("triton.runtime.interpreter", "InterpretedFunction")):
        try:
            classes.append(getattr(importlib.import_module(mod), name))
        except Exception:  # an older or newer Triton without this class
            pass
    return classes


class KernelLaunches:
    """Context manager: ``count`` is the number of Triton kernel launches made inside the block."""

    def __init__(self) -> None:
        self.count = 0
        self._saved: list[tuple[type, Callable[..., Any]]] = []

    def __enter__(self) -> "KernelLaunches":
        for cls in _launch_classes():
            original = cls.__dict__.get("run")
            if original is None:
                continue
            self._saved.append((cls, original))

            def run(fn_self, *args, _original=original, **kwargs):
                if not kwargs.get("warmup", False):
                    self.count += 1
                return _original(fn_self, *args, **kwargs)

            setattr(cls, "run", run)
        return self

    def __exit__(self, *exc: object) -> None:
        for cls, original in reversed(self._saved):
            setattr(cls, "run", original)
        self._saved.clear()


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
# Restoring what a verdict depends on
# ---------------------------------------------------------------------------------------------------

def _resolve(dotted: str) -> Any:
    module, _, attr = dotted.rpartition(".")
    return getattr(importlib.import_module(module), attr)


class TrustedState:
    """The attributes of :data:`GUARDED_MODULES` and :data:`GUARDED_CLASSES` as they were at snapshot."""

    def __init__(self) -> None:
        self.modules: dict[str, tuple[types.ModuleType, dict[str, Any]]] = {}
        self.classes: dict[str, tuple[type, dict[str, Any]]] = {}
        self.names: dict[str, Any] = {}

    @classmethod
    def snapshot(cls) -> "TrustedState":
        state = cls()
        for name in GUARDED_MODULES:
            try:
                mod = importlib.import_module(name)
            except Exception:
                continue
            state.modules[name] = (mod, {k: v for k, v in vars(mod).items()
                                         if not k.startswith("_") and (name, k) not in _VOLATILE})
        for name in GUARDED_CLASSES:
            try:
                klass = _resolve(name)
            except Exception:
                continue
            state.classes[name] = (klass, dict(vars(klass)))
        return state

    def remember(self, namespace: dict[str, Any], names: list[str]) -> None:
        """Trust the current bindings of ``names`` (the grader calls it after each locked cell runs)."""
        for k in names:
            if k in namespace:
                self.names[k] = namespace[k]

    def restore(self, namespace: dict[str, Any] | None = None) -> list[str]:
        """Undo every change to the guarded modules, classes and names; return what was changed."""
        changed: list[str] = []
        for name, (mod, attrs) in self.modules.items():
            if sys.modules.get(name) is not mod:
                sys.modules[name] = mod
                changed.append(f"sys.modules[{name!r}]")
            current = vars(mod)
            for k, v in attrs.items():
                if current.get(k, _MISSING) is not v:
                    try:
                        setattr(mod, k, v)
                        changed.append(f"{name}.{k}")
                    except Exception:
                        pass
        for name, (klass, attrs) in self.classes.items():
            current = dict(vars(klass))
            for k, v in attrs.items():
                if current.get(k, _MISSING) is not v and k not in _FIXED:
                    try:
                        setattr(klass, k, v)
                        changed.append(f"{name}.{k}")
                    except Exception:
                        pass
            for k in set(current) - set(attrs):
                try:
                    delattr(klass, k)
                    changed.append(f"{name}.{k}")
                except Exception:
                    pass
        if namespace is not None:
            for k, v in self.names.items():
                if namespace.get(k, _MISSING) is not v:
                    namespace[k] = v
                    changed.append(k)
        return changed


_MISSING = object()
#: Attributes that Jupyter itself replaces while a notebook runs.
_VOLATILE = {("builtins", k) for k in ("input", "raw_input", "getpass", "display", "get_ipython", "exit", "quit",
                                       "help", "copyright", "credits", "license")}
_FIXED = {"__dict__", "__weakref__", "__doc__", "__module__"}
_STATE: TrustedState | None = None


def install() -> TrustedState:
    """Take the snapshot (the grader runs this in the kernel before the notebook's first cell)."""
    global _STATE
    if _STATE is None:
        _STATE = TrustedState.snapshot()
    return _STATE


def remember(namespace: dict[str, Any], names: list[str]) -> None:
    """Trust the current bindings of ``names`` in ``namespace`` (no-op before :func:`install`)."""
    if _STATE is not None:
        _STATE.remember(namespace, names)


def restore(namespace: dict[str, Any] | None = None) -> list[str]:
    """Put back everything the snapshot holds; return what had changed (no-op before :func:`install`)."""
    return _STATE.restore(namespace) if _STATE is not None else []


def restore_after_student_code() -> list[str]:
    """Restore the snapshot if one was installed (called by checks after the student's function runs)."""
    return _STATE.restore() if _STATE is not None else []
