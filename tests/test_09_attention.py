"""Chapter 09 (attention): the offset checks catch the Z = 1-only row offset, the reference kernel is right
on the cases the hidden tests use, and each example submission fails the test it should."""

from __future__ import annotations

import math

import pytest
import torch

from grader.autograde import find_submissions, grade_all
from grader.course import solution_notebook
from grader.examples import build_submissions
from grader.notebook_code import load_namespace
from utils.attention import attention_reference, check_base_offset, check_row_offset, check_split
from utils.checks import CheckFailed

CHAPTER = "09_attention"


@pytest.fixture(scope="module")
def ns():
    return load_namespace(solution_notebook(CHAPTER))


def widely_copied(off_z, off_h, H, N):
    return off_z + off_h * N


def test_the_widely_copied_row_offset_passes_z1_and_fails_past_it():
    check_row_offset(widely_copied, Z=1, H=5, N=9)          # the easy case hides it
    with pytest.raises(CheckFailed, match="wrong"):
        check_row_offset(widely_copied, Z=2, H=5, N=9)


def test_offset_checks_accept_the_reference_and_read_strides_from_the_tensor(ns):
    check_split(ns["split_program_id"], Z=3, H=4)
    check_row_offset(ns["row_offset_2d"], Z=3, H=4, N=11)
    projection = torch.empty(2, 7, 3, 8).transpose(1, 2)
    check_base_offset(ns["base_offset"], projection)
    with pytest.raises(CheckFailed):   # assuming contiguous heads is wrong for a transposed layout
        check_base_offset(lambda z, h, sz, sh: (z * 3 + h) * 7 * 8, projection)


def test_reference_kernel_matches_float64(ns):
    attention = ns["attention"]
    torch.manual_seed(1)
    for (z, h, n, d), causal, scale, dtype in [((2, 3, 37, 16), False, None, torch.float32),
                                               ((2, 2, 19, 32), True, 0.7, torch.float32),
                                               ((3, 2, 5, 8), True, None, torch.float16)]:
        q, k, v = (torch.randn(z, h, n, d, dtype=dtype) for _ in range(3))
        got = attention(q, k, v, causal, scale)
        want = attention_reference(q.double(), k.double(), v.double(), causal, scale)
        assert got.dtype == dtype and got.shape == q.shape
        torch.testing.assert_close(got.double(), want, atol=1e-2, rtol=1e-2)


def test_reference_kernel_on_heads_from_a_projection(ns):
    z, n, h, d = 2, 21, 3, 16
    qkv = torch.randn(z, n, 3, h, d)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    assert not q.is_contiguous()
    got = ns["attention"](q, k, v, True, 1 / math.sqrt(d))
    torch.testing.assert_close(got.double(), attention_reference(q.double(), k.double(), v.double(), True),
                               atol=1e-4, rtol=1e-4)


def test_flop_count(ns):
    assert ns["attention_flops"](2, 3, 128, 64) == 4 * 2 * 3 * 128 * 128 * 64
    assert ns["attention_flops"](2, 3, 128, 64, causal=True) == 2 * 2 * 3 * 128 * 128 * 64


@pytest.mark.notebook
def test_examples_fail_for_the_right_reason(tmp_path):
    students = build_submissions(CHAPTER, tmp_path / "submitted")
    keep = ["cy_row_offset_z1", "dan_contiguous_heads", "eli_causal_off_by_one", "fay_ignores_sm_scale"]
    assert {"ada_correct", "ben_untouched", *keep} <= set(students)
    subs = [s for s in find_submissions(tmp_path / "submitted", CHAPTER) if s.student in keep]
    records = {(r.student, r.grade_id): r for r in grade_all(subs, tmp_path / "out", workers=2)}

    def status(student, test):
        return records[(student, test)].status

    # Z = 1 passes, Z > 1 exposes the widely copied row offset, in the exercise and in the kernel.
    assert status("cy_row_offset_z1", "test_row_offset_one_batch") == "passed"
    assert status("cy_row_offset_z1", "test_attention_one_batch") == "passed"
    assert status("cy_row_offset_z1", "test_row_offset_batched") == "failed"
    batched = records[("cy_row_offset_z1", "test_attention_batches_and_heads")]
    assert batched.status == "failed" and "off_z * H * N + off_h * N" in batched.message
    # Contiguous heads assumed: fine until the heads come from a projection.
    assert status("dan_contiguous_heads", "test_attention_batches_and_heads") == "passed"
    strided = records[("dan_contiguous_heads", "test_attention_strided_heads")]
    assert strided.status == "failed" and "not contiguous" in strided.message
    # The causal mask off by one fails causal tests only.
    assert status("eli_causal_off_by_one", "test_attention_batches_and_heads") == "passed"
    causal = records[("eli_causal_off_by_one", "test_attention_causal")]
    assert causal.status == "failed" and "key <= query" in causal.message
    # An ignored sm_scale fails only where a scale is passed.
    assert status("fay_ignores_sm_scale", "test_attention_causal") == "passed"
    scale = records[("fay_ignores_sm_scale", "test_attention_sm_scale")]
    assert scale.status == "failed" and "sm_scale explicitly" in scale.message
    for student in keep:
        assert status(student, "test_split_program_id") == "passed"
