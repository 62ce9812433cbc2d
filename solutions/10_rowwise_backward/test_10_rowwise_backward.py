"""Chapter 10 (backward of softmax and RMSNorm): the model answer earns every point a CPU can grade, each classic
mistake loses the test it should with a hint that names it, and neither the untouched notebook nor PyTorch's own
autograd result (the attack, graded only by real autograde in the sandbox) earns a correctness point.

The example answer files run against the hidden tests through the grader's judge in this process
(:func:`tests.conftest.run_with_answers`), without the cells no test reads (the self-check, the experiment and the
benchmark: they cost the interpreter seconds and decide nothing here). The solution notebook itself, self-check
included, runs under nbval and real autograde in tests/test_execution.py.
"""

from __future__ import annotations

import math
import types

import nbformat
import pytest
import torch

from tests.conftest import ROOT, run_with_answers
from tests.gpu_sizes import cell_source, ends_with_at_gpu_sizes

pytestmark = pytest.mark.notebook

CHAPTER = "10_rowwise_backward"
CORRECTNESS = ("test_softmax_grads", "test_rmsnorm_grads", "test_rmsnorm_grads_atomic")
GPU_ONLY = {"test_grads_gpu_sizes", "test_rmsnorm_backward_bandwidth"}
#: Cells of the student notebook that no hidden test reads.
UNREAD = ("self_check", "self_check_softmax", "self_check_rmsnorm", "Experiment", "runs = ", "sweep = ", "recorded(")


@pytest.fixture
def outcomes(monkeypatch):
    """run_with_answers without the student cells that no hidden test reads."""
    import grader.examples

    apply = grader.examples.apply_answers

    monkeypatch.setattr(grader.examples, "apply_answers", lambda chapter, answers: _lean(apply(chapter, answers)))
    return lambda student, kind="examples": run_with_answers(CHAPTER, student, kind)


def test_the_model_answer_passes_every_test_a_cpu_grades(outcomes):
    got = outcomes("ada_correct")
    assert set(got) == set(CORRECTNESS) | GPU_ONLY, got
    assert all(o == "passed" for o in got.values()), got


def test_the_untouched_notebook_earns_no_correctness_point(outcomes):
    got = outcomes("ben_untouched")
    for gid in CORRECTNESS:
        assert got[gid] != "passed" and "still a TODO stub" in got[gid], (gid, got[gid])


def test_pytorchs_autograd_result_earns_nothing_in_the_sandbox(tmp_path):
    """The attack (PyTorch's own backward in place of the kernels) graded for real: nbgrader in the bubblewrap
    sandbox, the judge and the relaunch. Every correctness test fails and says why; nothing else earns a point."""
    from grader.autograde import find_submissions, grade_all
    from grader.examples import build_submissions

    build_submissions(CHAPTER, tmp_path / "submitted", kind="attacks")
    subs = [s for s in find_submissions(tmp_path / "submitted", CHAPTER) if s.student == "fay_torch_result"]
    records = {r.grade_id: r for r in grade_all(subs, tmp_path / "out", feedback=False)}
    for gid in CORRECTNESS:
        assert records[gid].points == 0 and "computed with PyTorch outside its kernel" in records[gid].message, \
            (gid, records[gid])
    assert sum(r.points for r in records.values()) == 0, records


@pytest.mark.parametrize("student, fails, says", [
    ("cleo_softmax_no_sum", {"test_softmax_grads"}, "the Σ term is missing: dx = y·dy"),
    ("dan_rmsnorm_no_sum", {"test_rmsnorm_grads", "test_rmsnorm_grads_atomic"}, "dx: the Σ term is missing"),
    ("eve_dw_race", {"test_rmsnorm_grads_atomic"}, "a race on dw, or a missing reduction"),
    ("hal_first_partial", {"test_rmsnorm_grads"}, "a race on dw, or a missing reduction"),
    ("gus_dw_fp16", {"test_rmsnorm_grads"}, "accumulated in float16"),
])
def test_each_classic_mistake_loses_its_test_with_a_hint_that_names_it(outcomes, student, fails, says):
    got = outcomes(student)
    for gid in CORRECTNESS:
        if gid in fails:
            assert "Hint: " in got[gid] and says in got[gid], (gid, got[gid])
        else:
            assert got[gid] == "passed", (gid, got[gid])


def test_gradcheck_names_a_backward_that_is_not_the_forwards_derivative():
    """check_gradcheck, as the self-check calls it, on softmax whose backward keeps only the Jacobian's diagonal."""
    from triton_course.checks import CheckFailed
    from triton_course.rowwise_backward import check_gradcheck

    class DiagonalOnly(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = torch.softmax(x, -1)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, dy):
            (y,) = ctx.saved_tensors
            return y * dy

    check_gradcheck(lambda x: torch.softmax(x, -1), [torch.randn(2, 5, dtype=torch.float64)], "softmax")
    with pytest.raises(CheckFailed, match="not the derivative of your forward"):
        check_gradcheck(DiagonalOnly.apply, [torch.randn(2, 5, dtype=torch.float64)], "softmax")


