"""Chapter 05 (softmax): the example submissions fail the test they should, with the hint that names
their trap; the hints themselves; and the recorded GPU figures back the chapter's claims."""

from __future__ import annotations

import json

import pytest
import torch

from grader.autograde import find_submissions, grade_all
from grader.examples import build_submissions
from tests.conftest import ROOT
from utils.checks import CheckFailed, check
from utils.softmax import HINTS, reference, strided_rows, tolerance, with_neg_inf

CHAPTER = "05_softmax"


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("softmax")
    students = build_submissions(CHAPTER, tmp / "submitted")
    # the solution and the untouched notebook are graded by tests/test_autograde.py; the one-row
    # kernel is the reference minus its launch tuning, so on a CPU it shows nothing new
    keep = [s for s in students if s not in ("ada_correct", "ben_untouched", "ivy_one_row")]
    subs = [s for s in find_submissions(tmp / "submitted", CHAPTER) if s.student in keep]
    return {(r.student, r.grade_id): r for r in grade_all(subs, tmp / "out", workers=2)}


@pytest.mark.notebook
def test_twice_the_bytes_passes_everything_gradable_on_a_cpu(graded):
    """Correct but slow: only the bandwidth check (on a GPU) can fail it; see results/05_softmax.json."""
    for student in ("hal_two_pass",):
        records = [r for (s, _), r in graded.items() if s == student]
        assert records
        for r in records:
            if r.grade_id == "test_softmax_bandwidth":
                assert r.status == "not_graded" and r.points == 0, r
            else:
                assert r.status == "passed" and r.points == r.max_points, r


@pytest.mark.notebook
@pytest.mark.parametrize("student, grade_id, words", [
    ("cleo_no_max_online_nan", "test_softmax_large_values", "did you subtract the row max"),
    ("cleo_no_max_online_nan", "test_softmax_long_traps", "NaN in rows containing -inf"),
    ("eve_row_stride_n", "test_softmax_strided", "step between rows with the row stride"),
    ("fay_pad_zero", "test_softmax_shapes", "Load them with other=float('-inf')"),
    ("fay_pad_zero", "test_softmax_neg_inf", "A row that is -inf everywhere should give NaN"),
    ("gus_inplace", "test_softmax_input_untouched", "Input 0 was modified"),
])
def test_mistakes_fail_with_the_hint_that_names_them(graded, student, grade_id, words):
    r = graded[(student, grade_id)]
    assert r.status == "failed" and r.points == 0, r
    assert words in r.message, r.message


@pytest.mark.notebook
def test_mistakes_fail_only_where_they_should(graded):
    """Each mistake costs the tests of its trap, not unrelated ones."""
    for grade_id in ("test_softmax_shapes", "test_softmax_neg_inf", "test_softmax_long_sizes"):
        assert graded[("cleo_no_max_online_nan", grade_id)].status == "passed"
    for grade_id in ("test_softmax_shapes", "test_softmax_neg_inf", "test_softmax_fp16", "test_softmax_long_traps"):
        assert graded[("eve_row_stride_n", grade_id)].status == "passed"


def _ok(x):
    return torch.softmax(x.double(), dim=-1).to(x.dtype)


def _explain(fn, x):
    atol, rtol = tolerance(x.dtype)
    with pytest.raises(CheckFailed) as info:
        check(fn, [x], reference, atol=atol, rtol=rtol, hints=HINTS, name="softmax")
    return str(info.value)


def test_reference_follows_torch_on_fully_masked_rows():
    x = with_neg_inf(4, 10)
    expected = reference(x.double())
    assert torch.isnan(expected[2]).all() and torch.isfinite(expected[[0, 1, 3]]).all()
    assert expected[1, -1] == 1 and (expected[1, :-1] == 0).all()


def test_strided_rows_layout():
    x = strided_rows(3, 10, pad=5)
    assert x.shape == (3, 10) and x.stride() == (15, 1)


def test_hint_overflow():
    msg = _explain(lambda x: torch.exp(x) / torch.exp(x).sum(dim=1, keepdim=True), torch.randn(3, 50) * 30 + 100)
    assert "did you subtract the row max" in msg


def test_hint_padding_and_all_neg_inf_row():
    def pad_zero(x):  # padding lanes to 64 filled with 0 take part in max and sum
        padded = torch.zeros(x.shape[0], 64, dtype=x.dtype)
        padded[:, : x.shape[1]] = x
        return torch.softmax(padded, dim=-1)[:, : x.shape[1]].contiguous()
    assert "Load them with other=float('-inf')" in _explain(pad_zero, torch.randn(4, 50))
    assert "should give NaN" in _explain(pad_zero, with_neg_inf(4, 50))


def test_hint_row_stride():
    def wrong_stride(x):
        flat = x.as_strided((x.shape[0], x.shape[1]), (x.shape[1], 1))
        return torch.softmax(flat, dim=-1)
    msg = _explain(wrong_stride, strided_rows(5, 40))
    assert "step between rows with the row stride" in msg
    assert "step between rows" not in _explain(lambda x: _ok(x) * 2, torch.randn(5, 40))


def test_hint_nan_in_neg_inf_rows():
    def nan_rows(x):
        out = _ok(x)
        out[torch.isneginf(x).any(dim=1)] = float("nan")
        return out
    assert "NaN in rows containing -inf" in _explain(nan_rows, with_neg_inf(5, 30))


def test_hint_input_modified():
    def inplace(x):
        x -= x.max(dim=1, keepdim=True).values
        return _ok(x)
    msg = _explain(inplace, torch.randn(3, 20))
    assert "Input 0 was modified" in msg and "wrote into its input" in msg


def test_recorded_gpu_figures_back_the_claims():
    """What the notebook says about the H200: the straightforward kernel passes the student target and a
    kernel that moves twice the bytes fails it; the eager formula moves four times the budget."""
    path = ROOT / "results" / f"{CHAPTER}.json"
    if not path.exists():
        pytest.skip("results/05_softmax.json not recorded yet")
    r = json.loads(path.read_text())
    assert r["command"].endswith(f"python results/measure.py {CHAPTER}")
    check = r["bandwidth_check"]
    assert check["one_row"]["passes"] and check["reference"]["passes"]
    assert not check["twice_the_bytes"]["passes"]
    assert all(row["eager_fraction_of_copy"] < 0.25 for row in r["sizes"])
    assert all(row["reference_gbps"] > row["torch_softmax_gbps"] for row in r["sizes"])
