"""Chapter 08 (fusion analysis): the roofline helper, the recorded GPU figures, the fused add + RMSNorm with its
two outputs, the example submissions failing the test each mistake should fail, and every hint of the fused
kernel beside the mistake it names (it fires) and the others (it stays silent)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT, run_with_answers
from tests.gpu_sizes import (GRID_AXIS_LIMIT, cell_source, ends_with_at_gpu_sizes, largest_rows_per_program,
                             row_launches, run_cell, spans_many_programs)
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


def _solution():
    import nbformat

    from grader.course import solution_notebook

    return nbformat.read(solution_notebook(CHAPTER), as_version=4)


def test_memory_bound_chains_sit_on_the_fp32_roof_and_gemms_on_the_tensor_cores():
    source = next(c.source for c in _solution().cells if c.id == "cell-20")
    assert '"softmax 4096x4096": ("fp32"' in source and '"add+RMSNorm 8192x4096": ("fp32"' in source
    assert '"GEMM+act 4096^3": ("fp16_tensor"' in source
    assert "device_roof()" not in source


def test_the_recorded_counter_example_shows_fusion_losing():
    rec = json.loads((ROOT / "solutions" / CHAPTER / "records" / f"{CHAPTER}.json").read_text())
    assert "H200" in rec["device"]
    assert rec["counter_example"]["fused_speed_relative_to_unfused"] < 1.0


def test_the_recorded_chain_is_add_rmsnorm_once_measured():
    """After `python tests/gpu/measure.py 08_fusion` the record holds the new chain's prediction and measurement;
    before that (the record of the earlier chain) the notebook says it has none (tested under nbval)."""
    rec = json.loads((ROOT / "solutions" / CHAPTER / "records" / f"{CHAPTER}.json").read_text())
    if rec.get("chain") != "add_rmsnorm":
        pytest.skip("solutions/08_fusion/records/08_fusion.json predates the add + RMSNorm chain: run tests/gpu/measure.py 08_fusion")
    rows = {tuple(r["shape"]): r for r in rec["predicted_vs_measured"]}
    assert rows[(8192, 4096)]["predicted_speedup"] == pytest.approx(1.25, abs=0.01)
    assert rec["bandwidth_check"]["fraction_of_copy"] >= 0.9


BYTE_TESTS = ("test_softmax_bytes", "test_norm_bytes", "test_gemm_act", "test_reuse_bytes")
FUSED_TESTS = ("test_fused_fp32", "test_fused_fp16", "test_fused_inputs_untouched")


@pytest.mark.notebook
def test_correct_answers_pass_every_hidden_test_through_the_judge():
    outcomes = run_with_answers(CHAPTER, "ada_correct")
    assert set(outcomes) >= {*BYTE_TESTS, "test_roofline", *FUSED_TESTS, "test_fused_bf16", "test_fused_gpu_sizes",
                             "test_fused_bandwidth"}
    assert all(v == "passed" for v in outcomes.values()), outcomes


def _others_pass(outcomes, failing):
    return all(v == "passed" for k, v in outcomes.items() if k not in failing)


@pytest.mark.notebook
@pytest.mark.parametrize("student, failing, words", [
    # the production habit, through the judge: h is the caller's residual, changed in place
    ("cleo_residual_in_place", FUSED_TESTS, "returned its input `residual` as output `h` instead of a new tensor"),
    ("dev_norm_without_residual", FUSED_TESTS, "Hint: the mean of squares is taken over x alone"),
    ("fay_capped_block", FUSED_TESTS, "Hint: the end of each long row was never written"),
    ("gus_h_not_stored", FUSED_TESTS, "Hint: h was never written"),
    ("hal_divides_by_block", FUSED_TESTS, "Hint: the sum of squares is divided by BLOCK_N"),
])
def test_kernel_mistakes_lose_the_kernel_tests_and_say_why(student, failing, words):
    outcomes = run_with_answers(CHAPTER, student)
    for test in failing:
        assert words in outcomes[test], (test, outcomes[test])
    assert _others_pass(outcomes, failing), outcomes


@pytest.mark.notebook
def test_a_kernel_that_also_writes_into_residual_is_told_exactly_that():
    outcomes = run_with_answers(CHAPTER, "ivy_residual_also_updated")
    msg = outcomes["test_fused_fp32"]
    lines = msg.split("\n")
    assert lines[1].startswith("Input 1 was modified: your kernel changed its input `residual`:"), msg
    assert "Apart from that, every output is right." in msg and "are wrong" not in msg
    hints = [line for line in lines if line.startswith("Hint:")]
    assert len(hints) == 1 and "in place" in hints[0], hints
    assert _others_pass(outcomes, FUSED_TESTS), outcomes


@pytest.mark.notebook
def test_traffic_mistakes_lose_the_byte_tests():
    eve = run_with_answers(CHAPTER, "eve_traffic_off_by_one")
    for test in BYTE_TESTS:
        assert eve[test].startswith("CheckFailed") and ("expected" in eve[test] or "must still write h" in eve[test])
    assert "the fused kernel must still write h" in eve["test_norm_bytes"]
    assert _others_pass(eve, BYTE_TESTS), eve


def test_hidden_tests_use_only_judge_names_and_give_the_timed_check_a_reference():
    from grader.execute import is_judge_cell, is_test

    nb = _solution()
    assert {c.metadata["nbgrader"]["grade_id"] for c in nb.cells if is_judge_cell(c)} == {"judge_traffic",
                                                                                         "judge_fused"}
    bandwidth = next(c.source for c in nb.cells if is_test(c)
                     and c.metadata["nbgrader"]["grade_id"] == "test_fused_bandwidth")
    assert "reference=reference" in bandwidth and "tolerances=fused_tolerances" in bandwidth
    assert "fraction=0.85" in bandwidth and 'against="same_size_copy"' in bandwidth
    assert "(4 * 8192 * 4096 + 4096) * 2" in bandwidth


def test_no_visible_cell_hands_over_an_online_softmax():
    """09's TODO is the online softmax (running max, rescaled sum): no cell of 08 shows one."""
    for cell in _solution().cells:
        if cell.cell_type == "code":
            assert "tl.dot" not in cell.source and "row_max" not in cell.source, cell.id


