"""Chapter 02: the reference `benchmark` and traffic count, the self-checks' hints (each fires on its own
mistake and on no other), the memory-ladder helper, and the example corpus."""

from __future__ import annotations

import statistics
import time

import pytest

from grader.autograde import find_submissions, grade_all
from grader.course import solution_notebook
from grader.examples import build_submissions
from grader.notebook_code import exec_cell, load_namespace
from tests.conftest import run_with_answers, solution_cell
from triton_course.checks import CheckFailed
from triton_course.ladder import working_set_sweep

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


def test_benchmark_returns_the_statistic_asked_for(ns):
    sleeps = iter([0.16, 0.03, 0.06] * 3)  # median 60 ms, mean 83.3 ms, min 30 ms; a busy machine adds to each

    def fn():
        time.sleep(next(sleeps))

    got = {mode: ns["benchmark"](fn, warmup=0, trials=3, return_mode=mode) for mode in ("median", "mean", "min")}
    assert 59.9 <= got["median"] < 75 and 83.2 <= got["mean"] < 100 and 29.9 <= got["min"] < 45, got
    with pytest.raises(ValueError):
        ns["benchmark"](fn, return_mode="average")


def _cell(grade_id: str) -> str:
    return solution_cell(CHAPTER, grade_id)


def _per_call_ms(fn, n):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


# Typical mistakes in `benchmark`, each of one kind (CPU branch only: the self-check runs on the CPU here)
def _loop_mean(fn, warmup=1, trials=3, return_mode="median"):      # one clock around the loop: the mean
    for _ in range(warmup):
        fn()
    t0 = time.perf_counter()
    for _ in range(trials):
        fn()
    return (time.perf_counter() - t0) * 1e3 / trials


def _seconds(fn, warmup=1, trials=3, return_mode="median"):
    for _ in range(warmup):
        fn()
    return {"median": statistics.median, "mean": statistics.mean, "min": min}[return_mode](_per_call_ms(fn, trials)) / 1e3


def _warmup_timed(fn, warmup=1, trials=3, return_mode="median"):
    return float({"median": statistics.median, "mean": statistics.mean, "min": min}[return_mode](
        _per_call_ms(fn, warmup + trials)))


def _total(fn, warmup=1, trials=3, return_mode="median"):
    for _ in range(warmup):
        fn()
    return float(sum(_per_call_ms(fn, trials)))


def _one_loop(fn, warmup=1, trials=3, return_mode="median"):     # the warm-up calls are the timed calls
    return float(statistics.median(_per_call_ms(fn, max(warmup, trials))))


_BENCHMARK_MISTAKES = [(_loop_mean, "HINT_MEAN"), (_seconds, "HINT_SECONDS"), (_warmup_timed, "HINT_WARMUP"),
                       (_total, "HINT_TOTAL"), (_one_loop, "HINT_LOOPS")]
_BENCHMARK_HINTS = ("HINT_MEAN", "HINT_SECONDS", "HINT_WARMUP", "HINT_TOTAL", "HINT_LOOPS")


@pytest.mark.parametrize("mistake, hint", _BENCHMARK_MISTAKES, ids=[h for _, h in _BENCHMARK_MISTAKES])
def test_each_benchmark_hint_fires_on_its_mistake_and_on_no_other(ns, mistake, hint):
    scope = dict(ns, benchmark=mistake)
    exec_cell(_cell("judge_defs"), "<judge_defs>", scope)     # its helpers call the mistake, not ns's benchmark
    with pytest.raises(CheckFailed) as info:
        exec_cell(_cell("self_check_benchmark"), "<self_check_benchmark>", scope)
    fired = {name for name in _BENCHMARK_HINTS if scope[name] in str(info.value)}
    assert fired == {hint}, str(info.value)


_TRAFFIC_MISTAKES = [(lambda n, s=4: (8, 16 * n * s), "HINT_ONE_READ"), (lambda n, s=4: (8, 10 * n * s), "HINT_NO_WRITES"),
                     (lambda n, s=4: (8, 8 * n * s), "HINT_NO_READS"), (lambda n, s=4: (8, 18 * n * 4), "HINT_SCALING"),
                     (lambda n, s=4: (8, 20 * n * s), None), (lambda n, s=4: (7, 18 * n * s), None)]


@pytest.mark.parametrize("mistake, hint", _TRAFFIC_MISTAKES, ids=[str(h) for _, h in _TRAFFIC_MISTAKES])
def test_each_traffic_hint_fires_on_its_mistake_and_on_no_other(ns, mistake, hint):
    """The traffic self-check measures what gelu_eager's operators read and write, says when a count differs
    without printing the right one, and names a mistake only when the count is the one that mistake gives."""
    scope = dict(ns, eager_gelu_traffic=mistake)
    with pytest.raises(CheckFailed) as info:
        exec_cell(_cell("self_check_traffic"), "<self_check_traffic>", scope)
    names = ("HINT_ONE_READ", "HINT_NO_WRITES", "HINT_NO_READS", "HINT_SCALING")
    fired = {name for name in names if scope[name] in str(info.value)}
    assert fired == ({hint} if hint else set()), str(info.value)
    if mistake(1000)[1] != 72000:   # the right count is not handed over (unless it is the student's own)
        assert "72,000" not in str(info.value) and "72000" not in str(info.value)


