"""The torch and Triton versions this course is tested with, and a check against them.

The ranges here are the single source of truth: ``pyproject.toml`` and ``environment.yml`` must agree
with them (``tests/test_packaging.py`` checks that).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: package -> (lowest tested version, first version not tested). Colab (2026): torch 2.11 + triton 3.6;
#: ModelScope images: torch 2.9 (+ triton 3.5); CI: the CPU build of torch 2.13 + triton 3.9.
TESTED_RANGES: dict[str, tuple[str, str]] = {
    "torch": ("2.9", "2.14"),
    "triton": ("3.5", "3.10"),
}


def version_tuple(version: str) -> tuple[int, ...]:
    """``"2.11.0+cu130"`` -> ``(2, 11, 0)``; pre-release and local tags are ignored."""
    numbers = re.match(r"^(\d+(?:\.\d+)*)", version)
    if numbers is None:
        raise ValueError(f"cannot read a version number from {version!r}")
    return tuple(int(part) for part in numbers.group(1).split("."))


@dataclass(frozen=True)
class VersionVerdict:
    """Whether one installed package lies inside the tested range."""

    package: str
    installed: str
    low: str
    high: str

    @property
    def tested(self) -> bool:
        v = version_tuple(self.installed)
        return version_tuple(self.low) <= v < version_tuple(self.high)

    def describe(self) -> str:
        span = f">={self.low},<{self.high}"
        if self.tested:
            return f"{self.package} {self.installed} (tested range {span})"
        return (f"{self.package} {self.installed} is outside the tested range {span}: "
                f"the notebooks may still work, but nobody has checked this pairing")


def check_versions(installed: dict[str, str]) -> list[VersionVerdict]:
    """Verdicts for the packages in ``installed`` that have a tested range."""
    return [VersionVerdict(name, installed[name], *TESTED_RANGES[name])
            for name in TESTED_RANGES if name in installed]
