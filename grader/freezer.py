"""Stopping another submission while one submission's kernel is timed on a shared GPU (see grader.gpu_lock).

A submission graded on a GPU is registered (``gpu<N>.members/`` of the GPU lock folder) with what stops it:

* its **sandbox**: the cgroup freezer (cgroup v2 ``cgroup.freeze``, or cgroup v1's ``freezer`` hierarchy)
  where the grader could make the sandbox's cgroups (:class:`grader.sandbox.SandboxCgroups`), else SIGSTOP
  of its process tree (every process below the sandbox's first process, bwrap; a stopped process cannot
  fork, so the walk is repeated until no new process appears);
* its **judge** (the grading process that made the sandbox), with SIGSTOP: the judge computes references
  and compares outputs on the GPU too.

Freezing never changes what a submission computes, only when: its cells and its judge's calls resume where
they stopped. Thawing a process that ended meanwhile does nothing, and a pid that now belongs to another
process is recognised by its start time and left alone.

This module imports nothing heavy: the watchdog of :mod:`grader.gpu_lock` runs it in a fresh interpreter.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _procs(folder: Path) -> list[int]:
    try:
        return [int(p) for p in (folder / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _rmdir(folder: Path) -> None:
    for _ in range(250):  # killed tasks leave their cgroup a moment after the signal (longer on a busy machine)
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)


def _wait_for(check: Callable[[], bool], timeout_s: float = 2.0) -> bool:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if check():
            return True
        time.sleep(0.002)
    return check()


def _freeze_cgroup(mode: str, folder: Path) -> bool:
    if mode == "cgroup2":
        return _write(folder / "cgroup.freeze", "1") and _wait_for(
            lambda: "frozen 1" in _read(folder / "cgroup.events"))
    return _write(folder / "freezer.state", "FROZEN") and _wait_for(
        lambda: _read(folder / "freezer.state").strip() == "FROZEN")


def _thaw_cgroup(mode: str, folder: Path) -> None:
    _write(folder / ("cgroup.freeze" if mode == "cgroup2" else "freezer.state"), "0" if mode == "cgroup2" else "THAWED")


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time) of a process, from /proc."""
    text = _read(Path(f"/proc/{pid}/stat"))
    if not text:
        return None
    fields = text[text.rfind(")") + 2:].split()
    return int(fields[1]), fields[19]


def _descendants(root: int) -> dict[int, str]:
    """pid -> start time of ``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    starts: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None:
                children.setdefault(st[0], []).append(int(entry))
                starts[int(entry)] = st[1]
    out, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in starts and pid not in out:
            out[pid] = starts[pid]
            todo += children.get(pid, [])
    return out


def _stop(pids: dict[int, str]) -> list[list]:
    stopped = []
    for pid, start in pids.items():
        try:
            os.kill(pid, signal.SIGSTOP)
            stopped.append([pid, start])
        except (ProcessLookupError, PermissionError):
            pass
    return stopped


def _stop_tree(root: int) -> list[list]:
    """SIGSTOP ``root`` and its descendants until no new process appears."""
    stopped: dict[int, str] = {}
    for _ in range(20):
        new = {pid: start for pid, start in _descendants(root).items() if pid not in stopped}
        if not new:
            break
        stopped.update({pid: start for pid, start in _stop(new)})
    return [[pid, start] for pid, start in stopped.items()]


def _root_pid(member: dict) -> int | None:
    """The sandbox's first process (bwrap), if it is alive and still the child of the grader that made it."""
    try:
        root = int(_read(Path(member["pidfile"])).strip())
    except (KeyError, TypeError, ValueError):
        return None
    st = _stat(root)
    if st is None or st[0] != int(member.get("owner", -1)):
        return None  # gone, or the pid now belongs to another process
    return root


def freeze(member: dict, judge: bool = True) -> dict | None:
    """Stop a registered submission: its sandbox, and (``judge``) its grading process. Returns what
    :func:`thaw` needs, or None when nothing of it was running."""
    handle: dict = {"name": str(member.get("name", "?")), "mode": "none", "pids": []}
    judge_pid = member.get("judge_pid") if judge else None
    if judge_pid:  # first: a judge stopped cannot start new work in its sandbox
        st = _stat(int(judge_pid))
        if st is not None:
            handle["pids"] += _stop({int(judge_pid): st[1]})
    for key in ("cgroup2", "cgroup1"):
        folder = member.get(key)
        if folder and _procs(Path(folder)):
            if _freeze_cgroup(key, Path(folder)):
                handle.update(mode=key, path=folder)
                return handle
            _thaw_cgroup(key, Path(folder))  # could not freeze it whole: stop its processes instead
    root = _root_pid(member)
    if root is not None:
        handle["pids"] += _stop_tree(root)
        handle["mode"] = "signal"
    return handle if handle["pids"] or handle["mode"] != "none" else None


def sandbox_pids(member: dict) -> set[int]:
    """Every process of a registered submission's sandbox (not its judge): its cgroup's, else the tree below
    its first process."""
    for key in ("cgroup2", "cgroup1"):
        folder = member.get(key)
        if folder and _procs(Path(folder)):
            return set(_procs(Path(folder)))
    root = _root_pid(member)
    return set(_descendants(root)) if root is not None else set()


def kill(pids: set[int]) -> list[int]:
    """SIGKILL each of ``pids`` (a frozen or stopped process dies too, once thawed under cgroup v1); those
    signalled."""
    killed = []
    for pid in sorted(pids):
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except (ProcessLookupError, PermissionError):
            pass
    return killed


def thaw(handle: dict) -> None:
    """Undo :func:`freeze`: the sandbox first, then the judge."""
    if handle.get("mode") in ("cgroup2", "cgroup1"):
        _thaw_cgroup(handle["mode"], Path(handle["path"]))
    for pid, start in reversed(handle.get("pids", [])):
        st = _stat(int(pid))
        if st is not None and st[1] == start:
            try:
                os.kill(int(pid), signal.SIGCONT)
            except (ProcessLookupError, PermissionError):
                pass
