"""One GPU shared by several submissions' correctness work, and held alone while a kernel is timed.

Correctness does not need a GPU to itself; timing does. When several submissions are graded at once on one
GPU, the judge holds the GPU *exclusively* while it times a kernel (:func:`grader.judge_timing.timed_round`),
and nothing else of any other submission runs on that GPU meanwhile.

How: every submission graded on the GPU is registered in ``gpu<N>.members/`` (its sandbox and its judge,
:meth:`GpuLock.register`, done by :class:`grader.sandbox.Sandbox`). The timer takes the lock, *freezes*
every other registered submission (:mod:`grader.freezer`: the cgroup freezer or SIGSTOP for the sandbox,
SIGSTOP for its judge), freezes its own sandbox too for a moment while the GPU drains (what the frozen
ones queued before runs to its end: a background thread of a student's kernel may have launched work that
outlived its cell), thaws its own sandbox, times, and thaws the others, whatever happens in between.
Nobody waits for another submission's cell or call to end: correctness work is paused, not drained, so a
long cell elsewhere never delays a timed loop (and every GPU user of the node behind it).

The lock itself is a pair of ``flock`` files per GPU in a folder of the machine (``COURSE_GPU_LOCK_DIR``;
one folder per node on a cluster): ``gpu<N>.lock``, held exclusively by the one timer, and ``gpu<N>.gate``,
which a timer holds while it waits and times, so that a judge about to start new GPU work waits behind it
(:meth:`GpuLock.shared`). ``flock`` locks belong to open files and vanish with the process that held them: a
grader that dies never leaves a GPU locked. What a timer froze is written to ``gpu<N>.frozen``; a watchdog
process started with the hold thaws it when the hold ends, also when the timer was killed, so a dead timer
never leaves a submission stopped. The folder is the grader's: no sandbox sees it.

When the judge times trusted code of its own beside a student's kernel (the same-size copy of a bandwidth check,
the library's product of a TFLOP/s check), the submission's *own* sandboxes are frozen too for the whole hold
(``exclusive(quiet=...)``), and the GPU drained first: otherwise a thread of the student's kernel, or work it
queued, could share the GPU with the judge's yardstick and lower the target the student's kernel is held to.

Frozen processes queue nothing new, but what they queued runs on; a hold waits :data:`DRAIN_TIMEOUT_S` for it.
Honest work drains in milliseconds. A submission whose queued kernels still run then (a background thread
that queued minutes of work, a kernel that never ends) is stopped: NVML's per-process accounting names the
processes that ran kernels in the last seconds, and those of the frozen sandboxes are killed (their notebook's
kernel restarts, the cell in flight fails and says why, :func:`kill_note`), so that one submission cannot
slow the timed loops of the others, nor its own yardstick. Where NVML cannot name processes, the hold goes on
after the wait and the log says so.

Memory is not shared out by freezing: a frozen process keeps what it holds, and a notebook that keeps most of the
GPU's memory (a huge tensor in a global, a thread that takes whatever is freed) would make the other submissions'
tests fail for want of memory, try after try. So when a hidden test runs out of GPU memory, its judge asks the lock
to reclaim some before it tries again (:meth:`GpuLock.reclaim_memory`, called by
:func:`grader.judge.run_test_cell_on_a_shared_gpu`). NVML names the memory each process holds
(:func:`process_memory`); a submission is every registered sandbox of one judge (the kernel's and the re-run's:
members with the same ``owner``), and holds what their processes hold; judges are trusted, never counted nor
killed. A submission may hold its fair share, the GPU's memory over the submissions registered on it, and never less
than an honest timed round may take (:func:`limit`: the judge has the student's process prepare up to half of the
free memory, 40 GiB at most, of input sets, outside the exclusive hold). Every process of each sandbox of a
submission over that which holds memory is killed, and a note tells its notebook why (:func:`kill_note`,
:func:`memory_note`): its kernel restarts, as after a crash. The asking judge's own submission is held to the same
share: a notebook that hoards memory starves its own judge first, and exempting it would leave it to whichever
other judge ran out next. Nothing is killed where NVML cannot name processes. Each timed hold also records what the
judge's own sandboxes held on the GPU (``own_gpu_gib``; the most seen: :attr:`GpuLock.peak_gpu_bytes`).

Without ``COURSE_GPU_LOCK_DIR`` nothing waits and no other submission is frozen (one submission per GPU); the
submission's own sandboxes are still quieted while the judge times its yardstick, and running out of GPU memory
is the submission's own doing: nothing is reclaimed.
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
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

LOCK_DIR_ENV = "COURSE_GPU_LOCK_DIR"
#: The longest wait for the GPU to drain after the other submissions were frozen (their queued kernels run
#: to the end); past it, the frozen processes that NVML names as still running kernels are killed.
DRAIN_TIMEOUT_S = 60.0
#: The wait, after the processes keeping the GPU busy were killed, for their contexts to go.
KILLED_DRAIN_S = 10.0
#: How far back NVML's per-process samples are read when naming the processes that keep the GPU busy.
BUSY_WINDOW_S = 2.0
#: Written beside a sandbox's pid file when its processes were killed for keeping the GPU busy, or for holding more
#: than their share of its memory.
KILL_NOTE = "gpu-killed.txt"
#: How long the GPU must read idle before the judge times its own yardstick with the submission frozen: longer
#: than NVML's sample period on current GPUs (1/6 s), so that work launched the moment before is seen.
QUIET_SETTLE_S = 0.25
GIB = 1 << 30
#: An honest timed round has the student's process hold up to half of the free GPU memory, 40 GiB at most, in
#: input sets and outputs (``grader.judge_timing.calls_for``), from its "prepare" step to its "verify" step, under
#: the shared hold; a round whose judge side failed leaves them there until the next round. No submission's share
#: of the GPU's memory is less than that (half of the GPU on a smaller one) ...
TIMED_ROUND_BYTES = 40 * GIB
#: ... plus this: its CUDA contexts, the kernel's own tensors and scratch, what the notebook's cells keep.
MARGIN_BYTES = 4 * GIB


@dataclass(frozen=True)
class GpuMemory:
    """One reading of NVML: the GPU's memory (bytes), and what each process with a context on it holds."""

    total: int
    by_pid: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Reclaimed:
    """A submission whose sandboxes' processes :meth:`GpuLock.reclaim_memory` killed for holding more GPU memory
    than :func:`limit`."""

    owner: int                    # its judge's pid
    own: bool                     # the submission of the judge that asked
    sandboxes: tuple[str, ...]    # the sandboxes whose processes were killed
    pids: tuple[int, ...]         # the processes killed
    held: int                     # bytes its sandboxes held
    limit: int                    # bytes it could have held
    submissions: int              # submissions registered on the GPU


