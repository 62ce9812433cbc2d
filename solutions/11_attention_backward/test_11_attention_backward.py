"""Chapter 11 (FlashAttention-2's backward): the float64 formulas of the backward equal autograd's; the model answer is
right on the hidden tests' kinds of inputs and through loss.backward(); every example mistake fails the hidden test it
should, with the hint that names it (and no hint fires on the honest answer); the attack that lets PyTorch compute the
gradients earns no gradient point; the scaled-loss inputs overflow a float16 accumulator while the model answer stays
within tolerance; the counts and the launch rule hold.

The hidden tests run through the grader's judge in this process (:func:`hidden_outcomes`, as
``tests.conftest.run_with_answers`` does), but only the cells that define things and only the tests a case needs: the
interpreter runs this chapter's kernels slowly, and the whole chapter must stay within its share of CI."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from grader.notebook_code import load_namespace
from triton_course.attention_backward import (BACKWARD_HINTS, GPU_BACKWARD, INTERPRETER_BACKWARD, KEY_OFFSET,
                                              LOSS_SCALE, OUTPUTS, SMALL_BACKWARD, TURING_BACKWARD, WIDE_BACKWARD,
                                              autograd_grads,
                                              backward_bytes, backward_flops, check_autograd, grads_by_heads,
                                              grads_reference, loss_scaled_inputs, loss_scaled_tolerance,
                                              lse_reference, training_flops)
from triton_course.checks import CheckFailed, check

CHAPTER = "11_attention_backward"
GPU_ONLY = {"test_grads_gpu_sizes", "test_grads_speed"}
GRADIENT_TESTS = ["test_grads", "test_grads_causal", "test_grads_fp16", "test_grads_loss_scaled"]


def hidden_outcomes(student: str, kind: str = "examples", only: list[str] | None = None) -> dict[str, str]:
    """Each hidden test's outcome ("passed", or the error with its message) for ``student``'s answer file, the tests run
    by the grader's judge in this process: ``tests.conftest.run_with_answers`` without the self-checks, the experiment
    and the benchmark (cells that define nothing the tests use), and only the tests in ``only`` (all by default)."""
    from tests.conftest import run_with_answers

    def defines(i, cell) -> bool:
        meta = cell.metadata.get("nbgrader", {})
        return meta.get("grade_id") in ("setup", "judge_defs") or bool(meta.get("solution")) or i == 2

    return run_with_answers(CHAPTER, student, kind, cells=defines, only=only)


@pytest.fixture(scope="module")
def ns():
    return load_namespace(Path(__file__).parent / f"{CHAPTER}.ipynb")


def _case(z, h, n, d, causal=False, scale=None, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (*(torch.randn(z, h, n, d, generator=g).to(dtype) for _ in range(4)), causal, scale)


def test_the_backward_formulas_equal_float64_autograd():
    for case in (_case(2, 2, 19, 16), _case(1, 3, 23, 32, True, 0.3, seed=1)):
        wide = [t.double() if isinstance(t, torch.Tensor) else t for t in case]
        for mine, auto in zip(grads_reference(*wide), autograd_grads(*wide)):
            torch.testing.assert_close(mine, auto, atol=1e-12, rtol=1e-10)


def test_the_lse_reference_is_the_log_of_the_softmax_normaliser():
    q, k, v, *_ = (t.double() for t in _case(1, 1, 9, 16)[:4])
    o, lse = lse_reference(q, k, v, True)
    s = (q @ k.transpose(-1, -2)) / 4
    torch.testing.assert_close(torch.exp(s[..., 0, 0] - lse[..., 0]), torch.ones(1, 1, dtype=torch.float64))
    assert o.shape == q.shape and lse.shape == q.shape[:3]


def test_the_model_answer_matches_float64_and_runs_through_autograd(ns):
    grads = ns["attention_grads"]
    for case in (_case(2, 2, 37, 16), _case(1, 2, 41, 32, True, 0.7, seed=2),
                 _case(1, 1, 26, 64, True, dtype=torch.float16, seed=3)):
        wide = [t.double() if isinstance(t, torch.Tensor) else t for t in case]
        for got, want in zip(grads(*case), grads_reference(*wide)):
            assert got.dtype == case[0].dtype and got.shape == case[0].shape
            torch.testing.assert_close(got.double(), want, atol=1e-2, rtol=1e-2)
    check_autograd(ns["attention"], [_case(1, 2, 21, 16, True, seed=4)[:5]])


def test_loss_scaled_inputs_overflow_a_float16_running_sum_but_not_the_result(ns):
    """What the loss-scaled test relies on: dq fits float16, its running sum over keys does not, and the model answer
    (float32 accumulators) is within the test's tolerance."""
    torch.manual_seed(5)
    q, k, v, do = loss_scaled_inputs(1, 2, 48, 32, "cpu")
    dq, _, _ = grads_reference(*(t.double() for t in (q, k, v, do)))
    assert float(dq.abs().max()) < 65504
    s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(32)
    p = torch.softmax(s, -1)
    o = p @ v.double()
    ds = p * (do.double() @ v.double().transpose(-1, -2) - (do.double() * o).sum(-1, keepdim=True))
    running = torch.cumsum(ds[..., :, :, None] * k.double()[..., None, :, :], dim=-2) / math.sqrt(32)
    assert float(running.abs().max()) > 65504, "the partial sums must pass float16's largest value"
    check(ns["attention_grads"], (q, k, v, do), grads_reference, atol=loss_scaled_tolerance(q.dtype)[0],
          rtol=loss_scaled_tolerance(q.dtype)[1], outputs=OUTPUTS, require_kernel=False)
    assert LOSS_SCALE == 4096.0 and KEY_OFFSET == 8.0


