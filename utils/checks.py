"""Checking a student's kernel: compare with a float64 reference and explain every difference.

Three tools, used together by :func:`check`:

* :class:`GuardedAllocations` -- while it is active, ``torch.empty``/``empty_like``/``zeros``... return
  tensors filled with a *poison* bit pattern and surrounded by *guard* regions, so that afterwards we can
  tell which output elements were never written and which stores landed out of bounds;
* :func:`guarded_copy` -- puts an input inside a guard region, so an unmasked load reads a NaN sentinel
  (not another tensor, and not unmapped memory);
* :func:`compare` -- elementwise comparison with a float64 reference, summarised as ranges of indices
  with expected-against-got values, the way a student would debug it by hand.

And one rule the grader applies to every graded call, which :func:`check` applies too where a student's result is
judged (in a notebook, or under the grader): :func:`work_problems`, whether the result is the work of the
student's Triton kernel (a launch happened, received the output, and PyTorch computed nothing on the side).
"""

from __future__ import annotations

import math
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from .columns import ljust, rjust
from .i18n import _

#: Bit patterns. Poison fills fresh outputs ("never written"), guard fills the regions around outputs
#: and the read guard the regions around inputs. All are quiet NaNs with payloads that arithmetic does
#: not produce; the two guards differ because NaN arithmetic on the CPU keeps an operand's payload, so
#: an unmasked ``load + load`` past the end of the inputs would otherwise store the guard pattern back.
_POISON_BITS = {torch.float32: 0x7FC0DEAD, torch.float16: 0x7E5A, torch.bfloat16: 0x7FDA,
                torch.float64: 0x7FF8DEADDEADDEAD}
_GUARD_BITS = {torch.float32: 0x7FC0BEEF, torch.float16: 0x7E3C, torch.bfloat16: 0x7FBC,
               torch.float64: 0x7FF8BEEFBEEFBEEF}
_READ_GUARD_BITS = {torch.float32: 0x7FC0F00D, torch.float16: 0x7E0F, torch.bfloat16: 0x7FCF,
                    torch.float64: 0x7FF8F00DF00DF00D}
_INT_VIEW = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
DEFAULT_PAD = 4096  # elements of guard on each side: more than any sensible BLOCK

#: PyTorch operators a function may run outside its Triton kernels and still hand in its kernel's result:
#: allocation, views, copies and input checks. The grader's judge holds graded calls to the same set
#: (``triton_course.relaunch.ALLOWED_OPS``; tests/test_checks.py keeps the two equal).
ALLOWED_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "new_zeros",
    "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "fill_", "zero_", "arange",
    "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "expand", "permute", "transpose", "t",
    "squeeze", "unsqueeze", "flatten", "select", "slice", "narrow", "split", "split_with_sizes", "unbind",
    "alias", "detach", "view_as", "contiguous", "clone", "copy_", "_to_copy", "to", "lift_fresh",
    "lift_fresh_copy", "resize_", "set_", "is_same_size", "_local_scalar_dense", "is_nonzero", "equal",
    "stride", "size", "sym_size", "sym_stride", "sym_numel", "numel", "dim", "is_contiguous", "item",
})
#: Input checks may look at a few values (``.item()``); reading more is computing in Python.
MAX_SCALAR_READS = 16


class CheckFailed(AssertionError):
    """A self-check or hidden test found a difference; the message explains it."""


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(_INT_VIEW[t.element_size()])


def _fill_pattern(t: torch.Tensor, table: dict[torch.dtype, int], fallback: int) -> None:
    if t.dtype in table:
        _bits(t).fill_(table[t.dtype])
    elif t.dtype == torch.bool:
        t.fill_(True)
    else:
        t.fill_(fallback)


def _has_pattern(t: torch.Tensor, table: dict[torch.dtype, int], fallback: int) -> torch.Tensor:
    if t.dtype in table:
        return _bits(t) == table[t.dtype]
    if t.dtype == torch.bool:
        return torch.zeros_like(t)
    return t == fallback


def _span(shape: Sequence[int], stride: Sequence[int]) -> int:
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((s - 1) * st for s, st in zip(shape, stride))


@dataclass
class GuardedTensor:
    """A tensor view living at offset ``pad`` of a larger buffer whose rest holds the guard pattern."""

    view: torch.Tensor
    buffer: torch.Tensor
    pad: int

    def out_of_bounds_writes(self) -> tuple[int, int]:
        """How many guard elements (before, after) the tensor were overwritten."""
        span = _span(self.view.shape, self.view.stride())
        before = self.buffer[: self.pad]
        after = self.buffer[self.pad + span:]
        bad = lambda region: int((~_has_pattern(region, _GUARD_BITS, -0x5EED)).sum())  # noqa: E731
        return bad(before), bad(after)


def _guarded_alloc(shape, stride, dtype, device, pad: int, body: str, empty,
                   guard: dict[torch.dtype, int] = _GUARD_BITS) -> GuardedTensor:
    span = _span(shape, stride)
    buffer = empty(span + 2 * pad, dtype=dtype, device=device)
    _fill_pattern(buffer, guard, -0x5EED)
    view = buffer.as_strided(tuple(shape), tuple(stride), pad)
    if body == "poison":
        _fill_pattern(view, _POISON_BITS, -0x7A7A)
    elif body == "zeros":
        view.zero_()
    elif body == "ones":
        view.fill_(1)
    return GuardedTensor(view, buffer, pad)


def guarded_copy(t: torch.Tensor, pad: int = DEFAULT_PAD) -> torch.Tensor:
    """``t``'s values in a fresh tensor of the same shape and strides, with guard regions around it."""
    g = _guarded_alloc(t.shape, t.stride(), t.dtype, t.device, pad, "none", torch.empty, _READ_GUARD_BITS)
    g.view.copy_(t)
    return g.view


