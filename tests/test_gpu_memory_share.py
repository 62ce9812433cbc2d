"""GPU memory shared out when it runs out (grader/gpu_lock.py: GpuLock.reclaim_memory), with real processes.

Each submission here is what the GPU lock sees of one: a judge process that registers its sandboxes in a real lock
folder (:meth:`grader.gpu_lock.GpuLock.register`), each sandbox a real process tree below it (a shell, the sandbox's
first process, and a child of it, standing for the notebook's kernel) found as the freezer finds a sandbox without
cgroups. The one stand-in is NVML's reading (this machine has no GPU): a :class:`grader.gpu_lock.GpuMemory` that
says which of those processes holds how much of an 80 GiB GPU.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import grader.gpu_lock as gl
from grader.gpu_lock import GIB, KILL_NOTE, GpuLock, GpuMemory, kill_note
from grader.judge import run_test_cell_on_a_shared_gpu

ROOT = Path(__file__).resolve().parents[1]

#: A judge: registers ``sandboxes`` sandboxes of its own on the GPU, each a shell below it with one child (the
#: "kernel"), writes their pids, and waits.
JUDGE = r"""
import os, subprocess, sys, time
from pathlib import Path
from grader.gpu_lock import GpuLock

folder, staging, sandboxes = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
for i in range(sandboxes):
    box = staging / f"box{i}"
    box.mkdir(parents=True)
    root = subprocess.Popen(["/bin/sh", "-c", f"sleep 600 & echo $! > {box / 'kernel.pid'}; wait"])
    (box / "sandbox.pid").write_text(str(root.pid))
    GpuLock(folder).register(f"{staging.name}-{i}", {"name": f"{staging.name}-{i}", "pidfile": str(box / "sandbox.pid"),
                                                     "judge_pid": os.getpid() if i == 0 else None,
                                                     "cgroup2": None, "cgroup1": None})
(staging / "ready").write_text("ready")
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _written(path: Path) -> bool:
    with contextlib.suppress(OSError):
        return bool(path.read_text().strip())
    return False


def _wait_for(check, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


class Submission:
    """A judge process and its sandboxes' process trees, registered on GPU 0 of ``folder``."""

    def __init__(self, folder: Path, staging: Path, sandboxes: int = 1):
        self.staging = staging
        self.judge = subprocess.Popen([sys.executable, "-c", JUDGE, str(folder), str(staging), str(sandboxes)],
                                      cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True,
                                      stdin=subprocess.DEVNULL)
        self.boxes = [staging / f"box{i}" for i in range(sandboxes)]
        try:
            _wait_for(lambda: (staging / "ready").exists() and all(_written(b / "kernel.pid") for b in self.boxes))
        except BaseException:
            self.close()
            raise
        self.roots = [int((b / "sandbox.pid").read_text()) for b in self.boxes]
        self.kernels = [int((b / "kernel.pid").read_text()) for b in self.boxes]

    @property
    def kernel(self) -> int:
        return self.kernels[0]

    def sandbox_alive(self) -> list[bool]:
        return [_alive(p) for p in self.roots + self.kernels]

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.judge.pid, signal.SIGKILL)   # its session: the judge and the trees below it
        self.judge.wait(10)


@pytest.fixture
def gpu(tmp_path):
    """Three submissions registered on one GPU: ``hog``, ``honest`` and ``idle``."""
    folder = tmp_path / "locks"
    subs: dict[str, Submission] = {}
    try:
        for name in ("hog", "honest", "idle"):
            subs[name] = Submission(folder, tmp_path / name)
        yield folder, subs
    finally:
        for sub in subs.values():
            sub.close()