def test_ivanov_et_al_are_credited_where_their_figures_are_quoted():
    nb = _solution()
    header = nb.cells[0].source
    assert "Ivanov" in header and "arxiv.org/abs/2007.00072" in header
    figures = next(c.source for c in nb.cells if c.id == "data-movement")
    assert "Ivanov et al." in figures and "Their figures, not measured here" in figures


# ---------------------------------------------------------------------------------------------------
# Each hint of the fused kernel beside its mistake (fires) and the other mistakes (silent)
# ---------------------------------------------------------------------------------------------------

_HINT_PHRASES = {"residual": "the residual is missing", "stats": "taken over x alone",
                 "block": "divided by BLOCK_N", "long": "end of each long row", "h": "h was never written",
                 "in_place": "into residual in place"}


def _judge_namespace() -> dict:
    import torch

    from grader.execute import is_judge_cell
    from triton_course.device import current

    ns = {"torch": torch, "device": current()}
    for cell in _solution().cells:
        if is_judge_cell(cell):
            exec(cell.source, ns)
    return ns


def _mistakes(ns):
    import torch

    def right(x, r, w, eps=1e-6):
        y, h = ns["reference"](x.double(), r.double(), w.double(), eps)
        return y.to(x.dtype), h.to(x.dtype)

    def norm(h, stats, w, divisor=None):
        h, stats = h.double(), stats.double()
        return (h * torch.rsqrt((stats * stats).sum(-1, keepdim=True) / (divisor or stats.shape[-1]) + 1e-6)
                * w.double()).to(w.dtype)

    def without_residual(x, r, w, eps=1e-6):
        return norm(x, x, w), (x + r)

    def stats_from_x(x, r, w, eps=1e-6):
        return norm(x + r, x, w), (x + r)

    def by_block(x, r, w, eps=1e-6):
        return norm(x + r, x + r, w, 1 << (x.shape[-1] - 1).bit_length()), (x + r)

    def long_rows_cut(x, r, w, eps=1e-6):
        y, h = right(x, r, w, eps)
        out = torch.empty_like(x)                     # poisoned by the check: the tail stays "never written"
        out[..., :2048] = y[..., :2048]
        return out, h

    def h_not_written(x, r, w, eps=1e-6):
        return right(x, r, w, eps)[0], torch.empty_like(x)

    def in_place(x, r, w, eps=1e-6):
        y, h = right(x, r, w, eps)
        r.copy_(h)
        return y, h.clone()

    def scaled(x, r, w, eps=1e-6):
        y, h = right(x, r, w, eps)
        return y * 1.01, h

    def h_scaled(x, r, w, eps=1e-6):
        y, h = right(x, r, w, eps)
        return y, h * 1.01

    def case(*shape):
        return (torch.randn(*shape), torch.randn(*shape), torch.randn(shape[-1]))

    return [
        (without_residual, case(7, 300), "residual"),
        (stats_from_x, case(7, 300), "stats"),
        (by_block, case(7, 300), "block"),
        (long_rows_cut, case(2, 3000), "long"),
        (h_not_written, case(7, 300), "h"),
        (in_place, case(7, 300), "in_place"),
        (scaled, case(7, 300), None),        # N not a power of two: the old hint fired on any mistake here
        (scaled, case(2, 3000), None),
        (h_scaled, case(7, 300), None),
        (by_block, case(7, 256), None),      # N a power of two: dividing by BLOCK_N is right there
    ]