class GpuLock:
    """The shared/exclusive lock of one GPU, for one grading process."""

    def __init__(self, folder: Path | None, gpu: str = "0"):
        self.folder = folder
        self.gpu = gpu
        self._depth = 0             # nested shared sections of this process count once
        self._exclusive = False     # this process holds the GPU alone: its own shared sections are implied
        self._frozen: list[dict] = []  # what the current exclusive hold froze
        #: what the exclusive holds of this process did: [frozen sandboxes, drain ms], for the log and tests
        self.history: list[dict] = []
        #: what each :meth:`reclaim_memory` of this process saw and did (not holds: kept apart from ``history``)
        self.reclaims: list[dict] = []
        #: the most GPU memory (bytes) this process's own sandboxes were seen to hold (timed holds, reclaims)
        self.peak_gpu_bytes: int | None = None

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
        """Announce a submission on this GPU (``member``: what :func:`grader.freezer.freeze` needs); returns the
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

    def _members_alive(self) -> list[dict]:
        """Registered submissions of living grading processes (files of dead ones are removed)."""
        out = []
        for f in sorted(self._members.glob("*.json")) if self._members.is_dir() else []:
            try:
                member = json.loads(f.read_text())
                owner = int(member["owner"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if not _alive(owner):
                f.unlink(missing_ok=True)
                continue
            out.append(member)
        return out

    # -- freezing --------------------------------------------------------------------------------------
    def _thaw_stale(self) -> None:
        """Thaw what a timer froze and could not thaw (it died); only called while holding the lock."""
        thaw_stale(self._marker)

    def _freeze(self, members: list[dict], judge: bool) -> list[dict]:
        from grader.freezer import freeze

        frozen: list[dict] = []
        try:
            for member in members:
                handle = freeze(member, judge=judge)
                if handle is not None:
                    frozen.append(handle)
                    if self.folder is not None:  # after each one: a timer killed half-way leaves a complete list
                        self._marker.write_text(json.dumps({"by": os.getpid(), "frozen": self._frozen + frozen}))
        except BaseException:
            _thaw_all(frozen)
            raise
        return frozen

    # -- the two holds ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        """Marks a judge's correctness work on the GPU (a student cell, a call): it waits behind a timer that
        holds or waits for the GPU, and is never waited for (the timer freezes it instead)."""
        if self.folder is not None and not self._depth and not self._exclusive:
            gate = self._open("gate")
            try:
                fcntl.flock(gate, fcntl.LOCK_EX)
                fcntl.flock(gate, fcntl.LOCK_UN)
            finally:
                os.close(gate)
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1

    @contextlib.contextmanager
    def quieted(self, members: Sequence[dict]) -> Iterator[None]:
        """The body runs with ``members`` (the judge's own submission: its sandboxes, without the judge) frozen
        and the GPU drained of what they queued; they are thawed after it, whatever happens in it. Needs no
        lock folder: the member dicts say what to stop (:func:`grader.freezer.freeze`)."""
        if not members:
            yield
            return
        handles: list[dict] = []
        try:
            handles = self._freeze(list(members), judge=False)
            drained = drain(self.gpu, timeout_s=DRAIN_TIMEOUT_S, settle_s=QUIET_SETTLE_S) if handles else 0.0
            busy = drained is not None and drained >= DRAIN_TIMEOUT_S * 1e3
            entry = {"quieted": [f"{h['name']}:{h['mode']}" for h in handles],
                     "drain_ms": None if drained is None else round(drained, 1), "busy": busy}
            self.history.append(entry)
            if busy:   # what it times would share the GPU with this submission's own queued work
                from triton_course.checks import CheckFailed

                entry["killed"] = self._stop_hogs(list(members), handles)
                stopped = (" Its processes that kept the GPU busy were stopped; the notebook's kernel restarts."
                           if entry["killed"] else "")
                raise CheckFailed(f"GPU {self.gpu} was still running this submission's own queued work "
                                  f"{DRAIN_TIMEOUT_S:.0f} s after its sandboxes were frozen, so the judge could not "
                                  "time its yardstick (a same-size copy, PyTorch's product) on an idle GPU: no "
                                  "speed verdict. A notebook that leaves long GPU work queued or running (a "
                                  "background thread, a kernel that does not end) cannot be timed." + stopped)
            yield
        finally:
            _thaw_all(handles)

    @contextlib.contextmanager
    def exclusive(self, quiet: Sequence[dict] = ()) -> Iterator[None]:
        """Held while the judge times a kernel: every other submission on this GPU is frozen, and the GPU has
        drained, before the body runs; they are thawed after it, whatever happens in it. ``quiet``: the
        judge's own submission, frozen too for the whole body (:meth:`quieted`), when what the body times is
        the judge's own yardstick and not the student's kernel."""
        if self.folder is None or self._exclusive:
            with self.quieted(quiet):
                yield
            return
        gate, rw = self._open("gate"), self._open("lock")
        watchdog = None
        try:
            fcntl.flock(gate, fcntl.LOCK_EX)      # new correctness work now waits behind this timer
            fcntl.flock(rw, fcntl.LOCK_EX)        # ... and so does the next timer
            self._exclusive = True
            self._thaw_stale()
            self._frozen = []
            try:
                members = self._members_alive()
                others = [m for m in members if int(m["owner"]) != os.getpid()]
                mine = [m for m in members if int(m["owner"]) == os.getpid()]
                own_bytes = self._own_gpu_bytes(mine)   # its timed round's input sets are made by now
                if others:
                    watchdog = _start_watchdog(self.folder, self.gpu)
                self._frozen = self._freeze(others, judge=True)
                entry = {"registered": len(others), "frozen": [f"{h['name']}:{h['mode']}" for h in self._frozen],
                         "drain_ms": 0.0, "own_gpu_gib": None if own_bytes is None else round(own_bytes / GIB, 2)}
                drained = "not drained (nothing frozen)"
                if self._frozen:
                    own = self._freeze(mine, judge=False)  # its own queued work must drain too ...
                    try:
                        entry["drain_ms"] = drain(self.gpu, timeout_s=DRAIN_TIMEOUT_S)
                        if entry["drain_ms"] is not None and entry["drain_ms"] >= DRAIN_TIMEOUT_S * 1e3:
                            # someone's queued work outlasted the wait: stop whoever runs it, then time
                            entry["killed"] = self._stop_hogs(others + mine, self._frozen + own)
                            if entry["killed"]:
                                entry["drain_ms"] += drain(self.gpu, timeout_s=KILLED_DRAIN_S)
                    finally:
                        _thaw_all(own)                     # ... but it runs the timed loop
                    drained = ("not checked (no NVML)" if entry["drain_ms"] is None
                               else f"drained in {entry['drain_ms']:.0f} ms")
                # one line per timed hold, in the submission's autograde log: what was seen, frozen and drained
                print(f"course-gpu-lock: GPU {self.gpu}: froze {len(self._frozen)} other submission(s) of "
                      f"{len(others)} registered ({', '.join(entry['frozen'])}); GPU {drained}",
                      file=sys.stderr, flush=True)
                self.history.append(entry)
                with self.quieted(quiet):
                    yield
            finally:
                _thaw_all(self._frozen)
                self._frozen = []
                self._marker.unlink(missing_ok=True)
                self._exclusive = False
        finally:
            os.close(rw)
            os.close(gate)
            if watchdog is not None:  # it takes the lock once this hold is over, finds nothing, and exits
                _reap_later(watchdog)

    def _stop_hogs(self, members: list[dict], handles: list[dict]) -> list[str]:
        """After a drain ran out of time with ``members`` frozen: kill the processes of their sandboxes that
        NVML saw running kernels in the last :data:`BUSY_WINDOW_S` s, leave a note beside each such sandbox
        (:func:`kill_note`), and return the sandboxes' names. Nothing is killed where NVML cannot name them."""
        from grader.freezer import kill, sandbox_pids, thaw

        busy = busy_pids(self.gpu)
        stopped: list[str] = []
        for member in members if busy else []:
            hogs = sandbox_pids(member) & busy  # type: ignore[operator]
            if not hogs:
                continue
            name = str(member.get("name", "?"))
            kill(hogs)
            for handle in handles:   # under cgroup v1 a frozen process dies only once thawed
                if handle.get("name") == name and handle.get("mode") == "cgroup1":
                    thaw(handle)
            note = (f"GPU {self.gpu} was still running kernels of this notebook's Python process "
                    f"{DRAIN_TIMEOUT_S:.0f} s after it was paused while the grader timed on that GPU: work it had "
                    "queued (a background thread? a kernel that never ends?) kept the GPU from going idle. The grader "
                    "stopped that process so that the GPU could be timed; this cell did not finish.")
            with contextlib.suppress(KeyError, OSError):
                Path(member["pidfile"]).with_name(KILL_NOTE).write_text(note)
            print(f"course-gpu-lock: GPU {self.gpu}: killed {sorted(hogs)} of {name}: still running kernels "
                  f"{DRAIN_TIMEOUT_S:.0f} s after it was frozen", file=sys.stderr, flush=True)
            stopped.append(name)
        return stopped

    # -- GPU memory ------------------------------------------------------------------------------------
    def _own_gpu_bytes(self, mine: list[dict]) -> int | None:
        """Bytes this process's own sandboxes (``mine``) hold on the GPU now, also kept in :attr:`peak_gpu_bytes`;
        None when they are not registered or NVML cannot say."""
        from grader.freezer import sandbox_pids

        reading = process_memory(self.gpu) if mine else None
        if reading is None:
            return None
        held = held_by(set().union(*(sandbox_pids(m) for m in mine)), reading)
        self.peak_gpu_bytes = max(self.peak_gpu_bytes or 0, held)
        return held

    def reclaim_memory(self, read: Callable[[str], GpuMemory | None] | None = None) -> list[Reclaimed]:
        """Called by a judge whose hidden test ran out of GPU memory, before it tries again: each submission
        registered on this GPU (all sandboxes of one judge) whose sandboxes hold more than :func:`limit` has
        every process of those of its sandboxes that hold GPU memory killed, and a note left beside each
        (:func:`kill_note`, :func:`memory_note`); returns those submissions.

        The caller's own submission is held to the same limit, and is killed too when it is the one over it (a
        notebook that hoards memory starves its own judge first). Judges are never killed, nor counted: only
        processes of sandboxes are. Nothing is killed without a lock folder (one submission per GPU: running out
        is its own doing), nor where NVML cannot name the processes (``read``, :func:`process_memory` unless given,
        returns None)."""
        from grader.freezer import kill, sandbox_pids

        if self.folder is None:
            return []
        reading = (read or process_memory)(self.gpu)
        if reading is None:
            print(f"course-gpu-lock: GPU {self.gpu}: a test ran out of memory; NVML cannot say which processes hold "
                  "it: nothing reclaimed", file=sys.stderr, flush=True)
            return []
        groups: dict[int, list[dict]] = {}
        for member in self._members_alive():
            groups.setdefault(int(member["owner"]), []).append(member)
        if not groups:
            return []
        cap, held, over = over_limit(groups, reading, sandbox_pids)
        if os.getpid() in held:
            self.peak_gpu_bytes = max(self.peak_gpu_bytes or 0, held[os.getpid()])
        judges = {1, os.getpid(), *groups} | {int(m["judge_pid"]) for ms in groups.values() for m in ms
                                              if m.get("judge_pid")}
        reclaimed: list[Reclaimed] = []
        for owner in over:
            names, pids = [], []
            for member in groups[owner]:
                procs = sandbox_pids(member) - judges
                if not any(reading.by_pid.get(pid, 0) > 0 for pid in procs):
                    continue   # this sandbox of the submission holds nothing (the re-run's, between calls)
                name = str(member.get("name", "?"))
                pids += kill(procs)
                with contextlib.suppress(KeyError, OSError):
                    Path(member["pidfile"]).with_name(KILL_NOTE).write_text(
                        memory_note(self.gpu, held[owner], cap, reading.total, len(groups)))
                names.append(name)
            if names:
                reclaimed.append(Reclaimed(owner, owner == os.getpid(), tuple(names), tuple(sorted(pids)),
                                           held[owner], cap, len(groups)))
        gib = ", ".join(f"{held[o] / GIB:.1f}" for o in sorted(held, key=held.__getitem__, reverse=True))
        killed = "; ".join(f"killed {list(r.pids)} of {', '.join(r.sandboxes)}: {r.held / GIB:.1f} GiB"
                           for r in reclaimed)
        print(f"course-gpu-lock: GPU {self.gpu}: a test ran out of memory; the {len(groups)} submission(s) registered "
              f"hold {gib} GiB, at most {cap / GIB:.1f} GiB each; " + (killed or "none over it: nothing killed"),
              file=sys.stderr, flush=True)
        self.reclaims.append({"submissions": len(groups), "limit_gib": round(cap / GIB, 2),
                              "held_gib": sorted((round(b / GIB, 2) for b in held.values()), reverse=True),
                              "own_gib": round(held[os.getpid()] / GIB, 2) if os.getpid() in held else None,
                              "killed": [list(r.sandboxes) for r in reclaimed]})
        return reclaimed


def reclaim_gpu_memory() -> list[Reclaimed]:
    """:meth:`GpuLock.reclaim_memory` on this process's GPU (:meth:`GpuLock.from_env`): what the judge calls before
    it tries again a test that ran out of GPU memory."""
    return GpuLock.from_env().reclaim_memory()


def limit(total: int, submissions: int) -> int:
    """The most GPU memory (bytes) one submission's sandboxes may hold while another runs out: its fair share of the
    GPU's ``total`` among ``submissions``, and never less than an honest timed round may take
    (:data:`TIMED_ROUND_BYTES`, or half the GPU if smaller, plus :data:`MARGIN_BYTES`)."""
    return max(total // max(1, submissions), min(total // 2, TIMED_ROUND_BYTES) + MARGIN_BYTES)


def held_by(pids: Iterable[int], reading: GpuMemory) -> int:
    """Bytes that the processes ``pids`` hold on the GPU, as NVML read them."""
    return sum(reading.by_pid.get(pid, 0) for pid in set(pids))


def over_limit(submissions: dict[int, list[dict]], reading: GpuMemory,
               sandbox_pids: Callable[[dict], set[int]]) -> tuple[int, dict[int, int], list[int]]:
    """(the limit, bytes held per submission, the submissions over it). ``submissions``: judge pid -> its registered
    sandboxes (:meth:`GpuLock.register`'s member dicts); ``sandbox_pids``: :func:`grader.freezer.sandbox_pids`."""
    cap = limit(reading.total, len(submissions))
    held = {owner: held_by(set().union(*(sandbox_pids(m) for m in members)), reading)
            for owner, members in submissions.items()}
    return cap, held, sorted(owner for owner, b in held.items() if b > cap)


def memory_note(gpu: str, held: int, cap: int, total: int, submissions: int) -> str:
    """What the notebook of a submission whose processes were killed for the memory they held is told."""
    return (f"The grader stopped this notebook's processes on GPU {gpu}: they held {held / GIB:.1f} GiB of its memory "
            f"when a hidden test there ran out of memory, more than the {cap / GIB:.1f} GiB a submission may hold "
            f"(the GPU's {total / GIB:.0f} GiB are shared by the {submissions} submissions graded on it at once). "
            "Memory kept in a global (a large tensor, a cache) or taken by a thread left running starves the others' "
            "tests; free what a cell no longer needs. The notebook's kernel restarts; this cell did not finish.")


def is_memory_note(note: str | None) -> bool:
    """Whether a kill note is :func:`memory_note`'s (the notebook held more GPU memory than its share), not the note
    of a notebook that kept the GPU busy during a timing."""
    return bool(note) and "a submission may hold" in note and "ran out of memory" in note


def kill_note(staging: Path) -> str | None:
    """Why the GPU lock killed the processes of the sandbox staged in ``staging``, if it did (the note is
    removed once read)."""
    path = staging / KILL_NOTE
    try:
        text = path.read_text()
    except OSError:
        return None
    path.unlink(missing_ok=True)
    return text


def thaw_stale(marker: Path) -> None:
    """Thaw everything listed in a ``gpu<N>.frozen`` file and remove it."""
    try:
        stale = json.loads(marker.read_text())
    except (OSError, ValueError):
        return
    _thaw_all(stale.get("frozen", []))
    marker.unlink(missing_ok=True)


def _thaw_all(handles: list[dict]) -> None:
    from grader.freezer import thaw

    for handle in handles:
        thaw(handle)


_WATCHDOG = """
import fcntl, os, sys
sys.path[:0] = [p for p in os.environ.get("COURSE_GPU_LOCK_PATH", "").split(os.pathsep) if p]
from pathlib import Path
from grader.gpu_lock import thaw_stale
folder, gpu = Path(sys.argv[1]), sys.argv[2]
fd = os.open(folder / f"gpu{gpu}.lock", os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_SH)   # once the timer's hold is over: it ended, or its process died
thaw_stale(folder / f"gpu{gpu}.frozen")
"""


def _start_watchdog(folder: Path, gpu: str):
    """A process that thaws what this hold froze if this process dies holding it (it outlives us)."""
    import subprocess

    here = str(Path(__file__).resolve().parent.parent)
    return subprocess.Popen([sys.executable, "-c", _WATCHDOG, str(folder), gpu], start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "COURSE_GPU_LOCK_PATH": here})


def _reap_later(proc) -> None:
    import threading

    threading.Thread(target=proc.wait, daemon=True).start()


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


NVML_INSUFFICIENT_SIZE, NVML_NOT_FOUND = 7, 6


class _ProcessSample(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong), ("smUtil", ctypes.c_uint),
                ("memUtil", ctypes.c_uint), ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


def busy_pids(gpu: str, window_s: float = BUSY_WINDOW_S) -> set[int] | None:
    """PIDs (as this process sees them: on the H200, also those inside a sandbox's PID namespace) that NVML
    gave SM time on this GPU in its samples of the last ``window_s`` s; None when NVML cannot say."""
    handle = _device(gpu)
    if handle is None:
        return None
    lib = _nvml()
    since = ctypes.c_ulonglong(int((time.time() - window_s) * 1e6))   # NVML stamps samples in µs of the epoch
    count = ctypes.c_uint(0)
    rc = lib.nvmlDeviceGetProcessUtilization(handle, None, ctypes.byref(count), since)  # type: ignore[union-attr]
    if rc == NVML_NOT_FOUND or (rc == 0 and count.value == 0):   # no samples: no process ran a kernel
        return set()
    if rc != NVML_INSUFFICIENT_SIZE:   # not supported here, no permission...
        return None
    samples = (_ProcessSample * (count.value + 16))()   # room for processes that appear meanwhile
    count = ctypes.c_uint(len(samples))
    rc = lib.nvmlDeviceGetProcessUtilization(handle, samples, ctypes.byref(count), since)  # type: ignore[union-attr]
    if rc != 0:
        return None
    return {int(s.pid) for s in samples[:count.value] if s.smUtil > 0}


NVML_SUCCESS = 0
NVML_VALUE_NOT_AVAILABLE = (1 << 64) - 1


class _ProcessInfo(ctypes.Structure):
    """``nvmlProcessInfo_t`` (``nvmlProcessInfo_v2_t``) of ``nvmlDeviceGetComputeRunningProcesses_v3``."""

    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong), ("gpuInstanceId", ctypes.c_uint),
                ("computeInstanceId", ctypes.c_uint)]


