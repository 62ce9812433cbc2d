"""Real nbgrader autograde, on this machine (Triton's interpreter, no GPU).

For every chapter: the solution handed in as a student's notebook earns every point that can be
graded here, the untouched student notebook earns nothing, and performance checks are reported as
not graded with no points. For the vector-add chapter, the example corpus fails where it should.
"""

from __future__ import annotations

import json
import subprocess
import sys

import nbformat
import pytest

from grader.autograde import find_submissions, grade_all, graded_cells
from grader.course import solution_notebook
from grader.examples import apply_answers, build_submissions
from grader.feedback import leaks
from grader.results import read_json
from tests.conftest import CHAPTERS, ROOT

pytestmark = pytest.mark.notebook


def _solution_answers(chapter):
    nb = nbformat.read(solution_notebook(chapter), as_version=4)
    return {c.metadata["nbgrader"]["grade_id"]: None for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("solution")}


#: (points, status) of each test of three chapter-03 examples, graded by the local pool without a GPU (the Ray
#: cluster's grades must be these too: tests/test_cluster.py).
EXPECTED_03 = {
    "ada_correct": {"test_add_ragged": (2.0, "passed"), "test_add_fp16": (1.0, "passed"),
                    "test_add_2d": (1.0, "passed"), "test_add_writes_exactly_n": (1.0, "passed"),
                    "test_add_gpu_sizes": (0.0, "not_graded"), "test_add_bandwidth": (0.0, "not_graded")},
    "dev_floor_grid": {"test_add_ragged": (0.0, "failed"), "test_add_fp16": (0.0, "failed"),
                       "test_add_2d": (0.0, "failed"), "test_add_writes_exactly_n": (0.0, "failed"),
                       "test_add_gpu_sizes": (0.0, "not_graded"), "test_add_bandwidth": (0.0, "not_graded")},
    "eve_float32_out": {"test_add_ragged": (2.0, "passed"), "test_add_fp16": (0.0, "failed"),
                        "test_add_2d": (1.0, "passed"), "test_add_writes_exactly_n": (1.0, "passed"),
                        "test_add_gpu_sizes": (0.0, "not_graded"), "test_add_bandwidth": (0.0, "not_graded")},
}


#: Each edition of the release, handed in with the model answers and untouched: (student, answers?, language). The
#: Chinese edition's stubs are the English ones, code cell for code cell (tests/test_translations.py holds every
#: chapter to that), so its untouched notebook is graded for one chapter only: grading is the suite's dearest step.
EDITION_SUBMISSIONS = (("solution", True, "en"), ("untouched", False, "en"), ("solution-zh", True, "zh_CN"))
UNTOUCHED_ZH = ("untouched-zh", False, "zh_CN")
UNTOUCHED_ZH_CHAPTER = "03_vector_add"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_solution_earns_every_gradable_point_and_untouched_earns_none(chapter, tmp_path):
    """In both editions: the English release and the Chinese one (notebooks/zh/) are graded the same."""
    submitted = tmp_path / "submitted"
    editions = EDITION_SUBMISSIONS + ((UNTOUCHED_ZH,) if chapter == UNTOUCHED_ZH_CHAPTER else ())
    for student, answered, language in editions:
        dest = submitted / student / chapter / f"{chapter}.ipynb"
        dest.parent.mkdir(parents=True)
        nbformat.write(apply_answers(chapter, _solution_answers(chapter) if answered else {}, language), dest)
    records = grade_all(find_submissions(submitted, chapter), tmp_path / "out", workers=2)
    by_student = {s: [r for r in records if r.student == s] for s, _, _ in editions}
    cells = graded_cells(chapter)
    for solution in ("solution", "solution-zh"):
        assert len(by_student[solution]) == len(cells)
        for r in by_student[solution]:
            if r.status == "not_graded":
                assert r.points == 0 and r.message.startswith("NOT GRADED")
            else:
                assert r.status == "passed" and r.points == r.max_points, r
    for untouched in [s for s, answered, _ in editions if not answered]:
        assert len(by_student[untouched]) == len(cells)
        assert sum(r.points for r in by_student[untouched]) == 0
        assert all(r.status in ("failed", "not_graded") for r in by_student[untouched])
    assert [(r.grade_id, r.status) for r in by_student["solution"]] == \
        [(r.grade_id, r.status) for r in by_student["solution-zh"]]
    # the chapter's feedback (the only feedback its tests generate): written, and no hidden test line in it
    source = nbformat.read(solution_notebook(chapter), as_version=4)
    for student, _, _ in editions:
        html = tmp_path / "out" / "feedback" / student / f"{chapter}.html"
        assert html.exists() and not leaks(html, source), (student, leaks(html, source) if html.exists() else None)


def test_vector_add_examples_fail_for_the_right_reason(tmp_path):
    students = build_submissions("03_vector_add", tmp_path / "submitted")
    assert {"ada_correct", "ben_untouched", "dev_floor_grid", "eve_float32_out"} <= set(students)
    # a long student id (an LMS's name and id) must not lengthen the sandbox's socket paths past their limit
    ada = "ada_correct_" + "janedoe_0123456789" * 3
    (tmp_path / "submitted" / "ada_correct").rename(tmp_path / "submitted" / ada)
    keep = [ada, "dev_floor_grid", "eve_float32_out"]
    subs = [s for s in find_submissions(tmp_path / "submitted", "03_vector_add") if s.student in keep]
    records = {(r.student, r.grade_id): r for r in grade_all(subs, tmp_path / "out", workers=2)}
    assert records[(ada, "test_add_ragged")].status == "passed", records[(ada, "test_add_ragged")].message
    tail = records[("dev_floor_grid", "test_add_ragged")]
    assert tail.status == "failed" and "never written" in tail.message
    fp16 = records[("eve_float32_out", "test_add_fp16")]
    assert fp16.status == "failed" and "returned dtype float32, expected float16" in fp16.message
    assert records[("eve_float32_out", "test_add_ragged")].status == "passed"
    assert records[(ada, "test_add_bandwidth")].status == "not_graded"
    named = {ada: "ada_correct", "dev_floor_grid": "dev_floor_grid", "eve_float32_out": "eve_float32_out"}
    assert {(named[s], t): (r.points, r.status) for (s, t), r in records.items()} == {
        (student, test): outcome for student, tests in EXPECTED_03.items() for test, outcome in tests.items()}


