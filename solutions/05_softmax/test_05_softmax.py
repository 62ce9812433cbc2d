"""Chapter 05 (softmax): the example submissions fail the test they should, with the hint that names
their trap; the hints themselves; and the recorded GPU figures back the chapter's claims.

Each answer file runs against the hidden tests through the judge in this process
(:func:`tests.conftest.run_with_answers`); two of them (twice the bytes, float16 math) also go through
real nbgrader autograde.
"""

from __future__ import annotations

import functools
import json

import pytest
import torch
import triton
import triton.language as tl

from grader.autograde import find_submissions, grade_all
from grader.examples import build_submissions
from tests.conftest import ROOT, run_with_answers
from tests.gpu_sizes import (GRID_AXIS_LIMIT, MAX_INPUT_BYTES, cell_source, ends_with_at_gpu_sizes,
                             largest_rows_per_program, row_launches, run_cell, spans_many_programs)
from triton_course.checks import CheckFailed, check
from triton_course.softmax import HINTS, reference, strided_rows, tolerance, tolerance_rounded_once, with_neg_inf

CHAPTER = "05_softmax"
TESTS = {"test_softmax_shapes", "test_softmax_large_values", "test_softmax_neg_inf", "test_softmax_fp16",
         "test_softmax_strided", "test_softmax_input_untouched", "test_softmax_gpu_sizes", "test_softmax_bandwidth",
         "test_softmax_long_sizes", "test_softmax_long_traps", "test_softmax_long_gpu_sizes"}
#: Correctness at sizes only a GPU runs in reasonable time: not graded on the CPU, like the bandwidth check.
GPU_TESTS = ("test_softmax_gpu_sizes", "test_softmax_long_gpu_sizes")
NOT_GRADED_HERE = {"test_softmax_bandwidth", *GPU_TESTS}


@functools.lru_cache(maxsize=None)
def outcomes(student: str) -> dict[str, str]:
    return run_with_answers(CHAPTER, student)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("softmax")
    build_submissions(CHAPTER, tmp / "submitted")
    keep = ("hal_two_pass", "jay_fp16_math")
    subs = [s for s in find_submissions(tmp / "submitted", CHAPTER) if s.student in keep]
    return {(r.student, r.grade_id): r for r in grade_all(subs, tmp / "out", workers=2, feedback=False)}


@pytest.mark.notebook
@pytest.mark.parametrize("student", ["ada_correct", "hal_two_pass", "ivy_one_row"])
def test_right_values_pass_every_test_here(student):
    """The solution, the one-row kernel and the twice-the-bytes kernel compute the right values (float16
    rounded once included): only the bandwidth check on a GPU tells them apart (solutions/05_softmax/records/05_softmax.json)."""
    got = outcomes(student)
    assert set(got) == TESTS
    assert all(v == "passed" for v in got.values()), got


@pytest.mark.notebook
@pytest.mark.xdist_group("softmax_class")  # the graded class is made once per run
def test_twice_the_bytes_passes_everything_gradable_on_a_cpu(graded):
    """Correct but slow: only the bandwidth check (on a GPU) can fail it; see solutions/05_softmax/records/05_softmax.json. The checks at
    GPU sizes are not graded here either (never passed)."""
    for student in ("hal_two_pass",):
        records = [r for (s, _), r in graded.items() if s == student]
        assert records
        for r in records:
            if r.grade_id in NOT_GRADED_HERE:
                assert r.status == "not_graded" and r.points == 0 and r.message.startswith("NOT GRADED"), r
            else:
                assert r.status == "passed" and r.points == r.max_points, r


@pytest.mark.notebook
@pytest.mark.xdist_group("softmax_class")  # the graded class is made once per run
def test_float16_math_loses_the_float16_test_by_real_autograde(graded):
    """A softmax that keeps float16 inputs in float16 (exp rounded to float16, float16 sum and division)
    rounds three times: it loses the float16 test, here on the CPU as on a GPU, and nothing else."""
    fp16 = graded[("jay_fp16_math", "test_softmax_fp16")]
    assert fp16.status == "failed" and fp16.points == 0, fp16
    assert "computed in float16?" in fp16.message, fp16.message
    for (student, grade_id), r in graded.items():
        if student == "jay_fp16_math" and grade_id in NOT_GRADED_HERE:
            assert r.status == "not_graded" and r.points == 0, r
        elif student == "jay_fp16_math" and grade_id != "test_softmax_fp16":
            assert r.status == "passed" and r.points == r.max_points, r


