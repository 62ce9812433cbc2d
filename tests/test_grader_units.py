"""Fast checks of the grader's parts that need no nbgrader run: integrity guard, launch counting,
notebook repair, feedback redaction, records and the executor interface (LMS collection: tests/test_collect.py)."""

from __future__ import annotations

import json

import nbformat
import pytest
import torch

import triton_course  # noqa: F401  (interpreter on)
import triton
import triton.language as tl

from grader.repair import repair_notebook
from grader.course import example_submissions, student_notebook
from grader.examples import apply_answers, parse_answers
from grader.feedback import PLACEHOLDER, hide_hidden_regions
from tests.safety.transforms import TRANSFORMS
from triton_course import integrity
from triton_course.checks import CheckFailed, check

A = "03_vector_add"


@triton.jit
def _copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + i, tl.load(src + i, mask=i < n), mask=i < n)


def _triton_copy(x):
    out = torch.empty_like(x)
    _copy_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64)
    return out


def test_kernel_launches_are_counted():
    with integrity.KernelLaunches() as launches:
        _triton_copy(torch.randn(100))
        _triton_copy(torch.randn(10))
    assert launches.count == 2
    with integrity.KernelLaunches() as launches:
        torch.randn(5) + 1
    assert launches.count == 0


@triton.jit
def _copy_through_descriptors(src_desc, dst_desc, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK
    dst_desc.store([i], src_desc.load([i]))


def test_a_tensor_written_through_a_host_descriptor_counts_as_received():
    """Chapters 07 and 09 teach TensorDescriptor: a launcher that hands its output to the kernel only inside a
    host descriptor has still given it to the kernel, and must not be told that no launch received it (its
    relaunch re-creates the descriptor, so the judge grades the kernel's own work either way). A tensor that
    no launch saw, by pointer or by descriptor, is still not counted."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    x, out, bystander = torch.randn(64), torch.empty(64), torch.empty(64)
    with integrity.KernelLaunches() as launches:
        _copy_through_descriptors[(4,)](TensorDescriptor.from_tensor(x, [16]), TensorDescriptor.from_tensor(out, [16]),
                                        BLOCK=16)
    assert torch.equal(out, x) and launches.count == 1
    assert {x.untyped_storage().data_ptr(), out.untyped_storage().data_ptr()} <= launches.written
    assert bystander.untyped_storage().data_ptr() not in launches.written


def test_a_timed_function_that_skips_its_launch_is_caught(monkeypatch):
    """The performance checks time a function many times on a few input sets; one that caches its result
    and launches nothing on repeated calls must not be graded on the speed of its cache."""
    from triton_course.grading import require_launch_per_call

    cache = {}

    def memoised(t):
        if t.data_ptr() not in cache:
            cache[t.data_ptr()] = _triton_copy(t)
        return cache[t.data_ptr()]

    sets = [torch.randn(64), torch.randn(64)]
    monkeypatch.setenv(integrity.REQUIRE_KERNEL_ENV, "1")
    with integrity.LaunchesPerCall(memoised) as timed:
        for i in range(6):
            timed(sets[i % 2])
    assert (timed.calls, timed.launches) == (6, 2)
    with pytest.raises(CheckFailed, match="in only 2 of 6 calls"):
        require_launch_per_call(timed, "copy")
    with integrity.LaunchesPerCall(_triton_copy) as honest:
        for i in range(6):
            honest(sets[i % 2])
    require_launch_per_call(honest, "copy")   # a launch in every call: nothing to report
    monkeypatch.setenv(integrity.REQUIRE_KERNEL_ENV, "0")
    require_launch_per_call(timed, "copy")    # outside the grader kernels are not required


def test_check_requires_a_kernel_only_when_asked(monkeypatch):
    x = torch.randn(50)
    check(lambda t: t.clone(), [x], lambda t: t, atol=0, rtol=0)  # default outside the grader: no requirement
    with pytest.raises(CheckFailed, match="without launching a Triton kernel"):
        check(lambda t: t.clone(), [x], lambda t: t, atol=0, rtol=0, require_kernel=True)
    check(_triton_copy, [x], lambda t: t, atol=0, rtol=0, require_kernel=True)
    monkeypatch.setenv(integrity.REQUIRE_KERNEL_ENV, "1")
    with pytest.raises(CheckFailed):
        check(lambda t: t.clone(), [x], lambda t: t, atol=0, rtol=0)
    check(lambda t: t.clone(), [x], lambda t: t, atol=0, rtol=0, require_kernel=False)


def _ada():
    return apply_answers(A, parse_answers((example_submissions(A) / "ada_correct.py").read_text()))


def test_repair_reattaches_stripped_metadata_and_reports_test_changes():
    release = nbformat.read(student_notebook(A), as_version=4)
    nb = TRANSFORMS["nora_stripped_metadata"](_ada())
    notes, ok = repair_notebook(nb, release)
    assert ok and any("metadata was stripped" in n for n in notes)
    assert sum(1 for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id")) == \
        sum(1 for c in release.cells if c.metadata.get("nbgrader", {}).get("grade_id"))
    notes, ok = repair_notebook(TRANSFORMS["omar_deleted_tests"](_ada()), release)
    assert ok and any("was deleted" in n for n in notes)
    notes, ok = repair_notebook(TRANSFORMS["pia_edited_tests"](_ada()), release)
    assert ok and any("was edited" in n for n in notes)
    stranger = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('hi')")])
    assert repair_notebook(stranger, release)[1] is False






def test_hidden_regions_are_replaced():
    src = "a = 1\n### BEGIN HIDDEN TESTS\nsecret(42)\n### END HIDDEN TESTS\nb = 2"
    assert hide_hidden_regions(src) == f"a = 1\n{PLACEHOLDER}\nb = 2"


def test_any_executor_runs_the_jobs_and_tampering_is_put_back(tmp_path, monkeypatch):
    """grade_all with a caller's Executor; a job that rewrites another student's file gets it put back."""
    from concurrent.futures import ThreadPoolExecutor

    import grader.autograde as ag
    from grader.results import GradeRecord

    submitted = tmp_path / "submitted"
    for student in ("amy", "bob"):
        dest = submitted / student / A / f"{A}.ipynb"
        dest.parent.mkdir(parents=True)
        nbformat.write(_ada(), dest)
    original = (submitted / "bob" / A / f"{A}.ipynb").read_bytes()

    class FakeTemplate:
        def __init__(self, root, assignment):
            self.root = root
            root.mkdir(parents=True)

    def fake_job(job):
        if job.student == "amy":  # a submission that scribbles on a classmate's notebook
            (submitted / "bob" / A / f"{A}.ipynb").write_text("{}")
        assert job.notebook == original  # graded from the snapshot, whatever is on disk
        return ag.JobResult([GradeRecord(job.student, A, g, p, p, "passed", "") for g, p in job.cells], [])

    class CountingExecutor(ThreadPoolExecutor):
        submitted_jobs = 0

        def submit(self, fn, *args, **kwargs):
            CountingExecutor.submitted_jobs += 1
            return super().submit(fn, *args, **kwargs)

    monkeypatch.setattr(ag, "calibrate_gpus", lambda: [])
    monkeypatch.setattr(ag, "GradingTemplate", FakeTemplate)
    monkeypatch.setattr(ag, "run_job", fake_job)
    done = []
    with CountingExecutor(max_workers=1) as pool:
        records = ag.grade_all(ag.find_submissions(submitted, A), tmp_path / "out", executor=pool,
                               on_done=lambda s, r: done.append(s.student))
    assert CountingExecutor.submitted_jobs == 2 and sorted(done) == ["amy", "bob"]
    assert (submitted / "bob" / A / f"{A}.ipynb").read_bytes() == original
    assert any("changed files outside its workspace" in r.message for r in records if r.student == "amy")
    assert all(r.status == "passed" for r in records)
    saved = json.loads((tmp_path / "out" / "records" / A / "bob.json").read_text())
    assert saved["records"] and saved["sha256"]




@pytest.mark.notebook   # a real autograde, kernel and sandbox: make test's, not make test-fast's
def test_a_kernel_that_fails_to_start_is_retried_not_blamed_on_the_student(tmp_path, monkeypatch):
    """A Jupyter kernel that dies before running any cell (seen once under load on CI) is the machine's
    fault: the submission is graded again instead of scoring 0. The failure is simulated for the first
    attempt only; the second attempt is real nbgrader autograde."""
    import grader.autograde as ag
    import grader.jobs as jobs
    from grader.nbgrader_cli import CommandResult

    real = jobs.run_nbgrader
    calls = []

    def flaky(root, *args, **kw):
        calls.append(args[0])
        if args[0] == "autograde" and calls.count("autograde") == 1:
            return CommandResult(1, "RuntimeError: Kernel died before replying to kernel_info")
        return real(root, *args, **kw)

    monkeypatch.setattr(jobs, "run_nbgrader", flaky)   # what grader.jobs.run_job runs
    dest = tmp_path / "submitted" / "ada" / A / f"{A}.ipynb"
    dest.parent.mkdir(parents=True)
    nbformat.write(apply_answers(A, parse_answers((example_submissions(A) / "ada_correct.py").read_text())), dest)
    records = ag.grade_all(ag.find_submissions(tmp_path / "submitted", A), tmp_path / "out", workers=1)
    assert calls.count("autograde") == 2
    assert sum(r.points for r in records) == 5 and all(r.status in ("passed", "not_graded") for r in records)
    assert all("failed to start" in r.message for r in records)


def test_a_grading_template_is_generated_once_a_process_and_again_when_its_source_changes(tmp_path, monkeypatch):
    """The second template of an assignment in one process is a copy of the first (nbgrader's generate_assignment
    is not run again), byte for byte, kept in memory (no folder of it is left where the run made it); a changed
    solution folder (its hash) makes a new one."""
    import grader.autograde as ag

    monkeypatch.setattr(ag.GradingTemplate, "_made", {})
    generated = []
    real = ag.run_nbgrader
    monkeypatch.setattr(ag, "run_nbgrader", lambda root, *args, **kw: generated.append(args) or real(root, *args, **kw))
    first = ag.GradingTemplate(tmp_path / "one", A)
    second = ag.GradingTemplate(tmp_path / "two", A)
    assert len(generated) == 1 and generated[0][0] == "generate_assignment"

    def files(root):
        return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    assert files(first.root) == files(second.root) and first.release.is_file()
    assert "gradebook.db" in files(second.root)
    assert [type(v) for v in ag.GradingTemplate._made.values()] == [bytes]   # packed, not a folder on disk
    monkeypatch.setattr(ag, "template_source_hash", lambda assignment: "changed")
    ag.GradingTemplate(tmp_path / "three", A)
    assert len(generated) == 2


def test_a_process_that_found_no_gpu_does_not_look_again(monkeypatch):
    """Under the interpreter the calibration's child process answers 'no GPU' once; later runs in the process skip
    the child (seconds of CPU each), but a run with another TRITON_INTERPRET or CUDA_VISIBLE_DEVICES asks again."""
    import subprocess

    import grader.jobs as jobs

    monkeypatch.delenv("COURSE_COPY_GBPS", raising=False)
    monkeypatch.setattr(jobs, "_NO_GPU_IN", set())
    children = []
    real = subprocess.run
    monkeypatch.setattr(jobs.subprocess, "run", lambda *a, **kw: children.append(a) or real(*a, **kw))
    assert jobs.calibrate_gpus() == [] and len(children) == 1
    assert jobs.calibrate_gpus() == [] and len(children) == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert jobs.calibrate_gpus() == [] and len(children) == 2


def test_an_nbgrader_command_ends_when_its_work_is_done_and_keeps_its_exit_code_and_output(tmp_path):
    """grader.nbgrader_cli runs nbgrader and then ends its process without Python's teardown (about 1 s of every
    autograde): what nbgrader printed still reaches the log, a failing command still fails, a good one succeeds."""
    from grader.nbgrader_cli import NBGRADER_THEN_EXIT, prepare_course_dir, run_nbgrader

    prepare_course_dir(tmp_path)
    good = run_nbgrader(tmp_path, "--version")
    assert good.returncode == 0 and good.log.strip(), good
    bad = run_nbgrader(tmp_path, "autograde", "no_such_assignment", "--force")
    assert bad.returncode not in (0, None) and "no_such_assignment" in bad.log, bad
    assert "os._exit(code)" in NBGRADER_THEN_EXIT and "sys.stdout.flush()" in NBGRADER_THEN_EXIT
