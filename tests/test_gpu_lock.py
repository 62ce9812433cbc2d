"""The GPU lock of concurrent grading (grader/gpu_lock.py), with real processes, real flock files and real
bubblewrap sandboxes (on the CPU: what is frozen is the sandbox's processes, which a GPU only adds to).

Correctness work of several submissions may share a GPU; a timed loop must never overlap anyone else's work:
the timer freezes every other registered submission (sandbox and judge) and thaws it afterwards, also when
the timer raises or is killed.
"""

from __future__ import annotations

import contextlib
import json
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


def test_timers_take_turns_and_new_work_waits_behind_a_timer(tmp_path):
    log = tmp_path / "log"
    procs = [CTX.Process(target=_hold, args=(str(tmp_path), "exclusive", 0.6, str(log), 0.0)),
             CTX.Process(target=_hold, args=(str(tmp_path), "exclusive", 0.6, str(log), 0.1)),
             # correctness work that starts while a timer holds the GPU begins after it
             CTX.Process(target=_hold, args=(str(tmp_path), "shared", 0.1, str(log), 0.3))]
    _run(procs)
    rows = _intervals(log)
    timers = sorted((r for r in rows if r[0] == "exclusive"), key=lambda r: r[1])
    assert timers[1][1] >= timers[0][2] - 0.01, "two timed loops overlapped"
    (_, s0, _), = [r for r in rows if r[0] == "shared"]
    for _, t0, t1 in timers:
        assert not (t0 + 0.01 < s0 < t1 - 0.01), "correctness work started inside a timed loop"
    assert s0 >= timers[0][2] - 0.01, "correctness work went ahead of the timer that held the GPU"


def test_a_timer_does_not_wait_for_correctness_work_in_progress(tmp_path):
    """A long cell elsewhere is frozen (if registered), never waited for: the timer starts at once."""
    log = tmp_path / "log"
    _run([CTX.Process(target=_hold, args=(str(tmp_path), "shared", 2.0, str(log))),
          CTX.Process(target=_hold, args=(str(tmp_path), "exclusive", 0.2, str(log), 0.5))])
    rows = dict((m, (a, b)) for m, a, b in _intervals(log))
    assert rows["exclusive"][0] < rows["shared"][1] - 0.5


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


def test_without_a_lock_folder_nothing_waits_and_holds_nest(tmp_path):
    free = GpuLock(None)
    with free.shared(), free.exclusive():
        pass
    lock = GpuLock(tmp_path)
    with lock.exclusive(), lock.shared():  # the timer's own calls are part of its exclusive hold
        pass
    with lock.shared(), lock.exclusive():  # a judge's test cell that times a kernel inside it
        pass


# ---------------------------------------------------------------------------------------------------
# The other submissions on the GPU are frozen while a kernel is timed
# ---------------------------------------------------------------------------------------------------

def _time_alone(folder: str, files: list[str], seconds: float, log: str, crash: bool = False) -> None:
    """A timer: holds the GPU alone and reads the other submission's counters at the start and end of its hold."""
    lock = GpuLock(Path(folder))
    try:
        with lock.exclusive():
            time.sleep(0.2)
            first = [int(Path(f).read_text()) for f in files]
            time.sleep(seconds)
            last = [int(Path(f).read_text()) for f in files]
            Path(log).write_text(json.dumps({"first": first, "last": last, "frozen": lock.history[-1]["frozen"]}))
            if crash:
                raise RuntimeError("the timer crashed")
    except RuntimeError:
        pass


def _time_and_die(folder: str, ready: str) -> None:
    with GpuLock(Path(folder)).exclusive():
        Path(ready).write_text("frozen")
        time.sleep(600)