@pytest.mark.notebook
@pytest.mark.parametrize("student, grade_id, words", [
    ("cleo_no_max_online_nan", "test_softmax_large_values", "did you subtract the row max"),
    ("cleo_no_max_online_nan", "test_softmax_long_traps", "NaN in rows containing -inf"),
    ("eve_row_stride_n", "test_softmax_strided", "step between rows with the row stride"),
    ("fay_pad_zero", "test_softmax_shapes", "Load them with other=float('-inf')"),
    ("fay_pad_zero", "test_softmax_neg_inf", "A row that is -inf everywhere should give NaN"),
    ("gus_inplace", "test_softmax_input_untouched", "Input 0 was modified"),
    ("gus_inplace", "test_softmax_input_untouched", "wrote into its input"),
    ("jay_fp16_math", "test_softmax_fp16", "computed in float16?"),
])
def test_mistakes_fail_with_the_hint_that_names_them(student, grade_id, words):
    message = outcomes(student)[grade_id]
    assert message.startswith("CheckFailed"), message
    assert words in message, message


@pytest.mark.notebook
def test_mistakes_fail_only_where_they_should():
    """Each mistake costs the tests of its trap, not unrelated ones."""
    for grade_id in ("test_softmax_shapes", "test_softmax_neg_inf", "test_softmax_long_sizes"):
        assert outcomes("cleo_no_max_online_nan")[grade_id] == "passed"
    for grade_id in ("test_softmax_shapes", "test_softmax_neg_inf", "test_softmax_fp16", "test_softmax_long_traps"):
        assert outcomes("eve_row_stride_n")[grade_id] == "passed"
    for grade_id in TESTS - {"test_softmax_fp16"}:
        assert outcomes("jay_fp16_math")[grade_id] == "passed"


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


def _float16_math(x):
    """softmax of float16 x the way a kernel that stays in float16 computes it: three roundings."""
    e = torch.exp((x - x.max(dim=1, keepdim=True).values).float()).half()
    return (e.float() / e.float().sum(dim=1, keepdim=True).half().float()).half()


def test_rounded_once_tolerance_separates_float32_from_float16_math():
    """The float16 test's tolerance passes a softmax rounded once to float16 (the most a float32 kernel can
    be off), on every element, and fails float16 math with the hint that names it."""
    for seed in range(5):
        torch.manual_seed(seed)
        for x in (torch.randn(40, 256).half(), torch.randn(9, 999).half(), torch.randn(300, 17).half(),
                  (torch.randn(2, 20000) * 4).half()):
            atol, rtol = tolerance_rounded_once(x.dtype)
            check(_ok, [x], reference, atol=atol, rtol=rtol, hints=HINTS, name="softmax")
            with pytest.raises(CheckFailed, match="computed in float16"):
                check(_float16_math, [x], reference, atol=atol, rtol=rtol, hints=HINTS, name="softmax")
            atol, rtol = tolerance(x.dtype)  # the other tests' tolerance lets float16 math through
            check(_float16_math, [x], reference, atol=atol, rtol=rtol, hints=HINTS, name="softmax")
    assert tolerance_rounded_once(torch.float32) == tolerance(torch.float32)


def test_hint_float16_math_is_not_named_for_other_mistakes():
    # x 1.05: every row's largest value is at least 1/40, so some output is always outside the tolerance
    assert "computed in float16" not in _explain(lambda x: _ok(x) * 1.05, torch.randn(5, 40).half())
    assert "computed in float16" not in _explain(lambda x: _ok(x) * 1.001, torch.randn(5, 40))


def test_hint_input_modified():
    def inplace(x):
        x -= x.max(dim=1, keepdim=True).values
        return _ok(x)
    msg = _explain(inplace, torch.randn(3, 20))
    assert "Input 0 was modified" in msg and "wrote into its input" in msg


def test_recorded_gpu_figures_back_the_claims():
    """What the notebook says about the H200: the straightforward kernel passes the student target and a
    kernel that moves twice the bytes fails it; the eager formula moves four times the budget."""
    path = ROOT / "solutions" / CHAPTER / "records" / f"{CHAPTER}.json"
    if not path.exists():
        pytest.skip("solutions/05_softmax/records/05_softmax.json not recorded yet")
    r = json.loads(path.read_text())
    assert r["command"].endswith(f"python tests/gpu/measure.py {CHAPTER}")
    check = r["bandwidth_check"]
    assert check["one_row"]["passes"] and check["reference"]["passes"]
    assert not check["twice_the_bytes"]["passes"]
    assert all(row["eager_fraction_of_copy"] < 0.25 for row in r["sizes"])
    assert all(row["reference_gbps"] > row["torch_softmax_gbps"] for row in r["sizes"])


