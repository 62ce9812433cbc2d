"""Chapter 02: the reference `benchmark` and traffic count, and the example corpus."""

from __future__ import annotations

import time

import pytest

from grader.autograde import find_submissions, grade_all
from grader.course import solution_notebook
from grader.examples import build_submissions
from grader.notebook_code import load_namespace
from tests.conftest import run_with_answers

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


def test_examples_fail_for_the_right_reason():
    """Each answer file against the hidden tests, run by the judge (callables are utils.fixtures)."""
    ada = run_with_answers(CHAPTER, "ada_correct")
    assert set(ada) == {"test_benchmark_calls", "test_benchmark_timing", "test_benchmark_gpu", "test_gelu_traffic"}
    assert all(v == "passed" for v in ada.values()), ada  # test_benchmark_gpu: NOT GRADED on the CPU
    cleo = run_with_answers(CHAPTER, "cleo_times_warmup")
    assert "warm-up" in cleo["test_benchmark_timing"]
    assert cleo["test_benchmark_calls"] == "passed"
    dev = run_with_answers(CHAPTER, "dev_seconds_median")
    assert dev["test_benchmark_timing"] != "passed" and dev["test_gelu_traffic"] != "passed"
    assert dev["test_benchmark_calls"] == "passed"


def test_a_benchmark_that_never_calls_fn_earns_nothing_for_it():
    gus = run_with_answers(CHAPTER, "gus_fake_small_number")  # returns 0.001 at once
    for gid in ("test_benchmark_calls", "test_benchmark_timing"):
        assert "called fn 0 times" in gus[gid], (gid, gus[gid])
    assert gus["test_gelu_traffic"] == "passed"
    hal = run_with_answers(CHAPTER, "hal_sets_calls")  # sets fn.calls, returns fn.s in ms
    for gid in ("test_benchmark_calls", "test_benchmark_timing"):
        assert "fn was not called that often" in hal[gid], (gid, hal[gid])
    assert hal["test_gelu_traffic"] == "passed"


@pytest.mark.notebook
def test_examples_by_real_autograde(tmp_path):
    students = build_submissions(CHAPTER, tmp_path / "submitted")
    assert {"ada_correct", "ben_untouched", "cleo_times_warmup", "dev_seconds_median", "gus_fake_small_number",
            "hal_sets_calls"} <= set(students)
    subs = [s for s in find_submissions(tmp_path / "submitted", CHAPTER)
            if s.student in ("ada_correct", "ben_untouched", "hal_sets_calls")]
    records = {(r.student, r.grade_id): r for r in grade_all(subs, tmp_path / "out", workers=2)}
    for gid in ("test_benchmark_calls", "test_benchmark_timing", "test_gelu_traffic"):
        assert records[("ada_correct", gid)].status == "passed"
    assert records[("ada_correct", "test_benchmark_gpu")].status == "not_graded"
    assert sum(r.points for (s, _), r in records.items() if s == "ben_untouched") == 0
    for gid in ("test_benchmark_calls", "test_benchmark_timing"):
        hal = records[("hal_sets_calls", gid)]
        assert hal.status == "failed" and hal.points == 0 and "fn was not called that often" in hal.message