@contextlib.contextmanager
def own_sandbox(folder: Path, tmp_path: Path, judge_pid: int | None):
    """A sandbox of this process (a judge too), registered as ``mine``: (its staging folder, its kernel's pid, the
    lock); its process tree is killed on leaving."""
    box = tmp_path / "mine"
    box.mkdir()
    root = subprocess.Popen(["/bin/sh", "-c", f"sleep 600 & echo $! > {box / 'kernel.pid'}; wait"],
                            start_new_session=True)
    try:
        (box / "sandbox.pid").write_text(str(root.pid))
        _wait_for(lambda: _written(box / "kernel.pid"))
        lock = GpuLock(folder)
        lock.register("mine", {"name": "mine", "pidfile": str(box / "sandbox.pid"), "judge_pid": judge_pid,
                               "cgroup2": None, "cgroup1": None})
        yield box, int((box / "kernel.pid").read_text()), lock
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(root.pid, signal.SIGKILL)
        root.wait(10)


def reader(by_pid: dict[int, float], total_gib: float = 80, calls: list | None = None):
    """NVML's reading, standing in: these pids hold these GiB of a ``total_gib`` GPU."""
    def read(gpu: str) -> GpuMemory:
        if calls is not None:
            calls.append(gpu)
        return GpuMemory(int(total_gib * GIB), {pid: int(gib * GIB) for pid, gib in by_pid.items()})
    return read


def test_the_submission_holding_most_of_the_gpu_is_killed_and_told_why_the_others_live(gpu, capfd):
    folder, subs = gpu
    hog, honest, idle = subs["hog"], subs["honest"], subs["idle"]
    lock = GpuLock(folder)
    taken = lock.reclaim_memory(read=reader({hog.kernel: 60, honest.kernel: 3}))
    assert [(r.owner, r.own, r.sandboxes, r.submissions) for r in taken] == [(hog.judge.pid, False, ("hog-0",), 3)]
    assert taken[0].held == 60 * GIB and taken[0].limit == gl.limit(80 * GIB, 3) == 44 * GIB
    _wait_for(lambda: hog.sandbox_alive() == [False, False])   # the kernel and the sandbox's first process
    assert set(taken[0].pids) == {hog.roots[0], hog.kernel}
    assert _alive(hog.judge.pid), "a judge is never killed"
    assert honest.sandbox_alive() == [True, True] and idle.sandbox_alive() == [True, True]
    assert _alive(honest.judge.pid) and _alive(idle.judge.pid)
    note = kill_note(hog.boxes[0])
    assert note is not None and "60.0 GiB" in note and "44.0 GiB" in note and "80 GiB" in note
    assert "3 submissions graded on it at once" in note and "kernel restarts" in note
    assert not (hog.boxes[0] / KILL_NOTE).exists(), "the note is read once"
    assert kill_note(honest.boxes[0]) is None and kill_note(idle.boxes[0]) is None
    log = capfd.readouterr().err
    assert "course-gpu-lock: GPU 0: a test ran out of memory" in log and "hog-0: 60.0 GiB" in log
    assert lock.reclaims[-1]["killed"] == [["hog-0"]] and lock.reclaims[-1]["held_gib"] == [60.0, 3.0, 0.0]


def test_memory_of_all_the_sandboxes_of_one_submission_counts_together(tmp_path):
    """The kernel's sandbox and the re-run's belong to one judge: 30 + 20 GiB is one submission's 50, over 44."""
    folder = tmp_path / "locks"
    subs = {}
    try:
        for name, boxes in (("two", 2), ("honest", 1), ("idle", 1)):
            subs[name] = Submission(folder, tmp_path / name, sandboxes=boxes)
        two = subs["two"]
        taken = GpuLock(folder).reclaim_memory(read=reader({two.kernels[0]: 30, two.kernels[1]: 20}))
        assert [r.sandboxes for r in taken] == [("two-0", "two-1")] and taken[0].held == 50 * GIB
        _wait_for(lambda: not any(two.sandbox_alive()))
        assert kill_note(two.boxes[0]) and kill_note(two.boxes[1])
        assert subs["honest"].sandbox_alive() == [True, True]
    finally:
        for sub in subs.values():
            sub.close()