class _ProcessInfoR535(ctypes.Structure):
    """The same with ``usedGpuCcProtectedMemory``, as the first R535 drivers wrote it without a version bump."""

    _fields_ = [*_ProcessInfo._fields_, ("usedGpuCcProtectedMemory", ctypes.c_ulonglong)]


class _Memory(ctypes.Structure):
    """``nvmlMemory_t`` of ``nvmlDeviceGetMemoryInfo``."""

    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def total_memory(gpu: str) -> int | None:
    """The GPU's memory in bytes (``nvmlDeviceGetMemoryInfo``), or None when NVML cannot say."""
    handle = _device(gpu)
    if handle is None:
        return None
    info = _Memory()
    if _nvml().nvmlDeviceGetMemoryInfo(handle, ctypes.byref(info)) != NVML_SUCCESS:  # type: ignore[union-attr]
        return None
    return int(info.total)


def process_memory(gpu: str) -> GpuMemory | None:
    """The GPU's memory and the bytes each process with a compute context holds on it (PIDs as this process sees
    them), or None when NVML is missing, fails, or gives a reading that does not parse. A process whose memory
    NVML does not know is left out: it is never the reason for a kill."""
    handle, total = _device(gpu), total_memory(gpu)
    if handle is None or total is None:
        return None
    lib = _nvml()
    query = getattr(lib, "nvmlDeviceGetComputeRunningProcesses_v3", None)   # R510 and later
    query = query or getattr(lib, "nvmlDeviceGetComputeRunningProcesses_v2", None)   # the same layout
    if query is None:
        return None
    count = ctypes.c_uint(0)
    rc = query(handle, ctypes.byref(count), None)
    if rc == NVML_SUCCESS:                 # no process has a context on the GPU
        return GpuMemory(total, {})
    if rc != NVML_INSUFFICIENT_SIZE:
        return None
    room = count.value + 8                 # processes that start meanwhile
    buf = (ctypes.c_ubyte * (room * ctypes.sizeof(_ProcessInfoR535)))()   # room for either layout
    count = ctypes.c_uint(room)
    if query(handle, ctypes.byref(count), buf) != NVML_SUCCESS:
        return None
    return parse_processes(buf, count.value, total)


