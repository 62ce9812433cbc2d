"""Chapter 10_rowwise_backward: the model answer earns every point a CPU can grade, the untouched notebook none, and the
attack of its corpus nothing."""

from __future__ import annotations

import pytest

from tests.conftest import run_with_answers

CHAPTER = "10_rowwise_backward"
GPU_ONLY = {"test_relu_gpu_sizes", "test_relu_bandwidth"}


def test_the_model_answer_passes_every_test_a_cpu_grades():
    outcomes = run_with_answers(CHAPTER, "ada_correct")
    assert all(o == "passed" for gid, o in outcomes.items() if gid not in GPU_ONLY), outcomes


@pytest.mark.parametrize("student, kind", [("ben_untouched", "examples"), ("fay_torch_result", "attacks")])
def test_no_kernel_earns_no_correctness_point(student, kind):
    outcomes = run_with_answers(CHAPTER, student, kind)
    assert outcomes["test_relu_correct"] != "passed", outcomes
