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


FIXTURES: dict[str, type[Fixture]] = {"CountingCall": CountingCall}


def build(spec: dict[str, Any]) -> Fixture:
    return FIXTURES[spec["name"]](**spec["args"])