def test_a_judge_is_never_killed_nor_counted_however_much_it_holds(gpu):
    """The judges are trusted (references, comparisons): only processes of sandboxes are counted and killed."""
    folder, subs = gpu
    hog, honest = subs["hog"], subs["honest"]
    taken = GpuLock(folder).reclaim_memory(read=reader({hog.judge.pid: 70, hog.kernel: 1, honest.kernel: 3,
                                                              os.getpid(): 70}))
    assert taken == []
    time.sleep(0.2)
    assert _alive(hog.judge.pid) and hog.sandbox_alive() == [True, True]
    assert kill_note(hog.boxes[0]) is None


def test_nothing_is_killed_where_nvml_cannot_name_the_processes(gpu, capfd):
    folder, subs = gpu
    assert GpuLock(folder).reclaim_memory(read=lambda gpu: None) == []
    time.sleep(0.2)
    assert all(s.sandbox_alive() == [True, True] for s in subs.values())
    assert "nothing reclaimed" in capfd.readouterr().err


def test_nothing_is_reclaimed_without_a_lock_folder(gpu):
    """One submission per GPU: running out of memory is its own doing (NVML is not even read)."""
    _, subs = gpu
    calls: list = []
    assert GpuLock(None).reclaim_memory(read=reader({subs["hog"].kernel: 79}, calls=calls)) == []
    time.sleep(0.2)
    assert calls == [] and subs["hog"].sandbox_alive() == [True, True]


@pytest.mark.parametrize("held", [20, 40], ids=["under-the-share", "an-honest-timed-round"])
def test_nothing_is_killed_when_nobody_holds_more_than_a_submission_may(gpu, held):
    """20 GiB each is under 80 / 3; 40 GiB is over it, but an honest timed round may hold that much (half of the
    free memory, at most 40 GiB, of input sets: grader.judge_timing.calls_for), so it is not held to less."""
    folder, subs = gpu
    lock = GpuLock(folder)
    assert lock.reclaim_memory(read=reader({s.kernel: held for s in subs.values()})) == []
    time.sleep(0.2)
    assert all(s.sandbox_alive() == [True, True] for s in subs.values())
    assert lock.reclaims[-1]["killed"] == [] and lock.reclaims[-1]["limit_gib"] == 44.0


def test_the_asking_judges_own_submission_is_not_exempt(gpu, tmp_path):
    """This process is a judge too, with a sandbox of its own that holds 60 GiB: it is the hog, and is killed;
    the others live. Its peak is kept."""
    folder, subs = gpu
    with own_sandbox(folder, tmp_path, os.getpid()) as (box, kernel, lock):
        taken = lock.reclaim_memory(read=reader({kernel: 60, subs["honest"].kernel: 10}))
        assert [(r.own, r.sandboxes, r.submissions) for r in taken] == [(True, ("mine",), 4)]
        _wait_for(lambda: not _alive(kernel))
        assert all(s.sandbox_alive() == [True, True] for s in subs.values())
        assert lock.peak_gpu_bytes == 60 * GIB and lock.reclaims[-1]["own_gib"] == 60.0
        assert "60.0 GiB" in (kill_note(box) or "")


def test_the_limit_is_the_fair_share_but_never_less_than_an_honest_timed_round():
    assert gl.limit(80 * GIB, 3) == 44 * GIB            # 26.7 GiB shares: an honest round's 40 + 4
    assert gl.limit(141 * GIB, 2) == 141 * GIB // 2     # two on an H200: half each
    assert gl.limit(24 * GIB, 3) == 16 * GIB            # a small GPU: half of it, + 4
    assert gl.limit(80 * GIB, 1) == 80 * GIB