def _judge(folder: str, counter: str) -> None:
    """A grading process (no sandbox) registered on the GPU: it counts, as a judge's own work would run."""
    GpuLock(Path(folder)).register(f"judge-{os.getpid()}", {"name": f"judge-{os.getpid()}", "judge_pid": os.getpid(),
                                                           "pidfile": "/nonexistent"})
    n = 0
    while True:
        n += 1
        Path(counter + ".tmp").write_text(str(n))
        os.replace(counter + ".tmp", counter)
        time.sleep(0.01)


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.parametrize("cgroups", [True, False], ids=["cgroup", "sigstop"])
@pytest.mark.parametrize("crash", [False, True], ids=["ok", "timer-raises"])
def test_a_timed_loop_freezes_the_other_submissions_on_its_gpu(tmp_path, cgroups, crash):
    from tests.test_sandbox import CountingSandbox

    locks = tmp_path / "locks"
    sandbox = CountingSandbox(tmp_path, cgroups=cgroups)
    member = GpuLock(locks).register(sandbox.box.name, sandbox.box.member(judge=False))
    judge_counter = tmp_path / "judge-count"
    judge = CTX.Process(target=_judge, args=(str(locks), str(judge_counter)))
    judge.start()
    try:
        _wait_for(judge_counter)
        log = tmp_path / "timer.log"
        files = [str(f) for f in sandbox.files] + [str(judge_counter)]
        timer = CTX.Process(target=_time_alone, args=(str(locks), files, 1.0, str(log), crash))
        timer.start()
        timer.join(60)
        assert timer.exitcode == 0
        seen = json.loads(log.read_text())
        assert seen["first"] == seen["last"], f"another submission ran while a kernel was timed: {seen}"
        mode = sandbox.box.cgroup.freezer[0] if sandbox.box.cgroup.freezer else "signal"
        assert f"{sandbox.box.name}:{mode}" in seen["frozen"] and len(seen["frozen"]) == 2
        assert sandbox.advancing() == [True, True], "the sandbox was not thawed after the timed loop"
        before = int(judge_counter.read_text())
        time.sleep(0.3)
        assert int(judge_counter.read_text()) > before, "the judge was not thawed after the timed loop"
        assert not (locks / "gpu0.frozen").exists()
    finally:
        judge.kill()
        judge.join(10)
        GpuLock.unregister(member)
        sandbox.close()


def test_a_timer_killed_while_others_are_frozen_gets_them_thawed(tmp_path):
    """Its watchdog process sees the hold end with the process that held it, and thaws what it froze."""
    from tests.test_sandbox import CountingSandbox

    locks = tmp_path / "locks"
    sandbox = CountingSandbox(tmp_path)
    member = GpuLock(locks).register(sandbox.box.name, sandbox.box.member(judge=False))
    try:
        ready = tmp_path / "ready"
        timer = CTX.Process(target=_time_and_die, args=(str(locks), str(ready)))
        timer.start()
        _wait_for(ready)
        assert sandbox.advancing() == [False, False]
        os.kill(timer.pid, signal.SIGKILL)  # the timer dies holding the GPU, the sandbox still frozen
        timer.join(10)
        deadline = time.monotonic() + 20   # nobody else takes the lock: the watchdog alone thaws it
        while sandbox.advancing(0.3) != [True, True]:
            assert time.monotonic() < deadline, "the sandbox stayed frozen after its timer died"
        assert not (locks / "gpu0.frozen").exists()
    finally:
        GpuLock.unregister(member)
        sandbox.close()


def test_registered_submissions_of_dead_graders_are_dropped(tmp_path):
    lock = GpuLock(tmp_path)
    p = CTX.Process(target=time.sleep, args=(0,))
    p.start()
    p.join()
    path = tmp_path / "gpu0.members" / "gone.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"name": "gone", "owner": p.pid, "judge_pid": p.pid, "pidfile": "/nonexistent"}))
    with lock.exclusive():
        pass
    assert not path.exists() and lock.history[-1]["frozen"] == []


def test_both_sandboxes_of_a_submission_on_a_gpu_can_be_frozen(tmp_path, monkeypatch):
    """The kernel's sandbox and the relaunch sandbox are both registered with the GPU's lock (the judge once,
    with the kernel's): the re-run runs inside the judge's calls, and a timer that froze only the judge would
    leave the re-run's kernels running through its timed loop (on the H200 this halved a same-size copy)."""
    from grader.sandbox import Sandbox

    locks = tmp_path / "locks"
    monkeypatch.setenv("COURSE_GPU_LOCK_DIR", str(locks))
    os.chmod(tmp_path, 0o755)
    kernel = Sandbox(slot=5, staging=tmp_path / "box", gpu=True)
    relaunch = Sandbox(slot=5, staging=tmp_path / "box-relaunch", gpu=True, role="relaunch")
    try:
        members = {json.loads(f.read_text())["name"]: json.loads(f.read_text())
                   for f in (locks / "gpu0.members").glob("*.json")}
        assert set(members) == {kernel.name, relaunch.name}
        assert members[kernel.name]["judge_pid"] == os.getpid() and members[relaunch.name]["judge_pid"] is None
        assert members[relaunch.name]["pidfile"] == str(relaunch.pidfile)
    finally:
        kernel.close()
        relaunch.close()
    assert not list((locks / "gpu0.members").glob("*.json"))


