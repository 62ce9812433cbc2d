"""Chapter 04 (GELU): the example submissions earn and lose points for the right reasons, each hint names
only its own mistake, bfloat16 is graded only where it runs, the chapter's claims hold, and the recorded
H200 figures back what the notebook says.

Each answer file runs against the hidden tests under Triton's interpreter (through the grader's judge), and
one (the textbook tanh) also goes through real nbgrader autograde. A kernel whose load has no mask, or a mask
that cannot be False (tests/mask_corpus.py), computes the right values (the store is masked, and the
interpreter does not fault), so only the static check of the kernels' source catches it. The twice-the-bytes
kernel computes the right values, so here (no GPU) it loses nothing: its failure is the bandwidth check on a
GPU, recorded in solutions/04_gelu/records/04_gelu.json. A kernel that is wrong only at the benchmark's size passes every
correctness test here; on a GPU the test at sizes of many blocks catches it (tests/test_gpu_sizes.py), and the
judge's timed protocol, run here on the CPU with a small size, must catch it too.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import tempfile
from pathlib import Path

import nbformat
import pytest
import torch

from grader.autograde import find_submissions, grade_all
from grader.course import example_submissions, solution_notebook
from grader.examples import build_submissions
from tests.conftest import ROOT, main_path, run_with_answers
from tests.conftest import judge_defs as shared_judge_defs
from tests.mask_corpus import DODGES, self_check
from triton_course.checks import CheckFailed, check

CHAPTER = "04_gelu"
CORRECTNESS = {"test_gelu_shapes", "test_gelu_fp16", "test_gelu_large_inputs"}
TESTS = CORRECTNESS | {"test_gelu_bf16", "test_gelu_gpu_sizes", "test_gelu_bandwidth"}
MASK_TEST = "test_gelu_shapes"   # the mask check is the first thing it does


@functools.lru_cache(maxsize=None)
def outcomes(student: str) -> dict[str, str]:
    return run_with_answers(CHAPTER, student)


def judge_defs() -> dict:
    """The notebook's judge cell (reference, tolerances, hints), executed here as the grader does."""
    return shared_judge_defs(CHAPTER)


# --- the example submissions, through the judge --------------------------------------------------------

@pytest.mark.notebook
@pytest.mark.parametrize("student", ["ada_correct", "eve_clone_twice_the_bytes"])
def test_correct_and_twice_the_bytes_pass_every_test_here(student):
    got = outcomes(student)
    assert set(got) == TESTS
    assert all(v == "passed" for v in got.values()), (student, got)


@pytest.mark.notebook
@pytest.mark.parametrize("student, grade_id, words", [
    ("cleo_naive_tanh", "test_gelu_large_inputs", "does your tanh overflow?"),
    ("dev_erf_gelu", "test_gelu_shapes", "exact GELU (with erf)"),
    ("dev_erf_gelu", "test_gelu_fp16", "exact GELU (with erf)"),
    ("kai_half_precision_polynomial", "test_gelu_fp16", "computed in float16 or bfloat16?"),
])
def test_mistakes_fail_with_the_hint_that_names_them(student, grade_id, words):
    message = outcomes(student)[grade_id]
    assert message.startswith("CheckFailed"), message
    assert words in message, message


@pytest.mark.notebook
def test_mistakes_fail_only_where_they_should_and_name_no_other_trap():
    naive, erf, half = outcomes("cleo_naive_tanh"), outcomes("dev_erf_gelu"), outcomes("kai_half_precision_polynomial")
    assert naive["test_gelu_shapes"] == "passed" and half["test_gelu_shapes"] == "passed"
    for message in naive.values():
        assert "exact GELU" not in message and "computed in float16" not in message
    for message in erf.values():
        assert "overflow" not in message and "computed in float16" not in message
    for message in half.values():
        assert "overflow" not in message and "exact GELU" not in message


