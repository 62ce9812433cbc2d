"""triton_course.static: a memory read's mask counts only if it can be False for some element.

Each class of dodge (no mask, None, a constant, a mask that is always true, a read through an alias, a helper or
an unpacked call, a second kernel the function launches) is flagged wherever it is written, and the masks honest
kernels write (a bound, a branch, a loop over K, a 2-D tile) are not. The last tests follow the kernels a call
launched: notebook-side through triton_course.checks.check, judge-side through the kernels the judge re-ran.
"""

from __future__ import annotations

import textwrap

import pytest
import torch
import triton
import triton.language as tl

import triton_course  # noqa: F401  -- turns the interpreter on before the kernels below are defined
from triton_course.checks import CheckFailed, check
from triton_course.integrity import KernelLaunches
from triton_course.static import (MAX_STEPS, KernelSource, check_masked_loads, launched_kernels, masked_load_problems,
                                  note_launches)

#: The head of every kernel below: idx is the block's offsets, inside the honest mask.
HEAD = """\
def k(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    first = pid * BLOCK
    idx = first + tl.arange(0, BLOCK)
    inside = idx < n_elements
"""


def _problems(body: str, *helpers: tuple[str, str]) -> list[str]:
    """The reasons given for the reads of a kernel made of HEAD and ``body`` (helpers: (name, source))."""
    source = HEAD + textwrap.indent(textwrap.dedent(body), "    ")
    return [r.why for r in masked_load_problems([("k", source), *helpers])]


NO_MASK = [
    "x = tl.load(x_ptr + idx)",
    "x = tl.load(x_ptr + idx, other=0.0)",
    "x = tl.load(x_ptr + idx, cache_modifier='.cg')",
]
NONE_MASK = [
    "x = tl.load(x_ptr + idx, mask=None)",
    "x = tl.load(x_ptr + idx, None)",
    "m = None\nx = tl.load(x_ptr + idx, mask=m)",
]
CONSTANT_MASK = [
    "x = tl.load(x_ptr + idx, mask=True)",
    "x = tl.load(x_ptr + idx, True)",
    "x = tl.load(x_ptr + idx, mask=1)",
    "x = tl.load(x_ptr + idx, mask=1 == 1)",
    "x = tl.load(x_ptr + idx, mask=not False)",
    "x = tl.load(x_ptr + idx, mask=2 ** 3 > 7)",
    "m = True\nx = tl.load(x_ptr + idx, mask=m)",
    "if n_elements > 0:\n    m = True\nelse:\n    m = 1\nx = tl.load(x_ptr + idx, mask=m)",
    "if False:\n    m = inside\nelse:\n    m = True\nx = tl.load(x_ptr + idx, mask=m)",
    "a, m = idx, True\nx = tl.load(x_ptr + idx, mask=m)",
    "x = tl.load(x_ptr + idx, mask=ALWAYS)",              # a global: a compile-time constant
    "x = tl.load(x_ptr + idx, mask=BLOCK > 0)",            # a constexpr parameter
    "x = tl.load(x_ptr + idx, mask=BLOCK)",
    "x = tl.load(x_ptr + idx, mask=tl.full((BLOCK,), 1, tl.int1))",
    "keep = tl.full([BLOCK], True, tl.int1)\nx = tl.load(x_ptr + idx, mask=keep & True)",
    "x = tl.load(x_ptr + idx, mask=tl.zeros((BLOCK,), tl.int32) == 0)",
    "x = tl.load(x_ptr + idx, mask=tl.where(inside, True, 1))",
    "x = tl.load(x_ptr + idx, mask=tl.cdiv(BLOCK, 2) >= 0)",
]
ALWAYS_TRUE = [
    "x = tl.load(x_ptr + idx, mask=idx >= 0)",
    "x = tl.load(x_ptr + idx, mask=0 <= idx)",
    "x = tl.load(x_ptr + idx, mask=idx > -1)",
    "x = tl.load(x_ptr + idx, mask=idx >= first)",
    "x = tl.load(x_ptr + idx, mask=idx - first >= 0)",
    "x = tl.load(x_ptr + idx, mask=idx == idx)",
    "x = tl.load(x_ptr + idx, mask=idx < idx + 1)",
    "x = tl.load(x_ptr + idx, mask=idx < first + BLOCK)",
    "x = tl.load(x_ptr + idx, mask=idx < (pid + 1) * BLOCK)",
    "x = tl.load(x_ptr + idx, mask=tl.arange(0, BLOCK) < BLOCK)",
    "x = tl.load(x_ptr + idx, mask=inside | True)",
    "x = tl.load(x_ptr + idx, mask=True or inside)",
    "x = tl.load(x_ptr + idx, mask=inside | ~inside)",
    "x = tl.load(x_ptr + idx, mask=inside or not inside)",
    "x = tl.load(x_ptr + idx, mask=(idx < n_elements) | (idx >= n_elements))",
    "x = tl.load(x_ptr + idx, mask=(idx >= 0) & (pid >= 0))",
    "x = tl.load(x_ptr + idx, mask=tl.program_id(0) >= 0)",
    "x = tl.load(x_ptr + idx, mask=idx[:, None] >= 0)",
    "wide = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)\nx = tl.load(x_ptr + wide, mask=wide >= 0)",
    "m = idx >= 0\nm = m | inside\nx = tl.load(x_ptr + idx, mask=m)",
    "x = tl.load(x_ptr + idx, mask=tl.where(inside, idx >= 0, True))",
    "x = tl.load(x_ptr + idx, mask=(idx % BLOCK) < BLOCK)",
]
OTHER_READS = [   # the load reached another way, or another instruction that reads memory
    "ld = tl.load\nx = ld(x_ptr + idx)",
    "x = getattr(tl, 'load')(x_ptr + idx)",
    "x = load(x_ptr + idx)",                               # from triton.language import load
    "x = triton.language.load(x_ptr + idx)",
    "x = tl.load(*(x_ptr + idx, inside))",
    "x = tl.load(x_ptr + idx, **{'mask': inside})",
    "x = tl.atomic_add(x_ptr + idx, 0.0)",
    "x = tl.atomic_cas(x_ptr + idx, 0.0, 0.0)",
    "x = tl.load(x_ptr + idx, boundary_check=())",
    "m = True\nfor i in range(4):\n    x = tl.load(x_ptr + idx + i * n_elements, mask=m)\n    m = inside",
    "y = tl.load(x_ptr + tl.load(x_ptr + idx, mask=inside).to(tl.int32))",    # a read inside a read's pointer
]