def test_no_hint_fires_on_a_right_answer_and_each_names_its_own_mistake():
    """Each hint's symptom, read from outputs a mistake would produce (the float64 formulas with the mistake's switch):
    the hint that names it fires, and no hint fires on a right answer that is off by rounding only."""
    case = _case(1, 2, 40, 16, True, seed=6)
    wide = [t.double() if isinstance(t, torch.Tensor) else t for t in case]

    def returning(outputs):
        def fn(*args):
            return tuple(t.to(args[0].dtype).clone() for t in outputs)
        return fn

    def message(outputs):
        with pytest.raises(CheckFailed) as info:
            check(returning(outputs), case, grads_reference, atol=2e-2, rtol=2e-2, outputs=OUTPUTS,
                  hints=BACKWARD_HINTS, require_kernel=False)
        return str(info.value)

    right = grads_reference(*wide)
    check(returning([t * (1 + 1e-4) for t in right]), case, grads_reference, atol=2e-2, rtol=2e-2, outputs=OUTPUTS,
          hints=BACKWARD_HINTS, require_kernel=False)
    assert "P = exp(S)" in message(grads_reference(*wide, unshifted=True))
    no_delta = message(grads_reference(*wide, no_delta=True))
    assert "P * (dP - D)" in no_delta and "P = exp(S)" not in no_delta
    unmasked = message(grads_reference(*wide, unmasked_backward=True))
    assert "causal mask" in unmasked and "dP - D" not in unmasked


@pytest.mark.parametrize("student, failing, words", [
    ("gil_exp_without_lse", "test_grads", "P = exp(S)"),
    ("ivy_forgets_delta", "test_grads", "P * (dP - D)"),
    ("jo_no_causal_mask_in_backward", "test_grads_causal", "causal mask"),
    ("hal_dq_in_float16", "test_grads_loss_scaled", "Accumulate dq in float32"),
])
def test_each_example_fails_its_test_with_the_hint_that_names_it(student, failing, words):
    outcomes = hidden_outcomes(student, only=[failing])
    assert outcomes[failing].startswith("CheckFailed") and words in outcomes[failing], outcomes[failing][-2000:]