@pytest.mark.notebook
def test_unmasked_load_loses_the_shapes_test_naming_the_load():
    got = outcomes("fay_no_mask")
    shapes = got["test_gelu_shapes"]
    assert shapes.startswith("CheckFailed"), got
    assert "gelu_kernel" in shapes and "tl.load(x_ptr + idx)" in shapes and "no mask" in shapes, shapes
    assert all(got[t] == "passed" for t in got if t != "test_gelu_shapes"), got   # the values are right


@pytest.mark.notebook
@pytest.mark.parametrize("student, why", DODGES.items())
def test_a_mask_that_cannot_be_false_loses_the_mask_test_naming_the_load(student, why):
    """mask=None (keyword or positional), a constant or always-true mask, and an unmasked second kernel that gelu
    launches beside its masked gelu_kernel: the values are right, so only the source tells. The notebook's own
    self-check says the same, so a student who passes it keeps these points."""
    got = run_with_answers(CHAPTER, student, kind="attacks")
    message = got[MASK_TEST]
    assert message.startswith("CheckFailed") and why in message, message
    kernel = "gelu_tail_kernel" if "second_kernel" in student else "gelu_kernel"
    assert f"of {kernel}: tl.load(x_ptr + idx" in message, message
    assert all(v == "passed" for gid, v in got.items() if gid != MASK_TEST), got
    checked = self_check(CHAPTER, student)
    assert why in checked and f"of {kernel}: tl.load(x_ptr + idx" in checked, checked


@pytest.mark.notebook
def test_an_unmasked_second_kernel_is_read_by_real_autograde(tmp_path):
    """Through nbgrader, the sandbox and the second sandbox that re-runs the launches: the kernels the judge reads
    are those of the launch records it re-ran, and the unmasked one costs the shapes test alone."""
    build_submissions(CHAPTER, tmp_path / "submitted", kind="attacks")
    subs = [s for s in find_submissions(tmp_path / "submitted", CHAPTER) if s.student == "hugo_unmasked_second_kernel"]
    records = {r.grade_id: r for r in grade_all(subs, tmp_path / "out", workers=1, feedback=False)}
    shapes = records[MASK_TEST]
    assert shapes.status == "failed" and shapes.points == 0, shapes
    assert "line 3 of gelu_tail_kernel: tl.load(x_ptr + idx)" in shapes.message and "has no mask" in shapes.message
    assert all(records[gid].status == "passed" for gid in CORRECTNESS - {MASK_TEST}), records
    assert records["test_gelu_gpu_sizes"].status == "not_graded", records["test_gelu_gpu_sizes"]


@pytest.mark.notebook
def test_the_honest_student_graded_after_the_dodges_keeps_every_point_and_passes_the_self_check():
    got = run_with_answers(CHAPTER, "ada_correct")      # not the cached run: graded after every dodge above
    assert set(got) == TESTS and all(v == "passed" for v in got.values()), got
    assert self_check(CHAPTER, "ada_correct", "examples") == "passed"


@pytest.mark.notebook
def test_naive_tanh_by_real_autograde_and_bfloat16_not_graded_on_the_cpu(tmp_path):
    """The textbook tanh loses the large-input test with the hint that names the overflow; the bfloat16 test
    and the test at sizes of many blocks are reported as not graded (0 points, nothing lost) on this CPU. (A
    correct answer keeps every gradable point through real autograde: the solution in tests/test_autograde.py,
    ada_correct through the judge here.)"""
    build_submissions(CHAPTER, tmp_path / "submitted")
    subs = [s for s in find_submissions(tmp_path / "submitted", CHAPTER) if s.student == "cleo_naive_tanh"]
    records = {(r.student, r.grade_id): r for r in grade_all(subs, tmp_path / "out", workers=2, feedback=False)}
    large = records[("cleo_naive_tanh", "test_gelu_large_inputs")]
    assert large.status == "failed" and large.points == 0
    assert "does your tanh overflow?" in large.message
    assert records[("cleo_naive_tanh", "test_gelu_shapes")].status == "passed"
    bf16 = records[("cleo_naive_tanh", "test_gelu_bf16")]
    assert bf16.status == "not_graded" and bf16.points == 0, bf16
    assert bf16.message.startswith("NOT GRADED") and "bfloat16 skipped" in bf16.message
    sizes = records[("cleo_naive_tanh", "test_gelu_gpu_sizes")]     # at_gpu_sizes: never a pass on the CPU
    assert sizes.status == "not_graded" and sizes.points == 0 and sizes.max_points == 1, sizes
    assert sizes.message.startswith("NOT GRADED") and "2^26" in sizes.message, sizes.message


