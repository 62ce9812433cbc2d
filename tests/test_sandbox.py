"""The bubblewrap sandbox, tried from the inside: what a submission's process can see, reach and leave."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

import grader.sandbox as sandbox_mod
from grader.course import REPO_ROOT
from grader.sandbox import Limits, Sandbox, SandboxUnavailable


def run_inside(tmp_path, code: str, limits: Limits | None = None) -> subprocess.CompletedProcess:
    os.chmod(tmp_path, 0o755)
    box = Sandbox(slot=7, staging=tmp_path / "box", limits=limits or Limits())
    try:
        return subprocess.run(box.wrap([sys.executable, "-c", textwrap.dedent(code)]), capture_output=True, text=True,
                              timeout=120, stdin=subprocess.DEVNULL)
    finally:
        box.close()


def test_the_course_is_invisible_but_its_helpers_import(tmp_path):
    p = run_inside(tmp_path, f"""
        import os, triton_course, triton_course.checks
        print(os.path.exists({str(REPO_ROOT / 'solutions')!r}), os.path.exists({str(REPO_ROOT / 'grader')!r}),
              os.path.exists({str(REPO_ROOT / 'tests')!r}), triton_course.__file__.startswith('/course/'))
    """)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["False", "False", "False", "True"]


def test_home_and_tmp_are_empty_and_private(tmp_path):
    marker = tmp_path / f"host-{uuid.uuid4().hex}"
    marker.write_text("secret")
    p = run_inside(tmp_path, f"""
        import os, pathlib
        print(sorted(os.listdir(os.environ['HOME'])), os.path.exists({str(marker)!r}))
        pathlib.Path(os.environ['HOME'], '.ipython').mkdir()
    """)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["[]", "False"]


def test_no_network_and_no_writes_to_the_system(tmp_path):
    p = run_inside(tmp_path, f"""
        import socket
        try:
            socket.create_connection(('127.0.0.1', 22), timeout=2); print('reached')
        except OSError: print('unreachable')
        for path in ('/usr/evil', {str(sys.prefix + '/evil')!r}, '/course/triton_course/evil.py'):
            try:
                open(path, 'w'); print('wrote', path)
            except OSError: print('refused')
    """)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["unreachable", "refused", "refused", "refused"]


@pytest.mark.skipif(os.geteuid() != 0, reason="a uid of its own needs a root grader")
def test_it_runs_as_an_unprivileged_user_of_its_own_with_limits(tmp_path):
    p = run_inside(tmp_path, """
        import os, resource
        print(os.getuid(), resource.getrlimit(resource.RLIMIT_NPROC)[0], resource.getrlimit(resource.RLIMIT_FSIZE)[0])
        try:
            os.setuid(0); print('root again')
        except PermissionError: print('stays')
    """, Limits(processes=64, file_bytes=1 << 20))
    assert p.returncode == 0, p.stderr
    uid, nproc, fsize, stays = p.stdout.split()
    assert int(uid) == sandbox_mod.BASE_UID + 7 and nproc == "64" and fsize == str(1 << 20) and stays == "stays"


def test_a_process_left_behind_dies_with_the_sandbox(tmp_path):
    tag = f"course-left-behind-{uuid.uuid4().hex}"
    p = run_inside(tmp_path, f"""
        import subprocess
        subprocess.Popen(['sh', '-c', 'exec -a {tag} sleep 600'], start_new_session=True)
        print('started')
    """)
    assert p.stdout.strip() == "started", p.stderr
    left = subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True)
    assert left.stdout.strip() == "", "a process of the sandbox outlived it"


def test_without_bubblewrap_the_grader_refuses_and_says_why(tmp_path, monkeypatch):
    from grader.autograde import grade_all

    monkeypatch.setattr(sandbox_mod, "bwrap_path", lambda: None)
    sandbox_mod.unavailable_reason.cache_clear()
    try:
        reason = sandbox_mod.unavailable_reason()
        assert reason and "apt-get install bubblewrap" in reason and "--unsandboxed" in reason
        with pytest.raises(SandboxUnavailable, match="bubblewrap"):
            grade_all([], tmp_path / "out")
    finally:
        sandbox_mod.unavailable_reason.cache_clear()


# ---------------------------------------------------------------------------------------------------
# Freezing (grader.gpu_lock stops the other sandboxes on a GPU while one submission's kernel is timed)
# ---------------------------------------------------------------------------------------------------

COUNTER = """
import os, subprocess, sys, threading, time
def count(path):
    n = 0
    while True:
        n += 1
        with open(path + '.tmp', 'w') as f:
            f.write(str(n))
        os.replace(path + '.tmp', path)  # a counter stopped mid-write still reads whole
        time.sleep(0.01)