def test_launcher_promises_alignment_exactly_where_it_holds():
    """The reference passes ALIGN, the largest power of two up to 16 bytes of elements dividing N and both row
    strides: 8 for rows of 1000 float16 (so 16-byte loads, solutions/06_rmsnorm/test_06_rmsnorm.py compiles it), 4 for float32,
    4 for float16 rows of 1004, 1 for 999 and for rows 337 apart. A launcher that never sets it keeps rows of 1000
    at 2-byte loads; one that ignores the strides promises what does not hold, and the outputs show it."""
    import contextlib
    import io

    from grader.course import solution_notebook
    from grader.notebook_code import load_namespace

    with contextlib.redirect_stdout(io.StringIO()):
        ns = load_namespace(solution_notebook(CHAPTER))
    kernel, seen = ns["softmax_kernel"], []

    class Recorder:
        def __getitem__(self, grid):
            def run(*args, **meta):
                seen.append(meta.get("ALIGN", 1))
                return kernel[grid](*args, **meta)
            return run

    ns["softmax_kernel"] = Recorder()
    f16 = torch.float16
    cases = [(torch.randn(3, 1000, dtype=f16), 8), (torch.randn(3, 1000), 4), (torch.randn(3, 1004, dtype=f16), 4),
             (torch.randn(3, 999, dtype=f16), 1), (strided_rows(3, 300, pad=37), 1),
             (strided_rows(3, 1000, pad=8, dtype=f16), 8), (strided_rows(3, 1000, pad=4, dtype=f16), 4)]
    for x, want in cases:
        got = ns["softmax"](x)
        assert seen[-1] == want, (tuple(x.shape), x.stride(), x.dtype, seen[-1], want)
        torch.testing.assert_close(got.double(), reference(x.double()), **dict(zip(("atol", "rtol"),
                                                                                    tolerance(x.dtype))))


# Every hint of triton_course.softmax, by a phrase only it contains, beside a mistake that shows its symptom.
_HINT_PHRASES = {
    "overflow": "did you subtract the row max",
    "nan_in_neg_inf_rows": "NaN in rows containing -inf",
    "all_neg_inf_row": "A row that is -inf everywhere should give NaN",
    "padding": "Load them with other=float('-inf')",
    "online_rescale": "multiplied by exp(m - m_new)",
    "row_stride": "step between rows with the row stride",
    "float16_math": "computed in float16",
    "input_modified": "wrote into its input",
}


def _no_max(x):
    return torch.exp(x) / torch.exp(x).sum(dim=1, keepdim=True)


def _nan_where_neg_inf(x):
    out = _ok(x)
    out[torch.isneginf(x).any(dim=1)] = float("nan")
    return out


def _zero_for_all_neg_inf_rows(x):
    return torch.nan_to_num(_ok(x), nan=0.0)


def _pad_with_zero(x):
    padded = torch.zeros(x.shape[0], 64, dtype=x.dtype)
    padded[:, : x.shape[1]] = x
    return torch.softmax(padded.double(), dim=-1)[:, : x.shape[1]].to(x.dtype).contiguous()


def _online_without_rescale(x, chunk=1024):
    """softmax_long with a running max and sum per lane, in float32, whose sums are never multiplied by
    exp(m - m_new) when a chunk raises the max."""
    rows, n = x.shape
    run_max = torch.full((rows, chunk), float("-inf"))
    run_sum = torch.zeros(rows, chunk)
    for start in range(0, n, chunk):
        part = torch.full((rows, chunk), float("-inf"))
        part[:, : min(chunk, n - start)] = x[:, start:start + chunk].float()
        new_max = torch.maximum(run_max, part)
        pivot = torch.where(torch.isneginf(new_max), 0.0, new_max)
        run_sum = run_sum + torch.exp(part - pivot)          # right: run_sum * exp(run_max - pivot) + ...
        run_max = new_max
    row_max = run_max.max(dim=1, keepdim=True).values
    row_sum = (run_sum * torch.exp(run_max - row_max)).sum(dim=1, keepdim=True)
    return (torch.exp(x.float() - row_max) / row_sum).to(x.dtype)