@pytest.mark.notebook
def test_wrong_only_at_the_benchmark_size_passes_the_correctness_tests():
    # On the CPU the bandwidth test is NOT GRADED (counted as passed here): nothing below catches it.
    assert all(v == "passed" for v in outcomes("gus_quick_gelu_at_benchmark_size").values())


def _timed_bandwidth_test(student: str, small: int, threshold: int | None = None):
    """Run the chapter's hidden bandwidth test through the judge in this process, with the timed protocol
    forced on the CPU and the benchmark's 2^26 elements replaced by ``small``; ``threshold`` replaces the
    answer's 2**25 (where it starts to go wrong)."""
    from grader.course import example_submissions
    from grader.examples import answer_source, parse_answers
    from grader.execute import graded_functions, is_judge_cell, is_test, submitted_kernels
    from grader.judge import InProcessTransport, JudgeSession, Seed, run_test_cell
    from grader.notebook_code import exec_cell

    class SmallKeys(Seed):
        # triton_course.timing_harness.build_args seeds torch.Generator with key * 31 + j, which overflows the
        # generator's 64 bits for most 63-bit keys ("Overflow when unpacking long long"): keep keys small
        # until the harness reduces its seeds.
        def key(self, *parts: object) -> int:
            return super().key(*parts) >> 8

    answers = parse_answers((example_submissions(CHAPTER) / f"{student}.py").read_text())
    source = nbformat.read(solution_notebook(CHAPTER), as_version=4)
    nb = nbformat.read(solution_notebook(CHAPTER), as_version=4)
    ns: dict[str, object] = {"__name__": "__main__"}
    bandwidth = None
    last_solution = max(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("solution"))
    for i, cell in enumerate(nb.cells):
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
        if i > last_solution:
            continue   # the chapter's experiments and plots are not needed here
        exec_cell(cell.source, f"<{student} cell {i}>", ns)   # kernels' source readable: the judge re-runs them
    assert bandwidth is not None and "N = 2**26\n" in bandwidth
    bandwidth = bandwidth.replace("N = 2**26\n", f"N = {small}\n")
    with tempfile.TemporaryDirectory(prefix="judge-") as tmp:
        session = JudgeSession(InProcessTransport(ns, Path(tmp)), seed=SmallKeys())
        problems = session.build_namespace([c.source for c in source.cells if is_judge_cell(c)],
                                           graded_functions(source), submitted_kernels(nb))
        assert not problems, problems
        return run_test_cell(bandwidth, session.namespace_for("test_gelu_bandwidth"), "test_gelu_bandwidth")


@pytest.mark.notebook
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


# --- the hints, each beside the mistake it names and beside the others ----------------------------------

