"""Grading on a real Ray cluster: a head started here on 127.0.0.1 (CPU only), the real CLI with ``--ray``,
real nbgrader, the real sandbox.

One scenario, run once (module fixture), read by the tests below:

1. ``autograde --ray`` grades a class of three chapter-03 submissions, and the driver is killed (SIGKILL) as soon
   as the first record is written;
2. the same command is run again: it resumes, and while it runs the Ray worker process that is grading a
   submission is killed (SIGKILL), so Ray retries that task.

The grades must be the local pool's: tests/test_autograde.py's ``EXPECTED_03``, what its
test_vector_add_examples_fail_for_the_right_reason gets from the local pool for the same three students.

The driver runs with one temporary folder and the cluster with another: nothing of the driver's disk
(submitted notebooks, its templates) may be read on the workers. The cluster is stopped at the end, also
when a test fails: its processes (those whose command line names this cluster's own temporary folder, and
their descendants) are ended by their ids. ``ray stop`` would end every Ray process of the machine by name.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from grader.examples import build_submissions
from grader.results import read_json
from tests.conftest import ROOT
from tests.test_autograde import EXPECTED_03 as EXPECTED

pytestmark = [pytest.mark.notebook, pytest.mark.xdist_group("ray_cluster")]

A = "03_vector_add"
CLASS = ["ada_correct", "dev_floor_grid", "eve_float32_out"]
RAY = Path(sys.executable).parent / "ray"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _agent_ports() -> list[str]:
    """Fixed ports for the node's agents: with ports of their choosing, the raylet waits a fixed 15 s for them
    to write their port files, and on a busy machine their start takes longer (the raylet then aborts)."""
    return ["--dashboard-agent-grpc-port", str(_free_port()), "--dashboard-agent-listen-port", str(_free_port()),
            "--metrics-export-port", str(_free_port()), "--runtime-env-agent-port", str(_free_port())]


def _cluster_env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(TMPDIR=str(tmp), PYTHONPATH=str(ROOT),
               # Ray binds every port to the node's address; on Linux it turns 127.0.0.1 into the machine's
               # network address unless told this is a one-machine cluster
               RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
               # a busy 2-core CI machine starts a raylet, and its agents, slowly
               RAY_raylet_start_wait_time_s="300", RAY_task_oom_retries="2")
    env.pop("COURSE_GPU_LOCK_DIR", None)
    return env


def _cluster_processes(temp_dir: str) -> list[psutil.Process]:
    """This cluster's processes: those whose command line names its temp folder, and their descendants."""
    roots = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if p.pid != os.getpid() and any(temp_dir in a for a in (p.info["cmdline"] or [])):
                roots.append(p)
        except psutil.Error:
            pass
    found = {p.pid: p for p in roots}
    for p in roots:
        try:
            for c in p.children(recursive=True):
                found[c.pid] = c
        except psutil.Error:
            pass
    return list(found.values())


def _stop_cluster(temp_dir: str) -> None:
    procs = _cluster_processes(temp_dir)
    for p in procs:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=15)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=10)


def _cli(submitted: Path, out: Path, address: str) -> list[str]:
    return [sys.executable, "-m", "grader", "autograde", str(submitted), "--assignment", A, "--out", str(out),
            "--ray", address, "--cpus-per-job", "2", "--memory-per-job", "4"]


def _grading_worker(raylet: psutil.Process) -> tuple[psutil.Process, psutil.Process] | None:
    """(a Ray worker running a grading task, its nbgrader autograde child), if one is mid-job now."""
    try:
        workers = raylet.children()
    except psutil.Error:
        return None
    for w in workers:
        try:
            if "ray::grade_submission" not in " ".join(w.cmdline()):
                continue
            for child in w.children():
                cmd = " ".join(child.cmdline())
                if "nbgrader" in cmd and " autograde " in cmd:
                    return w, child
        except psutil.Error:
            continue
    return None