def test_each_fused_hint_fires_on_its_mistake_and_stays_silent_on_the_others():
    import torch

    from triton_course.checks import CheckFailed, check

    torch.manual_seed(0)
    ns = _judge_namespace()
    assert len(ns["fused_hints"]) == len(_HINT_PHRASES)
    for mistake, args, hint in _mistakes(ns):
        atol, rtol = zip(*ns["fused_tolerances"](torch.float32))
        try:
            check(mistake, list(args), ns["reference"], atol=atol, rtol=rtol, hints=ns["fused_hints"],
                  name="add_rmsnorm", require_kernel=False, **ns["FUSED"])
            assert hint is None, f"{mistake.__name__} passed the check"
            continue
        except CheckFailed as exc:
            message = str(exc)
        fired = {name for name, phrase in _HINT_PHRASES.items() if phrase in message}
        assert fired == ({hint} if hint else set()), (mistake.__name__, args[0].shape, message)


def test_bfloat16_is_refused_under_the_interpreter_with_the_reason():
    import torch

    from grader.course import solution_notebook
    from grader.notebook_code import load_namespace
    from triton_course.inputs import BadInputError

    ns = load_namespace(solution_notebook(CHAPTER))
    b = dict(dtype=torch.bfloat16)
    with pytest.raises(BadInputError, match="bfloat16 skipped: Triton's interpreter"):
        ns["add_rmsnorm"](torch.randn(4, 8, **b), torch.randn(4, 8, **b), torch.randn(8, **b))