def _gelu64(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _stable_tanh(a):
    e = torch.exp(-2 * a.abs())
    return torch.sign(a) * (1 - e) / (1 + e)


def _right(x):
    """What a correct kernel returns: computed in float32, rounded once to x's dtype."""
    xf = x.float()
    return (0.5 * xf * (1 + _stable_tanh(0.7978845608028654 * (xf + 0.044715 * xf**3)))).to(x.dtype)


def _textbook_tanh(x):
    xf = x.float()
    e2a = torch.exp(2 * 0.7978845608028654 * (xf + 0.044715 * xf**3))
    return (0.5 * xf * (1 + (e2a - 1) / (e2a + 1))).to(x.dtype)


def _exact_erf(x):
    xf = x.float()
    return (0.5 * xf * (1 + torch.erf(xf / math.sqrt(2)))).to(x.dtype)


def _polynomial_in_input_dtype(x):
    a = 0.7978845608028654 * (x + 0.044715 * x * x * x)          # rounded after every operation
    return (0.5 * x.float() * (1 + _stable_tanh(a.float()))).to(x.dtype)


def _scaled(x):
    return (_right(x).float() * 1.01).to(x.dtype)


def _nan_tail(x):
    out = _right(x).reshape(-1).clone()
    out[-5:] = float("nan")        # what a load past the end leaves: the guard region reads as NaN
    return out.reshape(x.shape)


_HINT_PHRASES = {"overflow": "does your tanh overflow?", "exact_erf": "exact GELU (with erf)",
                 "few_roundings": "computed in float16 or bfloat16?"}

_MISTAKES = [  # (mistake, input maker, the one hint it must name; None: no hint fits)
    (_textbook_tanh, lambda: (torch.rand(2000) * 2 - 1) * 60, "overflow"),
    (_textbook_tanh, lambda: 4 * torch.randn(3000).half(), "overflow"),
    (_exact_erf, lambda: torch.randn(3000), "exact_erf"),
    (_exact_erf, lambda: torch.randn(3000).half(), "exact_erf"),
    (_polynomial_in_input_dtype, lambda: torch.randn(3000).half(), "few_roundings"),
    (_polynomial_in_input_dtype, lambda: 4 * torch.randn(3000).half(), "few_roundings"),
    (_scaled, lambda: torch.randn(3000), None),
    (_scaled, lambda: torch.randn(3000).half(), None),
    (_nan_tail, lambda: torch.randn(3000), None),
]


@pytest.mark.parametrize("mistake, make, hint", _MISTAKES, ids=[f"{m.__name__}-{h}" for m, _, h in _MISTAKES])
def test_each_hint_fires_on_its_mistake_and_stays_silent_on_the_others(mistake, make, hint):
    ns = judge_defs()
    torch.manual_seed(0)
    x = make()
    atol, rtol = ns["tolerances"](x.dtype)
    with pytest.raises(CheckFailed) as info:
        check(mistake, [x], ns["reference"], atol=atol, rtol=rtol, hints=ns["hints"], name="gelu",
              require_kernel=False)
    fired = {name for name, phrase in _HINT_PHRASES.items() if phrase in str(info.value)}
    assert fired == ({hint} if hint else set()), str(info.value)


@pytest.mark.parametrize("n", [1, 2, 8])
def test_a_few_float16_values_never_name_the_wrong_cause(n):
    """A float16 value a few roundings off can land within tolerance of the exact GELU (about 1 draw in 100
    once made the hidden test name erf for half-precision math). With so few values the erf hint stays
    silent; with hundreds (what each hidden test checks first) the right cause is named."""
    ns = judge_defs()
    atol, rtol = ns["tolerances"](torch.float16)
    wrongly, named = {"_polynomial_in_input_dtype": 0, "_exact_erf": 0}, 0
    generator = torch.Generator().manual_seed(1)
    for _ in range(1000):
        x = torch.randn(n, generator=generator).half()
        for mistake, other in ((_polynomial_in_input_dtype, "exact_erf"), (_exact_erf, "few_roundings")):
            try:
                check(mistake, [x], ns["reference"], atol=atol, rtol=rtol, hints=ns["hints"], name="gelu",
                      require_kernel=False)
            except CheckFailed as failure:
                wrongly[mistake.__name__] += _HINT_PHRASES[other] in str(failure)
                named += "Hint:" in str(failure)
    assert wrongly == {"_polynomial_in_input_dtype": 0, "_exact_erf": 0}
    assert named > 0          # the float16 hint still fires where the values rule the exact GELU out


def test_every_hint_has_a_mistake_here():
    hints = judge_defs()["hints"]
    assert len(_HINT_PHRASES) == len(hints)
    assert set(_HINT_PHRASES) == {hint for _, _, hint in _MISTAKES if hint}
    for hint in hints:
        assert sum(phrase in hint.message for phrase in _HINT_PHRASES.values()) == 1, hint.message


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rounded_once_tolerance_passes_float32_math_and_fails_half_precision_math(dtype):
    """The float16/bfloat16 tolerance passes GELU computed in float32 and rounded once, on every element of
    inputs that reach the overflow region and the cancellation of 1 + tanh(a) at negative x; it fails the
    polynomial kept in the input's dtype."""
    ns = judge_defs()
    atol, rtol = ns["tolerances"](dtype)
    for seed in range(3):
        torch.manual_seed(seed)
        for x in (torch.randn(40000), 4 * torch.randn(4000), (torch.rand(4000) * 2 - 1) * 60):
            x = x.to(dtype)
            check(_right, [x], ns["reference"], atol=atol, rtol=rtol, hints=ns["hints"], require_kernel=False)
            with pytest.raises(CheckFailed):
                check(_polynomial_in_input_dtype, [x], ns["reference"], atol=atol, rtol=rtol, hints=ns["hints"],
                      require_kernel=False)


def test_the_textbook_tanh_fails_from_x_of_10_06_as_the_chapter_says():
    x = torch.arange(9.9, 10.2, 1e-4, dtype=torch.float64).float()
    a = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
    first = float(x[torch.isnan((torch.exp(2 * a) - 1) / (torch.exp(2 * a) + 1))][0])
    assert round(first, 2) == 10.06
    text = "\n".join(c.source for c in nbformat.read(solution_notebook(CHAPTER), as_version=4).cells)
    assert "10.06" in text and "10.5 on" not in text and "about 10.5" not in text


def test_tanh_is_not_in_triton_core_math_and_libdevice_does_not_run_in_the_interpreter():
    """What the background says about tanh: absent from tl.math, present in libdevice, whose extern calls
    the interpreter refuses."""
    import triton.language as tl
    from triton.language.extra import libdevice

    assert not hasattr(tl.math, "tanh") and hasattr(tl.math, "exp") and hasattr(libdevice, "tanh")
    from triton.runtime import interpreter

    assert "extern_elementwise not supported" in Path(interpreter.__file__).read_text()


# --- the solution's launcher and the measurement script -------------------------------------------------

@functools.lru_cache(maxsize=None)
def _solution():
    from grader.notebook_code import load_namespace

    return load_namespace(solution_notebook(CHAPTER))


@pytest.mark.notebook
def test_bfloat16_is_refused_with_the_reason_where_it_cannot_run():
    from triton_course.inputs import BadInputError

    ns = _solution()
    with pytest.raises(BadInputError, match="bfloat16 skipped: Triton's interpreter"):
        ns["gelu"](torch.randn(10, dtype=torch.bfloat16))


@pytest.mark.notebook
def test_solution_masks_full_blocks_with_a_multiple_of_block_and_handles_every_tail():
    """The reference's two paths (full blocks, last partial block) agree with GELU at sizes around BLOCK."""
    ns = _solution()
    block = ns["BLOCK"]
    for n in (0, 1, block - 1, block, block + 1, 3 * block, 3 * block + 7):
        x = torch.randn(n) * 5
        got = ns["gelu"](x)
        assert got.shape == x.shape
        torch.testing.assert_close(got.double(), _gelu64(x.double()), atol=1e-5, rtol=1e-5)


def _measurement_module():
    spec = importlib.util.spec_from_file_location("measure_04", ROOT / "solutions" / CHAPTER / "measure.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.notebook
def test_measurement_kernels_compute_what_they_claim_under_the_interpreter():
    m = _measurement_module()
    x = torch.randn(5000) * 4
    want = _gelu64(x.double())
    for kernel in (m.straightforward_kernel, m.twice_sfu_kernel):
        torch.testing.assert_close(m.launcher(kernel, 1024)(x).double(), want, atol=1e-5, rtol=1e-5)
    assert torch.equal(m.launcher(m.copy_kernel, 1024)(x), x)
    h = x.half()
    assert torch.equal(m.launcher(m.copy_kernel, 1024)(h), h)
    assert set(m.SWEEP_SIZES) == {"float32", "float16", "bfloat16"}
    assert any(n % 16 for n in m.SWEEP_SIZES["float32"]) and any(n % 16 for n in m.SWEEP_SIZES["bfloat16"])
    assert any(2 * 4 * n >= 64 * 2**20 for n in m.SWEEP_SIZES["float32"])


def test_ptx_loads_counts_each_global_load_instruction():
    m = _measurement_module()

    class Compiled:
        asm = {"ptx": "\t@%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];\n"
                      "\t@%p2 ld.global.v4.b32 { %r5, %r6, %r7, %r8 }, [ %rd2 + 0 ];\n"
                      "\t@%p3 ld.global.b32 { %r9 }, [ %rd3 + 0 ];\n\tst.global.b32 [ %rd4 + 0 ], { %r9 };\n"}

    assert m.ptx_loads(Compiled()) == "1 x ld.global.b32, 2 x ld.global.v4.b32"


# --- the chapter's shape and length ----------------------------------------------------------------------

def test_main_path_is_at_most_1800_words_and_keeps_the_chapter_shape():
    cells, appendix = main_path(CHAPTER)
    main = "\n".join(cells)
    assert appendix and len(main.split()) <= 1800, len(main.split())
    order = ["**Goals.**", "## Background", "budget", "## TODO", "## Self-check", "## Experiment", "## Benchmark",
             "## What to take away"]
    positions = [main.find(heading) for heading in order]
    assert all(p >= 0 for p in positions) and positions == sorted(positions), dict(zip(order, positions))
    assert "Hendrycks" in main and "Sources:" in appendix[0]


# --- the recorded H200 figures back the notebook's claims -----------------------------------------------

def _record() -> dict:
    return json.loads((ROOT / "solutions" / CHAPTER / "records" / f"{CHAPTER}.json").read_text())


def _section(name: str):
    record = _record()
    if name not in record:
        pytest.skip(f"solutions/{CHAPTER}/records/{CHAPTER}.json has no {name!r} yet: run python tests/gpu/measure.py {CHAPTER} on a GPU")
    return record[name]


def test_h200_figures_show_the_target_separates_the_kernel_from_twice_the_bytes():
    figures = _record()["bandwidth_check"]
    assert figures["reference"]["passes"] and not figures["twice_the_bytes"]["passes"]
    if "straightforward" in figures:
        assert figures["straightforward"]["passes"]


def test_h200_reference_matches_or_beats_pytorch_at_every_size_and_reaches_90_percent_of_copy():
    sweep = _section("sweep")
    assert set(sweep) == {"float32", "float16", "bfloat16"}
    for dtype, rows in sweep.items():
        for row in rows:
            assert row["matches_or_beats"], (dtype, row)
            if dtype == "float32" and row["traffic_mib"] >= 64:
                assert row["reference_of_copy"] >= 0.9, row
    eager = [r for r in sweep["float32"] if r["n"] >= 2**24]
    assert eager and all(r["eager_formula_gbps"] < 0.2 * r["reference_gbps"] for r in eager)


def test_h200_sfu_experiment_shows_the_arithmetic_limit_in_half_precision():
    """What the experiment's reading says: float32 at the copy; float16 and bfloat16 short of it, closer with
    the hardware tanh, further with twice the SFU work."""
    rows = {r["dtype"]: r for r in _section("sfu_experiment")["rows"]}
    assert rows["float32"]["reference_of_copy"] >= 0.95
    for dtype in ("float16", "bfloat16"):
        r = rows[dtype]
        assert r["reference_of_copy"] < rows["float32"]["reference_of_copy"]
        assert r["hw_tanh_of_copy"] > r["reference_of_copy"] > r["twice_sfu_of_copy"], r


def test_h200_reference_keeps_16_byte_loads_at_odd_sizes():
    odd = _section("odd_sizes")
    reference = odd["reference"]["ptx_loads"].split("; ")
    assert all("ld.global.v4" in part for part in reference), reference
    straightforward = odd["straightforward"]["ptx_loads"].split("; ")
    assert "ld.global.v4" in straightforward[0] and "ld.global.v4" not in straightforward[1], straightforward


def _cross_compile(kernel, dtype: str, n_divisible: bool, block: int = 1024) -> str:
    """PTX of ``kernel`` for an H100/H200 (sm_90), compiled here without a GPU as Triton's compiler can."""
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource, compile as triton_compile
    except ImportError as exc:  # a Triton without the CUDA backend cannot compile for a GPU
        pytest.skip(f"this Triton cannot compile for CUDA: {exc}")
    import types

    import triton

    def compilable(f):
        """A JITFunction of ``f`` (under the interpreter, @triton.jit gives interpreted functions) whose
        global helpers are JITFunctions too."""
        f = getattr(f, "fn", f)
        helpers = {k: compilable(f.__globals__[k]) for k in f.__code__.co_names
                   if k != f.__name__ and type(f.__globals__.get(k)).__name__ == "InterpretedFunction"}
        if helpers:
            f = types.FunctionType(f.__code__, {**f.__globals__, **helpers}, f.__name__)
        return triton.runtime.jit.JITFunction(f)

    jit = kernel if isinstance(kernel, triton.runtime.jit.JITFunction) else compilable(kernel)
    attrs = {(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]]}
    if n_divisible:
        attrs[(2,)] = [["tt.divisibility", 16]]
    signature = {"x_ptr": f"*{dtype}", "out_ptr": f"*{dtype}", "n_elements": "i32", "BLOCK": "constexpr"}
    source = ASTSource(jit, signature, constexprs={"BLOCK": block}, attrs=attrs)
    return triton_compile(source, target=GPUTarget("cuda", 90, 32)).asm["ptx"]


@pytest.mark.notebook
def test_ptx_of_the_reference_has_two_sfu_operations_per_element_and_16_byte_loads_at_odd_sizes():
    """What the budget and the appendix say, read off the PTX compiled for sm_90 (4 warps, BLOCK 1024: 8
    float32 elements per thread): one ex2.approx.f32 (tl.exp) and one div.full.f32 (/) per element on each
    of the reference's two paths; 16-byte loads in its full blocks even for odd n, where the straightforward
    kernel loads 4 bytes at a time."""
    ns, m = _solution(), _measurement_module()
    reference_odd = _cross_compile(ns["gelu_kernel"], "fp32", n_divisible=False)
    sfu = m.sfu_instructions(reference_odd)
    assert sfu == {"div.full.f32": 16, "ex2.approx.f32": 16}, sfu
    assert "ld.global.v4.b32" in reference_odd
    straight_odd = _cross_compile(m.straightforward_kernel, "fp32", n_divisible=False)
    straight_even = _cross_compile(m.straightforward_kernel, "fp32", n_divisible=True)
    assert "ld.global.v4" not in straight_odd and "ld.global.v4.b32" in straight_even
    assert m.sfu_instructions(straight_even) == {"div.full.f32": 8, "ex2.approx.f32": 8}
    assert "ld.global.v4.b32" in _cross_compile(ns["gelu_kernel"], "fp16", n_divisible=False)


def test_h200_ptx_has_the_sfu_instructions_the_budget_counts():
    sfu = _section("odd_sizes")["reference"]["sfu_instructions_per_thread"]
    assert sfu.get("ex2.approx.f32", 0) > 0 and sfu.get("div.full.f32", 0) > 0, sfu


def test_chapters_02_and_04_agree_on_torch_compile_gelu():
    """Chapter 02 times torch.compile(gelu_eager) with one kernel per size, back to back; chapter 04 times the
    same kernel in its sweep: their GB/s agree within 10% (separate runs) at the sizes both recorded."""
    sweep = {r["n"]: r for r in _section("sweep")["float32"]}
    shapes = json.loads((ROOT / "solutions" / "02_benchmarking" / "records" / "02_benchmarking.json").read_text()).get("torch_compile_shapes")
    if not shapes:
        pytest.skip("solutions/02_benchmarking/records/02_benchmarking.json has no torch_compile_shapes yet: run python tests/gpu/measure.py "
                    "02_benchmarking on a GPU")
    both = [(r, sweep[r["n"]]) for r in shapes["rows"] if r["n"] in sweep]
    assert both, "no size recorded by both chapters"
    for two, four in both:
        ratio = two["one_kernel_per_size_back_to_back_gbps"] / four["torch_compile_gbps"]
        assert 0.9 <= ratio <= 1.1, (two, four)


@pytest.mark.notebook
def test_the_experiments_hardware_tanh_kernel_and_the_reference_compile_for_sm90_in_every_dtype():
    """The experiment's gelu_hw_tanh_kernel (defined after the exercises) is one tanh.approx.f32 per element,
    and the reference compiles for bfloat16 too (rounded once, on the store)."""
    from grader.notebook_code import exec_cells_starting_with

    ns = dict(_solution())
    exec_cells_starting_with(solution_notebook(CHAPTER), ns, ("@triton.jit\ndef gelu_hw_tanh_kernel",))
    for dtype in ("fp32", "fp16", "bf16"):
        ptx = _cross_compile(ns["gelu_hw_tanh_kernel"], dtype, n_divisible=True)
        assert ptx.count("tanh.approx.f32") == 8 and "ex2.approx" not in ptx, dtype
    assert "cvt.rn.bf16x2.f32" in _cross_compile(ns["gelu_kernel"], "bf16", n_divisible=True)


# --- the self-check gives the grader's verdict on whose work the result is (issue 45) -------------------------

_TORCH_GELU = '''#%% gelu from-solution
#%%- replace
    out = torch.empty_like(x)
    n = x.numel()
    if n:
        gelu_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK)
    return out
#%%- with
    return F.gelu(x, approximate="tanh")
'''


def _self_check_with(answers_text: str) -> str:
    """The student notebook with these answers, run in this process up to its self-check: "passed" or its message."""
    import contextlib
    import io

    from grader.examples import apply_answers, parse_answers
    from grader.notebook_code import exec_cell

    nb = apply_answers(CHAPTER, parse_answers(answers_text))
    ns: dict[str, object] = {"__name__": "__main__"}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec_cell(cell.source, f"<{CHAPTER} cell {i}>", ns)
        except CheckFailed as exc:
            return str(exc)
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "self_check":
            return "passed"
    raise AssertionError("no self-check cell")


def test_in_a_notebook_the_self_check_fails_f_gelu_as_the_grader_does(monkeypatch):
    """F.gelu gives GELU's values and scores nothing with the grader; in a notebook (an IPython shell is running)
    the self-check says so and names what happened. Outside one (this process) the same self-check passes: the
    course's own tests and scripts ask for the rule when they want it."""
    import sys
    import types

    from triton_course import integrity

    monkeypatch.delenv(integrity.REQUIRE_KERNEL_ENV, raising=False)
    assert _self_check_with(_TORCH_GELU) == "passed"
    fake = types.ModuleType("IPython")
    fake.get_ipython = lambda: object()
    monkeypatch.setitem(sys.modules, "IPython", fake)
    message = _self_check_with(_TORCH_GELU)
    assert "without launching a Triton kernel" in message and "aten.gelu" in message, message
    assert "Hint:" not in message, message
    assert _self_check_with("#%% gelu from-solution\n") == "passed"
