"""Chapter 07 (matmul + ReLU): the example submissions fail the test they should, for the reason they
should; the speed check, called by the judge, times the student's function through the verified protocol
of grader/judge_timing.py; and the chapter's helpers in utils/matmul.py behave as documented without a GPU.

The example submissions run against the hidden tests through the judge in this process
(:func:`tests.conftest.run_with_answers`); two of them also go through real nbgrader autograde.
"""

from __future__ import annotations

import pytest

from grader.autograde import find_submissions, grade_all
from grader.examples import build_submissions
from tests.conftest import run_with_answers

CHAPTER = "07_matmul_relu"
TESTS = {"test_ragged_sizes", "test_single_row_and_column", "test_transposed_views", "test_relu_zeros",
         "test_long_k_float32_sum", "test_matmul_relu_speed"}


def test_flop_helpers():
    from triton_course.matmul import matmul_bytes, matmul_flops, tflops

    assert matmul_flops(4096, 4096, 4096) == 2 * 4096**3
    assert matmul_bytes(3, 5, 7, 2) == (3 * 7 + 7 * 5 + 3 * 5) * 2
    assert tflops(2e12, 1000.0) == pytest.approx(2.0)


def test_speed_check_is_not_graded_without_a_gpu(capsys):
    from triton_course.grading import NOT_GRADED
    from triton_course.matmul import dot_uses_tensor_cores, tflops_points

    assert not dot_uses_tensor_cores()
    called = []
    points = tflops_points(lambda: called.append(1), lambda: None, lambda: (), 1, fraction=0.75, points=2,
                           what="matmul")
    assert points == 0.0 and not called
    assert capsys.readouterr().out.startswith(NOT_GRADED)


def test_hidden_tests_reach_several_of_the_largest_gpu_tiles_in_every_dimension():
    """The ragged test holds a case with more than two of the largest autotune tiles (plus a ragged part)
    along M, N and K, on the GPU and under the interpreter alike."""
    import ast
    import re

    import nbformat

    from grader.course import solution_notebook

    nb = nbformat.read(solution_notebook(CHAPTER), as_version=4)
    text = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells if c.cell_type == "code"}
    configs = next(c.source for c in nb.cells if c.cell_type == "code" and "GPU_CONFIGS = [" in c.source)
    tiles = [tuple(int(x) for x in m) for m in re.findall(r"config\((\d+), (\d+), (\d+), \d+, \d+, \d+\)", configs)]
    assert tiles, "no autotune configs found"
    big_m, big_n, big_k = (max(t[i] for t in tiles) for i in range(3))
    ragged = text["test_ragged_sizes"]
    for side in ("gpu", "cpu"):
        shapes = ast.literal_eval(re.search(side + r"=(\[[^\]]*\])", ragged).group(1))
        assert any(m > 2 * max(big_m, big_n) and n > 2 * max(big_m, big_n) and k > 2 * big_k
                   and m % big_n and n % big_n and k % big_k for m, n, k in shapes), (side, shapes)


@pytest.mark.notebook
def test_the_reference_kernel_passes_every_hidden_test():
    outcomes = run_with_answers(CHAPTER, "ada_correct")
    assert set(outcomes) == TESTS
    assert all(v == "passed" for v in outcomes.values()), outcomes


@pytest.mark.notebook
def test_matmul_mistakes_fail_for_the_right_reason():
    # No K mask: ragged K reads past the end of the inputs (the guard region reads as NaN).
    cleo = run_with_answers(CHAPTER, "cleo_no_k_mask")
    assert "Mask the K dimension" in cleo["test_ragged_sizes"]
    assert "partial" not in cleo["test_ragged_sizes"]
    assert cleo["test_relu_zeros"] == "passed"   # K = 96: a multiple of BLOCK_K (32) under the interpreter

    # ReLU on partial sums (ReLU in the wrong place): wrong as soon as K takes more than one step.
    dev = run_with_answers(CHAPTER, "dev_relu_in_k_loop")
    assert "partial* sum" in dev["test_ragged_sizes"]
    assert "Mask the K dimension" not in dev["test_ragged_sizes"]
    assert "should be exactly 0" in dev["test_relu_zeros"]

    # No ReLU: negative outputs.
    eve = run_with_answers(CHAPTER, "eve_no_relu")
    assert "negative" in eve["test_relu_zeros"]
    assert eve["test_ragged_sizes"] != "passed"
    assert "apply ReLU" in eve["test_ragged_sizes"]

    # Row-major b assumed: fine for contiguous inputs, wrong for transposed views.
    finn = run_with_answers(CHAPTER, "finn_contiguous_b")
    assert finn["test_ragged_sizes"] == "passed"
    assert "strides" in finn["test_transposed_views"]

    # A float16 running sum: the long-K test catches it and says why.
    gia = run_with_answers(CHAPTER, "gia_fp16_accumulator")
    assert "accumulate in float32" in gia["test_long_k_float32_sum"]
    if gia["test_ragged_sizes"] != "passed":   # K = 201 in float16 is already off here and there
        assert "Accumulate in float32" in gia["test_ragged_sizes"]
    for student, outcomes in (("cleo", cleo), ("dev", dev), ("eve", eve), ("finn", finn)):
        assert "off by only a little" not in outcomes["test_ragged_sizes"], student

    for student, outcomes in (("cleo", cleo), ("dev", dev), ("eve", eve), ("finn", finn), ("gia", gia)):
        assert set(outcomes) == TESTS, student
        assert outcomes["test_matmul_relu_speed"] == "passed", (student, outcomes)   # NOT GRADED on the CPU