def _long_pad_with_zero(x, chunk=1024):
    """softmax_long whose last, partial chunk loads its padding lanes as 0."""
    width = -(-x.shape[1] // chunk) * chunk
    padded = torch.zeros(x.shape[0], width, dtype=torch.float64)
    padded[:, : x.shape[1]] = x
    return torch.softmax(padded, dim=-1)[:, : x.shape[1]].to(x.dtype).contiguous()


def _rows_n_apart(x):
    return _ok(x.as_strided((x.shape[0], x.shape[1]), (x.shape[1], 1)))


def _writes_input(x):
    x -= x.max(dim=1, keepdim=True).values
    return _ok(x)


def _scaled(x):
    return _ok(x) * 1.01


_MISTAKES = [  # (mistake, input maker, the one hint it must name; None: no hint fits)
    (_no_max, lambda: torch.randn(3, 50) * 30 + 100, "overflow"),
    (_nan_where_neg_inf, lambda: with_neg_inf(5, 30), "nan_in_neg_inf_rows"),
    (_zero_for_all_neg_inf_rows, lambda: with_neg_inf(5, 30), "all_neg_inf_row"),
    (_pad_with_zero, lambda: torch.randn(4, 50), "padding"),
    (_long_pad_with_zero, lambda: torch.randn(3, 2500), "padding"),
    (_online_without_rescale, lambda: torch.randn(3, 2500), "online_rescale"),
    (_online_without_rescale, lambda: with_neg_inf(5, 3000), "online_rescale"),
    (_online_without_rescale, lambda: strided_rows(3, 2500), "online_rescale"),
    (_rows_n_apart, lambda: strided_rows(5, 40), "row_stride"),
    (_float16_math, lambda: torch.randn(40, 256).half(), "float16_math"),
    (_writes_input, lambda: torch.randn(3, 20) * 0.1 + 3, "input_modified"),
    (_scaled, lambda: torch.randn(5, 40), None),
    (_scaled, lambda: strided_rows(5, 40), None),
    (_scaled, lambda: with_neg_inf(5, 30), None),
]


@pytest.mark.parametrize("mistake, make, hint", _MISTAKES, ids=[f"{m.__name__}-{h}" for m, _, h in _MISTAKES])
def test_each_hint_fires_on_its_mistake_and_stays_silent_on_the_others(mistake, make, hint):
    """The mistake fails the check and names its own hint and no other; the float16 test's tight
    tolerance is used for float16 inputs, as the hidden float16 test does."""
    torch.manual_seed(0)
    x = make()
    atol, rtol = (tolerance_rounded_once if x.dtype == torch.float16 else tolerance)(x.dtype)
    with pytest.raises(CheckFailed) as info:
        check(mistake, [x], reference, atol=atol, rtol=rtol, hints=HINTS, name="softmax")
    fired = {name for name, phrase in _HINT_PHRASES.items() if phrase in str(info.value)}
    assert fired == ({hint} if hint else set()), str(info.value)


@triton.jit
def _long_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, CHUNK: tl.constexpr, RESCALE: tl.constexpr,
                 PAD: tl.constexpr, PER_LANE: tl.constexpr):
    """The extension's online softmax, with a running max and sum per lane (PER_LANE) or per row, and two
    mistakes to choose: RESCALE=False never multiplies the sum by exp(m - m_new); PAD=0.0 loads the padding
    lanes of the last chunk as 0."""
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, CHUNK)
    if PER_LANE:
        m = tl.full([CHUNK], float("-inf"), tl.float32)
        s = tl.zeros([CHUNK], tl.float32)
    else:
        m = float("-inf")
        s = 0.0
    for start in tl.range(0, n_cols, CHUNK):
        cols = start + offs
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=cols < n_cols, other=PAD).to(tl.float32)
        m_new = tl.maximum(m, x) if PER_LANE else tl.maximum(m, tl.max(x, axis=0))
        pivot = tl.where(m_new == float("-inf"), 0.0, m_new)
        e = tl.exp(x - pivot) if PER_LANE else tl.sum(tl.exp(x - pivot), axis=0)
        s = s * tl.exp(m - pivot) + e if RESCALE else s + e
        m = m_new
    if PER_LANE:
        row_max = tl.max(m, axis=0)
        row_sum = tl.sum(s * tl.exp(m - row_max), axis=0)
    else:
        row_max = m
        row_sum = s
    for start in tl.range(0, n_cols, CHUNK):
        cols = start + offs
        ok = cols < n_cols
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=ok, other=float("-inf")).to(tl.float32)
        tl.store(out_ptr + row * out_row_stride + cols, (tl.exp(x - row_max) / row_sum).to(out_ptr.dtype.element_ty),
                 mask=ok)


def _softmax_long(chunk=4096, rescale=True, pad=float("-inf"), per_lane=True):
    def softmax_long(x):
        out = torch.empty(x.shape, dtype=x.dtype)
        _long_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), out.stride(0), CHUNK=chunk, RESCALE=rescale,
                                    PAD=pad, PER_LANE=per_lane)
        return out
    return softmax_long


def _fired(fn, x):
    atol, rtol = tolerance(x.dtype)
    with pytest.raises(CheckFailed) as info:
        check(fn, [x], reference, atol=atol, rtol=rtol, hints=HINTS, name="softmax_long", require_kernel=False)
    return {name for name, phrase in _HINT_PHRASES.items() if phrase in str(info.value)}