def test_the_references_agree_and_the_byte_counts_are_the_chapters():
    from triton_course.rowwise_backward import (rmsnorm_backward_reference, rmsnorm_bytes, rmsnorm_grads_reference,
                                                rstd_of, softmax_bytes, softmax_grad_reference)

    x, w, dy = torch.randn(5, 33), torch.randn(33), torch.randn(5, 33)
    for a, b in zip(rmsnorm_backward_reference(x, w, rstd_of(x, 1e-3), dy), rmsnorm_grads_reference(x, w, dy, 1e-3)):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-5)
    y = torch.softmax(x.double(), -1)
    assert torch.allclose(softmax_grad_reference(x, dy), y * (dy - (dy * y).sum(-1, keepdim=True)), atol=1e-12)
    assert softmax_bytes(4096, 4096, 2) == {"forward": 2 * 4096 * 4096 * 2, "backward": 3 * 4096 * 4096 * 2}
    counts = rmsnorm_bytes(3, 10, 2, programs=4)
    assert counts == {"forward": 2 * 3 * 10 * 2 + 20 + 12, "backward": 3 * 3 * 10 * 2 + 20 + 12 + 40,
                      "partials": 2 * 4 * 4 * 10}


def _launch_rule(sms: int):
    """backward_config of the solution, as a GPU of ``sms`` SMs runs it."""
    gpu = types.SimpleNamespace(pick=lambda gpu, cpu: gpu, sms=sms)
    import triton
    import triton.language as tl

    ns = {"torch": torch, "triton": triton, "tl": tl, "math": math, "device": gpu}
    source, _ = cell_source(CHAPTER, "rmsnorm_backward")
    exec(compile(source.replace("### BEGIN SOLUTION", "").replace("### END SOLUTION", ""), "<rmsnorm_backward>",
                 "exec"), ns)
    return ns["backward_config"]


def test_the_gpu_sizes_span_many_programs_for_dw_and_rows_longer_than_a_block():
    """At GPU sizes every program sums several tiles into its share of dw and dw_sum_kernel loops over more partial
    rows than its BLOCK_P, some last tiles are ragged, and some rows are longer than 2^16 elements."""
    assert ends_with_at_gpu_sizes(CHAPTER, "test_grads_gpu_sizes")
    source, _ = cell_source(CHAPTER, "test_grads_gpu_sizes")
    ns: dict = {"torch": torch}
    exec(source.split("def check_gpu_sizes")[0].replace("from triton_course.grading import at_gpu_sizes", ""), ns)
    config = _launch_rule(sms=132)
    shapes = [(math.prod(s[:-1]), s[-1], 4 if d == torch.float32 else 2) for s, d in ns["RMS_SIZES"]]
    launches = [config(m, n, e) for m, n, e in shapes]
    assert sum(programs > 120 and tiles > 1 for _, _, tiles, programs, _ in launches) >= 4, launches
    assert any(programs > 32 for *_, programs, _ in launches)                       # dw_sum_kernel loops
    assert any(m % rows for (m, _, _), (_, rows, *_) in zip(shapes, launches))      # a ragged last tile
    assert any(rows == 16 for _, rows, *_ in launches)                               # the largest tile of rows
    assert max(n for _, n, _ in shapes) > 2**16 and max(s[-1] for s, _ in ns["SOFTMAX_SIZES"]) > 2**16