class GuardedAllocations:
    """Context manager: tensors allocated by torch.empty/empty_like/empty_strided/zeros/zeros_like/
    ones/ones_like and Tensor.new_empty/new_zeros inside it are guarded (``empty`` ones also poisoned).

    Anything the wrapper cannot reproduce exactly (``out=``, sparse layouts, pinned memory) falls back to
    the real function, so the student's code never behaves differently because it is being checked.
    """

    _TORCH = {"empty": "poison", "empty_like": "poison", "empty_strided": "poison",
              "zeros": "zeros", "zeros_like": "zeros", "ones": "ones", "ones_like": "ones"}
    _METHODS = {"new_empty": "poison", "new_zeros": "zeros", "new_ones": "ones"}

    def __init__(self, pad: int = DEFAULT_PAD):
        self.pad = pad
        self.allocations: list[GuardedTensor] = []
        self._saved: dict[tuple[object, str], Callable] = {}

    def find(self, t: torch.Tensor) -> GuardedTensor | None:
        """The guarded allocation whose storage ``t`` lives in, if any."""
        ptr = t.untyped_storage().data_ptr()
        return next((g for g in self.allocations if g.buffer.untyped_storage().data_ptr() == ptr), None)

    def _wrap(self, original: Callable, body: str, is_method: bool) -> Callable:
        real_empty = self._saved.get((torch, "empty"), torch.empty)

        def wrapper(*args, **kwargs):
            if kwargs.get("out") is not None or kwargs.get("pin_memory") or kwargs.get("layout") not in (
                    None, torch.strided):
                return original(*args, **kwargs)
            try:
                meta_kwargs = dict(kwargs, device="meta")
                meta_kwargs.pop("requires_grad", None)
                if is_method:
                    self_t, rest = args[0], args[1:]
                    device = kwargs.get("device") or self_t.device
                    template = original(self_t.to("meta"), *rest, **meta_kwargs)
                else:
                    device = kwargs.get("device")
                    if device is None and args and isinstance(args[0], torch.Tensor):
                        device = args[0].device  # the *_like functions
                    if device is None:
                        device = torch.get_default_device()
                    meta_args = [a.to("meta") if isinstance(a, torch.Tensor) else a for a in args]
                    template = original(*meta_args, **meta_kwargs)
                g = _guarded_alloc(template.shape, template.stride(), template.dtype, torch.device(device),
                                   self.pad, body, real_empty)
            except Exception:
                return original(*args, **kwargs)
            self.allocations.append(g)
            return g.view

        return wrapper

    def __enter__(self) -> "GuardedAllocations":
        for name in self._TORCH:
            self._saved[(torch, name)] = getattr(torch, name)
        for name in self._METHODS:
            self._saved[(torch.Tensor, name)] = getattr(torch.Tensor, name)
        for name, body in self._TORCH.items():
            setattr(torch, name, self._wrap(self._saved[(torch, name)], body, False))
        for name, body in self._METHODS.items():
            setattr(torch.Tensor, name, self._wrap(self._saved[(torch.Tensor, name)], body, True))
        return self

    def __exit__(self, *exc) -> None:
        for (owner, name), fn in self._saved.items():
            setattr(owner, name, fn)


# ---------------------------------------------------------------------------------------------------
# Comparing with a reference
# ---------------------------------------------------------------------------------------------------

@dataclass
class Comparison:
    """The outcome of comparing one output with its float64 reference."""

    total: int
    wrong: torch.Tensor            # bool mask, flattened: value differs (includes never-written)
    unwritten: torch.Tensor        # bool mask, flattened: still holds the poison pattern
    got: torch.Tensor              # float64, flattened
    expected: torch.Tensor         # float64, flattened
    shape: tuple[int, ...]
    atol: float
    rtol: float
    oob_before: int = 0
    oob_after: int = 0
    notes: list[str] = field(default_factory=list)
    output: str = ""               # which output, for a function that returns several ("" for one)

    @property
    def ok(self) -> bool:
        return not bool(self.wrong.any()) and self.oob_before == 0 and self.oob_after == 0

    def index(self, flat: int) -> str:
        return "[" + ", ".join(str(i) for i in _unravel(flat, self.shape)) + "]"


def _unravel(flat: int, shape: Sequence[int]) -> list[int]:
    out = []
    for size in reversed(shape):
        out.append(flat % size if size else 0)
        flat //= max(size, 1)
    return list(reversed(out)) or [0]


def _runs(mask: torch.Tensor, limit: int = 4) -> tuple[list[tuple[int, int]], int]:
    """Maximal runs [start, stop) of True in a flat bool mask: the first ``limit`` and how many in all."""
    idx = torch.nonzero(mask.cpu(), as_tuple=False).flatten().tolist()
    runs: list[tuple[int, int]] = []
    for i in idx:
        if runs and runs[-1][1] == i:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    return runs[:limit], len(runs)


def compare(got: torch.Tensor, expected: torch.Tensor, *, atol: float, rtol: float,
            allocation: GuardedTensor | None = None) -> Comparison:
    """Elementwise |got - expected| <= atol + rtol * |expected|; NaN matches NaN, inf matches inf."""
    unwritten = _has_pattern(got.detach(), _POISON_BITS, -0x7A7A).reshape(-1).cpu() \
        if allocation is not None else torch.zeros(got.numel(), dtype=torch.bool)
    g = got.detach().to(torch.float64).reshape(-1).cpu()
    e = expected.detach().to(torch.float64).reshape(-1).cpu()
    close = (g - e).abs() <= atol + rtol * e.abs()
    close |= (g == e)                       # equal infinities
    close |= torch.isnan(g) & torch.isnan(e)
    close &= ~unwritten
    before, after = allocation.out_of_bounds_writes() if allocation is not None else (0, 0)
    return Comparison(g.numel(), ~close, unwritten, g, e, tuple(got.shape), atol, rtol, before, after)