@pytest.mark.notebook
def test_no_k_mask_and_relu_in_k_loop_fail_under_real_autograde(tmp_path):
    students = build_submissions(CHAPTER, tmp_path / "submitted")
    expected = {"ada_correct", "ben_untouched", "cleo_no_k_mask", "dev_relu_in_k_loop", "eve_no_relu",
                "finn_contiguous_b", "gia_fp16_accumulator"}
    assert expected <= set(students)
    subs = [s for s in find_submissions(tmp_path / "submitted", CHAPTER)
            if s.student in ("cleo_no_k_mask", "dev_relu_in_k_loop")]
    records = {(r.student, r.grade_id): r for r in grade_all(subs, tmp_path / "out", workers=2)}

    ragged = records[("cleo_no_k_mask", "test_ragged_sizes")]
    assert ragged.status == "failed" and ragged.points == 0
    assert "Mask the K dimension" in ragged.message and "partial" not in ragged.message
    assert records[("cleo_no_k_mask", "test_relu_zeros")].status == "passed"
    ragged = records[("dev_relu_in_k_loop", "test_ragged_sizes")]
    assert ragged.status == "failed" and "partial* sum" in ragged.message
    for student in ("cleo_no_k_mask", "dev_relu_in_k_loop"):
        assert records[(student, "test_matmul_relu_speed")].status == "not_graded"


# ---------------------------------------------------------------------------------------------------
# The speed check through the judge (its timing protocol run under the interpreter: numbers meaningless)
# ---------------------------------------------------------------------------------------------------


def _notebook_namespace(student: str) -> dict:
    """The solution notebook's cells up to its self-check, with ``student``'s answer cells in place."""
    import nbformat

    from grader.course import EXAMPLE_SUBMISSIONS, solution_notebook
    from grader.examples import answer_source, parse_answers

    answers = parse_answers((EXAMPLE_SUBMISSIONS / CHAPTER / f"{student}.py").read_text())
    ns: dict = {"__name__": "__main__"}
    for cell in nbformat.read(solution_notebook(CHAPTER), as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade_id") == "self_check":
            break
        if cell.cell_type != "code":
            continue
        source = cell.source
        if meta.get("solution") and meta["grade_id"] in answers:
            source = answer_source(answers[meta["grade_id"]], source, meta["grade_id"])
        exec(compile(source, f"<{meta.get('grade_id', 'cell')}>", "exec"), ns)
    return ns


def _narrow_seed_class():
    from grader.judge import Seed

    class NarrowSeed(Seed):
        """55-bit keys: triton_course.timing_harness.build_args seeds a generator with ``key * 31 + j``, which
        overflows torch's 64-bit seed for the judge's 63-bit keys (reported to the lead)."""

        def key(self, *parts: object) -> int:
            return super().key(*parts) >> 8

    return NarrowSeed


def _NarrowSeed():  # noqa: N802 -- reads as the class it builds
    return _narrow_seed_class()()


def _speed(ns: dict, session, **kwargs) -> float:
    from grader.judge import StudentFunction
    from triton_course.matmul import matmul_flops, tflops_points

    return tflops_points(StudentFunction(session, "matmul_relu"), ns["torch_relu_matmul"],
                         lambda: ns["make"](70, 50, 96), matmul_flops(70, 50, 96), fraction=0.75, points=2,
                         what="matmul_relu at 70x50x96", baseline_name="torch relu(a @ b)", **kwargs)


@pytest.mark.notebook
def test_speed_check_through_the_judge_verifies_every_timed_output(tmp_path, monkeypatch, capsys):
    from grader.judge import InProcessTransport, JudgeSession
    from grader.judge_timing import TIME_ON_CPU_ENV
    from triton_course.checks import CheckFailed
    from triton_course.grading import NOT_GRADED

    ns = _notebook_namespace("ada_correct")
    checked = {"reference": ns["reference"], "tolerances": ns["matmul_tolerance"]}
    session = JudgeSession(InProcessTransport(ns, tmp_path), seed=_NarrowSeed())
    capsys.readouterr()

    # Under the interpreter the judge awards nothing and times nothing...
    monkeypatch.delenv(TIME_ON_CPU_ENV, raising=False)
    assert _speed(ns, session, **checked) == 0.0
    assert capsys.readouterr().out.startswith(NOT_GRADED) and session.calls == 0

    # ... unless told to run the protocol anyway: then it needs a reference for the timed outputs,
    monkeypatch.setenv(TIME_ON_CPU_ENV, "1")
    with pytest.raises(CheckFailed, match="no reference"):
        _speed(ns, session)
    # times verified rounds of the student's function in its kernel and the baseline here,
    assert _speed(ns, session, **checked) == 2.0
    out = capsys.readouterr().out
    assert "TFLOP/s" in out and "torch relu(a @ b)" in out and out.rstrip().endswith("passed")
    assert session.calls >= 6   # prepare, three no-ops, run, verify

    # and a kernel whose timed outputs are wrong (no ReLU) earns nothing, whatever its speed.
    wrong = _notebook_namespace("eve_no_relu")
    with pytest.raises(CheckFailed, match="wrong"):
        _speed(wrong, JudgeSession(InProcessTransport(wrong, tmp_path), seed=_NarrowSeed()), **checked)