def test_the_bandwidth_target_is_set_on_the_record_and_the_notebook_quotes_the_record():
    """The hidden bandwidth test's fraction is measure.py's TARGET, at least a fifth under what the model answer reached
    on a GPU, and every figure the reading and the appendix quote is computed here from the record."""
    import json
    import re

    record = json.loads((ROOT / "solutions" / CHAPTER / "records" / f"{CHAPTER}.json").read_text())
    source, points = cell_source(CHAPTER, "test_rmsnorm_backward_bandwidth")
    fraction = float(re.search(r"fraction=([0-9.]+)", source).group(1))
    reached = record["bandwidth_check"]["partial_sums"]["fraction_of_same_size_copy"]
    assert points > 0 and fraction == _measure_module().TARGET and reached >= 1.25 * fraction, (fraction, reached)

    nb = nbformat.read(ROOT / "solutions" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    text = " ".join(" ".join(c.source.split()) for c in nb.cells if c.cell_type == "markdown")
    rows = record["sizes"]
    ratio = {peer: [r["partial_sums_gbps"] / r[f"{peer}_gbps"] for r in rows]
             for peer in ("torch autograd", "torch.compile", "Liger-Kernel")}
    apart = max(abs(r["atomics_gbps"] / r["partial_sums_gbps"] - 1) for r in rows)
    widest, smallest = rows[-1], rows[0]
    softmax = {r["n"]: r["triton_gbps"] for r in record["softmax"]}
    drift = record["atomic_drift"]["max_elements_differing_from_the_first_run"]
    quoted = [f"within {math.ceil(apart * 100)}% of each other",
              f"{min(ratio['torch autograd']):.2f}-{max(ratio['torch autograd']):.2f}x autograd",
              f"{min(ratio['Liger-Kernel']):.2f}-{max(ratio['Liger-Kernel']):.2f}x Liger-Kernel",
              f"({ratio['torch.compile'][0]:.2f}x at {smallest['n']:,})",
              f"reach {widest['partial_sums_gbps']:,.0f} GB/s, {widest['partial_sums_gbps'] / widest['same_size_copy_gbps']:.0%} of a copy",
              f"expects **{fraction:.0%} of a copy", f"reached {reached:.0%} on the H100",
              f"reads {softmax[1024]:,.0f} GB/s at N = 1,024, above the {record['copy_gbps']:,.0f} GB/s",
              f"under the copy ({softmax[4096]:,.0f} and {softmax[8192]:,.0f} GB/s)", f"up to {drift['atomics']:,} of the 4,096 elements"]
    for quote in quoted:
        assert quote in text, quote
    assert min(ratio["torch.compile"][1:]) > 1 > ratio["torch.compile"][0] and drift["partial_sums"] == 0
    assert softmax[1024] > record["copy_gbps"] > max(softmax[4096], softmax[8192])
    assert "H100" in record["device"]


def _measure_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("measure_10", ROOT / "solutions" / CHAPTER / "measure.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_measure_names_its_peers_and_why_one_is_skipped():
    assert callable(_measure_module().measure)
    from triton_course.rowwise_backward import peer_functions

    peers, skipped = peer_functions()
    assert {"torch autograd", "torch.compile"} <= set(peers)
    assert "Liger-Kernel" in peers or "Liger-Kernel" in skipped


def test_the_softmax_peers_compute_the_chapters_gradient():
    """measure.py times softmax's forward plus backward beside autograd, torch.compile and Liger-Kernel (or says
    why Liger is skipped); each peer's dx equals the float64 formula's before anything is timed."""
    from triton_course.rowwise_backward import softmax_peer_functions

    peers, skipped = softmax_peer_functions()
    assert {"torch autograd", "torch.compile"} <= set(peers) and ("Liger-Kernel" in peers or "Liger-Kernel" in skipped)
    x, dy = torch.randn(6, 40, dtype=torch.float64), torch.randn(6, 40, dtype=torch.float64)
    y = torch.softmax(x, -1)
    want = y * (dy - (dy * y).sum(-1, keepdim=True))
    for name in ("torch autograd", "torch.compile"):
        torch.testing.assert_close(peers[name](x, dy), want, msg=name)


def _timed_bandwidth(monkeypatch, student: str) -> tuple[str, str]:
    """The bandwidth test through the judge, its timed protocol forced on the CPU at 48 x 40 (its numbers mean
    nothing here; what is checked is that every timed output is verified against the reference)."""
    from grader.judge_timing import TIME_ON_CPU_ENV
    import grader.examples

    monkeypatch.setenv(TIME_ON_CPU_ENV, "1")
    apply = grader.examples.apply_answers
    monkeypatch.setattr(grader.examples, "apply_answers", lambda chapter, answers: _lean(apply(chapter, answers)))
    gid = "test_rmsnorm_backward_bandwidth"

    def small(_, source):
        assert "M = N = 4096\n" in source
        return source.replace("M = N = 4096\n", "M, N = 48, 40\n")

    printed: dict[str, str] = {}
    got = run_with_answers(CHAPTER, student, only=[gid], edit=small, printed=printed)
    return got[gid], printed[gid]


def _lean(nb):
    """The notebook without the cells no hidden test reads."""
    nb.cells = [c for c in nb.cells if c.cell_type == "markdown"
                or not any(mark in c.source or c.metadata.get("nbgrader", {}).get("grade_id") == mark
                           for mark in UNREAD)]
    return nb


def test_the_bandwidth_tests_timed_inputs_are_a_valid_backward_and_every_one_is_verified(monkeypatch):
    """The timed calls draw their inputs from shapes and dtypes; a stored rstd drawn from both signs is no forward's,
    and the float64 reference then disagreed with an honest kernel on half the rows: the model answer lost its
    bandwidth point on an H100 (tests/gpu/records/gpu_class_throughput_course_twice.json). An rstd template that is
    all positive now gives positive timed values (grader.judge_timing._specs)."""
    import grader.judge_timing

    outcome, printed = _timed_bandwidth(monkeypatch, "ada_correct")
    assert outcome == "passed" and "NOT GRADED" not in printed and "GB/s" in printed, (outcome, printed)

    drawn = grader.judge_timing._specs   # as before the fix: every timed tensor standard-normal
    monkeypatch.setattr(grader.judge_timing, "_specs",
                        lambda templates: [{k: v for k, v in s.items() if k != "positive"} for s in drawn(templates)])
    outcome, _ = _timed_bandwidth(monkeypatch, "ada_correct")
    assert "timed call" in outcome and "wrong" in outcome, outcome
