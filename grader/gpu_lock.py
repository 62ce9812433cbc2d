"""One GPU shared by several submissions' correctness work, and held alone while a kernel is timed.

Correctness does not need a GPU to itself; timing does. When several submissions are graded at once on
one GPU, each of them takes the GPU's lock *shared* while its code runs (a student cell, a judge's test
cell or call) and *exclusive* while the judge times a kernel (:func:`grader.judge_timing.timed_round`),
so no other submission's work overlaps a timed loop.

The lock is a pair of ``flock`` files per GPU in a folder of the machine (``COURSE_GPU_LOCK_DIR``; one
folder per node on a cluster): ``gpu<N>.lock`` is the read-write lock, and ``gpu<N>.gate`` a turnstile
that a waiting timer holds, so that a stream of shared holders cannot starve it. ``flock`` locks belong to
open files and vanish with the process that held them: a grader that dies never leaves a GPU locked.
The folder and files are the grader's: the sandbox never sees them.

**Work the lock cannot see.** A submission's process may keep using the GPU outside the cells the grader
runs (a background thread that goes on launching kernels after its cell returned). So every sandbox on a
GPU registers itself in ``gpu<N>.members/`` (:meth:`GpuLock.register`), and the holder of the exclusive
lock *freezes* every other registered sandbox (:mod:`grader.sandbox`: the cgroup freezer, or SIGSTOP of
its process tree), waits until the GPU has no kernel running (NVML's utilisation counter reads 0), times,
and thaws them. What it froze is written to ``gpu<N>.frozen``: if the timer dies before it thaws, the next
process that takes the lock (shared or exclusive) thaws them, so a crashed timer never leaves a sandbox
stopped.

Without ``COURSE_GPU_LOCK_DIR`` every method is a no-op (one submission per GPU).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

LOCK_DIR_ENV = "COURSE_GPU_LOCK_DIR"
#: The longest wait for the GPU to drain after the other sandboxes were frozen (their queued kernels run
#: to the end); past it the timer goes on and says so in the log.
DRAIN_TIMEOUT_S = 20.0


class GpuLock:
    """The shared/exclusive lock of one GPU, for one grading process."""

    def __init__(self, folder: Path | None, gpu: str = "0"):
        self.folder = folder
        self.gpu = gpu
        self._depth = 0             # nested shared holds of this process count once
        self._exclusive = False     # this process holds the GPU alone: its own shared holds are implied
        self._rw: int | None = None  # the open lock file of the outermost shared hold
        #: what the exclusive holds of this process did: [frozen sandboxes, drain ms], for the log and tests
        self.history: list[dict] = []

    @classmethod
    def from_env(cls) -> "GpuLock":
        """The lock of this process's GPU (first of ``CUDA_VISIBLE_DEVICES``), or a no-op without the folder."""
        folder = os.environ.get(LOCK_DIR_ENV)
        gpu = (os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0")
        return cls(Path(folder) if folder else None, gpu)

    # -- files -----------------------------------------------------------------------------------------
    def _open(self, suffix: str) -> int:
        assert self.folder is not None
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        return os.open(self.folder / f"gpu{self.gpu}.{suffix}", os.O_RDWR | os.O_CREAT, 0o600)

    @property
    def _members(self) -> Path:
        assert self.folder is not None
        return self.folder / f"gpu{self.gpu}.members"

    @property
    def _marker(self) -> Path:
        assert self.folder is not None
        return self.folder / f"gpu{self.gpu}.frozen"

    # -- registry of sandboxes on this GPU -------------------------------------------------------------
    def register(self, name: str, member: dict) -> Path | None:
        """Announce a sandbox on this GPU (``member``: what :func:`grader.sandbox.freeze` needs); returns the
        file to remove with :meth:`unregister`, or None when there is no lock folder."""
        if self.folder is None:
            return None
        self._members.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self._members / f"{name}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({**member, "owner": os.getpid()}))
        os.replace(tmp, path)
        return path

    @staticmethod
    def unregister(path: Path | None) -> None:
        if path is not None:
            path.unlink(missing_ok=True)

    def _others(self) -> list[dict]:
        """Registered sandboxes of other, living grading processes (files of dead ones are removed)."""
        out = []
        for f in sorted(self._members.glob("*.json")) if self._members.is_dir() else []:
            try:
                member = json.loads(f.read_text())
                owner = int(member["owner"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if owner == os.getpid():
                continue
            if not _alive(owner):
                f.unlink(missing_ok=True)
                continue
            out.append(member)
        return out

    # -- freezing --------------------------------------------------------------------------------------
    def _thaw_stale(self) -> None:
        """Thaw what a timer froze and could not thaw (it died): called by whoever holds the lock next."""
        try:
            stale = json.loads(self._marker.read_text())
        except (OSError, ValueError):
            return
        from grader.sandbox import thaw

        for handle in stale.get("frozen", []):
            thaw(handle)
        self._marker.unlink(missing_ok=True)

    def _freeze_others(self) -> list[dict]:
        from grader.sandbox import freeze

        frozen = []
        try:
            for member in self._others():
                handle = freeze(member)
                if handle is not None:
                    frozen.append(handle)
                    # written after each one: a timer killed half-way leaves a complete list to thaw
                    self._marker.write_text(json.dumps({"by": os.getpid(), "frozen": frozen}))
        except BaseException:
            self._thaw(frozen)
            raise
        return frozen

    def _thaw(self, frozen: list[dict]) -> None:
        from grader.sandbox import thaw

        for handle in frozen:
            thaw(handle)
        self._marker.unlink(missing_ok=True)

    # -- the two holds ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        """Held while a submission's code (or its judge) may use the GPU for correctness work."""
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
            self._thaw_stale()
            self._rw = rw
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                self._rw = None
        finally:
            os.close(rw)                          # closing releases the flock
            os.close(gate)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Held while the judge times a kernel: no other submission's work runs on this GPU meanwhile.

        Every other sandbox registered on this GPU is frozen and the GPU drained before the body runs, and
        thawed after it, whatever happens in it. Called inside this process's own shared hold (a judge's test
        cell that times), the shared hold is given up for the exclusive one and taken again afterwards."""
        if self.folder is None or self._exclusive:
            yield
            return
        upgraded = self._rw
        if upgraded is not None:
            fcntl.flock(upgraded, fcntl.LOCK_UN)  # two holds of one process on one file would deadlock
        gate, rw = self._open("gate"), self._open("lock")
        try:
            fcntl.flock(gate, fcntl.LOCK_EX)      # new shared holders now wait at the gate
            fcntl.flock(rw, fcntl.LOCK_EX)        # ... and the ones inside finish their cell or call
            self._exclusive = True
            self._thaw_stale()
            frozen: list[dict] = []
            try:
                frozen = self._freeze_others()
                entry = {"frozen": [h.get("name", "?") + ":" + h["mode"] for h in frozen], "drain_ms": 0.0}
                if frozen:
                    entry["drain_ms"] = drain(self.gpu)
                    print(f"course-gpu-lock: GPU {self.gpu}: froze {len(frozen)} other sandbox(es) "
                          f"({', '.join(entry['frozen'])}), GPU drained in {entry['drain_ms']:.0f} ms",
                          file=sys.stderr, flush=True)
                self.history.append(entry)
                yield
            finally:
                self._thaw(frozen)
                self._exclusive = False
        finally:
            os.close(rw)
            if upgraded is not None:              # back to this process's shared hold, behind waiting timers
                fcntl.flock(upgraded, fcntl.LOCK_SH)
            os.close(gate)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---------------------------------------------------------------------------------------------------
# Has the GPU drained? NVML's utilisation counter, read through the driver's own library (no package)
# ---------------------------------------------------------------------------------------------------

class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


@functools.cache
def _nvml() -> ctypes.CDLL | None:
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        return lib if lib.nvmlInit_v2() == 0 else None
    except (OSError, AttributeError):
        return None


@functools.cache
def _device(gpu: str) -> ctypes.c_void_p | None:
    lib = _nvml()
    if lib is None:
        return None
    handle = ctypes.c_void_p()
    if gpu.isdigit():  # the grader sets CUDA_DEVICE_ORDER=PCI_BUS_ID, so CUDA's index is NVML's
        rc = lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(int(gpu)), ctypes.byref(handle))
    else:              # a UUID in CUDA_VISIBLE_DEVICES
        rc = lib.nvmlDeviceGetHandleByUUID(gpu.encode(), ctypes.byref(handle))
    return handle if rc == 0 else None


def utilization(gpu: str) -> int | None:
    """Percent of NVML's last sample period (1/6 s to 1 s) in which a kernel ran on this GPU; None if unknown."""
    handle = _device(gpu)
    if handle is None:
        return None
    util = _Utilization()
    if _nvml().nvmlDeviceGetUtilizationRates(handle, ctypes.byref(util)) != 0:  # type: ignore[union-attr]
        return None
    return int(util.gpu)


def drain(gpu: str, timeout_s: float = DRAIN_TIMEOUT_S) -> float:
    """Wait until no kernel has run on the GPU for one NVML sample period; milliseconds waited.

    The frozen sandboxes cannot queue more work, but what they queued before runs to its end; a timed loop
    that started meanwhile would share the GPU with it. No NVML (no GPU): nothing to wait for."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        busy = utilization(gpu)
        if not busy:  # 0, or None without NVML
            break
        time.sleep(0.01)
    else:
        print(f"course-gpu-lock: GPU {gpu} still busy after {timeout_s:.0f} s with the other sandboxes frozen; "
              "timing anyway", file=sys.stderr, flush=True)
    return (time.perf_counter() - t0) * 1e3


def device_name(gpu: str) -> str | None:
    """The GPU's name from NVML (no CUDA context is made), or None."""
    handle = _device(gpu)
    if handle is None:
        return None
    buf = ctypes.create_string_buffer(96)
    if _nvml().nvmlDeviceGetName(handle, buf, ctypes.c_uint(96)) != 0:  # type: ignore[union-attr]
        return None
    return buf.value.decode(errors="replace")
