"""Chapter 07 (matmul + ReLU): the example submissions fail the test they should, for the reason they
should, and the chapter's helpers in utils/matmul.py behave as documented without a GPU."""

from __future__ import annotations

import pytest

from grader.autograde import find_submissions, grade_all
from grader.examples import build_submissions

CHAPTER = "07_matmul_relu"


def test_flop_helpers():
    from utils.matmul import matmul_bytes, matmul_flops, tflops

    assert matmul_flops(4096, 4096, 4096) == 2 * 4096**3
    assert matmul_bytes(3, 5, 7, 2) == (3 * 7 + 7 * 5 + 3 * 5) * 2
    assert tflops(2e12, 1000.0) == pytest.approx(2.0)


def test_speed_check_is_not_graded_without_a_gpu(capsys):
    from utils.grading import NOT_GRADED
    from utils.matmul import dot_uses_tensor_cores, tflops_points

    assert not dot_uses_tensor_cores()
    called = []
    points = tflops_points(lambda: called.append(1), lambda: None, lambda: (), 1, fraction=0.75, points=2,
                           what="matmul")
    assert points == 0.0 and not called
    assert capsys.readouterr().out.startswith(NOT_GRADED)


@pytest.mark.notebook
def test_matmul_examples_fail_for_the_right_reason(tmp_path):
    students = build_submissions(CHAPTER, tmp_path / "submitted")
    expected = {"ada_correct", "ben_untouched", "cleo_no_k_mask", "dev_relu_in_k_loop", "eve_no_relu",
                "finn_contiguous_b", "gia_fp16_accumulator"}
    assert expected <= set(students)
    subs = [s for s in find_submissions(tmp_path / "submitted", CHAPTER) if s.student not in ("ada_correct", "ben_untouched")]
    records = {(r.student, r.grade_id): r for r in grade_all(subs, tmp_path / "out", workers=2)}

    def status(student, test):
        return records[(student, test)].status

    def message(student, test):
        return records[(student, test)].message

    # (ada_correct is the solution itself: tests/test_autograde.py grades it for every chapter.)
    # No K mask: ragged K reads past the end of the inputs (the guard region reads as NaN).
    assert status("cleo_no_k_mask", "test_ragged_sizes") == "failed"
    assert "Mask the K dimension" in message("cleo_no_k_mask", "test_ragged_sizes")
    assert "partial" not in message("cleo_no_k_mask", "test_ragged_sizes")
    assert status("cleo_no_k_mask", "test_relu_zeros") == "passed"   # K = 96: a multiple of BLOCK_K

    # ReLU on partial sums: wrong as soon as K takes more than one step.
    assert status("dev_relu_in_k_loop", "test_ragged_sizes") == "failed"
    assert "partial* sum" in message("dev_relu_in_k_loop", "test_ragged_sizes")
    assert "Mask the K dimension" not in message("dev_relu_in_k_loop", "test_ragged_sizes")

    # No ReLU: negative outputs.
    assert status("eve_no_relu", "test_relu_zeros") == "failed"
    assert "negative" in message("eve_no_relu", "test_relu_zeros")
    assert status("eve_no_relu", "test_ragged_sizes") == "failed"

    # Row-major b assumed: fine for contiguous inputs, wrong for transposed views.
    assert status("finn_contiguous_b", "test_ragged_sizes") == "passed"
    assert status("finn_contiguous_b", "test_transposed_views") == "failed"
    assert "strides" in message("finn_contiguous_b", "test_transposed_views")

    # A float16 running sum: the long-K test catches it and says why.
    assert status("gia_fp16_accumulator", "test_long_k_float32_sum") == "failed"
    assert "accumulate in float32" in message("gia_fp16_accumulator", "test_long_k_float32_sum")

    for student in expected - {"ada_correct", "ben_untouched"}:
        assert records[(student, "test_matmul_relu_speed")].status == "not_graded"