def test_online_softmax_without_rescale_is_named_and_padding_is_not():
    """softmax_long kernels (Triton, in the interpreter) on the self-check's rows of 10000 (three chunks of 4096): the
    running sum never rescaled (per lane or per row) makes every output too small and gets the rescale hint, not
    the padding hint, though 10000 is not a power of two; it is right on rows that fit in one chunk. Padding lanes
    loaded as 0 get the padding hint and not the rescale hint, on long rows as on short ones."""
    torch.manual_seed(0)
    x = torch.randn(3, 10000)
    for per_lane in (True, False):
        no_rescale = _softmax_long(rescale=False, per_lane=per_lane)
        assert _fired(no_rescale, x) == {"online_rescale"}
        assert _fired(_softmax_long(pad=0.0, per_lane=per_lane), x) == {"padding"}
        assert _fired(_softmax_long(pad=0.0, per_lane=per_lane), torch.randn(2, 100)) == {"padding"}
        for short in (torch.randn(2, 100), torch.randn(2, 4096)):   # within one chunk: right
            check(no_rescale, [short], reference, atol=tolerance(short.dtype)[0], rtol=tolerance(short.dtype)[1],
                  hints=HINTS, name="softmax_long", require_kernel=False)
    assert _fired(_softmax_long(chunk=1024, rescale=False), strided_rows(3, 5000)) == {"online_rescale"}
    check(_softmax_long(), [x], reference, atol=tolerance(x.dtype)[0], rtol=tolerance(x.dtype)[1], hints=HINTS,
          name="softmax_long", require_kernel=False)


def test_every_hint_has_a_mistake_here():
    assert len(_HINT_PHRASES) == len(HINTS)
    assert set(_HINT_PHRASES) == {hint for _, _, hint in _MISTAKES if hint}
    for hint in HINTS:
        assert sum(phrase in hint.message for phrase in _HINT_PHRASES.values()) == 1, hint.message


def test_roofline_offers_the_units_a_row_kernel_runs_on():
    """triton_course.roofline: softmax and norms are drawn under the FP32 or special-function roof, matmuls keep the
    tensor-core default, and a unit it does not know is refused with the choices."""
    from triton_course.gpus import GPU_SPECS
    from triton_course.roofline import datasheet_roof, device_roof

    h200, t4 = GPU_SPECS["H200"], GPU_SPECS["T4"]
    assert datasheet_roof("H200").peak_tflops == h200.fp16_tensor_tflops
    assert datasheet_roof("H200", "fp32").peak_tflops == h200.fp32_tflops
    assert datasheet_roof("H200", "sfu").peak_tflops == pytest.approx(h200.fp32_tflops / 16)  # 16 of 128 lanes
    assert datasheet_roof("T4", "sfu").peak_tflops == pytest.approx(t4.fp32_tflops / 8)       # 16 of 64 lanes
    roof = device_roof("fp32")
    assert roof.compute == "fp32" and roof.units == "fp32 FLOP" and 10 < roof.ridge < 20
    assert roof.bound(5 * 4096 * 4096 / (8 * 4096 * 4096)) == "memory"   # softmax, float32
    with pytest.raises(ValueError, match="'fp16_tensor', 'fp32', 'sfu'"):
        device_roof("fp64")


def test_recorded_launch_figures_are_read_by_shape():
    from triton_course.softmax import recorded_launch_gbps

    for chapter in ("05_softmax", "06_rmsnorm"):
        figures, source = recorded_launch_gbps(chapter, 4096)
        assert {(1, 1), (1, 32), (8, 8)} <= set(figures) and "H200" in source and chapter in source
        assert figures[1, 32] < max(figures.values())   # the chapters' reading: 32 warps lose
    with pytest.raises(ValueError, match="not 777"):
        recorded_launch_gbps("05_softmax", 777)


@functools.lru_cache(maxsize=None)
def _solution_cell(grade_id: str) -> dict:
    """The namespace of the solution's cell ``grade_id`` (``softmax`` or ``softmax_long``), run on its own: kernels
    defined, nothing launched."""
    from grader.course import solution_notebook
    from triton_course.inputs import BadInputError, expect

    nb = json.loads(solution_notebook(CHAPTER).read_text())
    cell = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id)
    ns = dict(functools=functools, torch=torch, triton=triton, tl=tl, expect=expect, BadInputError=BadInputError)
    exec("".join(cell["source"]), ns)
    return ns


def _solution_config():
    """The solution's softmax_config, read from its softmax cell (the kernel is defined, nothing launched)."""
    return _solution_cell("softmax")["softmax_config"]


