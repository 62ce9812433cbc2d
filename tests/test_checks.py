"""triton_course.checks finds the mistakes students make, and says which; triton_course.inputs rejects bad input."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

import triton_course  # noqa: F401  -- turns the interpreter on before the kernels below are defined
from triton_course.checks import CheckFailed, GuardedAllocations, Hint, check, guarded_copy, tolerance_for
from triton_course.inputs import BadInputError, expect


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, MASK_SLACK: tl.constexpr):
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = idx < n + MASK_SLACK
    tl.store(out_ptr + idx, tl.load(x_ptr + idx, mask=ok) + tl.load(y_ptr + idx, mask=ok), mask=ok)


def _launch(x, y, *, programs=None, slack=0, out_dtype=None):
    out = torch.empty_like(x, dtype=out_dtype or x.dtype)
    n = x.numel()
    _add_kernel[(programs if programs is not None else triton.cdiv(n, 128),)](x, y, out, n, BLOCK=128,
                                                                               MASK_SLACK=slack)
    return out


def good(x, y):
    return _launch(x, y)


def _inputs(n=1000, dtype=torch.float32):
    return torch.randn(n, dtype=dtype), torch.randn(n, dtype=dtype)


def _fail(fn, args=None, **kw) -> str:
    with pytest.raises(CheckFailed) as info:
        check(fn, args or _inputs(), lambda x, y: x + y, atol=1e-6, rtol=1e-5, **kw)
    return str(info.value)


def test_a_correct_kernel_passes():
    result = check(good, _inputs(), lambda x, y: x + y, atol=1e-6, rtol=1e-5)
    assert result.ok and result.total == 1000


def test_unwritten_tail_is_named_with_its_indices():
    msg = _fail(lambda x, y: _launch(x, y, programs=1000 // 128))
    assert "104 elements were never written" in msg and "[896]..[999]" in msg


def test_store_past_the_end_is_reported_as_out_of_bounds():
    msg = _fail(lambda x, y: _launch(x, y, slack=128))
    assert "Out-of-bounds stores" in msg and "24 after the end" in msg


def test_wrong_values_show_expected_against_got():
    def off_by_one(x, y):
        out = good(x, y)
        out[5] += 1.0
        return out
    msg = _fail(off_by_one)
    assert "1 of 1000 output elements are wrong" in msg and "[5]" in msg and "expected" in msg


def test_wrong_dtype_is_named():
    msg = _fail(lambda x, y: _launch(x, y, out_dtype=torch.float32), _inputs(dtype=torch.float16))
    assert "returned dtype float32, expected float16" in msg


def test_todo_stub_is_recognised():
    def stub(x, y):
        raise NotImplementedError()
    assert "still a TODO stub" in _fail(stub)


def test_a_raise_inside_an_interpreted_kernel_is_unwrapped():
    @triton.jit
    def broken(x_ptr):
        raise NotImplementedError()

    def fn(x, y):
        broken[(1,)](x)
        return x
    assert "TODO stub" in _fail(fn)


def test_other_exceptions_keep_their_type_and_message():
    def fn(x, y):
        raise IndexError("row 3 is missing")
    assert "raised IndexError: row 3 is missing" in _fail(fn)


def test_modified_input_is_reported():
    def clobber(x, y):
        out = good(x, y)
        x.zero_()
        return out
    assert "Input 0 was modified" in _fail(clobber)


def test_hint_is_added_when_it_applies():
    hint = Hint(lambda c, args: bool(c.unwritten.any()), "grid too small?")
    msg = _fail(lambda x, y: _launch(x, y, programs=1), hints=[hint])
    assert "Hint: grid too small?" in msg


def test_nan_matches_nan_and_inf_matches_inf():
    x = torch.tensor([float("nan"), float("inf"), 1.0])
    check(lambda a: a.clone(), (x,), lambda a: a, atol=0, rtol=0)


def test_guarded_allocations_restore_torch():
    original = torch.empty_like
    src = torch.ones(3, 4).t()
    with GuardedAllocations() as allocs:
        assert torch.empty_like is not original
        t = torch.empty_like(src)
    assert t.stride() == original(src).stride()  # same layout as the real empty_like
    assert allocs.find(t) is not None and torch.isnan(t).all()  # poisoned
    assert torch.empty_like is original


def test_guarded_copy_keeps_values_and_strides():
    x = torch.randn(6, 5).t()
    g = guarded_copy(x)
    assert torch.equal(g, x) and g.stride() == x.stride()


def test_tolerances_are_tighter_for_float32():
    assert tolerance_for(torch.float32)[1] < tolerance_for(torch.float16)[1]


@pytest.mark.parametrize("bad, needle", [
    (lambda x: x.to(torch.int32), "dtype int32"),
    (lambda x: x.to("meta"), "is on meta"),
    (lambda x: x[:-1], "must match"),
    (lambda x: "not a tensor", "must be a torch.Tensor"),
])
def test_expect_names_the_problem(bad, needle):
    x = torch.randn(8)
    with pytest.raises(BadInputError, match=needle):
        expect("y", bad(x), like=x if needle == "must match" else None)


def test_expect_rejects_strided_last_dim_when_asked():
    with pytest.raises(BadInputError, match="stride 1"):
        expect("x", torch.randn(4, 6).t(), contiguous_last_dim=True)


def test_compiler_errors_are_explained_with_the_hint_for_their_cause():
    from triton_course.checks import explain_exception

    class CompilationError(Exception):
        pass

    exp16 = explain_exception(CompilationError("at 5:8:\n    y = tl.exp(x)\nValueError: Expected dtype ['fp32', 'fp64'] "
                                               "but got fp16"), "softmax(float16[4, 8])")
    assert "Triton could not compile" in exp16 and "upcast first" in exp16
    other = explain_exception(CompilationError("at 3:4:\nunsupported operand"), "add(float32[4])")
    assert "upcast" not in other and "power-of-two" not in other
    arange = explain_exception(CompilationError("at 2:10:\narange's range must be a power of 2"), "gelu(float32[3])")
    assert "next_power_of_2" in arange


# -- a changed input is reported as exactly that; hints only on their own symptom; several outputs ---------

@triton.jit
def _residual_add_kernel(x_ptr, r_ptr, out_ptr, n, BLOCK: tl.constexpr, IN_PLACE: tl.constexpr):
    """out = x + residual; with IN_PLACE also residual = x + residual (a production habit)."""
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = idx < n
    h = tl.load(x_ptr + idx, mask=ok) + tl.load(r_ptr + idx, mask=ok)
    tl.store(out_ptr + idx, h, mask=ok)
    if IN_PLACE:
        tl.store(r_ptr + idx, h, mask=ok)


def _residual_add(x, residual, in_place=False):
    out = torch.empty_like(x)
    _residual_add_kernel[(triton.cdiv(x.numel(), 128),)](x, residual, out, x.numel(), BLOCK=128, IN_PLACE=in_place)
    return out


def _residual_reference(x, residual):
    return x + residual


_UNWRITTEN = Hint(lambda c, a: bool(c.unwritten.any()), "the grid does not cover every element")
_ANY_WRONG = Hint(lambda c, a: bool(c.wrong.any()), "some values are wrong")


def test_a_kernel_that_writes_into_its_input_is_told_exactly_that_and_nothing_else():
    with pytest.raises(CheckFailed) as info:
        check(lambda x, r: _residual_add(x, r, in_place=True), _inputs(1500), _residual_reference, atol=1e-6,
              rtol=1e-5, hints=[_UNWRITTEN, _ANY_WRONG], name="residual_add")
    msg = str(info.value)
    report = msg.split("\n")[1]
    assert report.startswith("Input 1 was modified: your kernel changed its input `residual`: 1500 of 1500 "
                             "elements differ from what was passed in"), msg
    assert "Apart from that, the output is right" in msg
    assert "output elements are wrong" not in msg and "Hint:" not in msg


def test_the_reference_comes_from_the_inputs_as_they_were_before_the_call():
    """A kernel that clobbers x after computing its output right is wrong only about x."""
    def add_then_clobber(x, y):
        out = good(x, y)
        _residual_add_kernel[(triton.cdiv(x.numel(), 128),)](x, y, x, x.numel(), BLOCK=128, IN_PLACE=False)
        return out
    msg = _fail(add_then_clobber)
    assert "changed its input `x`" in msg and "changed its input `y`" not in msg and "are wrong" not in msg


def test_input_names_come_from_the_reference_or_are_given():
    msg = _fail(lambda x, y: _residual_add(x, y, in_place=True), arg_names=("a", "b"))
    assert "changed its input `b`" in msg
    msg = _fail(lambda x, y: _residual_add(x, y, in_place=True))   # lambda x, y: x + y, the reference
    assert "changed its input `y`" in msg


def test_each_hint_fires_on_its_own_symptom_only():
    """The unwritten-tail hint: fires for a grid one program short, silent for a wrong value, and silent for
    a kernel that only changed its input."""
    def one_value_off(x, y):
        out = good(x, y)
        out[5] += 1.0
        return out
    assert "Hint: the grid does not cover" in _fail(lambda x, y: _launch(x, y, programs=1000 // 128), hints=[_UNWRITTEN])
    assert "Hint:" not in _fail(one_value_off, hints=[_UNWRITTEN])
    assert "Hint:" not in _fail(lambda x, y: _residual_add(x, y, in_place=True), hints=[_UNWRITTEN])


@triton.jit
def _sum_diff_kernel(x_ptr, y_ptr, s_ptr, d_ptr, n, BLOCK: tl.constexpr):
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = idx < n
    x, y = tl.load(x_ptr + idx, mask=ok), tl.load(y_ptr + idx, mask=ok)
    tl.store(s_ptr + idx, x + y, mask=ok)
    tl.store(d_ptr + idx, x - y, mask=ok)


def _sum_diff(x, y, programs=None):
    s, d = torch.empty_like(x), torch.empty_like(x)
    _sum_diff_kernel[(programs or triton.cdiv(x.numel(), 128),)](x, y, s, d, x.numel(), BLOCK=128)
    return s, d


def _pair(fn, hints=(), **kw):
    kw = {"atol": 1e-6, "rtol": 1e-5, **kw}
    return check(fn, _inputs(), lambda x, y: (x + y, x - y), outputs=("sum", "diff"), hints=hints, **kw)


def _pair_fail(fn, **kw) -> str:
    with pytest.raises(CheckFailed) as info:
        _pair(fn, **kw)
    return str(info.value)


def test_several_outputs_are_each_checked_and_named():
    sums, diffs = _pair(_sum_diff)
    assert sums.ok and diffs.ok and (sums.output, diffs.output) == ("sum", "diff")
    def diff_off(x, y):
        s, d = _sum_diff(x, y)
        d[7] = 0
        return s, d
    msg = _pair_fail(diff_off)
    assert "Output `diff`: 1 of 1000 output elements are wrong" in msg and "Output `sum`" not in msg
    msg = _pair_fail(lambda x, y: _sum_diff(x, y, programs=1000 // 128))
    assert "Output `sum`: 104 of 1000" in msg and "Output `diff`: 104 of 1000" in msg and "never written" in msg


@pytest.mark.parametrize("fn, words", [
    (lambda x, y: (_sum_diff(x, y)[0],) * 2, "outputs `sum` and `diff` share memory"),
    (lambda x, y: (_sum_diff(x, y)[0], x), "output `diff` is your input `x`"),
    (lambda x, y: _sum_diff(x, y)[0], "returned Tensor, expected a tuple of 2 tensors (sum, diff)"),
    (lambda x, y: (*_sum_diff(x, y), x), "returned 3 outputs"),
    (lambda x, y: (_sum_diff(x, y)[0], _sum_diff(x, y)[1].double()), "output `diff` has dtype float64, expected float32"),
    (lambda x, y: (_sum_diff(x, y)[0], _sum_diff(x, y)[1][:-1]), "output `diff` has shape (999,), expected (1000,)"),
])
def test_outputs_of_the_wrong_kind_are_named(fn, words):
    assert words in _pair_fail(fn)


def test_out_dtypes_and_per_output_tolerances():
    def sum_and_float64_diff(x, y):
        s, d = _sum_diff(x, y)
        return s, d.double() + 1e-4
    _pair(sum_and_float64_diff, out_dtypes=(None, torch.float64), atol=(1e-6, 1e-3), rtol=(1e-5, 0.0))
    assert "Output `diff`" in _pair_fail(sum_and_float64_diff, out_dtypes=(None, torch.float64))


def test_a_hint_looks_only_at_its_own_output():
    diff_hint = Hint(lambda c, a: bool(c.unwritten.any()), "diff: grid too small", output="diff")
    sum_hint = Hint(lambda c, a: bool(c.unwritten.any()), "sum: grid too small")   # the first output by default

    def diff_short(x, y):
        s, _ = _sum_diff(x, y)
        _, d = _sum_diff(x, y, programs=1)
        return s, d
    msg = _pair_fail(diff_short, hints=[diff_hint, sum_hint])
    assert "Hint: diff: grid too small" in msg and "sum: grid too small" not in msg


def _nudged(positions, by):
    """An add that is right except at ``positions``, each off by ``by`` times the check's tolerance there."""
    def add(x, y):
        out = good(x, y)
        for i in positions:
            exact = float(x[i].double() + y[i].double())
            out[i] = exact + by * (1e-6 + 1e-5 * abs(exact))
        return out
    return add


