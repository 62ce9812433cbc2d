"""Objects a hidden test hands to a student's function that are not data: rebuilt on the student's side.

The judge sends plain data only. A test that passes, say, a callable to the student's ``benchmark``
passes a *fixture*: the judge sends its name and arguments (:meth:`Fixture.spec`), the harness builds the
same object in the student's kernel, and after the call the object's state comes back
(:meth:`Fixture.update`). State reported by the student's process is evidence, not proof: tests that
use it cross-check it with what the judge can see itself, such as its own clock.
"""

from __future__ import annotations

import time
from typing import Any


class Fixture:
    """Base class: ``ARGS`` are the constructor's arguments, ``STATE`` the attributes reported back."""

    ARGS: tuple[str, ...] = ()
    STATE: tuple[str, ...] = ()

    def spec(self) -> dict[str, Any]:
        return {"kind": "fixture", "name": type(self).__name__, "args": {k: getattr(self, k) for k in self.ARGS}}

    def state(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.STATE}

    def prepare(self) -> None:
        """Set-up that belongs on the student's side (GPU buffers, say): run by :func:`build` there."""

    def update(self, state: dict[str, Any]) -> None:
        for k in self.STATE:
            if k in state and isinstance(state[k], (int, float)) and not isinstance(state[k], bool):
                setattr(self, k, state[k])


class CountingCall(Fixture):
    """A callable that counts its calls and sleeps ``warm_s`` seconds in its first ``slow_calls`` calls,
    ``s`` seconds after that."""

    ARGS = ("slow_calls", "warm_s", "s")
    STATE = ("calls",)

    def __init__(self, slow_calls: int = 0, warm_s: float = 0.0, s: float = 0.0):
        self.calls, self.slow_calls, self.warm_s, self.s = 0, slow_calls, warm_s, s

    def __call__(self) -> None:
        self.calls += 1
        time.sleep(self.warm_s if self.calls <= self.slow_calls else self.s)

    @property
    def expected_seconds(self) -> float:
        """Seconds its calls so far must have slept: what a judge's clock can check."""
        return min(self.calls, self.slow_calls) * self.warm_s + max(0, self.calls - self.slow_calls) * self.s


class CycleCall(Fixture):
    """A callable that counts its calls and sleeps ``sleeps[0]``, ``sleeps[1]``, ... seconds in turn, cycling."""

    ARGS = ("sleeps",)
    STATE = ("calls",)

    def __init__(self, sleeps: list[float] | tuple[float, ...] = (0.0,)):
        self.calls, self.sleeps = 0, [float(s) for s in sleeps]

    def __call__(self) -> None:
        self.calls += 1
        time.sleep(self.sleeps[(self.calls - 1) % len(self.sleeps)])

    @property
    def expected_seconds(self) -> float:
        """Seconds its calls so far must have slept."""
        return sum(self.sleeps[i % len(self.sleeps)] for i in range(int(self.calls)))


class MatmulCall(Fixture):
    """A callable that queues one ``n x n`` float32 matrix product on the GPU (``torch.mm(a, a, out=...)``)
    per call, and counts its calls. It does *not* synchronise in its calls, as a real GPU workload does
    not: a benchmark must wait for the GPU itself. :meth:`prepare` (run where the calls will run) allocates,
    runs one product and synchronises, so that neither the allocation nor cuBLAS's start-up lands in the
    calls (a fixture built by hand, in a notebook, does it in its first call)."""

    ARGS = ("n",)
    STATE = ("calls",)

    def __init__(self, n: int = 4096):
        self.calls, self.n, self.a, self.out = 0, int(n), None, None

    def prepare(self) -> None:
        import torch

        if self.a is not None:
            return
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        self.a = torch.randn(self.n, self.n, device=dev, dtype=torch.float32)
        self.out = torch.empty_like(self.a)
        torch.mm(self.a, self.a, out=self.out)
        if dev == "cuda":
            torch.cuda.synchronize()

    def __call__(self) -> None:
        import torch

        self.prepare()
        self.calls += 1
        torch.mm(self.a, self.a, out=self.out)


FIXTURES: dict[str, type[Fixture]] = {"CountingCall": CountingCall, "CycleCall": CycleCall,
                                      "MatmulCall": MatmulCall}


def build(spec: dict[str, Any]) -> Fixture:
    fixture = FIXTURES[spec["name"]](**spec["args"])
    fixture.prepare()
    return fixture