@pytest.mark.parametrize("layout", [gl._ProcessInfo, gl._ProcessInfoR535], ids=["documented", "r535"])
def test_nvmls_process_list_is_read_in_either_layout_the_drivers_write(layout):
    """Two processes, as the driver writes them (the first R535 drivers: 8 more bytes an entry); read in the wrong
    layout the second entry's pid would be 0 (or memory past the GPU's), so the right layout is the one that parses.
    A process whose memory NVML does not know is left out."""
    rows = [layout(pid=4242, usedGpuMemory=60 * GIB, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF),
            layout(pid=4343, usedGpuMemory=3 * GIB, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF),
            layout(pid=4444, usedGpuMemory=gl.NVML_VALUE_NOT_AVAILABLE, gpuInstanceId=0xFFFFFFFF,
                   computeInstanceId=0xFFFFFFFF)]
    buf = (ctypes.c_ubyte * (8 * ctypes.sizeof(gl._ProcessInfoR535)))()
    ctypes.memmove(buf, (layout * 3)(*rows), 3 * ctypes.sizeof(layout))
    assert gl.parse_processes(buf, 3, 80 * GIB) == GpuMemory(80 * GIB, {4242: 60 * GIB, 4343: 3 * GIB})
    garbage = (ctypes.c_ubyte * 256)(*([0xAB] * 256))
    assert gl.parse_processes(garbage, 3, 80 * GIB) is None


# ---------------------------------------------------------------------------------------------------
# The judge reclaims before each new try of a test that ran out of memory
# ---------------------------------------------------------------------------------------------------

OOM_WHILE_THE_HOG_LIVES = """
state["tries"] += 1
if state["alive"](state["hog"]):
    raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
3
"""


def test_an_honest_test_gets_its_memory_back_from_the_hog_before_its_next_try(gpu):
    """The test fails for want of memory while the hog's kernel lives; the judge's reclaim (the lock's, for real)
    kills the hog between the tries, and the next try passes. Its notes say how many submissions memory was
    reclaimed from, never whose."""
    import torch

    folder, subs = gpu
    hog, honest = subs["hog"], subs["honest"]
    lock = GpuLock(folder)
    events: list[str] = []

    def reclaim():
        events.append("reclaim")
        return lock.reclaim_memory(read=reader({hog.kernel: 60, honest.kernel: 3}))

    def sleep(seconds: float) -> None:   # the judge's wait: the killed process is gone by its end
        events.append(f"sleep {seconds:g}")
        _wait_for(lambda: not _alive(hog.kernel), timeout_s=seconds)

    state = {"tries": 0, "alive": _alive, "hog": hog.kernel}
    outcome = run_test_cell_on_a_shared_gpu(OOM_WHILE_THE_HOG_LIVES, {"state": state, "torch": torch}, "test_x",
                                            sleep=sleep, reclaim=reclaim)
    assert outcome.error is None and outcome.score == 3 and state["tries"] == 2
    assert events == ["reclaim", "sleep 5"], "memory is reclaimed before the wait of the new try"
    assert outcome.notes[0] == "tried 2 times: the GPU ran out of memory before"
    assert "reclaimed GPU memory from 1 other submission(s)" in outcome.notes[1] and len(outcome.notes) == 2
    assert not any("hog" in n or str(hog.judge.pid) in n for n in outcome.notes), "no other student is named"
    assert honest.sandbox_alive() == [True, True]


def test_a_test_that_never_runs_out_of_memory_reclaims_nothing(gpu):
    import torch

    folder, subs = gpu
    calls: list = []
    outcome = run_test_cell_on_a_shared_gpu("3", {"torch": torch}, "test_x", sleep=lambda s: None,
                                            reclaim=lambda: calls.append(1) or GpuLock(folder).reclaim_memory(
                                                read=reader({subs["hog"].kernel: 60})))
    assert outcome.score == 3 and calls == [] and outcome.notes == []
    assert subs["hog"].sandbox_alive() == [True, True]