def test_a_near_miss_says_so_and_a_real_mistake_does_not():
    """A few elements just past the tolerance (what rounding in another order can do) are called a near miss, with
    the worst multiple of the tolerance; the same elements far off, too many elements a little off, or an element
    never written, are not. grader/report.py flags a near miss for the instructor to review."""
    near = _fail(_nudged([3], 1.4))
    assert "Near miss: 1 of 1000 elements, the worst 1.4" in near
    assert "Near miss" not in _fail(_nudged([3], 3.0))                  # far off
    assert "Near miss" not in _fail(_nudged(range(0, 1000, 50), 1.2))   # 2% of the output
    assert "Near miss" not in _fail(lambda x, y: _launch(x, y, programs=7))  # a tail never written
    from grader.report import GradedSubmission, flags
    from grader.results import GradeRecord

    record = GradeRecord("ann", "09_attention", "test_attention_sm_scale", 0, 1, "failed", f"CheckFailed: {near}")
    (flag,) = flags([GradedSubmission("ann", "09_attention", [record])])
    assert flag.kinds == ["near miss"] and "Near miss" in flag.evidence[0]


# ---------------------------------------------------------------------------------------------------
# The grader's rule "the result comes from your kernel", applied where a student's result is judged
# ---------------------------------------------------------------------------------------------------