@pytest.mark.notebook
def test_examples_fail_for_the_right_reason_through_real_autograde(tmp_path):
    from grader.autograde import find_submissions, grade_all
    from grader.examples import build_submissions

    students = build_submissions(CHAPTER, tmp_path / "submitted")
    assert {"ada_correct", "ben_untouched", "cleo_residual_in_place", "dev_norm_without_residual",
            "eve_traffic_off_by_one", "fay_capped_block", "gus_h_not_stored", "hal_divides_by_block",
            "ivy_residual_also_updated"} <= set(students)
    assert "jon_row_loop_stops_after_first_block" in build_submissions(CHAPTER, tmp_path / "submitted",
                                                                       kind="attacks")
    # (a correct answer keeps every gradable point through real autograde: the solution, tests/test_autograde.py)
    keep = ["ivy_residual_also_updated", "eve_traffic_off_by_one", "jon_row_loop_stops_after_first_block"]
    subs = [s for s in find_submissions(tmp_path / "submitted", CHAPTER) if s.student in keep]
    rec = {(r.student, r.grade_id): r for r in grade_all(subs, tmp_path / "out", workers=2, feedback=False)}

    for student in keep:   # on this CPU: no speed points, bfloat16 skipped, GPU sizes not run, nothing lost for them
        for grade_id in ("test_fused_bandwidth", "test_fused_bf16", "test_fused_gpu_sizes"):
            r = rec[(student, grade_id)]
            assert r.status == "not_graded" and r.points == 0 and r.message.startswith("NOT GRADED"), r
        assert "bfloat16 skipped" in rec[(student, "test_fused_bf16")].message

    # a loop over a row that stops after its first block: the tests of wide rows fail, and with them only those
    for grade_id in ("test_fused_fp32", "test_fused_fp16"):
        jon = rec[("jon_row_loop_stops_after_first_block", grade_id)]
        assert jon.status == "failed" and jon.points == 0 and "the end of each long row was never written" in jon.message
    for grade_id in (*BYTE_TESTS, "test_roofline", "test_fused_inputs_untouched"):
        assert rec[("jon_row_loop_stops_after_first_block", grade_id)].status == "passed", grade_id

    ivy = rec[("ivy_residual_also_updated", "test_fused_inputs_untouched")]
    assert ivy.status == "failed" and "your kernel changed its input `residual`" in ivy.message
    assert rec[("ivy_residual_also_updated", "test_softmax_bytes")].status == "passed"

    for test in BYTE_TESTS:
        eve = rec[("eve_traffic_off_by_one", test)]
        assert eve.status == "failed", (test, eve)
    assert rec[("eve_traffic_off_by_one", "test_fused_fp16")].status == "passed"


def test_hidden_tests_reach_every_launch_path_the_rule_takes_on_a_gpu():
    """Chapter 06's launch rule, here for the fused kernel: under the interpreter the hidden tests stack short
    rows with a ragged last program, mask tails, stream, and promise an alignment (and not), as on a GPU. The
    rule's constants against the sweep, and what ALIGN does to the PTX, are tested in solutions/06_rmsnorm/test_06_rmsnorm.py."""
    from tests.conftest import chapter_tests

    rmsnorm = chapter_tests("06_rmsnorm")
    paths, possible = rmsnorm.launch_paths(CHAPTER, {"add_rmsnorm_kernel": (5, 6)},
                                   ("test_fused_fp32", "test_fused_fp16", "test_fused_inputs_untouched"))
    assert possible >= rmsnorm.EVERY_PATH - {"STREAM=True", "STREAM=False"}, possible
    assert paths["add_rmsnorm_kernel"] >= possible, possible - paths["add_rmsnorm_kernel"]


# ---------------------------------------------------------------------------------------------------------------
# Rows of several blocks on the CPU, and correctness at GPU sizes (graded on a GPU, not graded under the interpreter)
# ---------------------------------------------------------------------------------------------------------------

def test_the_test_at_gpu_sizes_is_not_graded_under_the_interpreter():
    printed, score, _ = run_cell(CHAPTER, "test_fused_gpu_sizes")
    assert score == 0 and printed.startswith("NOT GRADED"), printed
    assert ends_with_at_gpu_sizes(CHAPTER, "test_fused_gpu_sizes")


def _gpu_sizes() -> list:
    _, _, ns = run_cell(CHAPTER, "test_fused_gpu_sizes")
    return [(shape, dtype) for dtype, shapes in ns["GPU_SIZES"].items() for shape in shapes]


def test_the_test_at_gpu_sizes_spans_many_programs_of_the_launch_rule_and_rows_of_many_blocks():
    """Launched by the solution's rule as on a GPU: the largest stack of short rows it ever takes (512 rows of one
    float16 value) at several program counts, stacked rows at more, each with a ragged last program; more rows than
    a grid's second axis holds; rows of the launcher's widest (65536 values, and 65535 of them: a ragged last block
    for any block a kernel may loop over) and of more than 32768 in both dtypes; the bandwidth check's 4 x 2048 x 4096
    float16. All within a T4. On the CPU, the float32 test holds a row of 65535 values too."""
    import torch

    config = _launch_rule()["launch_config"]
    rows = lambda m, n, size: config(m, n, size)[1]  # noqa: E731
    launches = row_launches(_gpu_sizes(), rows)
    largest = largest_rows_per_program(rows, 65536)
    assert largest == 512
    assert not spans_many_programs(launches, largest), spans_many_programs(launches, largest)
    assert max(x.n for x in launches) == 65536 and any(x.n == 65535 and x.element_size == 4 for x in launches)
    for size in (2, 4):
        assert any(x.element_size == size and 32768 < x.n < 65536 and x.n % 2 for x in launches), size
    bandwidth, _ = cell_source(CHAPTER, "test_fused_bandwidth")
    assert "cases(torch.float16, [(4, 2048, 4096)])" in bandwidth
    assert ((4, 2048, 4096), torch.float16) in _gpu_sizes()
    assert "if x.shape[-1] > 65536:" in cell_source(CHAPTER, "fused")[0]   # the launcher's widest row
    assert "(1, 65535)" in cell_source(CHAPTER, "test_fused_fp32")[0]