def _fmt(v: float) -> str:
    if math.isnan(v):
        return "nan"
    return f"{v:.6g}"


#: A failure is a near miss when every wrong element is finite, written and within NEAR_MISS_FACTOR times its
#: tolerance, and they are one element or at most NEAR_MISS_SHARE of the output: what a different order of
#: rounding can do, and what an instructor should look at before the point is lost (grader/report.py flags it).
NEAR_MISS_FACTOR = 2.0
NEAR_MISS_SHARE = 0.01


def error_over_tolerance(got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> torch.Tensor:
    """|got - expected| / (atol + rtol * |expected|) elementwise (float64): above 1 fails :func:`compare`; an
    element that is exactly right counts 0, also under a tolerance of 0."""
    diff = (got.to(torch.float64) - expected.to(torch.float64)).abs()
    return torch.where(diff == 0, 0.0, diff / (atol + rtol * expected.to(torch.float64).abs()))


def near_miss(c: Comparison) -> float | None:
    """The worst wrong element's error as a multiple of its tolerance, when the failure is a near miss (see
    :data:`NEAR_MISS_FACTOR`); None otherwise (nothing wrong, never-written or non-finite elements, stores out of
    bounds, too many elements wrong, or one far off)."""
    wrong = c.wrong & ~c.unwritten
    n = int(wrong.sum())
    if n == 0 or bool(c.unwritten.any()) or c.oob_before or c.oob_after or n > max(1.0, NEAR_MISS_SHARE * c.total):
        return None
    got, want = c.got[wrong], c.expected[wrong]
    if not bool((torch.isfinite(got) & torch.isfinite(want)).all()):
        return None
    worst = float(error_over_tolerance(got, want, c.atol, c.rtol).max())
    return worst if worst <= NEAR_MISS_FACTOR else None


def describe(c: Comparison, max_rows: int = 8) -> str:
    """The Triton-Puzzles-style explanation of a failed comparison."""
    lines = []
    n_wrong = int(c.wrong.sum())
    if n_wrong:
        lines.append(_("{wrong} of {total} output elements are wrong "
                       "(tolerance |got - expected| <= {atol} + {rtol}*|expected|).").format(
            wrong=n_wrong, total=c.total, atol=f"{c.atol:g}", rtol=f"{c.rtol:g}"))
    n_unwritten = int(c.unwritten.sum())
    if n_unwritten:
        runs, count = _runs(c.unwritten)
        shown = ", ".join(f"{c.index(a)}..{c.index(b - 1)}" if b - a > 1 else c.index(a) for a, b in runs)
        # TRANSLATORS: {indices} lists index ranges such as "[512]..[999], [1024]"; {more} is " ..." or nothing.
        lines.append(_("{count} elements were never written (they still hold the poison value): "
                       "{indices}{more}").format(count=n_unwritten, indices=shown,
                                                 more=" ..." if count > len(runs) else ""))
    if c.oob_before or c.oob_after:
        lines.append(_("Out-of-bounds stores: {before} element(s) before the start and {after} after the end of "
                       "the output were overwritten. Is every tl.store masked?").format(
            before=c.oob_before, after=c.oob_after))
    wrong_written = c.wrong & ~c.unwritten
    if bool(wrong_written.any()):
        runs, count = _runs(wrong_written)
        shown = ", ".join(f"{c.index(a)}..{c.index(b - 1)}" if b - a > 1 else c.index(a) for a, b in runs)
        # TRANSLATORS: {indices} lists index ranges such as "[0]..[999]"; {more} is " ..." or nothing.
        lines.append(_("Wrong values at {indices}{more}").format(indices=shown,
                                                                  more=" ..." if count > len(runs) else ""))
        rows = torch.nonzero(wrong_written, as_tuple=False).flatten()[:max_rows].tolist()
        # TRANSLATORS: column headers of the table of wrong elements: index, expected value, value got, |difference|.
        lines.append("  " + ljust(_("index"), 16) + rjust(_("expected"), 14) + rjust(_("got"), 14)
                     + rjust(_("|diff|"), 12))
        for i in rows:
            ev, gv = float(c.expected[i]), float(c.got[i])
            lines.append(f"  {c.index(i):<16}{_fmt(ev):>14}{_fmt(gv):>14}{_fmt(abs(gv - ev)):>12}")
        finite = torch.isfinite(c.got) & torch.isfinite(c.expected) & wrong_written
        if bool(finite.any()):
            diff = (c.got - c.expected).abs()[finite]
            lines.append(_("  largest |diff| among wrong elements: {diff}").format(diff=_fmt(float(diff.max()))))
        worst = near_miss(c)
        if worst is not None:
            lines.append(_("  Near miss: {wrong} of {total} elements, the worst {times} times its tolerance. "
                           "Rounding in another order can do that; a kernel that computes in a lower precision "
                           "usually misses by more, and in more places.").format(
                wrong=n_wrong, total=c.total, times=f"{worst:.2f}"))
        nan_new = torch.isnan(c.got) & ~torch.isnan(c.expected) & ~c.unwritten
        if bool(nan_new.any()):
            lines.append(_("  {count} element(s) are NaN where the reference is finite (an overflow, or a load past "
                           "the end of an input: the guard region reads as NaN).").format(count=int(nan_new.sum())))
    lines += c.notes
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------
# Running a student's function and explaining what went wrong
# ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Hint:
    """A known trap: when ``applies(comparison, inputs)`` is true, ``message`` is added to the report.

    A hint is asked only about an output where something is wrong (its own symptom must show there), and for a
    function that returns several outputs only about output ``output`` (an index, or the output's name;
    the first output by default)."""

    applies: Callable[[Comparison, Sequence[torch.Tensor]], bool]
    message: str
    output: int | str = 0


def _student_frame(exc: BaseException) -> str:
    """``cell line N: source`` for the innermost frame that comes from a notebook cell."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if "ipykernel" in f.filename or f.filename.startswith("<ipython")]
    if not frames:
        return ""
    f = frames[-1]
    return "\n" + _("  at your code, line {line}: {source}").format(line=f.lineno, source=(f.line or "").strip())


def explain_exception(exc: BaseException, call: str) -> str:
    """Turn whatever a student's function raised into one or two plain sentences."""
    inner = exc
    cause = getattr(exc, "__cause__", None)
    if type(exc).__name__ == "InterpreterError" and cause is not None:
        inner = cause  # the interpreter wraps the real exception
    text = str(inner).strip()
    if isinstance(inner, NotImplementedError) or "NotImplementedError" in text:
        return _("{call} is still a TODO stub: replace `raise NotImplementedError()` with your code.").format(call=call)
    if type(inner).__name__ == "CompilationError":
        if "Raise" in text or "NotImplementedError" in text:
            return _("{call}: the kernel still contains the TODO stub `raise NotImplementedError()`.").format(call=call)
        first = [ln for ln in text.splitlines() if ln.strip()][-3:]
        hint = ""
        if "Expected dtype" in text and "fp32" in text:
            hint = "\n" + _("Hint: {hint}").format(hint=_(
                "tl.exp, tl.log, tl.sqrt and the other math functions need float32 (or float64): upcast first, "
                "x.to(tl.float32), and cast the result back when you store it."))
        elif "must be a power of 2" in text or "arange's range must be a power of 2" in text:
            hint = "\n" + _("Hint: {hint}").format(hint=_(
                "tl.arange needs a power-of-two length: use triton.next_power_of_2(n) and a mask."))
        # TRANSLATORS: {compiler} is the last lines of Triton's own error message, indented; {hint} a hint or nothing.
        return _("{call}: Triton could not compile the kernel:\n  {compiler}{hint}").format(
            call=call, compiler="\n  ".join(first), hint=hint)
    if type(inner).__name__ == "OutOfResources":
        # TRANSLATORS: {error} is Triton's own message, in English.
        return _("{call}: the kernel asks for more registers or shared memory than the GPU has ({error}). "
                 "Try a smaller BLOCK or fewer stages.").format(call=call, error=text)
    # TRANSLATORS: {error_type} and {error} are the Python exception's class and message, as Python gives them;
    # {where} is nothing, or a new line naming the line of the student's code.
    return _("{call} raised {error_type}: {error}{where}").format(
        call=call, error_type=type(inner).__name__, error=text, where=_student_frame(exc))


def describe_inputs(args: Sequence[object]) -> str:
    parts = []
    for a in args:
        if isinstance(a, torch.Tensor):
            dt = str(a.dtype).replace("torch.", "")
            strides = "" if a.is_contiguous() else f" strides={tuple(a.stride())}"
            parts.append(f"{dt}{list(a.shape)}{strides}")
        else:
            parts.append(repr(a))
    return ", ".join(parts)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def parameter_names(fn: Callable[..., object], count: int) -> list[str]:
    """Names for ``count`` positional arguments of ``fn`` (the reference: trusted code): its parameters'
    names where it has them, else ``input i``."""
    import inspect

    try:
        params = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return [params[i] if i < len(params) else _("input {index}").format(index=i) for i in range(count)]


def _span_bytes(t: torch.Tensor) -> tuple[int, int]:
    start = t.data_ptr()
    return start, start + _span(t.shape, t.stride()) * t.element_size()


def shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors' elements overlap in memory (the same tensor, or overlapping views)."""
    if a.device != b.device or a.numel() == 0 or b.numel() == 0:
        return False
    (a0, a1), (b0, b1) = _span_bytes(a), _span_bytes(b)
    return a0 < b1 and b0 < a1


def changed_inputs(before: Sequence[torch.Tensor | None], after: Sequence[torch.Tensor],
                   names: Sequence[str]) -> list[str]:
    """One sentence per input tensor whose bits differ after the call (``before``: copies taken before it,
    None for arguments that are not tensors; ``after``: the tensor arguments after the call, in order)."""
    notes = []
    tensors = [(i, b) for i, b in enumerate(before) if b is not None]
    for (i, b), a in zip(tensors, after):
        a = a.to(b.device) if a.device != b.device else a
        if a.shape != b.shape:
            notes.append(_("Input {index} was modified: your kernel changed its input `{name}` (its shape is now "
                           "{shape}).").format(index=i, name=names[i], shape=tuple(a.shape)))
            continue
        same = _bits(a) == _bits(b) if a.is_floating_point() and a.dtype in _POISON_BITS else a == b
        changed = int((~same).sum())
        if changed:
            notes.append(_("Input {index} was modified: your kernel changed its input `{name}`: {changed} of "
                           "{total} elements differ from what was passed in. Kernels must leave their inputs "
                           "untouched: store into an output, not into an input. (The expected values come from "
                           "the inputs as they were before the call.)").format(
                index=i, name=names[i], changed=changed, total=b.numel()))
    return notes


# ---------------------------------------------------------------------------------------------------
# Whose work a result is: the grader's rule, applied where the student can see it
# ---------------------------------------------------------------------------------------------------

def judged_here(require_kernel: bool | None = None) -> bool:
    """Whether a call checked in this process must show that its result is its Triton kernel's work.

    ``require_kernel`` True or False decides. None (the default) means: where a student's result is judged, under
    the grader (``COURSE_REQUIRE_KERNEL=1``) and in a notebook (an IPython shell is running), so that a self-check
    gives the verdict the grader will give; the course's own tests and scripts ask for it when they want it."""
    if require_kernel is not None:
        return bool(require_kernel)
    from .integrity import require_kernel_default

    ipython = sys.modules.get("IPython")
    return require_kernel_default() or (ipython is not None and getattr(ipython, "get_ipython", lambda: None)()
                                        is not None)


def work_problems(evidence: dict, require_kernel: bool, outputs: Sequence[str] | None = None,
                  arg_names: Sequence[str] | None = None) -> list[str]:
    """Why a call's output is not the work of the student's Triton kernel ([] if nothing is wrong), from the
    evidence of the call (:func:`call_evidence` here; the grader's harness sends the judge the same fields).

    ``evidence["output"]`` is one tensor, or a tuple whose every tensor is held to the same rules
    (``outputs`` names them, ``arg_names`` the inputs, in messages)."""
    problems: list[str] = []
    if not require_kernel:
        return problems
    if int(evidence.get("launches", 0)) == 0:
        problems.append(_("returned without launching a Triton kernel. The grader awards points only for "
                          "results your Triton kernel computes (not PyTorch, NumPy or stored answers)."))
    ops = {str(k): int(v) for k, v in dict(evidence.get("ops", {})).items()}
    computed = sorted(k for k in ops if k not in ALLOWED_OPS)
    if computed:
        # TRANSLATORS: {operators} lists PyTorch operators such as "aten.add, aten.mul".
        problems.append(_("computed with PyTorch outside its kernel ({operators}). Allocating, views and "
                          ".contiguous() are fine; the result must come from your kernel.").format(
            operators=", ".join(f"aten.{k}" for k in computed[:6])))
    if ops.get("_local_scalar_dense", 0) > MAX_SCALAR_READS:
        problems.append(_("read {count} tensor values into Python (.item(), float(...)): "
                          "the result must come from your kernel, not from Python arithmetic.").format(
            count=ops["_local_scalar_dense"]))
    if int(evidence.get("unknown_copies", 0)):
        problems.append(_("copied data into a tensor that neither its inputs nor a Triton kernel produced "
                          "(a tensor made from NumPy or Python values?)."))
    out = evidence.get("output") or {}
    if out.get("kind") == "tensor":
        problems += _returned_tensor_problems(out, None, arg_names)
    elif out.get("kind") == "tuple":
        items = [i for i in out.get("items", []) if isinstance(i, dict)]
        names = list(outputs) if outputs is not None and len(outputs) == len(items) else \
            [_("output {number}").format(number=i + 1) for i in range(len(items))]
        for item, name in zip(items, names):
            problems += _returned_tensor_problems(item, name, arg_names)
        for i, item in enumerate(items):
            twins = [j for j in item.get("shares_memory_with", []) if isinstance(j, int) and i < j < len(items)]
            for j in twins:
                problems.append(_("returned outputs `{first}` and `{second}` in the same memory (the same "
                                  "tensor twice?): each output needs a tensor of its own, written by your "
                                  "kernel.").format(first=names[i], second=names[j]))
    return problems


def _returned_tensor_problems(out: dict, name: str | None, arg_names: Sequence[str] | None) -> list[str]:
    """The evidence of one returned tensor (``name`` is None for a function's only output)."""
    problems = []
    if out.get("is_input"):
        k = out.get("input_index")
        # TRANSLATORS: {input} is an input's name in backquotes, or the words "one of its inputs".
        arg = f"`{arg_names[k]}`" if isinstance(k, int) and arg_names and 0 <= k < len(arg_names) else \
            _("one of its inputs")
        problems.append(_("returned its input {input} instead of a new output tensor.").format(input=arg)
                        if name is None else
                        _("returned its input {input} as output `{output}` instead of a new tensor.").format(
                            input=arg, output=name))
    elif not out.get("written_by_launch"):
        problems.append(_("returned a tensor that no Triton kernel launch received, so the kernel cannot "
                          "have written it.") if name is None else
                        _("returned as output `{output}` a tensor that no Triton kernel launch received, so the "
                          "kernel cannot have written it.").format(output=name))
    if not out.get("exact_type", True):
        problems.append(_("returned a subclass of torch.Tensor; return a plain tensor.") if name is None else
                        _("returned as output `{output}` a subclass of torch.Tensor; return a plain "
                          "tensor.").format(output=name))
    return problems


def call_evidence(got: object, launches, log, inputs: Sequence[torch.Tensor]) -> dict:
    """The evidence :func:`work_problems` reads, for a call made in this process: its launches
    (:class:`triton_course.integrity.KernelLaunches`), the operators it ran outside them
    (:class:`triton_course.integrity.OperatorLog`), and for each returned tensor whether a launch received its
    storage, whether it is an input, and whether it is a plain tensor."""
    def one(t: torch.Tensor) -> dict:
        ptr = t.untyped_storage().data_ptr()
        index = next((i for i, a in enumerate(inputs) if ptr == a.untyped_storage().data_ptr()), None)
        return {"kind": "tensor", "written_by_launch": ptr in launches.written, "input_index": index,
                "is_input": index is not None, "exact_type": type(t) is torch.Tensor}

    evidence = {"launches": launches.count, "ops": dict(log.ops), "unknown_copies": log.unknown_copies}
    if isinstance(got, torch.Tensor):
        evidence["output"] = one(got)
    elif isinstance(got, (tuple, list)) and got and all(isinstance(g, torch.Tensor) for g in got):
        items = [one(g) for g in got]
        for i, g in enumerate(got):
            items[i]["shares_memory_with"] = [j for j, h in enumerate(got) if j != i and shares_memory(g, h)]
        evidence["output"] = {"kind": "tuple", "items": items}
    return evidence


def _per_output(value: float | Sequence[float], n: int, what: str) -> list[float]:
    if isinstance(value, (int, float)):
        return [float(value)] * n
    values = [float(v) for v in value]
    if len(values) != n:
        raise ValueError(f"{what}: {len(values)} values for {n} outputs")
    return values


def check(fn: Callable[..., object], args: Sequence[object], reference: Callable[..., object],
          *, atol: float | Sequence[float], rtol: float | Sequence[float], name: str | None = None,
          hints: Sequence[Hint] = (), guard_inputs: bool = True, inputs_unchanged: bool = True,
          require_kernel: bool | None = None, outputs: Sequence[str] | None = None,
          out_dtypes: Sequence[torch.dtype | None] | None = None,
          arg_names: Sequence[str] | None = None) -> Comparison | tuple[Comparison, ...]:
    """Run ``fn(*args)`` and compare it with ``reference`` evaluated in float64; raise
    :class:`CheckFailed` with an explanation if anything is off, else return the comparison.

    Inputs are copied into guard regions first; outputs allocated inside ``fn`` are poisoned and
    guarded. The output must have the reference's shape and the first input's dtype and device.

    **Several outputs.** When ``reference`` returns a tuple, ``fn`` must return a tuple (or list) of as
    many tensors, and each is checked as one output is: its shape, its dtype (``out_dtypes[i]``, None for
    the first input's dtype), never-written elements, stores out of bounds, values; it must not share
    memory with another output or be one of the inputs. ``outputs`` names them in messages (``("y",
    "rstd")``); ``atol`` and ``rtol`` may give one value per output. The check then returns a tuple of
    comparisons.

    ``require_kernel``: fail unless the result is the work of ``fn``'s Triton kernel, by the grader's rule
    (:func:`work_problems`: a launch happened and received every returned tensor, none of which is an input, and
    PyTorch computed nothing outside the kernel). The default (None) applies it where a student's result is
    judged: under the grader (``COURSE_REQUIRE_KERNEL=1``) and in a notebook (:func:`judged_here`), so that a
    self-check fails where the grader would give nothing; pass False for a check whose function legitimately
    launches none.

    The reference is computed from copies of the inputs taken before the call, and the inputs are
    compared bit for bit with those copies afterwards: a kernel that writes into an input is reported as
    exactly that, first, naming the input (``arg_names``, by default the reference's parameter names).
    Hints are asked only about outputs that are wrong. When ``fn`` is the grader's proxy of a student's
    function (it has ``remote_call``, see :mod:`grader.judge`), the call runs in the student's sandboxed
    kernel and only its outputs, its inputs after the call and the evidence of how they were made come
    back; everything else here runs in the judge.
    """
    __tracebackhide__ = True
    call = name or (fn.__name__ if hasattr(fn, "__name__") else _("your function"))
    label = f"{call}({describe_inputs(args)})"
    names = list(arg_names) if arg_names is not None else parameter_names(reference, len(args))
    names += [_("input {index}").format(index=i) for i in range(len(names), len(args))]
    args = [guarded_copy(a) if guard_inputs and isinstance(a, torch.Tensor) else a for a in args]
    before = [a.clone() if isinstance(a, torch.Tensor) else None for a in args]
    # The reference comes from copies taken before the call, so a kernel that writes into its inputs is
    # reported as exactly that, not as wrong values.
    wide = [b.to(torch.float64) if b is not None and b.is_floating_point() else (b if b is not None else a)
            for a, b in zip(args, before)]
    expected = reference(*wide)
    several = isinstance(expected, (tuple, list))
    expected_list = list(expected) if several else [expected]
    n_out = len(expected_list)
    out_names = list(outputs) if outputs is not None else (
        [_("output {number}").format(number=i + 1) for i in range(n_out)] if several else [""])
    if len(out_names) != n_out:
        raise ValueError(f"check: {len(out_names)} output names for a reference with {n_out} outputs")
    atols, rtols = _per_output(atol, n_out, "atol"), _per_output(rtol, n_out, "rtol")
    remote = getattr(fn, "remote_call", None)
    if remote is not None:  # the grader's judge: the call runs in the student's sandboxed kernel
        result_of_call = remote(list(args), label=label, outputs=out_names if several else None, arg_names=names)
        got, after = result_of_call.output, result_of_call.inputs_after
        allocations: list[GuardedTensor | None] = list(result_of_call.allocations)
    else:
        got, after, allocations = _call_here(fn, args, label, several, require_kernel,
                                             out_names if several else None, names)
    changed = changed_inputs(before, after, names) if inputs_unchanged else []
    got_list = _returned(got, label, several, out_names)
    if len(allocations) != len(got_list):
        allocations = [None] * len(got_list)
    problems = _output_problems(got_list, expected_list, out_names, args, names, label, several=several,
                                out_dtypes=out_dtypes, here=remote is None)
    if problems:
        raise CheckFailed("\n".join(changed + [_problems(label, problems)]))
    results = []
    for g, e, allocation, a_tol, r_tol, what in zip(got_list, expected_list, allocations, atols, rtols, out_names):
        if allocation is not None and allocation.view is not g:
            allocation = allocation if allocation.view.data_ptr() == g.data_ptr() else None
        c = compare(g, e, atol=a_tol, rtol=r_tol, allocation=allocation)
        c.output = what
        results.append(c)
    _report(results, changed, label, several, hints, _as_passed(args, before) if changed else args)
    return tuple(results) if several else results[0]


def _call_here(fn: Callable[..., object], args: Sequence[object], label: str, several: bool,
               require_kernel: bool | None, outputs: Sequence[str] | None = None,
               arg_names: Sequence[str] | None = None) -> tuple[object, list[torch.Tensor], list[GuardedTensor | None]]:
    """(output, the tensor arguments after the call, the guarded allocation of each output) of ``fn(*args)`` in
    this process, its launches noted (:func:`triton_course.integrity.note_launches`); :class:`CheckFailed` if it
    raised, or, where the call is judged (:func:`judged_here`), if its result is not its kernel's work
    (:func:`work_problems`: the grader's rule)."""
    __tracebackhide__ = True
    from contextlib import nullcontext

    from .integrity import KernelLaunches, OperatorLog, note_launches

    judged = judged_here(require_kernel)
    inputs = [a for a in args if isinstance(a, torch.Tensor)]
    launches = KernelLaunches()
    log = OperatorLog(inputs, launches) if judged else None
    with GuardedAllocations() as allocs, launches, (log if log is not None else nullcontext()):
        try:
            got = fn(*args)
        except Exception as exc:  # the student's code failed: explain, don't dump Triton internals
            raise CheckFailed(explain_exception(exc, label)) from None
    note_launches(fn, launches.kernels)   # for check_masked_loads(..., launched_by=fn)
    if log is not None and (isinstance(got, (torch.Tensor, tuple, list))):
        problems = work_problems(call_evidence(got, launches, log, inputs), True, outputs, arg_names)
        if problems:
            # TRANSLATORS: {call} is a call such as "add(float32[1000], float32[1000])"; {problems} are sentences
            # whose subject is that call ("returned without launching a Triton kernel. ...").
            raise CheckFailed(_("{call} {problems}").format(call=label, problems=join_sentences(problems)))
    items = list(got) if several and isinstance(got, (tuple, list)) else [got]
    return got, inputs, [allocs.find(g) if isinstance(g, torch.Tensor) else None for g in items]


def _returned(got: object, label: str, several: bool, out_names: Sequence[str]) -> list[object]:
    """The outputs of a call as a list: :class:`CheckFailed` if a function of several outputs did not return a
    tuple (or list) of as many."""
    __tracebackhide__ = True
    if not several:
        return [got]
    if not isinstance(got, (tuple, list)):
        raise CheckFailed(_("{call} returned {type}, expected a tuple of {count} tensors ({names})").format(
            call=label, type=type(got).__name__, count=len(out_names), names=", ".join(out_names)))
    if len(got) != len(out_names):
        raise CheckFailed(_("{call} returned {returned} outputs, expected a tuple of {count} tensors "
                            "({names})").format(call=label, returned=len(got), count=len(out_names),
                                                names=", ".join(out_names)))
    return list(got)


def _problems(label: str, problems: Sequence[str]) -> str:
    """One line: the call, then what is wrong with its outputs (:func:`_output_problems`)."""
    # TRANSLATORS: separates the problems of one call's outputs ("returned shape (10,), expected (1000,); ...").
    separator = _("; ")
    # TRANSLATORS: {call} is a call such as "add(float32[1000])"; {problems} are clauses whose subject is that call
    # ("returned shape (10,), expected (1000,)").
    return _("{call} {problems}").format(call=label, problems=separator.join(problems))


def _output_problems(got_list: list[object], expected_list: list[torch.Tensor], out_names: Sequence[str],
                     args: Sequence[object], names: Sequence[str], label: str, *, several: bool,
                     out_dtypes: Sequence[torch.dtype | None] | None, here: bool) -> list[str]:
    """What is wrong with the outputs before their values are compared: type, shape, dtype, and (for a call
    made ``here``, in this process) device and memory shared with an input or another output. Raises
    :class:`CheckFailed` at once for a function of one output that returned no tensor."""
    __tracebackhide__ = True
    first = next((a for a in args if isinstance(a, torch.Tensor)), None)
    problems = []
    for i, (g, e, what) in enumerate(zip(got_list, expected_list, out_names)):
        if not isinstance(g, torch.Tensor):
            if several:
                problems.append(_("output `{output}` is a {type}, expected a tensor").format(
                    output=what, type=type(g).__name__))
                continue
            raise CheckFailed(_("{call} returned {type}, expected a tensor (did you forget `return out`?)").format(
                call=label, type=type(g).__name__))
        if tuple(g.shape) != tuple(e.shape):
            problems.append((_("output `{output}` has shape {got}, expected {expected}") if several else
                             _("returned shape {got}, expected {expected}")).format(
                output=what, got=tuple(g.shape), expected=tuple(e.shape)))
        want_dtype = (out_dtypes[i] if out_dtypes is not None and i < len(out_dtypes) else None) or \
            (first.dtype if first is not None else None)
        if want_dtype is not None and g.dtype != want_dtype:
            # TRANSLATORS: {why} is " (the input's dtype)" or nothing.
            why = _(" (the input's dtype)") if want_dtype == (first.dtype if first is not None else None) else ""
            problems.append(
                (_("output `{output}` has dtype {got}, expected {expected}{why}") if several else
                 _("returned dtype {got}, expected {expected}{why}")).format(
                    output=what, got=_dtype_name(g.dtype), expected=_dtype_name(want_dtype), why=why))
        if here and first is not None and g.device != first.device:
            problems.append((_("output `{output}` has a tensor on {got}, expected {expected}") if several else
                             _("returned a tensor on {got}, expected {expected}")).format(
                output=what, got=g.device, expected=first.device))
        if here and several:
            for j, a in enumerate(args):
                if isinstance(a, torch.Tensor) and shares_memory(g, a):
                    problems.append(_("output `{output}` is your input `{input}` (or a view of it), not a new "
                                      "tensor").format(output=what, input=names[j]))
            for j in range(i):
                other = got_list[j]
                if isinstance(other, torch.Tensor) and shares_memory(g, other):
                    problems.append(_("outputs `{first}` and `{second}` share memory (the same tensor returned "
                                      "twice?): each output needs its own tensor").format(first=out_names[j],
                                                                                          second=what))
    return problems


def _report(results: list[Comparison], changed: list[str], label: str, several: bool, hints: Sequence[Hint],
            hint_args: Sequence[object]) -> None:
    """Raise :class:`CheckFailed` with every changed input and every wrong output (and the hints that fire on
    ``hint_args``), if there is any."""
    __tracebackhide__ = True
    if changed:
        results[0].notes.extend(changed)
    if changed or not all(c.ok for c in results):
        report = changed[:]
        wrong = [c for c in results if not c.ok]
        if changed and not wrong:
            report.append(_("Apart from that, every output is right.") if several else
                          _("Apart from that, the output is right."))
        elif changed:
            report.append(_("Fix that first: other programs may have read the values your kernel wrote there."))
        for c in wrong:
            text = describe(c)
            # TRANSLATORS: {report} is the explanation of what is wrong with that output, several lines.
            report.append(_("Output `{output}`: {report}").format(output=c.output, report=text) if several else text)
        # A hint's message is translated here, where the report is made: the hints of utils/ and of the notebooks
        # are extracted into the catalogue (grader.message_catalogues) and need no marking where they are defined.
        extra = [_(h.message) if h.message else h.message for h in hints if _hint_fires(h, results, hint_args)]
        raise CheckFailed(_("{call}:").format(call=label) + "\n" + "\n".join(report)
                          + "".join("\n" + _("Hint: {hint}").format(hint=m) for m in extra))


def join_sentences(sentences: Sequence[str]) -> str:
    """Sentences one after another: a space between them, none after a full-width full stop (Chinese)."""
    out = ""
    for s in sentences:
        out += s if not out or out.endswith(("\u3002", "\uff01", "\uff1f", "\uff09")) else " " + s
    return out


def _as_passed(args: Sequence[object], before: Sequence[torch.Tensor | None]) -> list[object]:
    """The arguments as they were passed (values from the copies taken before the call), with their strides:
    what hints look at when the call changed an input."""
    out = []
    for a, b in zip(args, before):
        if isinstance(a, torch.Tensor) and b is not None:
            t = torch.empty_strided(a.size(), a.stride(), dtype=a.dtype, device=a.device)
            t.copy_(b)
            out.append(t)
        else:
            out.append(a)
    return out


def _hint_fires(hint: Hint, results: Sequence[Comparison], args: Sequence[object]) -> bool:
    """Whether ``hint`` applies: only to its own output, and only when something is wrong there (a wrong
    value, or an input the call changed, noted on the first output)."""
    if isinstance(hint.output, str):
        c = next((r for r in results if r.output == hint.output), None)
    else:
        c = results[hint.output] if -len(results) <= hint.output < len(results) else None
    return c is not None and (not c.ok or bool(c.notes)) and _safe(hint.applies, c, args)


def _safe(pred: Callable, *a) -> bool:
    try:
        return bool(pred(*a))
    except Exception:
        return False


def check_all(fn: Callable[..., object], cases: Sequence[Sequence[object]],
              reference: Callable[..., object], *,
              tolerances: Callable[[torch.dtype], tuple[float, float] | Sequence[tuple[float, float]]],
              hints: Sequence[Hint] = (), name: str | None = None, quiet: bool = False,
              require_kernel: bool | None = None, outputs: Sequence[str] | None = None,
              out_dtypes: Sequence[torch.dtype | None] | None = None,
              arg_names: Sequence[str] | None = None) -> None:
    """:func:`check` each case (tolerances chosen by the first input's dtype); print one line each.

    ``tolerances(dtype)`` gives ``(atol, rtol)``, or, for a function with several outputs, one such pair
    per output."""
    __tracebackhide__ = True
    for args in cases:
        first = next(a for a in args if isinstance(a, torch.Tensor))
        tol = tolerances(first.dtype)
        if isinstance(tol[0], (tuple, list)):
            atol, rtol = [t[0] for t in tol], [t[1] for t in tol]
        else:
            atol, rtol = tol
        check(fn, args, reference, atol=atol, rtol=rtol, hints=hints, name=name, require_kernel=require_kernel,
              outputs=outputs, out_dtypes=out_dtypes, arg_names=arg_names)
        if not quiet:
            print(f"ok  {name or fn.__name__}({describe_inputs(args)})")


def tolerance_for(dtype: torch.dtype) -> tuple[float, float]:
    """(atol, rtol) for elementwise kernels that compute in fp32 and round to ``dtype`` once."""
    return {torch.float32: (1e-6, 1e-5), torch.float16: (1e-3, 1e-3),
            torch.bfloat16: (1e-2, 1e-2), torch.float64: (1e-12, 1e-12)}.get(dtype, (0.0, 0.0))