class _Shell:
    """Stands in for IPython's running shell: what a notebook's kernel has and a pytest process has not."""


@pytest.fixture
def in_a_notebook(monkeypatch):
    """check() as a notebook's self-check calls it: an IPython shell is running (COURSE_REQUIRE_KERNEL unset)."""
    import types

    from triton_course import integrity

    monkeypatch.delenv(integrity.REQUIRE_KERNEL_ENV, raising=False)
    fake = types.ModuleType("IPython")
    fake.get_ipython = lambda: _Shell()
    monkeypatch.setitem(__import__("sys").modules, "IPython", fake)


def _torch_sum(x, y):
    return x + y


def _launched_then_torch(x, y):
    out = _launch(x, y)
    out.copy_(x + y)   # the kernel ran, but what is handed in is PyTorch's sum
    return out


def _launched_into_a_scratch_tensor(x, y):
    _launch(x, y)
    return torch.add(x, y)


def _returns_its_input(x, y):
    _launch(x, y)
    return x


@pytest.mark.parametrize("fn, words, absent", [
    (_torch_sum, ["without launching a Triton kernel", "aten.add", "no Triton kernel launch received"], []),
    (_launched_then_torch, ["aten.add"], ["without launching", "no Triton kernel launch received"]),
    (_launched_into_a_scratch_tensor, ["aten.add", "no Triton kernel launch received"], ["without launching"]),
    (_returns_its_input, ["returned its input `x`"], ["without launching", "aten."]),
])
def test_in_a_notebook_a_result_not_made_by_the_kernel_fails_with_its_own_symptoms(in_a_notebook, fn, words, absent):
    """x + y from PyTorch gives the right values, and scores 0 with the grader: the self-check says so, naming
    what happened (no launch, the PyTorch operator, a returned tensor no launch received, an input returned),
    and names nothing that did not happen."""
    msg = _fail(fn)
    for w in words:
        assert w in msg, (w, msg)
    for w in absent:
        assert w not in msg, (w, msg)