@pytest.fixture(scope="module")
def scenario():
    root = Path(tempfile.mkdtemp(prefix="course-cluster-"))
    temp_dir = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths live under it
    worker_tmp, driver_tmp = root / "worker-tmp", root / "driver-tmp"
    worker_tmp.mkdir()
    driver_tmp.mkdir()
    facts: dict = {"root": root, "worker_tmp": worker_tmp, "driver_tmp": driver_tmp}
    try:
        submitted = root / "submitted"
        build_submissions(A, root / "built")
        for s in CLASS:
            shutil.copytree(root / "built" / s, submitted / s)
        facts["submitted"] = submitted

        # the cluster: a head on 127.0.0.1, CPU only, dashboard off
        port = _free_port()
        env = _cluster_env(worker_tmp)
        with open(root / "ray-start.log", "w") as log:  # a file, not a pipe: the daemons it starts keep it open
            start = subprocess.run([str(RAY), "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port),
                                    "--num-cpus", "4", "--memory", str(16 << 30), "--object-store-memory",
                                    str(100 << 20), "--include-dashboard=false", "--disable-usage-stats",
                                    "--temp-dir", temp_dir, *_agent_ports()], env=env, stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=400)
        assert start.returncode == 0, (root / "ray-start.log").read_text()[-3000:]
        address = f"127.0.0.1:{port}"
        facts["listening"] = sorted({c.laddr.ip for p in _cluster_processes(temp_dir)
                                     for c in _connections(p) if c.status == psutil.CONN_LISTEN})
        raylet = next(p for p in _cluster_processes(temp_dir) if p.name() == "raylet")
        out = root / "out"
        driver_env = {**_cluster_env(driver_tmp), "PYTHONUNBUFFERED": "1"}
        cmd = _cli(submitted, out, address)

        # 1. the driver is killed as soon as the first record is written
        with open(root / "run1.log", "w") as log:
            driver = subprocess.Popen(cmd, env=driver_env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
            records = out / "records" / A
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline and driver.poll() is None and not list(records.glob("*.json")):
                time.sleep(0.1)
            driver.kill()
            driver.wait(30)
        facts["recorded_before_kill"] = {f.stem: f.read_bytes() for f in records.glob("*.json")}
        facts["driver_files_after_kill"] = [str(p) for p in driver_tmp.rglob("*") if p.is_file()]

        # 2. the same command resumes; a worker is killed while it grades
        with open(root / "run2.log", "w") as log:
            driver = subprocess.Popen(cmd, env=driver_env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
            killed = None
            deadline = time.monotonic() + 600
            while killed is None and time.monotonic() < deadline and driver.poll() is None:
                found = _grading_worker(raylet)
                if found is not None:
                    worker, nbgrader = found
                    time.sleep(3)  # well inside its job (nbgrader starts, the template is unpacked)
                    if worker.is_running() and nbgrader.is_running():
                        student = next(a.split("=", 1)[1] for a in nbgrader.cmdline() if a.startswith("--student="))
                        worker.kill()
                        killed = {"student": student, "nbgrader": nbgrader}
                time.sleep(0.1)
            facts["killed"] = killed
            if killed is not None:
                try:
                    killed["nbgrader"].wait(20)
                    killed["orphan_survived"] = False
                except psutil.TimeoutExpired:
                    killed["orphan_survived"] = True
            facts["rc"] = driver.wait(900)
        facts["run2"] = (root / "run2.log").read_text()
        facts["out"] = out
        facts["jobs_left"] = sorted(p.name for p in (worker_tmp / "course-grader" / "jobs").glob("*"))
        yield facts
    finally:
        _stop_cluster(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


def _connections(p: psutil.Process):
    try:
        return p.net_connections(kind="tcp")
    except psutil.Error:
        return []


def _table(records) -> dict[tuple[str, str], tuple[float, str]]:
    return {(r.student, r.grade_id): (r.points, r.status) for r in records}


def test_the_cluster_listens_on_loopback_only(scenario):
    assert scenario["listening"] and set(scenario["listening"]) <= {"127.0.0.1", "::ffff:127.0.0.1"}, \
        scenario["listening"]


def test_the_cluster_gives_the_local_pools_grades(scenario):
    assert scenario["rc"] == 0, scenario["run2"][-3000:]
    ray_records = read_json(scenario["out"] / "grades.json")
    assert _table(ray_records) == {(student, test): outcome for student, tests in EXPECTED.items()
                                   for test, outcome in tests.items()}
    messages = {(r.student, r.grade_id): r.message for r in ray_records}
    assert "never written" in messages[("dev_floor_grid", "test_add_ragged")]
    assert "returned dtype float32, expected float16" in messages[("eve_float32_out", "test_add_fp16")]


def test_one_record_per_student_and_test_nothing_lost_or_doubled(scenario):
    rows = json.loads((scenario["out"] / "grades.json").read_text())
    keys = [(r["student"], r["grade_id"]) for r in rows]
    assert len(keys) == len(set(keys))
    assert {s for s, _ in keys} == set(CLASS)
    assert sorted(p.stem for p in (scenario["out"] / "records" / A).glob("*.json")) == sorted(CLASS)
    assert all(r["status"] != "error" for r in rows), [r for r in rows if r["status"] == "error"]


def test_a_worker_killed_mid_job_is_retried(scenario):
    killed = scenario["killed"]
    assert killed is not None, "no grading worker was caught mid-job"
    assert not killed["orphan_survived"], "the killed worker's nbgrader went on grading"
    record = json.loads((scenario["out"] / "records" / A / f"{killed['student']}.json").read_text())
    assert record["records"] and all(r["status"] != "error" for r in record["records"])
    assert record["run"]["ray_node"] and record["run"]["ray"]
    assert scenario["jobs_left"] == [], "the killed job's workspace was left on the node"


def test_an_interrupted_run_resumes_without_regrading(scenario):
    before = scenario["recorded_before_kill"]
    assert 1 <= len(before) < len(CLASS), sorted(before)
    for student, data in before.items():  # byte for byte: not graded again
        assert (scenario["out"] / "records" / A / f"{student}.json").read_bytes() == data
    assert f"{len(before)}/{len(CLASS)}" in scenario["run2"]  # the bar starts at what was done


def test_the_progress_bar_shows_rate_and_time_left(scenario):
    log = scenario["run2"]
    assert "submission/s" in log or "s/submission" in log
    assert "<" in log and "100%" in log


def test_no_path_of_the_driver_is_read_on_the_workers(scenario):
    driver_tmp, worker_tmp = str(scenario["driver_tmp"]), str(scenario["worker_tmp"])
    for student in CLASS:
        log = (scenario["out"] / "work" / A / student / "autograde.log").read_text()
        assert worker_tmp in log, log[-2000:]
        assert driver_tmp not in log and str(scenario["submitted"]) not in log
    # the driver's templates are gone once packed, before any job is sent
    assert scenario["driver_files_after_kill"] == []
    assert [p for p in scenario["driver_tmp"].rglob("*") if p.is_file()] == []
    assert (scenario["out"] / "feedback" / "ada_correct" / f"{A}.html").exists()
