"""The GPU lock of concurrent grading (grader/gpu_lock.py), with real processes and real flock files.

Correctness work of several submissions may share a GPU; a timed loop must never overlap anyone else's work.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

import pytest

from grader.gpu_lock import GpuLock

CTX = mp.get_context("spawn")


def _hold(folder: str, mode: str, seconds: float, log: str, start_after: float = 0.0) -> None:
    time.sleep(start_after)
    lock = GpuLock(Path(folder))
    with (lock.exclusive() if mode == "exclusive" else lock.shared()):
        began = time.monotonic()
        time.sleep(seconds)
        ended = time.monotonic()
    with open(log, "a") as f:
        f.write(f"{mode} {os.getpid()} {began} {ended}\n")


def _intervals(log: Path) -> list[tuple[str, float, float]]:
    rows = [line.split() for line in log.read_text().splitlines()]
    return [(mode, float(a), float(b)) for mode, _, a, b in rows]


def _run(procs: list[mp.Process]) -> None:
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0


def test_shared_holders_overlap_and_a_timer_overlaps_nobody(tmp_path):
    log = tmp_path / "log"
    procs = [CTX.Process(target=_hold, args=(str(tmp_path), "shared", 1.0, str(log))) for _ in range(2)]
    procs.append(CTX.Process(target=_hold, args=(str(tmp_path), "exclusive", 0.5, str(log), 0.3)))
    # a shared holder arriving while the timer waits must wait behind it (no starvation of the timer)
    procs.append(CTX.Process(target=_hold, args=(str(tmp_path), "shared", 0.2, str(log), 0.6)))
    _run(procs)
    rows = _intervals(log)
    shared = [r for r in rows if r[0] == "shared"]
    (_, t0, t1), = [r for r in rows if r[0] == "exclusive"]
    first_two = sorted(shared, key=lambda r: r[1])[:2]
    assert first_two[1][1] < first_two[0][2], "two shared holders ran at the same time"
    for _, a, b in shared:
        assert b <= t0 + 0.01 or a >= t1 - 0.01, f"shared work {a:.2f}-{b:.2f} overlapped timing {t0:.2f}-{t1:.2f}"
    late = max(shared, key=lambda r: r[1])
    assert late[1] >= t1 - 0.01, "the late shared holder went ahead of the waiting timer"


def _hold_forever(folder: str) -> None:
    with GpuLock(Path(folder)).exclusive():
        time.sleep(600)


def test_a_grader_that_dies_holding_the_gpu_frees_it(tmp_path):
    p = CTX.Process(target=_hold_forever, args=(str(tmp_path),))
    p.start()
    time.sleep(1.0)
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)
    t = time.monotonic()
    with GpuLock(tmp_path).exclusive():
        pass
    assert time.monotonic() - t < 2


def test_without_a_lock_folder_nothing_waits_and_nesting_is_refused(tmp_path):
    free = GpuLock(None)
    with free.shared(), free.exclusive():
        pass
    lock = GpuLock(tmp_path)
    with lock.exclusive(), lock.shared():  # the timer's own calls are part of its exclusive hold
        pass
    with lock.shared(), pytest.raises(RuntimeError, match="held it shared"):
        with lock.exclusive():
            pass