def test_in_a_notebook_an_honest_kernel_passes_and_allocation_views_and_contiguous_are_fine(in_a_notebook):
    def honest(x, y):
        x, y = x.contiguous().view(-1), y.contiguous().reshape(-1)
        out = torch.empty(x.numel(), dtype=x.dtype)
        n = x.numel()
        _add_kernel[(triton.cdiv(n, 128),)](x, y, out, n, BLOCK=128, MASK_SLACK=0)
        return out.view(-1)

    check(honest, _inputs(), lambda x, y: x + y, atol=1e-6, rtol=1e-5)
    check(_torch_sum, _inputs(), lambda x, y: x + y, atol=1e-6, rtol=1e-5, require_kernel=False)


def test_outside_a_notebook_and_the_grader_the_rule_applies_only_when_asked(monkeypatch):
    from triton_course import integrity
    from triton_course.checks import judged_here

    monkeypatch.delenv(integrity.REQUIRE_KERNEL_ENV, raising=False)
    check(_torch_sum, _inputs(), lambda x, y: x + y, atol=1e-6, rtol=1e-5)   # the course's own tests, scripts
    assert not judged_here() and judged_here(True) and not judged_here(False)
    assert "aten.add" in _fail(_launched_then_torch, require_kernel=True)
    monkeypatch.setenv(integrity.REQUIRE_KERNEL_ENV, "1")
    assert judged_here() and "aten.add" in _fail(_launched_then_torch)