@pytest.mark.parametrize("body, words", [(b, "has no mask") for b in NO_MASK]
                         + [(b, "mask=None is no mask") for b in NONE_MASK]
                         + [(b, "is a constant") for b in CONSTANT_MASK]
                         + [(b, "is always true") for b in ALWAYS_TRUE])
def test_a_mask_that_cannot_be_false_is_no_mask(body, words):
    found = _problems(body)
    assert len(found) == 1 and words in found[0], found


@pytest.mark.parametrize("body", OTHER_READS)
def test_reads_by_another_name_or_instruction_are_read_too(body):
    assert len(_problems(body)) == 1, _problems(body)


HONEST = [
    "x = tl.load(x_ptr + idx, mask=inside)",
    "x = tl.load(x_ptr + idx, inside, other=0.0)",
    "x = tl.load(x_ptr + idx, mask=inside & (idx >= 0))",
    "x = tl.load(x_ptr + idx, mask=idx < BLOCK)",                       # a constexpr bound can cut the block
    "x = tl.load(x_ptr + idx, mask=idx < 2**31)",                       # not proven: it counts
    "m = inside\nm = m & (idx % 2 == 0)\nx = tl.load(x_ptr + idx, mask=m)",
    "if n_elements > 4096:\n    m = True\nelse:\n    m = inside\nx = tl.load(x_ptr + idx, mask=m)",
    "n_full = n_elements // BLOCK * BLOCK\nfull = idx < n_full\nx = tl.load(x_ptr + idx, mask=full)\n"
    "if first >= n_full:\n    y = tl.load(x_ptr + idx, mask=inside)",
    "acc = tl.zeros((BLOCK,), tl.float32)\nfor k in range(0, n_elements, BLOCK):\n"
    "    offs = k + tl.arange(0, BLOCK)\n    acc += tl.load(x_ptr + offs, mask=offs < n_elements, other=0.0)",
    "offs = tl.arange(0, BLOCK)\nfor k in range(0, tl.cdiv(n_elements, BLOCK)):\n"
    "    acc = tl.load(x_ptr + offs[None, :], mask=offs[None, :] < n_elements - k * BLOCK)",
    "rows = pid * 16 + tl.arange(0, 16)\ncols = tl.arange(0, BLOCK)\n"
    "x = tl.load(x_ptr + rows[:, None] * n_elements + cols[None, :], "
    "mask=(rows[:, None] < n_elements) & (cols[None, :] < n_elements))",
    "offs = idx\nwhile tl.min(offs) < n_elements:\n    x = tl.load(x_ptr + offs, mask=offs < n_elements)\n"
    "    offs += BLOCK",
    "x = tl.load(x_ptr + idx, mask=tl.where(n_elements > 0, inside, idx < 1))",
    "desc = tl.make_tensor_descriptor(x_ptr, [n_elements], [1], [BLOCK])\nx = desc.load([first])",
    "x = tl.load(x_ptr, boundary_check=(0,))",
    "x = tl.atomic_add(x_ptr + idx, 1.0, mask=inside)",
]


