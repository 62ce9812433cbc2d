"""Chapter 04 (GELU): the example submissions earn and lose points for the right reasons.

Each answer file runs against the hidden tests under Triton's interpreter (through the grader's judge), and
one (the naive tanh) also goes through real nbgrader autograde. The naive tanh must lose the large-input
test with feedback that names the overflow, and the exact-erf GELU must be named too. A kernel whose load
has no mask computes the right values (the store is masked, and the interpreter does not fault), so only
the static check of the kernel's source catches it. The twice-the-bytes kernel computes the right values,
so here (no GPU) it loses nothing: its failure is the bandwidth check on a GPU, recorded in
results/04_gelu.json. A kernel that is wrong only at the benchmark's size passes every correctness test;
the judge's timed protocol, run here on the CPU with a small size, must catch it.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from grader.autograde import find_submissions, grade_all
from grader.examples import build_submissions
from tests.conftest import ROOT, run_with_answers

pytestmark = pytest.mark.notebook

CHAPTER = "04_gelu"
CORRECTNESS = {"test_gelu_shapes", "test_gelu_fp16", "test_gelu_large_inputs"}


def test_correct_and_twice_the_bytes_pass_every_test_here():
    for student in ("ada_correct", "eve_clone_twice_the_bytes"):
        outcomes = run_with_answers(CHAPTER, student)
        assert set(outcomes) >= CORRECTNESS | {"test_gelu_bandwidth"}
        assert all(v == "passed" for v in outcomes.values()), (student, outcomes)


def test_exact_erf_gelu_is_named():
    outcomes = run_with_answers(CHAPTER, "dev_erf_gelu")
    assert "exact GELU (with erf)" in outcomes["test_gelu_shapes"]


def test_unmasked_load_loses_the_shapes_test_naming_the_load():
    outcomes = run_with_answers(CHAPTER, "fay_no_mask")
    shapes = outcomes["test_gelu_shapes"]
    assert shapes.startswith("CheckFailed"), outcomes
    assert "gelu_kernel" in shapes and "tl.load(x_ptr + idx)" in shapes and "no mask" in shapes, shapes
    # The values are right: nothing else is lost.
    assert all(outcomes[t] == "passed" for t in outcomes if t != "test_gelu_shapes"), outcomes


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


def test_wrong_only_at_the_benchmark_size_passes_the_correctness_tests():
    # On the CPU the bandwidth test is NOT GRADED (counted as passed here): nothing below catches it.
    outcomes = run_with_answers(CHAPTER, "gus_quick_gelu_at_benchmark_size")
    assert all(v == "passed" for v in outcomes.values()), outcomes


def _timed_bandwidth_test(student: str, small: int, threshold: int | None = None):
    """Run the chapter's hidden bandwidth test through the judge in this process, with the timed protocol
    forced on the CPU and the benchmark's 2^26 elements replaced by ``small``; ``threshold`` replaces the
    answer's 2**25 (where it starts to go wrong)."""
    import nbformat

    from grader.course import EXAMPLE_SUBMISSIONS, solution_notebook
    from grader.examples import answer_source, parse_answers
    from grader.execute import graded_functions, is_judge_cell, is_test, submitted_kernels
    from grader.judge import InProcessTransport, JudgeSession, Seed, run_test_cell

    class SmallKeys(Seed):
        # triton_course.timing_harness.build_args seeds torch.Generator with key * 31 + j, which overflows the
        # generator's 64 bits for most 63-bit keys ("Overflow when unpacking long long"): keep keys small
        # until the harness reduces its seeds.
        def key(self, *parts: object) -> int:
            return super().key(*parts) >> 8

    answers = parse_answers((EXAMPLE_SUBMISSIONS / CHAPTER / f"{student}.py").read_text())
    source = nbformat.read(solution_notebook(CHAPTER), as_version=4)
    nb = nbformat.read(solution_notebook(CHAPTER), as_version=4)
    ns: dict[str, object] = {"__name__": "__main__"}
    bandwidth = None
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code":
            continue
        if meta.get("grade_id") == "test_gelu_bandwidth":
            bandwidth = cell.source
        if is_test(cell):
            continue
        if meta.get("solution") and meta["grade_id"] in answers:
            cell.source = answer_source(answers[meta["grade_id"]], cell.source, meta["grade_id"])
            if threshold is not None:
                assert "2**25" in cell.source
                cell.source = cell.source.replace("2**25", str(threshold))
        exec(compile(cell.source, f"<{meta.get('grade_id', 'cell')}>", "exec"), ns)
    assert bandwidth is not None and "N = 2**26\n" in bandwidth
    bandwidth = bandwidth.replace("N = 2**26\n", f"N = {small}\n")
    with tempfile.TemporaryDirectory(prefix="judge-") as tmp:
        session = JudgeSession(InProcessTransport(ns, Path(tmp)), seed=SmallKeys())
        problems = session.build_namespace([c.source for c in source.cells if is_judge_cell(c)],
                                           graded_functions(source), submitted_kernels(nb))
        assert not problems, problems
        return run_test_cell(bandwidth, session.namespace_for("test_gelu_bandwidth"), "test_gelu_bandwidth")


def test_timed_protocol_catches_a_kernel_wrong_at_the_benchmark_size(monkeypatch):
    monkeypatch.setenv("COURSE_JUDGE_TIME_ON_CPU", "1")
    small = 2**14 + 3  # above both sizes of the test's correct_first check (small // 64 + 3 and 5121)
    good = _timed_bandwidth_test("ada_correct", small)
    assert good.error is None and not good.crashed and not good.timeout, good
    assert good.score == 2, good
    assert "NOT GRADED" not in good.stdout and "passed" in good.stdout, good.stdout
    wrong = _timed_bandwidth_test("gus_quick_gelu_at_benchmark_size", small, threshold=2**13)
    assert wrong.error is not None and wrong.error[0] == "CheckFailed", wrong
    assert "timed call" in wrong.error[1], wrong.error
    assert "is wrong" in wrong.error[1] or "returned a wrong result" in wrong.error[1], wrong.error


def test_h200_figures_show_the_target_separates_the_kernel_from_twice_the_bytes():
    figures = json.loads((ROOT / "results" / f"{CHAPTER}.json").read_text())["bandwidth_check"]
    assert figures["reference"]["passes"] and not figures["twice_the_bytes"]["passes"]