def test_when_its_own_notebook_was_the_hog_the_note_says_so_and_a_failing_reclaim_costs_no_try():
    import torch

    from grader.gpu_lock import Reclaimed

    state = {"tries": 0, "failing": 2, "error": torch.cuda.OutOfMemoryError("CUDA out of memory.")}
    cell = 'state["tries"] += 1\nif state["tries"] <= state["failing"]:\n    raise state["error"]\n3\n'
    answers = iter([[Reclaimed(os.getpid(), True, ("mine",), (1234,), 60 * GIB, 44 * GIB, 3)], RuntimeError("bug")])

    def reclaim():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    outcome = run_test_cell_on_a_shared_gpu(cell, {"state": state}, "test_x", sleep=lambda s: None, reclaim=reclaim)
    assert outcome.score == 3 and state["tries"] == 3
    assert outcome.notes[1].startswith("this notebook's own processes held more than its share")
    assert not any("other submission" in n for n in outcome.notes)


def test_a_timed_hold_records_what_the_judges_own_sandboxes_hold(gpu, tmp_path, monkeypatch):
    """At each timed hold the lock reads (NVML, standing in) what this judge's own sandboxes hold: kept per hold
    and as the most seen."""
    folder, subs = gpu
    with own_sandbox(folder, tmp_path, None) as (_, kernel, lock):
        held = iter([12, 30, 7])
        monkeypatch.setattr(gl, "process_memory", lambda gpu: GpuMemory(
            80 * GIB, {kernel: int(next(held) * GIB), subs["hog"].kernel: 70 * GIB}))
        for _ in range(3):
            with lock.exclusive():
                pass
        assert [h["own_gpu_gib"] for h in lock.history] == [12.0, 30.0, 7.0]
        assert lock.peak_gpu_bytes == 30 * GIB


def test_a_hoarder_killed_for_memory_again_after_its_replay_is_not_replayed_a_third_time(tmp_path):
    """A notebook the GPU lock kills for the memory it holds restarts and replays its cells, which may take the memory
    again: the second such kill ends its run (the cells left are not run, and say why), where a death of another
    kind still restarts it. grader.execute.CourseExecute reads the lock's real note, as when grading."""
    import logging
    from types import SimpleNamespace

    import nbformat
    from nbclient.exceptions import DeadKernelError

    from grader.execute import CourseExecute
    from grader.gpu_lock import is_memory_note, memory_note

    note = memory_note("0", 60 * GIB, 44 * GIB, 80 * GIB, 2)
    assert is_memory_note(note) and not is_memory_note("killed: still running kernels 10 s after it was frozen")
    ex = CourseExecute()
    ex.log = logging.getLogger("test")
    ex.nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"x{i} = {i}") for i in range(6)])
    ex._sandbox, ex._relaunch_box, ex._memory_kills = SimpleNamespace(staging=tmp_path), None, 0
    crashed: list[int] = []
    assert ex._after_death(DeadKernelError("a crash"), 0, crashed) == 1          # not the lock's doing: restarted
    (tmp_path / KILL_NOTE).write_text(note)
    assert ex._after_death(DeadKernelError("killed"), 1, crashed) == 2          # the first memory kill: replayed
    assert "60.0 GiB" in ex.nb.cells[1].outputs[-1]["evalue"] and ex._memory_kills == 1
    (tmp_path / KILL_NOTE).write_text(note)
    assert ex._after_death(DeadKernelError("killed"), 2, crashed) is None       # took it again: no third run
    assert crashed == [0, 1, 2] and ex._memory_kills == 2
    for cell in ex.nb.cells[3:]:
        assert cell.outputs[0]["ename"] == "NotRun" and "2 times for holding more GPU memory" in \
            cell.outputs[0]["evalue"]
    # deaths of other kinds end the run only past max_restarts, and say so
    ex.max_restarts, ex._memory_kills, crashed = 1, 0, []
    assert ex._after_death(DeadKernelError("a crash"), 0, crashed) == 1
    assert ex._after_death(DeadKernelError("a crash"), 1, crashed) is None
    assert "the kernel died 2 times" in ex.nb.cells[2].outputs[0]["evalue"]