@pytest.mark.parametrize("body", HONEST)
def test_masks_that_can_be_false_count(body):
    assert _problems(body) == []


def test_a_helper_is_read_with_the_values_it_is_called_with():
    """A helper whose load takes its mask as an argument: called with True it is unmasked, with a bound it is not.
    The message names the helper's line and where it was called from."""
    helper = ("masked_load", "def masked_load(p, m, other=0.0):\n    return tl.load(p, mask=m, other=other)\n")
    assert _problems("x = masked_load(x_ptr + idx, inside)", helper) == []
    source = HEAD + "    x = masked_load(x_ptr + idx, True)\n"
    (found,) = masked_load_problems([("k", source), helper])
    assert found.kernel == "masked_load" and found.line == 2 and "called from line 6 of k" in found.via
    assert "is a constant" in found.why
    mask_maker = ("everything", "def everything(i):\n    return i >= 0\n")
    assert "always true" in _problems("x = tl.load(x_ptr + idx, mask=everything(idx))", mask_maker)[0]


def test_every_kernel_given_is_read_and_each_read_reported_once():
    masked = HEAD + "    tl.store(out_ptr + idx, tl.load(x_ptr + idx, mask=inside), mask=inside)\n"
    tail = "def tail(x_ptr, out_ptr, n):\n    i = tl.arange(0, 16)\n    tl.store(out_ptr + i, tl.load(x_ptr + i))\n"
    found = masked_load_problems([("k", masked), ("tail", tail), ("k", "@triton.jit\n" + masked)])
    assert [(r.kernel, r.line, r.text) for r in found] == [("tail", 3, "tl.load(x_ptr + i)")]


def test_a_source_built_to_explode_is_refused_not_followed():
    nested = "x = tl.load(x_ptr + idx, mask=inside)\n"
    for depth in range(24):
        nested = f"for i{depth} in range(2):\n" + textwrap.indent(nested, "    ")
    with pytest.raises(CheckFailed, match="too long or too deeply nested"):
        _problems(nested)
    assert MAX_STEPS < 10**6


def test_constant_folding_never_builds_huge_numbers():
    assert "is a constant" in _problems("x = tl.load(x_ptr + idx, mask=9 ** 9 ** 9 ** 9 > 0)")[0]


# --- the kernels a call launched ---------------------------------------------------------------------------

@triton.jit
def _masked_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + idx, _times_two(tl.load(x_ptr + idx, mask=idx < n)), mask=idx < n)


@triton.jit
def _times_two(v):
    return v * 2


@triton.jit
def _unmasked_tail_kernel(x_ptr, out_ptr, n, start, BLOCK: tl.constexpr):
    idx = start + tl.arange(0, BLOCK)
    tl.store(out_ptr + idx, _times_two(tl.load(x_ptr + idx, mask=None)), mask=idx < n)


