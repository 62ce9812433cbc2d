"""Chapter 01: the occupancy rules of the reference solution, its spec table, and the example corpus."""

from __future__ import annotations

import pytest

from grader.autograde import find_submissions, grade_all
from grader.course import solution_notebook
from grader.examples import build_submissions
from grader.notebook_code import load_namespace
from tests.conftest import run_with_answers
from utils.gpus import GPU_SPECS
from utils.occupancy import LIMITS, sm_limits

CHAPTER = "01_gpu_model"


@pytest.fixture(scope="module")
def ns():
    return load_namespace(solution_notebook(CHAPTER))


def test_every_named_gpu_has_limits():
    for name, spec in GPU_SPECS.items():
        assert sm_limits(name).compute_capability == spec.compute_capability
        assert sm_limits(name.lower()) is sm_limits(name)
    with pytest.raises(ValueError):
        sm_limits("Z9")
    for lim in LIMITS.values():
        assert lim.max_shared_per_block + lim.shared_reserved_per_block <= lim.shared_per_sm


@pytest.mark.parametrize("args, gpu, want", [
    ((128, 160), "A100", 0.1875),        # the lecture's example (registers)
    ((256, 32), "A100", 1.0),
    ((1024, 64), "A100", 0.5),
    ((544, 40), "A100", 0.53125),        # register partitions decide
    ((640, 16), "H100", 0.9375),         # warps decide
    ((32, 16), "H200", 0.5),             # blocks decide
    ((256, 16, 41 * 1024), "A100", 0.375),  # the 1 KB reservation decides
    ((128, 32, 32329), "H100", 0.375),   # the 128-byte granularity decides
    ((1024, 65), "B200", 0.0),           # a block's registers do not fit
])
def test_reference_occupancy(ns, args, gpu, want):
    assert ns["occupancy"](*args, gpu=gpu) == pytest.approx(want)


def test_occupancy_is_monotone_and_bounded(ns):
    occ = ns["occupancy"]
    for gpu in ("A100", "H100", "T4", "A10"):
        for threads in (32, 96, 128, 256, 512, 1024):
            by_regs = [occ(threads, r, gpu=gpu) for r in range(0, 256, 7)]
            assert all(0 <= v <= 1 for v in by_regs)
            assert by_regs == sorted(by_regs, reverse=True), (gpu, threads)
            by_smem = [occ(threads, 32, s, gpu=gpu) for s in range(0, 64 * 1024, 3000)]
            assert by_smem == sorted(by_smem, reverse=True), (gpu, threads)


def test_waves_and_access_patterns(ns):
    assert [ns["waves"](b, 132) for b in (1, 132, 133, 264, 265)] == [1, 1, 2, 2, 3]
    assert ns["last_wave_utilization"](133, 132) == pytest.approx(1 / 132)
    lanes = range(32)
    assert ns["sectors_touched"]([4 * i for i in lanes]) == 4
    assert ns["sectors_touched"]([128 * i for i in lanes]) == 32
    assert ns["bank_conflict_ways"]([128 * i for i in lanes]) == 32
    assert ns["bank_conflict_ways"]([132 * i for i in lanes]) == 1


def test_examples_fail_for_the_right_reason():
    """Each answer file against the hidden tests, run by the judge (proxies; ValueErrors reach it as words)."""
    assert all(v == "passed" for v in run_with_answers(CHAPTER, "ada_correct").values())
    cleo = run_with_answers(CHAPTER, "cleo_whole_file")
    assert "occupancy(544, 40)" in cleo["test_occupancy_registers"]
    assert cleo["test_occupancy_shared"] == "passed"
    dev = run_with_answers(CHAPTER, "dev_no_reservation")
    assert "1 KB reservation" in dev["test_occupancy_shared"]
    assert dev["test_occupancy_registers"] == "passed"
    eve = run_with_answers(CHAPTER, "eve_floor_waves")
    assert all(eve[g] != "passed" for g in ("test_waves", "test_sectors", "test_bank_conflicts"))
    assert eve["test_occupancy_shared"] == "passed"


def test_a_table_of_the_self_check_cases_earns_nothing_for_occupancy():
    fay = run_with_answers(CHAPTER, "fay_self_check_table")
    for gid in ("test_occupancy_registers", "test_occupancy_warps_blocks", "test_occupancy_shared"):
        assert fay[gid].startswith("CheckFailed: occupancy("), (gid, fay[gid])
    assert fay["test_waves"] == "passed"


@pytest.mark.notebook
def test_examples_by_real_autograde(tmp_path):
    students = build_submissions(CHAPTER, tmp_path / "submitted")
    assert {"ada_correct", "ben_untouched", "cleo_whole_file", "dev_no_reservation", "eve_floor_waves",
            "fay_self_check_table"} <= set(students)
    subs = [s for s in find_submissions(tmp_path / "submitted", CHAPTER)
            if s.student in ("ada_correct", "ben_untouched", "dev_no_reservation")]
    records = {(r.student, r.grade_id): r for r in grade_all(subs, tmp_path / "out", workers=2)}
    ada = [r for (s, _), r in records.items() if s == "ada_correct"]
    assert ada and all(r.status == "passed" and r.points == r.max_points for r in ada)
    assert sum(r.points for (s, _), r in records.items() if s == "ben_untouched") == 0
    dev = records[("dev_no_reservation", "test_occupancy_shared")]
    assert dev.status == "failed" and "1 KB reservation" in dev.message
    assert records[("dev_no_reservation", "test_occupancy_registers")].status == "passed"