@pytest.mark.parametrize("with_folder", [True, False], ids=["lock-folder", "no-lock-folder"])
@pytest.mark.parametrize("crash", [False, True], ids=["ok", "body-raises"])
def test_the_judge_freezes_its_own_submission_while_it_times_its_yardstick(tmp_path, with_folder, crash):
    """``exclusive(quiet=...)``: while the judge times its own yardstick (a same-size copy, the library's
    product), the submission's own sandbox stops too -- with or without other submissions on the GPU -- so a
    thread of the student's kernel cannot share the GPU with it and lower the target. Thawed afterwards."""
    from tests.test_sandbox import CountingSandbox

    sandbox = CountingSandbox(tmp_path)
    lock = GpuLock(tmp_path / "locks" if with_folder else None)
    try:
        with pytest.raises(RuntimeError) if crash else contextlib.nullcontext():
            with lock.exclusive(quiet=[sandbox.box.member(judge=False)]):
                time.sleep(0.2)
                first = sandbox.counts()
                time.sleep(0.8)
                last = sandbox.counts()
                if crash:
                    raise RuntimeError("the yardstick failed")
        assert first == last, f"the submission ran while the judge timed its yardstick: {first} -> {last}"
        assert lock.history[-1]["quieted"] == [f"{sandbox.box.name}:{sandbox.box.cgroup.freezer[0]}"
                                              if sandbox.box.cgroup.freezer else f"{sandbox.box.name}:signal"]
        assert sandbox.advancing() == [True, True], "the submission was not thawed after the yardstick"
    finally:
        sandbox.close()


@pytest.mark.parametrize("reading", [0, 37], ids=["idle", "busy"])
def test_the_judge_times_its_yardstick_only_on_a_gpu_that_reads_idle(tmp_path, monkeypatch, reading):
    """NVML's utilisation counter stands in here (this machine has no GPU): with the submission frozen, the
    judge waits for a quarter second of idle readings before it times its yardstick; if the GPU never reads
    idle (the submission queued more work than the drain limit), it refuses to time at all -- a yardstick
    timed beside that work would lower the target -- and the submission is thawed either way."""
    import grader.gpu_lock as gl
    from tests.test_sandbox import CountingSandbox
    from triton_course.checks import CheckFailed

    monkeypatch.setattr(gl, "utilization", lambda gpu: reading)
    monkeypatch.setattr(gl, "DRAIN_TIMEOUT_S", 1.0)
    sandbox = CountingSandbox(tmp_path)
    lock, ran = GpuLock(None), []
    try:
        with pytest.raises(CheckFailed, match="could not time its yardstick") if reading else contextlib.nullcontext():
            with lock.exclusive(quiet=[sandbox.box.member(judge=False)]):
                ran.append(True)
        hold = lock.history[-1]
        assert hold["busy"] == bool(reading) and ran == ([] if reading else [True])
        assert hold["drain_ms"] >= (1000 if reading else 1000 * gl.QUIET_SETTLE_S), hold
        assert sandbox.advancing() == [True, True]
    finally:
        sandbox.close()


# ---------------------------------------------------------------------------------------------------
# A submission whose queued GPU work outlasts the drain is stopped, not timed beside
# ---------------------------------------------------------------------------------------------------

def _main_python(member: dict) -> set[int]:
    """The sandbox's first Python process (the notebook's kernel, the one NVML would name on a GPU)."""
    from grader.freezer import sandbox_pids

    return {p for p in sandbox_pids(member)    # not sh, bwrap or prlimit, whose arguments carry the code too;
            if Path(f"/proc/{p}/comm").read_text().startswith("python")    # not the counter's child either
            and b"threading" in Path(f"/proc/{p}/cmdline").read_bytes()}


def _alive(pids: set[int]) -> set[int]:
    out = set()
    for p in pids:
        with contextlib.suppress(OSError):
            if Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                out.add(p)
    return out


def _fake_nvml(setattr, gl, hogs: set[int]) -> None:
    """NVML stands in (no GPU here): the GPU reads busy, and names ``hogs`` as running kernels, while any of
    them is alive -- as a process's queued kernels end with its context."""
    setattr(gl, "utilization", lambda gpu: 37 if _alive(hogs) else 0)
    setattr(gl, "busy_pids", lambda gpu, window_s=0: _alive(hogs))
    setattr(gl, "DRAIN_TIMEOUT_S", 1.0)


def _time_beside_a_hog(folder: str, hogs: list[int], log: str) -> None:
    import grader.gpu_lock as gl

    _fake_nvml(setattr, gl, set(hogs))
    lock = GpuLock(Path(folder))
    with lock.exclusive():
        reading = gl.utilization("0")
    Path(log).write_text(json.dumps({"reading_when_timed": reading, **lock.history[-1]}))