@triton.jit
def _load_with(p, m):
    return tl.load(p, mask=m)


_aliased_load = _load_with      # called by another name: still read where it is called


@triton.jit
def _aliased_helper_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + idx, _aliased_load(x_ptr + idx, True), mask=idx < n)


def _honest(x):
    out = torch.empty_like(x)
    _masked_kernel[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128)
    return out


def _with_a_tail_kernel(x):
    """The full blocks by the masked kernel, the last by a kernel whose load has mask=None."""
    out = torch.empty_like(x)
    n, full = x.numel(), x.numel() // 128
    if full:
        _masked_kernel[(full,)](x, out, n, BLOCK=128)
    if n % 128:
        _unmasked_tail_kernel[(1,)](x, out, n, full * 128, BLOCK=128)
    return out


def _check(fn):
    x = torch.randn(1000)
    check(fn, [x], lambda x: 2 * x, atol=1e-6, rtol=1e-6)


def test_kernel_launches_keeps_each_launched_kernel_once():
    with KernelLaunches() as launches:
        _with_a_tail_kernel(torch.randn(1000))
        _with_a_tail_kernel(torch.randn(1000))
    assert launches.count == 4
    assert [k is _masked_kernel for k in launches.kernels] == [True, False]
    assert launches.kernels[1] is _unmasked_tail_kernel


def test_the_checked_calls_of_a_function_name_every_kernel_it_launched():
    """check() notes the kernels each call launched; check_masked_loads(kernel, launched_by=fn) reads them, and the
    helpers they call, beside the kernel it names. The values are right: only the source tells."""
    _check(_with_a_tail_kernel)
    assert launched_kernels(_with_a_tail_kernel) == [_masked_kernel, _unmasked_tail_kernel]
    check_masked_loads(_masked_kernel)          # the kernel the chapter names is masked
    with pytest.raises(CheckFailed) as info:
        check_masked_loads(_masked_kernel, launched_by=_with_a_tail_kernel)
    message = str(info.value)
    assert "_unmasked_tail_kernel" in message and "tl.load(x_ptr + idx, mask=None)" in message, message
    assert "mask=None is no mask" in message and "_masked_kernel" in message.splitlines()[0]


def test_a_helper_called_by_another_name_is_read_where_it_is_called():
    with pytest.raises(CheckFailed) as info:
        check_masked_loads(_aliased_helper_kernel)
    assert "line 2 of _load_with, called from line 3 of _aliased_helper_kernel: tl.load(p, mask=m)" in str(info.value)
    assert "is a constant" in str(info.value)


def test_an_honest_function_passes_and_says_what_it_read(capsys):
    _check(_honest)
    check_masked_loads(_masked_kernel, launched_by=_honest)
    assert capsys.readouterr().out.strip().endswith("every load is masked in _masked_kernel, _times_two")


def test_the_judge_side_reads_the_kernels_its_re_runs_showed():
    """What the judge notes for its proxy: KernelSource objects of the launch record it re-ran, never run here."""

    class Proxy:
        __name__ = "add"

    proxy = Proxy()
    with pytest.raises(CheckFailed, match="has not launched a Triton kernel"):
        check_masked_loads(launched_by=proxy)
    tail = KernelSource("tail", "def tail(x_ptr, n):\n    return tl.load(x_ptr + tl.arange(0, 16), mask=1 > 0)\n")
    note_launches(proxy, [KernelSource("add_kernel", HEAD + "    tl.load(x_ptr + idx, mask=inside)\n"), tail])
    note_launches(proxy, [tail])
    assert len(launched_kernels(proxy)) == 2
    with pytest.raises(CheckFailed, match=r"line 2 of tail: tl.load\(x_ptr \+ tl.arange\(0, 16\), mask=1 > 0\)"):
        check_masked_loads(launched_by=proxy)


def test_a_kernel_whose_source_is_not_a_function_is_named():
    with pytest.raises(CheckFailed, match="the source of broken could not be read"):
        check_masked_loads(KernelSource("broken", "def broken(:\n"))