def test_the_mistakes_that_only_some_inputs_show_pass_the_other_tests():
    """A float16 running sum passes the ordinary tests (its rounding hides there); a backward without the causal
    mask passes the non-causal ones: each loses only the test that shows it."""
    assert hidden_outcomes("hal_dq_in_float16", only=["test_grads_fp16"]) == {"test_grads_fp16": "passed"}
    assert hidden_outcomes("jo_no_causal_mask_in_backward", only=["test_grads"]) == {"test_grads": "passed"}


def test_the_model_answer_passes_every_test_a_cpu_grades():
    outcomes = hidden_outcomes("ada_correct")
    assert set(outcomes) == {"test_forward_lse", *GRADIENT_TESTS, *GPU_ONLY}
    assert all(o == "passed" for o in outcomes.values()), outcomes


@pytest.mark.parametrize("student, kind", [("ben_untouched", "examples"), ("fay_torch_result", "attacks")])
def test_no_kernel_of_its_own_earns_no_gradient_point(student, kind):
    outcomes = hidden_outcomes(student, kind, only=["test_forward_lse", "test_grads", "test_grads_causal"])
    assert outcomes["test_grads"] != "passed" and outcomes["test_grads_causal"] != "passed", outcomes
    if student == "fay_torch_result":   # its forward is its own kernel's: that point stays
        assert outcomes["test_forward_lse"] == "passed", outcomes


def test_counts():
    assert backward_flops(2, 3, 128, 64) == 10 * 2 * 3 * 128 * 128 * 64
    assert backward_flops(2, 3, 128, 64, True) == 5 * 2 * 3 * 128 * 128 * 64
    assert training_flops(1, 1, 64, 32) == 14 * 64 * 64 * 32
    assert backward_bytes(1, 2, 100, 64, 2) == 8 * 2 * 100 * 64 * 2 + 4 * 2 * 100


def test_launch_blocks_divide_each_other():
    """Each kernel's streamed step divides the block its other kernel holds, so causal loops start and stop on whole
    steps (the dK/dV program starts at the query step holding its first key, the dQ program stops after its own
    diagonal)."""
    for c in (INTERPRETER_BACKWARD, GPU_BACKWARD, WIDE_BACKWARD, SMALL_BACKWARD, TURING_BACKWARD):
        assert c.block_kv % c.block_q_step == 0 and c.block_q % c.block_kv_step == 0, c
        assert max(c.block_kv, c.block_q) <= 128   # the GPU-size test's 4,096 keys are 32 blocks and more


def test_the_speed_reference_by_heads_equals_the_whole_one():
    case = _case(2, 3, 17, 16, True)[:5]
    wide = [t.double() if isinstance(t, torch.Tensor) else t for t in case]
    for a, b in zip(grads_by_heads(*wide), grads_reference(*wide)):
        torch.testing.assert_close(a, b)


@pytest.mark.notebook
def test_a_mistake_graded_by_real_autograde_loses_only_its_points(tmp_path):
    """The answer file without the D term, built into a notebook and graded as a class is (nbgrader, the sandbox, the
    judge): the forward keeps its point, the gradient tests fail with the hint, the GPU-only tests are not graded."""
    from grader.autograde import find_submissions, grade_all
    from grader.examples import build_submissions

    students = build_submissions(CHAPTER, tmp_path / "submitted")
    assert "ivy_forgets_delta" in students
    subs = [s for s in find_submissions(tmp_path / "submitted", CHAPTER) if s.student == "ivy_forgets_delta"]
    records = {r.grade_id: r for r in grade_all(subs, tmp_path / "out", workers=1, feedback=False)}
    assert records["test_forward_lse"].status == "passed"
    for test in ("test_grads", "test_grads_causal"):
        assert records[test].status == "failed" and "P * (dP - D)" in records[test].message, records[test]
    for test in GPU_ONLY:
        assert records[test].status == "not_graded" and records[test].points == 0