def test_a_fused_kernel_wrong_past_some_size_loses_the_point_at_gpu_sizes_and_is_told_the_size(monkeypatch):
    """With at_gpu_sizes told it runs on a GPU, the test's checks run at its sizes (a PyTorch stand-in for the kernel,
    outside the grader, which would refuse it): an add_rmsnorm right on the first 65535 rows and wrong past them
    loses the point, and the failure names the size (solutions/05_softmax/test_05_softmax.py shows a function right everywhere
    earning its point)."""
    import types

    import torch

    import triton_course.grading as grading
    from triton_course import integrity
    from triton_course.checks import CheckFailed

    monkeypatch.setattr(grading, "current", lambda: types.SimpleNamespace(interpreted=False))
    monkeypatch.setenv(integrity.REQUIRE_KERNEL_ENV, "0")

    def right(x, residual, weight, eps=1e-6):
        h = x.double() + residual.double()
        y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight.double()
        return y.to(x.dtype), h.to(x.dtype)

    def wrong_past_the_grid_axis(x, residual, weight, eps=1e-6):
        y, h = right(x, residual, weight, eps)
        out = torch.empty_like(y)            # the rows a grid's second axis cannot reach are never written
        out[:GRID_AXIS_LIMIT] = y[:GRID_AXIS_LIMIT]
        return out, h

    with pytest.raises(CheckFailed, match=r"(?s)\(float32\[70001, 5\], float32\[70001, 5\], float32\[5\]\):\n"
                                          r"Output `y`: .*never written"):
        run_cell(CHAPTER, "test_fused_gpu_sizes", {"add_rmsnorm": wrong_past_the_grid_axis})


@pytest.mark.notebook
def test_a_loop_over_a_row_that_stops_after_its_first_block_loses_the_tests_of_wide_rows_here():
    """solutions/08_fusion/submissions/attacks/jon_row_loop_stops_after_first_block (blocks of at most 32768 values, a loop bounded by
    the number of blocks): right on rows of one block, wrong on rows of several. On the CPU it loses the float32
    test by its row of 65535 values (every row of the earlier float32 cases fits one block) and the float16 test by
    its rows of 40000, both with the hint that the end of each long row was never written; the rest passes, and the
    test at GPU sizes is not graded here (real autograde above: not_graded)."""

    got = run_with_answers(CHAPTER, "jon_row_loop_stops_after_first_block", kind="attacks")
    lost = {"test_fused_fp32": "add_rmsnorm(float32[1, 65535]", "test_fused_fp16": "add_rmsnorm(float16[2, 40000]"}
    for grade_id, call in lost.items():
        assert got[grade_id].startswith(f"CheckFailed: {call}"), got[grade_id]
        assert "Hint: the end of each long row was never written" in got[grade_id], got[grade_id]
    assert all(v == "passed" for k, v in got.items() if k not in lost), got
    assert {"test_fused_gpu_sizes", "test_fused_bandwidth", "test_fused_bf16"} <= set(got)


# ---------------------------------------------------------------------------------------------------
# Issue 45: the launch rule is given, outside the student's cell; the prose says what spills and fusion cost
# ---------------------------------------------------------------------------------------------------

_RULE_CONSTANTS = ("WARP_BYTES", "TILE_BYTES", "SHORT_TILE_BYTES", "BYTES_PER_THREAD", "MIN_WARPS", "MAX_WARPS",
                   "STREAM_ROW_BYTES")