def test_the_traffic_self_check_hands_over_no_byte_count():
    source = _cell("self_check_traffic").replace("triton_course.i18n", "")   # a module's name, not a count
    for number in ("18", "72", "9 *", "* 9"):
        assert number not in source, number


def test_working_set_sweep_on_the_cpu_reports_a_bandwidth_per_set():
    got = working_set_sweep([2**16, 2**20], on_gpu=False)
    assert len(got) == 2 and all(g > 0.1 for g in got)
    with pytest.raises(ValueError):
        working_set_sweep([4], on_gpu=False)


def test_eager_traffic_matches_the_formula(ns):
    assert ns["eager_gelu_traffic"](1000) == (8, 72000)
    assert ns["eager_gelu_traffic"](10, 2) == (8, 360)


def test_examples_fail_for_the_right_reason():
    """Each answer file against the hidden tests, run by the judge (callables are triton_course.fixtures)."""
    ada = run_with_answers(CHAPTER, "ada_correct")
    assert set(ada) == {"test_benchmark_calls", "test_benchmark_timing", "test_benchmark_gpu", "test_gelu_traffic"}
    assert all(v == "passed" for v in ada.values()), ada  # test_benchmark_gpu: NOT GRADED on the CPU
    cleo = run_with_answers(CHAPTER, "cleo_times_warmup")
    assert "time only the calls after the warm-up loop" in cleo["test_benchmark_timing"]
    assert cleo["test_benchmark_calls"] == "passed"
    assert "that is the mean" not in cleo["test_benchmark_timing"]
    dev = run_with_answers(CHAPTER, "dev_seconds_median")
    assert "milliseconds" in dev["test_benchmark_timing"] and dev["test_gelu_traffic"] != "passed"
    assert "time only the calls after the warm-up loop" not in dev["test_benchmark_timing"]
    assert dev["test_benchmark_calls"] == "passed"
    ivy = run_with_answers(CHAPTER, "ivy_mean_of_loop")
    assert "that is the mean of the calls" in ivy["test_benchmark_timing"], ivy
    assert "milliseconds" not in ivy["test_benchmark_timing"]
    assert ivy["test_benchmark_calls"] == "passed" and ivy["test_gelu_traffic"] == "passed"


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
    """A mistake graded by nbgrader in the sandbox (the solution and the untouched notebook are graded so by
    tests/test_autograde.py)."""
    students = build_submissions(CHAPTER, tmp_path / "submitted")
    assert {"ada_correct", "ben_untouched", "cleo_times_warmup", "dev_seconds_median", "gus_fake_small_number",
            "hal_sets_calls", "ivy_mean_of_loop"} <= set(students)
    subs = [s for s in find_submissions(tmp_path / "submitted", CHAPTER) if s.student == "hal_sets_calls"]
    records = {(r.student, r.grade_id): r for r in grade_all(subs, tmp_path / "out", workers=1, feedback=False)}
    for gid in ("test_benchmark_calls", "test_benchmark_timing"):
        hal = records[("hal_sets_calls", gid)]
        assert hal.status == "failed" and hal.points == 0 and "fn was not called that often" in hal.message


# ---------------------------------------------------------------------------------------------------
# The CUDA-graph cell: skipped with its reason on the CPU, and on a GPU (stand-ins here) three timings a row
# ---------------------------------------------------------------------------------------------------


def _graph_cell() -> str:
    import nbformat

    nb = nbformat.read(solution_notebook(CHAPTER), as_version=4)
    cells = [c.source for c in nb.cells if c.cell_type == "code" and "do_bench_cudagraph" in c.source]
    assert len(cells) == 1
    return cells[0]


def test_the_cuda_graph_cell_says_why_it_is_skipped_on_the_cpu(ns, capsys):
    assert not ns["device"].is_gpu
    exec_cell(_graph_cell(), "<02 cuda graphs>", dict(ns))
    out = capsys.readouterr().out
    assert out.startswith("Skipped:") and "no GPU" in out and "CUDA stream" in out


def test_the_cuda_graph_cell_times_each_size_three_ways_on_a_gpu(ns, capsys):
    """On a GPU (stand-ins for torch, the timers and Triton): one row per size with the chapter's benchmark,
    do_bench and do_bench_cudagraph in microseconds, the graph asked for the median of its replays."""
    import types

    asked = []

    def cudagraph(fn, rep, return_mode):
        asked.append((fn(), rep, return_mode))
        return 0.002

    fake = dict(ns)
    fake["device"] = types.SimpleNamespace(is_gpu=True)
    fake["torch"] = types.SimpleNamespace(randn=lambda n, device: float(n))
    fake["benchmark"] = lambda fn, warmup, trials: 0.020
    fake["time_ms"] = lambda fn: 0.005
    fake["triton"] = types.SimpleNamespace(testing=types.SimpleNamespace(do_bench_cudagraph=cudagraph))
    exec_cell(_graph_cell(), "<02 cuda graphs>", fake)
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.strip().startswith("2^")]
    assert [r[0] for r in rows] == ["2^10", "2^16", "2^20", "2^24"]
    assert all(r[1:] == ["20.0", "5.0", "2.0"] for r in rows), rows
    assert asked == [(2.0 * n, 20, "median") for n in (2**10, 2**16, 2**20, 2**24)]