def test_the_speed_target_is_set_on_the_record_and_the_notebook_quotes_the_record():
    """The hidden speed test's fraction is measure.py's SPEED_FRACTION, at least a fifth under the model answer's
    ratio to SDPA at the test's shape on a GPU, and the reading and the appendix quote the record's ratios."""
    import importlib.util
    import json
    import re

    import nbformat

    from tests.gpu_sizes import cell_source

    folder = Path(__file__).parent
    record = json.loads((folder / "records" / f"{CHAPTER}.json").read_text())
    spec = importlib.util.spec_from_file_location("measure_11", folder / "measure.py")
    measure = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(measure)
    source, points = cell_source(CHAPTER, "test_grads_speed")
    fraction = float(re.search(r"fraction=([0-9.]+)", source).group(1))
    reached = record["speed_check"]["ratio_to_sdpa"]
    assert points > 0 and fraction == measure.SPEED_FRACTION and reached >= 1.25 * fraction, (fraction, reached)
    margin = 1 - fraction / reached   # how much of its speed the model answer could lose and still pass
    assert f"a margin of {margin:.0%}" in source

    nb = nbformat.read(folder / f"{CHAPTER}.ipynb", as_version=4)
    text = " ".join(" ".join(c.source.split()) for c in nb.cells if c.cell_type == "markdown")
    by_d = {d: [r["ratio_to_sdpa"] for r in record["rows"] if r["D"] == d] for d in (64, 128)}
    every = by_d[64] + by_d[128]
    for quote in (f"reaches {min(every):.2f}-{max(every):.2f} of SDPA (appendix)", f"the speed test asks for {fraction}",
                  f"The speed test's {fraction:.0%} leaves the model answer a margin of {margin:.0%}",
                  f"at its shape ({reached:.2f}: it could lose {margin:.0%} of its speed",
                  f"was {math.ceil(max(record['gpu_accuracy'].values()) * 100)}% of the notebook's tolerance"):
        assert quote in text, quote
    # "faster per FLOP at D = 64, slower at 128": against the 0.78 that equal pace gives (14 N^2 D executed against 10)
    assert "faster per FLOP at `D = 64` unmasked, slower causal and at 128" in text and "above the 0.78" in text
    unmasked = [r["ratio_to_sdpa"] for r in record["rows"] if r["D"] == 64 and not r["causal"]]
    causal = [r["ratio_to_sdpa"] for r in record["rows"] if r["D"] == 64 and r["causal"]]
    assert min(unmasked) > 0.78 > max(causal + by_d[128]) and max(record["gpu_accuracy"].values()) < 1
    assert f"{min(unmasked):.2f}-{max(unmasked):.2f} of SDPA at `D = 64` unmasked" in text
    assert f"causal ({min(causal):.2f}-{max(causal):.2f}) and at `D = 128` ({min(by_d[128]):.2f}-{max(by_d[128]):.2f})" in text
    assert record["speed_check"]["target"] == fraction and record["speed_check"]["margin"] == round(margin, 3)
    sweep = json.loads((folder / "records" / f"{CHAPTER}_launches.json").read_text())
    first = next(r for r in sweep["against_sdpa"] if r["D"] == 64 and not r["causal"] and r["N"] == 4096)
    assert f"gave {first['notebook_ratio_to_sdpa']:.2f} at `D = 64`" in text
    assert f"gave {first['chosen_ratio_to_sdpa']:.2f} in the same run." in text
    # "dK/dV ... ran 9% slower per FLOP than dQ at D = 64": each kernel alone at the chosen launch, FLOPs executed
    c = sweep["chosen"]["D=64"]
    ms = {k: next(r["ms"] for r in sweep["kernels"] if r["D"] == 64 and r["kernel"] == k and r["held"] == held
                  and r["step"] == step and r["warps"] == c["num_warps"] and r["stages"] == c["num_stages"])
          for k, held, step in (("dkdv", c["block_kv"], c["block_q_step"]), ("dq", c["block_q"], c["block_kv_step"]))}
    assert f"ran {1 - (8 / ms['dkdv']) / (6 / ms['dq']):.0%} slower per FLOP than dQ at `D = 64`" in text
    # the launches backward_config takes on Hopper in 16 bits are the ones the sweep chose
    import dataclasses
    assert sweep["chosen"] == {"D=64": dataclasses.asdict(GPU_BACKWARD), "D=128": dataclasses.asdict(WIDE_BACKWARD)}