def test_a_submission_whose_queued_work_never_drains_is_killed_and_the_others_are_timed_on_an_idle_gpu(tmp_path):
    """Two other submissions are frozen for a timed loop; one of them (its kernel process) still keeps the GPU
    busy after the drain limit, as a background thread that queued minutes of kernels would. Only that
    process is killed -- the one NVML names -- and the loop is timed once the GPU reads idle; the innocent
    submission is thawed untouched, and the killed one's grader finds a note saying why its cell died."""
    from grader.gpu_lock import KILL_NOTE, kill_note
    from tests.test_sandbox import CountingSandbox

    locks = tmp_path / "locks"
    (tmp_path / "hog").mkdir()
    (tmp_path / "innocent").mkdir()
    hog, innocent = CountingSandbox(tmp_path / "hog", slot=7), CountingSandbox(tmp_path / "innocent", slot=8)
    registered = [GpuLock(locks).register(s.box.name, s.box.member(judge=False)) for s in (hog, innocent)]
    try:
        hogs = _main_python(hog.box.member(judge=False))
        assert len(hogs) == 1, hogs
        log = tmp_path / "timer.log"
        timer = CTX.Process(target=_time_beside_a_hog, args=(str(locks), sorted(hogs), str(log)))
        timer.start()
        timer.join(60)
        assert timer.exitcode == 0
        seen = json.loads(log.read_text())
        assert seen["killed"] == [hog.box.name], seen
        assert seen["reading_when_timed"] == 0, "the loop was timed while the hog's work still ran"
        assert seen["drain_ms"] >= 1000, seen
        assert not _alive(hogs), "the hog's process survived"
        assert innocent.advancing() == [True, True], "the innocent submission was not thawed, or was harmed"
        assert hog.advancing()[0] is False, "the named process (the kernel's) still runs"
        note = kill_note(hog.box.staging)
        assert note and "kept the GPU from going idle" in note and "did not finish" in note
        assert not (hog.box.staging / KILL_NOTE).exists() and kill_note(innocent.box.staging) is None
    finally:
        for path in registered:
            GpuLock.unregister(path)
        hog.close()
        innocent.close()


@pytest.mark.parametrize("named", [True, False], ids=["nvml-names-it", "nvml-cannot-say"])
def test_the_judges_own_submission_that_never_drains_gets_no_speed_verdict_and_is_stopped(tmp_path, monkeypatch,
                                                                                            named):
    """Its own yardstick: the submission's queued work outlasts the drain, so there is no speed verdict (as
    before); where NVML names the process, it is killed too, so that its queue stops slowing everyone."""
    import grader.gpu_lock as gl
    from tests.test_sandbox import CountingSandbox
    from triton_course.checks import CheckFailed

    sandbox = CountingSandbox(tmp_path)
    hogs = _main_python(sandbox.box.member(judge=False))
    _fake_nvml(monkeypatch.setattr, gl, hogs)
    if not named:
        monkeypatch.setattr(gl, "busy_pids", lambda gpu, window_s=0: None)
    try:
        with pytest.raises(CheckFailed, match="could not time its yardstick") as err:
            with GpuLock(None).exclusive(quiet=[sandbox.box.member(judge=False)]):
                pass
        assert ("were stopped" in str(err.value)) == named
        assert sandbox.advancing()[0] is not named, "the named process was killed, and only where NVML named it"
        assert bool(_alive(hogs)) is not named
    finally:
        sandbox.close()


def test_the_killed_submissions_cell_says_the_grader_stopped_it_and_why(tmp_path):
    """The note the hold leaves beside a killed sandbox becomes the KernelDied message of the cell in flight (read
    once), instead of the generic 'a kernel stored out of bounds'; without a note the generic message stands."""
    import types

    from grader.execute import CourseExecute
    from grader.gpu_lock import KILL_NOTE

    kernel, relaunch = tmp_path / "box", tmp_path / "box-relaunch"
    kernel.mkdir()
    relaunch.mkdir()
    ex = CourseExecute.__new__(CourseExecute)
    ex._sandbox, ex._relaunch_box = types.SimpleNamespace(staging=kernel), types.SimpleNamespace(staging=relaunch)
    assert ex._why_killed() is None
    (relaunch / KILL_NOTE).write_text("GPU 0 was still running kernels of this notebook's Python process ...")
    assert ex._why_killed().startswith("GPU 0 was still running kernels")
    assert ex._why_killed() is None, "a note explains one death, not every later one"