def test_command_line_contract(tmp_path):
    """`python -m grader autograde` writes grades.json with the documented fields, and a CSV."""
    build_submissions("03_vector_add", tmp_path / "submitted")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "grader", "autograde", str(tmp_path / "submitted"),
                           "--assignment", "03_vector_add", "--student", "ada_correct", "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads((out / "grades.json").read_text())
    assert rows and all({"student", "assignment", "grade_id", "points", "max_points", "status", "message"} <= set(r)
                        for r in rows)
    assert read_json(out / "grades.json")[0].student == "ada_correct"
    assert "ada_correct" in (out / "grades.csv").read_text()
    assert "ada_correct" in proc.stdout and "NOT GRADED" in proc.stdout
    assert (out / "feedback" / "ada_correct" / "03_vector_add.html").exists()
    assert (out / "records" / "03_vector_add" / "ada_correct.json").exists()
    report = subprocess.run([sys.executable, "-m", "grader", "report", str(out), "--csv", str(tmp_path / "t.csv")],
                            capture_output=True, text=True, cwd=ROOT)
    assert report.returncode == 0 and "ada_correct" in report.stdout and (tmp_path / "t.csv").exists()


def test_a_thread_left_launching_kernels_costs_nothing_to_others(tmp_path):
    """solutions/03_vector_add/submissions/attacks/yan_background_gpu_thread: its cell returns with a thread still launching its
    kernel. It earns its correctness points, and the honest student graded beside it keeps every point. (On a GPU shared by several submissions the same case checks that
    its queued work never overlaps another's timed loop: tests/gpu/gpu_class_throughput.py.)"""

    build_submissions("03_vector_add", tmp_path / "built", kind="attacks")
    build_submissions("03_vector_add", tmp_path / "built")
    submitted = tmp_path / "submitted"
    for student in ("yan_background_gpu_thread", "ada_correct"):
        (submitted / student).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "built" / student).rename(submitted / student)
    records = grade_all(find_submissions(submitted, "03_vector_add"), tmp_path / "out", workers=2, feedback=False)
    for r in records:
        if r.grade_id in ("test_add_bandwidth", "test_add_gpu_sizes"):   # GPU-only checks, 0 on the CPU
            assert r.status == "not_graded", r
        else:
            assert r.status == "passed" and r.points == r.max_points, r


def test_more_workers_than_gpus_share_each_gpu_with_the_lock_on(tmp_path, monkeypatch):
    """--workers above the number of GPUs: no longer capped; every job gets the GPU lock folder, so that its
    timed loops freeze the others (the GPU itself is simulated here: one calibrated GPU, jobs that only wait)."""
    import threading
    import time

    import grader.autograde as ag
    from grader.gpu_lock import LOCK_DIR_ENV
    from grader.results import GradeRecord

    build_submissions("03_vector_add", tmp_path / "built")
    subs = [s for s in find_submissions(tmp_path / "built", "03_vector_add")][:4]
    seen, running, peak, lock = [], [0], [0], threading.Lock()

    def fake_job(job):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            seen.append((job.env.get(LOCK_DIR_ENV), job.env.get("CUDA_VISIBLE_DEVICES"), job.slot,
                         job.env.get("CUDA_DEVICE_ORDER")))
        time.sleep(1.0)
        with lock:
            running[0] -= 1
        return ag.JobResult([GradeRecord(job.student, job.assignment, g, p, p, "passed", "") for g, p in job.cells], [])

    monkeypatch.setattr(ag, "calibrate_gpus", lambda: ["3000.0"])
    monkeypatch.setattr(ag, "run_job", fake_job)
    ag.grade_all(subs, tmp_path / "out", workers=3, feedback=False)
    assert peak[0] == 3, "the pool was capped at one submission per GPU"
    assert all(d and gpu == "0" and order == "PCI_BUS_ID" for d, gpu, _, order in seen), seen
    assert len({d for d, *_ in seen}) == 1
    assert len({slot for *_, slot, _ in seen[:3]}) == 3  # concurrent sandboxes never share a uid


def test_one_worker_per_gpu_needs_no_lock(tmp_path, monkeypatch):
    import grader.autograde as ag
    from grader.gpu_lock import LOCK_DIR_ENV
    from grader.results import GradeRecord

    build_submissions("03_vector_add", tmp_path / "built")
    subs = find_submissions(tmp_path / "built", "03_vector_add")[:2]
    seen = []

    def fake_job(job):
        seen.append((job.env.get(LOCK_DIR_ENV), job.env.get("CUDA_VISIBLE_DEVICES")))
        return ag.JobResult([GradeRecord(job.student, job.assignment, g, p, p, "passed", "") for g, p in job.cells], [])

    monkeypatch.delenv(LOCK_DIR_ENV, raising=False)
    monkeypatch.setattr(ag, "calibrate_gpus", lambda: ["3000.0", "3000.0"])
    monkeypatch.setattr(ag, "run_job", fake_job)
    ag.grade_all(subs, tmp_path / "out", workers=2, feedback=False)
    assert sorted(seen) == [(None, "0"), (None, "1")]
