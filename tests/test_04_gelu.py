"""Chapter 04 (GELU): the example submissions earn and lose points for the right reasons.

Each answer file runs against the hidden tests under Triton's interpreter, and one (the naive tanh) also
goes through real nbgrader autograde. The naive tanh must lose the large-input test with feedback that
names the overflow, and the exact-erf GELU must be named too. The twice-the-bytes kernel computes the
right values, so here (no GPU) it loses nothing: its failure is the bandwidth check on a GPU, recorded in
results/04_gelu.json.
"""

from __future__ import annotations

import json

import pytest

from grader.autograde import find_submissions, grade_all
from grader.examples import build_submissions
from tests.conftest import ROOT, run_with_answers

pytestmark = pytest.mark.notebook

CHAPTER = "04_gelu"


def test_correct_and_twice_the_bytes_pass_every_test_here():
    for student in ("ada_correct", "eve_clone_twice_the_bytes"):
        outcomes = run_with_answers(CHAPTER, student)
        assert set(outcomes) >= {"test_gelu_shapes", "test_gelu_fp16", "test_gelu_large_inputs"}
        assert all(v == "passed" for v in outcomes.values()), (student, outcomes)


def test_exact_erf_gelu_is_named():
    outcomes = run_with_answers(CHAPTER, "dev_erf_gelu")
    assert "exact GELU (with erf)" in outcomes["test_gelu_shapes"]


def test_naive_tanh_is_named_as_the_overflow_by_real_autograde(tmp_path):
    outcomes = run_with_answers(CHAPTER, "cleo_naive_tanh")
    assert outcomes["test_gelu_shapes"] == "passed"
    assert "NaN for x > 10: does your tanh overflow?" in outcomes["test_gelu_large_inputs"]
    if outcomes["test_gelu_fp16"] != "passed":  # 4 * randn reaches x > 10.5 now and then
        assert "NaN for x > 10: does your tanh overflow?" in outcomes["test_gelu_fp16"]
    build_submissions(CHAPTER, tmp_path / "submitted")
    subs = [s for s in find_submissions(tmp_path / "submitted", CHAPTER) if s.student == "cleo_naive_tanh"]
    records = {r.grade_id: r for r in grade_all(subs, tmp_path / "out")}
    large = records["test_gelu_large_inputs"]
    assert large.status == "failed" and large.points == 0
    assert "NaN for x > 10: does your tanh overflow?" in large.message
    assert records["test_gelu_shapes"].status == "passed"


def test_h200_figures_show_the_target_separates_the_kernel_from_twice_the_bytes():
    figures = json.loads((ROOT / "results" / f"{CHAPTER}.json").read_text())["bandwidth_check"]
    assert figures["reference"]["passes"] and not figures["twice_the_bytes"]["passes"]