def test_the_rule_and_its_operators_are_the_judges():
    """The self-check and the grader's judge give one verdict: the rule is defined once (triton_course.checks) and
    the judge and the re-run import it, so the same evidence gets the same problems."""
    from grader.judge_calls import work_problems as judge_work_problems
    from triton_course.checks import ALLOWED_OPS, MAX_SCALAR_READS, work_problems
    from triton_course.relaunch import ALLOWED_OPS as RELAUNCH_ALLOWED_OPS

    assert judge_work_problems is work_problems and RELAUNCH_ALLOWED_OPS is ALLOWED_OPS   # one definition
    tensor = {"kind": "tensor", "written_by_launch": True, "is_input": False, "exact_type": True}
    cases = [
        {"launches": 1, "ops": {"empty_like": 1}, "output": tensor},
        {"launches": 0, "ops": {"add": 1}, "output": dict(tensor, written_by_launch=False)},
        {"launches": 1, "ops": {"_local_scalar_dense": MAX_SCALAR_READS + 1}, "unknown_copies": 1,
         "output": dict(tensor, is_input=True, input_index=1)},
        {"launches": 2, "output": {"kind": "tuple", "items": [dict(tensor, shares_memory_with=[1]),
                                                               dict(tensor, exact_type=False)]}},
    ]
    for evidence in cases:
        for required in (True, False):
            mine = work_problems(evidence, required, ["y", "rstd"], ["x", "w"])
            assert mine == judge_work_problems(evidence, required, ["y", "rstd"], ["x", "w"])
            assert bool(mine) == (required and evidence is not cases[0])