# a thread that goes on after the 'cell' (the main program) has nothing left to do, and a child process
threading.Thread(target=count, args=({a!r},), daemon=True).start()
subprocess.Popen([sys.executable, '-c', 'import time\\n' + {child!r}])
while True:
    time.sleep(1)
"""
CHILD = """
import os
n = 0
while True:
    n += 1
    open({b!r} + '.tmp', 'w').write(str(n)); os.replace({b!r} + '.tmp', {b!r}); time.sleep(0.01)
"""


class CountingSandbox:
    """A real bubblewrap sandbox running a process tree whose progress can be read from outside: a thread
    of its main process and a child process each bump a counter file in the exchange folder."""

    def __init__(self, tmp_path, slot: int = 9, cgroups: bool = True):
        os.chmod(tmp_path, 0o755)
        self.box = Sandbox(slot=slot, staging=tmp_path / f"box{slot}")
        if not cgroups:  # as on a machine where the grader cannot make cgroups: SIGSTOP of the tree
            self.box.cgroup.remove()
            self.box.cgroup.folders, self.box.cgroup.freezer, self.box.cgroup.memory = [], None, None
        self.files = [self.box.exchange / "thread", self.box.exchange / "child"]
        code = COUNTER.format(a=str(self.files[0]), child=CHILD.format(b=str(self.files[1])))
        self.proc = subprocess.Popen(self.box.wrap([sys.executable, "-c", code]), stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not all(f.exists() and f.read_text() for f in self.files):
            assert time.monotonic() < deadline and self.proc.poll() is None, "the sandboxed counters never started"
            time.sleep(0.05)

    def counts(self) -> list[int]:
        return [int(f.read_text()) for f in self.files]

    def advancing(self, seconds: float = 0.5) -> list[bool]:
        a = self.counts()
        time.sleep(seconds)
        return [y > x for x, y in zip(a, self.counts())]

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self.box.close()


@pytest.mark.parametrize("cgroups", [True, False], ids=["cgroup", "sigstop"])
def test_freezing_stops_the_whole_sandbox_and_thawing_resumes_it(tmp_path, cgroups):
    from grader.freezer import freeze, thaw

    sandbox = CountingSandbox(tmp_path, cgroups=cgroups)
    try:
        assert sandbox.advancing() == [True, True]
        handle = freeze(sandbox.box.member(judge=False))  # this test's own process made it: not frozen
        try:
            assert handle is not None
            if cgroups and sandbox.box.cgroup.freezer:  # where this machine has a cgroup freezer, it is used
                assert handle["mode"] in ("cgroup1", "cgroup2")
            else:
                assert handle["mode"] == "signal" and len(handle["pids"]) >= 3  # bwrap, the kernel, its child
            time.sleep(0.1)
            assert sandbox.advancing(0.8) == [False, False], "a frozen sandbox kept running"
        finally:
            thaw(handle)
        assert sandbox.advancing() == [True, True], "the sandbox did not resume after the thaw"
    finally:
        sandbox.close()
    assert not list(Path("/sys/fs/cgroup").glob(f"*/{sandbox.box.name}")) and \
        not Path("/sys/fs/cgroup", sandbox.box.name).exists(), "the sandbox's cgroups were left behind"