def _rule_cell():
    return next(c for c in _solution().cells if c.cell_type == "code" and c.id == "launch-rule")


def _launch_rule() -> dict:
    """The namespace of the given launch-rule cell, run on its own."""
    import math

    import triton

    ns = {"math": math, "triton": triton}
    exec(compile(_rule_cell().source, "<08 launch rule>", "exec"), ns)
    return ns


def test_the_launch_rule_is_given_before_the_todo_and_its_fitted_constants_stay_out_of_it():
    """The rule's H200-fitted constants and launch_config sit in a given cell (no nbgrader solution region) before
    the student's cell, which assigns none of them; the TODO's text names the rule; the constants' origin is said
    where they are."""
    import ast

    cells = _solution().cells
    rule = _rule_cell()
    fused_at = next(i for i, c in enumerate(cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "fused")
    assert cells.index(rule) < fused_at and "BEGIN SOLUTION" not in rule.source
    assert not rule.metadata.get("nbgrader", {}).get("solution")
    assert "fitted on one H200" in rule.source and "08_fusion_gaps_sweep.json" in rule.source
    fused = cells[fused_at].source
    assigned = {t.id for node in ast.walk(ast.parse(fused)) if isinstance(node, ast.Assign)
                for t in node.targets if isinstance(t, ast.Name)}
    assert not assigned & set(_RULE_CONSTANTS) and "def launch_config" not in fused
    assert set(_RULE_CONSTANTS) <= set(_launch_rule())
    todo = next(c.source for c in cells if c.cell_type == "markdown" and "## TODO 3" in c.source)
    assert "`launch_config`" in todo and "chapter 06's rule" in todo


def test_the_student_notebook_gets_the_launch_rule_whole():
    """Released, the given cell is the solution's, word for word: nothing of it is the student's to write."""
    import nbformat

    student = nbformat.read(ROOT / "notebooks" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    assert any(c.cell_type == "code" and c.source == _rule_cell().source for c in student.cells)


def test_the_prose_says_what_spills_and_attention_cost_and_owns_its_rule():
    """Review 06-09, E8.1-E8.3: spills go to local memory, cached in L1 and L2; attention fuses because softmax
    feeds a linear map (rescaled online), not because its scores are large; the reuse rule is the course's own."""
    text = "\n".join(c.source for c in _solution().cells if c.cell_type == "markdown")
    assert "spills to local memory, cached in L1 and L2 and reaching HBM only when evicted" in text
    assert "HBM traffic again" not in text
    assert "softmax feeds a linear map (`P V`)" in text and "online softmax" in text
    assert "as Ivanov et al. apply it" not in text and "Our rule: **fuse away an intermediate" in text
    assert "since the fused sweep ran before chapter 06" not in text


def test_the_chains_are_memory_or_compute_bound_alike_on_a_t4_an_a10_and_an_h200(capsys):
    """What the roofline cell prints for three datasheets: the memory-bound chains stay memory bound on every one,
    the square GEMM compute bound, the skinny one memory bound (the reading says so for a T4 and an A10)."""
    for gpu in ("H200", "A10", "T4"):
        spec = GPU_SPECS[gpu]
        fp32 = spec.fp32_tflops * 1e3 / spec.peak_gbps
        tensor = spec.fp16_tensor_tflops * 1e3 / spec.peak_gbps
        assert 5 * 4096**2 / (2 * 4096**2 * 2) < fp32 and 5 / 8 < fp32                 # softmax, add + RMSNorm
        assert 2 * 4096**3 / ((3 * 4096**2) * 2) > tensor                                # GEMM 4096^3
        assert 2 * 8192**2 * 64 / ((2 * 8192 * 64 + 8192**2) * 2) < tensor               # GEMM K = 64
    cell = next(c.source for c in _solution().cells if c.cell_type == "code" and "ridges fp32" in c.source)
    assert 'for gpu in ("H200", "A10", "T4")' in cell
    counter = next(c.source for c in _solution().cells if c.cell_type == "code" and "counter_example" in c.source)
    assert 'for gpu in ("A10", "T4")' in counter and "not measured" in counter   # the H200 record's one line elsewhere
