"""Chapter 08 (fusion analysis): the roofline helper, the recorded GPU figures, and the example
submissions failing the test each mistake should fail."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT, run_with_answers
from triton_course.gpus import GPU_SPECS
from triton_course.roofline import KernelPoint, Roof, datasheet_roof, device_roof, plot_roofline

CHAPTER = "08_fusion"


def test_roof_arithmetic():
    roof = Roof(4000.0, 1000.0, "test")
    assert roof.ridge == pytest.approx(250.0)
    assert roof.attainable_tflops(10.0) == pytest.approx(40.0)      # 10 FLOP/B x 4 TB/s
    assert roof.attainable_tflops(1e4) == pytest.approx(1000.0)
    assert roof.bound(249.0) == "memory" and roof.bound(251.0) == "compute"
    p = KernelPoint("k", flops=2e9, nbytes=1e9, measured_ms=1.0)
    assert p.intensity == pytest.approx(2.0) and p.measured_tflops == pytest.approx(2.0)


def test_roof_without_a_gpu_is_the_h200_datasheet_and_says_so():
    roof = device_roof()
    spec = GPU_SPECS["H200"]
    assert (roof.bandwidth_gbps, roof.peak_tflops) == (spec.peak_gbps, spec.fp16_tensor_tflops)
    assert "datasheet" in roof.source and "no GPU" in roof.source
    assert datasheet_roof("T4").peak_tflops == GPU_SPECS["T4"].fp16_tensor_tflops


def test_roofline_plot_draws(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    ax = plot_roofline(datasheet_roof(), [KernelPoint("a", 1e9, 1e9), KernelPoint("b", 1e12, 1e9, 2.0)], "t")
    ax.figure.savefig(tmp_path / "roof.png")
    assert "datasheet" in ax.get_title()


def test_recorded_gpu_figures_meet_the_claims():
    path = ROOT / "results" / f"{CHAPTER}.json"
    if not path.exists():
        pytest.skip("no GPU record yet")
    rec = json.loads(path.read_text())
    assert "H200" in rec["device"]
    check = rec["bandwidth_check"]
    assert check["fraction_of_copy"] >= 0.9 and check["achieved_gbps"] >= check["compile_gbps"]
    bench = next(r for r in rec["sizes"] if r["shape"] == [4, 2048, 4096] and r["dtype"] == "float16")
    assert bench["speedup_predicted"] == pytest.approx(7 / 3, abs=0.01)
    ce = rec["counter_example"]
    assert ce["fused_speed_relative_to_unfused"] < 1.0, "the counter-example must show fusion losing"


BYTE_TESTS = ("test_softmax_bytes", "test_norm_bytes", "test_gemm_act", "test_chain_bytes")
FUSED_TESTS = ("test_fused_fp32", "test_fused_fp16", "test_fused_inputs_untouched")


@pytest.mark.notebook
def test_correct_answers_pass_every_hidden_test_through_the_judge():
    outcomes = run_with_answers(CHAPTER, "ada_correct")
    assert set(outcomes) >= {*BYTE_TESTS, "test_roofline", *FUSED_TESTS, "test_fused_bandwidth"}
    assert all(v == "passed" for v in outcomes.values()), outcomes


@pytest.mark.notebook
def test_mistakes_lose_the_points_they_should_through_the_judge():
    cleo = run_with_answers(CHAPTER, "cleo_residual_in_place")
    assert "Input 1 was modified" in cleo["test_fused_inputs_untouched"], cleo
    assert "Input 0 was modified" not in cleo["test_fused_inputs_untouched"]
    assert all(cleo[t] == "passed" for t in (*BYTE_TESTS, "test_roofline")), cleo

    dev = run_with_answers(CHAPTER, "dev_norm_without_residual")
    assert "over x alone" in dev["test_fused_fp32"] and "over x alone" in dev["test_fused_fp16"], dev
    assert all(dev[t] == "passed" for t in (*BYTE_TESTS, "test_roofline")), dev

    eve = run_with_answers(CHAPTER, "eve_traffic_off_by_one")
    for test in BYTE_TESTS:
        assert eve[test].startswith("CheckFailed") and "expected" in eve[test], (test, eve[test])
    assert all(eve[t] == "passed" for t in ("test_roofline", *FUSED_TESTS)), eve

    # BLOCK_N capped at 16384 without a loop over the row: right on every row up to 16384 elements, so only
    # the rows wider than that (what a GPU kernel tiling its rows must loop over) catch it.
    fay = run_with_answers(CHAPTER, "fay_capped_block")
    for test in FUSED_TESTS:
        assert "never written" in fay[test] and "loop over its tiles" in fay[test], (test, fay[test])
    assert all(fay[t] == "passed" for t in (*BYTE_TESTS, "test_roofline")), fay


def test_hidden_tests_use_only_judge_names_and_give_the_timed_check_a_reference():
    import nbformat

    from grader.course import solution_notebook
    from grader.execute import is_judge_cell, is_test

    nb = nbformat.read(solution_notebook(CHAPTER), as_version=4)
    assert {c.metadata["nbgrader"]["grade_id"] for c in nb.cells if is_judge_cell(c)} == {"judge_traffic",
                                                                                         "judge_fused"}
    bandwidth = next(c.source for c in nb.cells if is_test(c)
                     and c.metadata["nbgrader"]["grade_id"] == "test_fused_bandwidth")
    assert "reference=reference" in bandwidth and "tolerances=fused_tolerances" in bandwidth
    assert "fraction=0.8" in bandwidth


@pytest.mark.notebook
def test_examples_fail_for_the_right_reason(tmp_path):
    from grader.autograde import find_submissions, grade_all
    from grader.examples import build_submissions

    students = build_submissions(CHAPTER, tmp_path / "submitted")
    assert {"ada_correct", "ben_untouched", "cleo_residual_in_place", "dev_norm_without_residual",
            "eve_traffic_off_by_one", "fay_capped_block"} <= set(students)
    keep = ["ada_correct", "cleo_residual_in_place", "dev_norm_without_residual", "eve_traffic_off_by_one"]
    subs = [s for s in find_submissions(tmp_path / "submitted", CHAPTER) if s.student in keep]
    rec = {(r.student, r.grade_id): r for r in grade_all(subs, tmp_path / "out", workers=2)}

    ada = [r for (s, _), r in rec.items() if s == "ada_correct"]
    assert all(r.status == "passed" and r.points == r.max_points for r in ada if r.status != "not_graded")
    assert rec[("ada_correct", "test_fused_bandwidth")].status == "not_graded"

    cleo = rec[("cleo_residual_in_place", "test_fused_inputs_untouched")]
    assert cleo.status == "failed" and "Input 1 was modified" in cleo.message
    assert rec[("cleo_residual_in_place", "test_softmax_bytes")].status == "passed"

    dev = rec[("dev_norm_without_residual", "test_fused_fp32")]
    assert dev.status == "failed" and "over x alone" in dev.message
    assert rec[("dev_norm_without_residual", "test_norm_bytes")].status == "passed"

    for test in ("test_softmax_bytes", "test_norm_bytes", "test_gemm_act", "test_chain_bytes"):
        eve = rec[("eve_traffic_off_by_one", test)]
        assert eve.status == "failed" and "expected" in eve.message, (test, eve)
    assert rec[("eve_traffic_off_by_one", "test_roofline")].status == "passed"
    assert rec[("eve_traffic_off_by_one", "test_fused_fp16")].status == "passed"
