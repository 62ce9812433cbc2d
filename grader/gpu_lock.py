"""One GPU shared by several submissions' correctness work, and held alone while a kernel is timed.

Correctness does not need a GPU to itself; timing does. When several submissions are graded at once on
one GPU, each of them takes the GPU's lock *shared* while its code runs (a student cell, a judge's call)
and *exclusive* while the judge times a kernel (:func:`grader.judge_timing.timed_round`), so no other
submission's work overlaps a timed loop.

The lock is a pair of ``flock`` files per GPU in a folder of the machine (``COURSE_GPU_LOCK_DIR``; one
folder per node on a cluster): ``gpu<N>.lock`` is the read-write lock, and ``gpu<N>.gate`` a turnstile
that a waiting timer holds, so that a stream of shared holders cannot starve it. ``flock`` locks belong to
open files and vanish with the process that held them: a grader that dies never leaves a GPU locked.
The folder and files are the grader's: the sandbox never sees them.

Without ``COURSE_GPU_LOCK_DIR`` every method is a no-op (one submission per GPU, as the local pool runs).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

LOCK_DIR_ENV = "COURSE_GPU_LOCK_DIR"


class GpuLock:
    """The shared/exclusive lock of one GPU, for one grading process."""

    def __init__(self, folder: Path | None, gpu: str = "0"):
        self.folder = folder
        self.gpu = gpu
        self._depth = 0          # nested shared holds of this process count once
        self._exclusive = False  # this process holds the GPU alone: its own shared holds are implied

    @classmethod
    def from_env(cls) -> "GpuLock":
        """The lock of this process's GPU (first of ``CUDA_VISIBLE_DEVICES``), or a no-op without the folder."""
        folder = os.environ.get(LOCK_DIR_ENV)
        gpu = (os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0")
        return cls(Path(folder) if folder else None, gpu)

    def _open(self, suffix: str) -> int:
        assert self.folder is not None
        self.folder.mkdir(parents=True, exist_ok=True)
        return os.open(self.folder / f"gpu{self.gpu}.{suffix}", os.O_RDWR | os.O_CREAT, 0o600)

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        """Held while a submission's code may use the GPU for correctness work."""
        if self.folder is None or self._depth or self._exclusive:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        gate, rw = self._open("gate"), self._open("lock")
        try:
            fcntl.flock(gate, fcntl.LOCK_EX)      # wait behind a timer that is waiting
            fcntl.flock(rw, fcntl.LOCK_SH)
            fcntl.flock(gate, fcntl.LOCK_UN)
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
        finally:
            os.close(rw)                          # closing releases the flock
            os.close(gate)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Held while the judge times a kernel: no other submission's code runs on this GPU meanwhile."""
        if self.folder is None:
            yield
            return
        if self._depth:
            raise RuntimeError("a grading process asked for the GPU alone while it held it shared")
        gate, rw = self._open("gate"), self._open("lock")
        try:
            fcntl.flock(gate, fcntl.LOCK_EX)      # new shared holders now wait at the gate
            fcntl.flock(rw, fcntl.LOCK_EX)        # ... and the ones inside finish their cell or call
            self._exclusive = True
            try:
                yield
            finally:
                self._exclusive = False
        finally:
            os.close(rw)
            os.close(gate)