def test_launch_rule_picks_what_the_sweeps_measured_fastest():
    """At every shape of the recorded sweeps (4096 float32 rows of 512 to 16384; the shapes where a peer led; the
    graph-timed ones, which replace the others where they overlap) the reference's rule picks a launch the sweep
    timed, within 3% of the fastest (a first-round spread) and within 1% at 12 of the 16 shapes, and within 2% of the
    best of torch, torch.compile and Liger wherever any launch reached that."""
    from triton_course.softmax import rule_against_sweeps

    picks = rule_against_sweeps(_solution_config())
    if not picks:
        pytest.skip("solutions/05_softmax/records/05_softmax_*sweep.json not in this copy")
    assert len(picks) == 16   # 15 shapes of the back-to-back sweeps, 8192 x 1024 float16 of the graph-timed ones
    graphed = {p.shape for p in picks if p.source.endswith("_graphs.json")}
    assert {"4096x4096 float16", "4096x4096 bfloat16", "4096x2048 float32", "16384x1000 float16"} <= graphed
    for p in picks:
        assert p.gbps is not None, f"{p.shape}: the rule's launch {p.launch} was not timed"
        assert p.of_fastest >= 0.97, (p.shape, p.launch, p.gbps, p.fastest)
        if p.peer_reachable:
            assert p.of_best_peer >= 0.98, (p.shape, p.launch, p.gbps, p.best_peer)
    near = [p for p in picks if p.of_fastest >= 0.99]   # ties, at the graph-timed sweeps' resolution
    assert len(near) >= 12, [p.shape for p in picks if p not in near]


def test_launch_rule_reads_the_row_and_the_input():
    """Short rows are stacked into 2 KB programs of 4 warps; longer rows get a warp per 4 KB (2 KB when N is not a
    multiple of 16, so loads are one element wide); inputs up to 16 MiB get cache hints; never more rows than M."""
    config = _solution_config()
    assert config(262144, 64, 4) == (64, 8, 4, False)
    assert config(65536, 256, 2) == (256, 4, 4, False)   # 32 MiB: no hints (solutions/05_softmax/records/05_softmax_small_graphs.json)
    assert config(4096, 4096, 2) == (4096, 1, 2, False)
    assert config(4096, 1024, 4) == (1024, 2, 2, True)     # 16 MiB: hints
    assert config(32768, 1000, 4) == (1024, 1, 2, False)       # 1000: one-element loads, twice the warps
    assert config(32768, 1024, 4) == (1024, 1, 1, False)
    assert config(8192, 5120, 2) == (8192, 1, 4, False)
    assert config(32768, 3000, 4) == (4096, 1, 8, False)
    assert config(4096, 1000, 4) == (1024, 2, 4, True)
    assert config(3, 100, 4) == (128, 4, 4, True)    # 512-byte rows, 4 per program (3 rows: one program)
    assert config(1, 32768, 4) == (32768, 1, 16, True)


# ---------------------------------------------------------------------------------------------------------------
# Correctness at GPU sizes (many programs, rows of many chunks): graded on a GPU, not graded under the interpreter
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("grade_id", GPU_TESTS)
def test_tests_at_gpu_sizes_are_not_graded_under_the_interpreter(grade_id):
    """Each prints NOT GRADED and scores 0 here (the grader reports not_graded, never passed); its score is
    at_gpu_sizes' with the cell's own point."""
    printed, score, _ = run_cell(CHAPTER, grade_id)
    assert score == 0 and printed.startswith("NOT GRADED"), printed
    assert ends_with_at_gpu_sizes(CHAPTER, grade_id)


