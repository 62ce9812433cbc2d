"""Chapter 02: the reference `benchmark` and traffic count, and the example corpus."""

from __future__ import annotations

import time

import pytest

from grader.autograde import find_submissions, grade_all
from grader.course import solution_notebook
from grader.examples import build_submissions
from grader.notebook_code import load_namespace

CHAPTER = "02_benchmarking"


@pytest.fixture(scope="module")
def ns():
    return load_namespace(solution_notebook(CHAPTER))


def test_benchmark_counts_and_excludes_warmup(ns):
    calls = []

    def fn():
        calls.append(time.perf_counter())
        time.sleep(0.3 if len(calls) == 1 else 0.01)

    ms = ns["benchmark"](fn, warmup=1, trials=4)
    assert len(calls) == 5
    assert 9.9 <= ms < 100  # the 300 ms warm-up call is not in it
    with pytest.raises(ValueError):
        ns["benchmark"](fn, trials=0)


def test_eager_traffic_matches_the_formula(ns):
    assert ns["eager_gelu_traffic"](1000) == (8, 72000)
    assert ns["eager_gelu_traffic"](10, 2) == (8, 360)


@pytest.mark.notebook
def test_examples_fail_for_the_right_reason(tmp_path):
    students = build_submissions(CHAPTER, tmp_path / "submitted")
    assert {"ada_correct", "ben_untouched", "cleo_times_warmup", "dev_seconds_median"} <= set(students)
    records = {(r.student, r.grade_id): r
               for r in grade_all(find_submissions(tmp_path / "submitted", CHAPTER), tmp_path / "out", workers=2)}
    for gid in ("test_benchmark_calls", "test_benchmark_timing", "test_gelu_traffic"):
        assert records[("ada_correct", gid)].status == "passed"
    assert records[("ada_correct", "test_benchmark_gpu")].status == "not_graded"
    assert sum(r.points for (s, _), r in records.items() if s == "ben_untouched") == 0
    cleo = records[("cleo_times_warmup", "test_benchmark_timing")]
    assert cleo.status == "failed" and "warm-up" in cleo.message
    assert records[("cleo_times_warmup", "test_benchmark_calls")].status == "passed"
    dev = records[("dev_seconds_median", "test_benchmark_timing")]
    assert dev.status == "failed"
    assert records[("dev_seconds_median", "test_gelu_traffic")].status == "failed"
    assert records[("dev_seconds_median", "test_benchmark_calls")].status == "passed"
