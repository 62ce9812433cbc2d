"""The bubblewrap sandbox, tried from the inside: what a submission's process can see, reach and leave."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid

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