def _plausible(entries: list, total: int) -> bool:
    """Entries read with the right layout: real pids, a MIG id or 0xFFFFFFFF, memory within the GPU's (or unknown)."""
    return all(0 < e.pid < (1 << 22) and (e.gpuInstanceId == 0xFFFFFFFF or e.gpuInstanceId < 64)
               and (e.computeInstanceId == 0xFFFFFFFF or e.computeInstanceId < 64)
               and (e.usedGpuMemory <= total or e.usedGpuMemory == NVML_VALUE_NOT_AVAILABLE) for e in entries)


def parse_processes(buf: ctypes.Array, count: int, total: int) -> GpuMemory | None:
    """The reading in ``buf``, ``count`` entries that NVML wrote: in the documented layout, else in the one the
    first R535 drivers wrote (8 more bytes an entry); None when neither parses (nothing is then killed)."""
    for layout in (_ProcessInfo, _ProcessInfoR535):
        if count * ctypes.sizeof(layout) > ctypes.sizeof(buf):
            continue
        entries = list((layout * count).from_buffer(buf))
        if _plausible(entries, total):
            by_pid: dict[int, int] = {}
            for e in entries:   # a process listed twice (MIG instances) counts once, at its largest
                if e.usedGpuMemory != NVML_VALUE_NOT_AVAILABLE:
                    by_pid[int(e.pid)] = max(by_pid.get(int(e.pid), 0), int(e.usedGpuMemory))
            return GpuMemory(total, by_pid)
    return None