def test_softmax_at_gpu_sizes_spans_many_programs_of_the_launch_rule():
    """The softmax test at GPU sizes, launched by the solution's rule as on a GPU: the largest stack of short rows the
    rule ever takes (1024 rows of one float16 value) at several program counts, stacked rows at more, each with a
    ragged last program; more rows than a grid's second axis holds; rows of MAX_COLS values and rows of over half of
    it that are not a power of two, in 16 and 32 bits; and the bandwidth check's 4096 x 4096 float32. All within a
    T4."""
    _, _, ns = run_cell(CHAPTER, "test_softmax_gpu_sizes")
    solution = _solution_cell("softmax")
    rows = lambda m, n, size: solution["softmax_config"](m, n, size)[1]  # noqa: E731
    launches = row_launches([((m, n), dtype) for m, n, dtype in ns["GPU_SIZES"]], rows)
    largest = largest_rows_per_program(rows, solution["MAX_COLS"])
    assert largest == 1024
    assert not spans_many_programs(launches, largest), spans_many_programs(launches, largest)
    max_cols = solution["MAX_COLS"]
    assert any(x.n == max_cols for x in launches)
    for size in (2, 4):
        assert any(x.element_size == size and max_cols // 2 < x.n and x.n & (x.n - 1) for x in launches), size
    bandwidth, _ = cell_source(CHAPTER, "test_softmax_bandwidth")
    assert "M = N = 4096" in bandwidth and "torch.randn(M, N, device=dev)" in bandwidth
    assert any(x.shape == (4096, 4096) and x.element_size == 4 for x in launches)


def test_softmax_long_at_gpu_sizes_spans_several_of_the_longest_chunks():
    """Rows of two to five chunks of 2^16 values (the longest a GPU may loop over), each with a ragged last chunk, in
    16 and 32 bits; -inf entries across chunk boundaries; a thousand rows of several of the solution's chunks; more
    rows than a grid's second axis holds (softmax_long launches a program per row). All within a T4."""
    source, _ = cell_source(CHAPTER, "test_softmax_long_gpu_sizes")
    _, _, ns = run_cell(CHAPTER, "test_softmax_long_gpu_sizes")
    sizes, longest = ns["GPU_SIZES"], 2**16
    chunks = {-(-n // longest) for _, n, _ in sizes if n > longest and n % longest}
    assert len(chunks) >= 3 and min(chunks) == 2 and max(chunks) >= 5, chunks
    assert {dtype for _, n, dtype in sizes if n > 2 * longest} == {torch.float16, torch.float32}
    chunk = _solution_cell("softmax_long")["CHUNK"]
    assert any(m >= 1000 and n > chunk and n % chunk for m, n, _ in sizes)
    assert any(m > GRID_AXIS_LIMIT for m, _, _ in sizes)
    assert "with_neg_inf(5, 200001" in source
    launches = row_launches([((m, n), dtype) for m, n, dtype in sizes], lambda m, n, size: 1)
    assert sum(x.rows * x.n * x.element_size for x in launches) < MAX_INPUT_BYTES


def test_a_softmax_wrong_past_some_size_loses_the_point_at_gpu_sizes_and_is_told_the_size(monkeypatch):
    """With at_gpu_sizes told it runs on a GPU, the test's checks run at its sizes (here with PyTorch stand-ins for
    the kernel, outside the grader, which would refuse them): a softmax right on the first 65535 rows of an input
    and wrong past them loses the point, and the failure names the size; right everywhere, it earns the point."""
    import types

    import triton_course.grading as grading
    from triton_course import integrity

    monkeypatch.setattr(grading, "current", lambda: types.SimpleNamespace(interpreted=False))
    monkeypatch.setenv(integrity.REQUIRE_KERNEL_ENV, "0")

    def right(x):
        return torch.softmax(x.double(), dim=-1).to(x.dtype)

    def wrong_past_the_grid_axis(x):
        out = torch.empty_like(x)            # the rows a grid's second axis cannot reach are never written
        out[:GRID_AXIS_LIMIT] = right(x[:GRID_AXIS_LIMIT])
        return out

    printed, score, _ = run_cell(CHAPTER, "test_softmax_gpu_sizes", {"softmax": right})
    assert score == 1 and "correct at every size" in printed
    with pytest.raises(CheckFailed, match=r"(?s)\(float32\[70001, 7\]\):\n.*never written"):
        run_cell(CHAPTER, "test_softmax_gpu_sizes", {"softmax": wrong_past_the_grid_axis})


@pytest.mark.notebook
def test_an_online_softmax_that_never_rescales_loses_the_extensions_tests_here():
    """solutions/05_softmax/submissions/attacks/kim_online_sum_not_rescaled, right on rows of one chunk and wrong on rows of several:
    it loses both of the extension's tests on the CPU, its rows of 50000 values named by the rescale hint; softmax
    (the solution's) keeps every point, and the extension's test at GPU sizes is not graded here."""

    got = run_with_answers(CHAPTER, "kim_online_sum_not_rescaled", kind="attacks")
    assert set(got) == TESTS
    lost = ("test_softmax_long_sizes", "test_softmax_long_traps")
    for grade_id in lost:
        assert got[grade_id].startswith("CheckFailed: softmax_long("), got[grade_id]
    assert "multiplied by exp(m - m_new)" in got["test_softmax_long_traps"], got["test_softmax_long_traps"]
    assert all(v == "passed" for k, v in got.items() if k not in lost), got


# ---------------------------------------------------------------------------------------------------------------
# The appendix quotes its records, and the student's cell holds no constant fitted on one GPU
# ---------------------------------------------------------------------------------------------------------------

def _gbps(value: float) -> str:
    return f"{value:,.0f}"


def test_appendix_quotes_the_figures_its_records_hold():
    """Every H200 figure of the appendix is the one its record holds now: 05_softmax.json (the benchmark, the one-row
    kernel, the rounds won) and 05_softmax_launch_sweep.json (warps, cache hints, persistent grids). An earlier
    appendix kept an older run's figures and said "all 15 rounds" where the file says 5 of 15 at N = 8192."""
    from tests.conftest import main_path

    text = "\n".join(main_path(CHAPTER)[1])
    records = ROOT / "solutions" / CHAPTER / "records"
    r = json.loads((records / f"{CHAPTER}.json").read_text())
    at = {row["n"]: row for row in r["sizes"]}
    quotes = [f"{_gbps(at[4096]['one_row_gbps'])} GB/s, {at[4096]['one_row_fraction_of_copy']:.0%} of the 1 GiB copy "
              f"({_gbps(r['copy_gbps'])} GB/s",
              f"{_gbps(at[4096]['reference_gbps'])} GB/s, {at[4096]['reference_fraction_of_copy']:.0%} of the 1 GiB copy "
              f"and {at[4096]['reference_fraction_of_same_size_copy']:.0%} of a copy of the same 134 MB "
              f"({_gbps(at[4096]['same_size_copy_gbps'])} GB/s)",
              f"`torch.softmax` reached {_gbps(at[4096]['torch_softmax_gbps'])} GB/s at N = 4096 and "
              f"{_gbps(at[8192]['torch_softmax_gbps'])} at 8192 ({at[4096]['torch_softmax_gbps'] / r['copy_gbps']:.0%} and "
              f"{at[8192]['torch_softmax_gbps'] / r['copy_gbps']:.0%} of the copy), {_gbps(at[16384]['torch_softmax_gbps'])}",
              f"({_gbps(at[8192]['reference_gbps'])} against {_gbps(at[8192]['one_row_gbps'])} GB/s; faster in "
              f"{at[8192]['rounds_reference_faster_than_one_row']} of 15 rounds)",
              f"({_gbps(at[4096]['torch_compile_gbps'])} against {_gbps(at[4096]['reference_gbps'])})",
              f"({_gbps(at[8192]['torch_compile_gbps'])} and {_gbps(at[16384]['torch_compile_gbps'])} against "
              f"{_gbps(at[8192]['reference_gbps'])} and {_gbps(at[16384]['reference_gbps'])})",
              f"a plain copy reaches only {_gbps(at[512]['same_size_copy_gbps'])} GB/s; the reference "
              f"({_gbps(at[512]['reference_gbps'])})",
              f"reached {_gbps(r['long_rows']['softmax_long_gbps'])} GB/s, `torch.softmax` "
              f"{_gbps(r['long_rows']['torch_softmax_gbps'])}",
              f"reached only {_gbps(at[16384]['one_row_gbps'])} GB/s at N = 16 384"]
    for quote in quotes:
        assert quote in text, quote
    # the rounds: 14 or 15 of 15 at every width but 8192, where the reference does not win
    assert {row["rounds_reference_faster_than_one_row"] for n, row in at.items() if n != 8192} <= {14, 15}
    assert not at[8192]["reference_beats_torch_and_one_row"] and "all 15 rounds" not in text
    assert "1.6 times `torch.softmax`" in text and round(at[4096]["one_row_gbps"] / at[4096]["torch_softmax_gbps"], 1) == 1.6

    sweep = json.loads((records / f"{CHAPTER}_launch_sweep.json").read_text())["widths"]
    r1 = {int(n): s["round1_gbps"] for n, s in sweep.items()}
    assert (f"{_gbps(r1[512]['tile rows1/w1'])} against {_gbps(r1[512]['tile rows1/w4'])} GB/s at N = 512 (1 warp "
            "against 4)") in text
    assert f"{_gbps(r1[16384]['tile rows1/w16'])} against {_gbps(r1[16384]['tile rows1/w4'])} at N = 16 384" in text
    assert (f"({_gbps(r1[512]['cache hints rows1/w1'])} against {_gbps(r1[512]['tile rows1/w1'])} GB/s at N = 512, "
            f"{_gbps(r1[1024]['cache hints rows1/w1'])} against {_gbps(r1[1024]['tile rows1/w1'])} at 1024)") in text
    assert (f"({_gbps(r1[4096]['persistent rows1/w2'])} against {_gbps(r1[4096]['tile rows1/w2'])} GB/s at N = 4096)"
            in text)
    slower = [1 - max(v for k, v in r.items() if k.startswith("persistent")) /
              max(v for k, v in r.items() if k.startswith("tile")) for r in r1.values()]
    assert "3-7% slower" in text and 0.025 <= min(slower) and max(slower) < 0.075, slower


def test_the_student_cell_holds_the_rule_but_no_constant_fitted_on_one_gpu():
    """The TODO states the launch rule; the thresholds fitted on the H200 live in triton_course.softmax and reach the
    reference only inside its solution, so the student's cell opens with the kernel, not with one GPU's numbers."""
    import nbformat

    from triton_course import softmax as helpers

    student = nbformat.read(ROOT / "notebooks" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    cell = next(c.source for c in student.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "softmax")
    for name in ("SHORT_ROW_BYTES", "SMALL_INPUT_BYTES", "STREAM_INPUT_BYTES", "H200"):
        assert name not in cell, name
    todo = next(c.source for c in student.cells if c.cell_type == "markdown" and c.source.startswith("## TODO"))
    assert "**The launch rule.** One program per row." in todo and "next power of two of `N`" in todo
    config = _solution_config()
    assert config(4096, 1000, 4) == (1024, 2, 4, helpers.STREAM_INPUT_BYTES >= 4096 * 1024 * 4)
