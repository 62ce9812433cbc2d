"""Where a submission's judge spends its time: a clock per phase, kept in the autograded notebook.

The judge's work falls in three phases that a class's throughput report needs apart:

* ``calls``: a graded function's call into the student's kernel (:meth:`grader.judge_calls.JudgeCalls.call`),
  waiting for it included (a call waits while another submission's kernel is timed);
* ``reruns``: the call's Triton launches re-run alone in the second sandbox (:func:`grader.judge_calls.relaunch`);
* ``timing``: the timed rounds and the judge's yardsticks (:mod:`grader.judge_timing`), waiting for the GPU's
  lock and for the GPU to drain included.

Each second is charged to the innermost phase open at the time (a call made inside a timed round counts as a
call, not as timing), so the phases never count the same second twice and add up to at most the judge's time.
:class:`grader.execute.CourseExecute` stores :attr:`PhaseClock.seconds` and :attr:`PhaseClock.counts` in the
autograded notebook's metadata (``course_grader.phases``); ``tests/gpu/gpu_class_throughput.py`` reads them.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class PhaseClock:
    """Seconds and entries per phase name, each second charged to the innermost open phase."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self._open: list[list[Any]] = []   # [name, when its current stretch began]

    def _charge(self, name: str, since: float, now: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + (now - since)

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """The body's time goes to ``name`` (less the time of phases opened inside it). A phase opened inside
        itself (a yardstick timed within a timed round) is one entry of that phase."""
        now = time.perf_counter()
        if self._open:
            outer = self._open[-1]
            self._charge(outer[0], outer[1], now)
        if not self._open or self._open[-1][0] != name:
            self.counts[name] = self.counts.get(name, 0) + 1
        self._open.append([name, now])
        try:
            yield
        finally:
            now = time.perf_counter()
            inner, since = self._open.pop()
            self._charge(inner, since, now)
            if self._open:
                self._open[-1][1] = now

    def summary(self) -> dict[str, dict[str, float]]:
        """{"seconds": {phase: s}, "counts": {phase: entries}}, seconds rounded to the millisecond."""
        return {"seconds": {k: round(v, 3) for k, v in self.seconds.items()}, "counts": dict(self.counts)}


def _clock_of(first: Any) -> PhaseClock | None:
    """The clock of a judge session given as the first argument, or of the session of a graded function."""
    for holder in (first, getattr(first, "session", None)):
        clock = getattr(holder, "phases", None)
        if isinstance(clock, PhaseClock):
            return clock
    return None


def phase(name: str) -> Callable[[F], F]:
    """Decorator: time the function as phase ``name`` on the clock of its first argument (a
    :class:`grader.judge.JudgeSession`, or a graded function whose ``session`` is one); untimed without one."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            clock = _clock_of(args[0]) if args else None
            if clock is None:
                return fn(*args, **kwargs)
            with clock.timed(name):
                return fn(*args, **kwargs)

        return timed  # type: ignore[return-value]

    return wrap