def drain(gpu: str, timeout_s: float = DRAIN_TIMEOUT_S, settle_s: float = 0.0) -> float | None:
    """Wait until no kernel has run on the GPU for one NVML sample period (and, with ``settle_s``, until every
    reading for that long says so); milliseconds waited, or None when NVML cannot tell (no GPU, no driver
    library): then nothing is waited for, and the log says so.

    The frozen submissions cannot queue more work, but what they queued before runs to its end; a timed loop
    that started meanwhile would share the GPU with it. A reading covers the last sample period (1/6 s to 1 s),
    so a kernel launched just before it may not show yet: ``settle_s`` longer than a period catches it (seen on
    the H200: a kernel left spinning the moment a timed loop ended read as an idle GPU once in four)."""
    t0 = time.perf_counter()
    if utilization(gpu) is None:
        return None
    idle_since = None
    while time.perf_counter() - t0 < timeout_s:
        if utilization(gpu) == 0:
            idle_since = idle_since if idle_since is not None else time.perf_counter()
            if time.perf_counter() - idle_since >= settle_s:
                break
        else:
            idle_since = None
        time.sleep(0.01)
    else:
        print(f"course-gpu-lock: GPU {gpu} still busy after {timeout_s:.0f} s with the submissions frozen",
              file=sys.stderr, flush=True)
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
