"""Helpers for the attention chapter (09): offset checks, a float64 reference, hints and a TFLOP/s sweep.

* :func:`check_split`, :func:`check_base_offset`, :func:`check_row_offset` -- grade the offset exercises
  against the truth read from real tensors (element offsets of ``t[z, h]`` in their storage), and print a
  table of every ``(z, h)`` a formula gets wrong;
* :func:`attention_reference` -- softmax(q k^T * scale) v in float64, with an optional causal mask;
* :func:`attention_tolerance` and :data:`ATTENTION_HINTS` -- for ``triton_course.checks.check_all``;
* :func:`attention_roofs`, :func:`tflops_sweep`, :func:`plot_tflops` -- TFLOP/s against sequence length next to
  PyTorch, under the roof of the units ``tl.dot`` runs on here (tensor cores, or the FP32 units of a T4) and the
  special-function ceiling of the exponentials; :func:`benchmark_lengths` -- the lengths this device can time;
* :func:`copy_reference`, :data:`COPY_HINTS` -- for the copy kernel that puts the offsets to work;
* :func:`causal_block_sweep`, :func:`tiles_visited`, :func:`recorded_causal_ratios` -- the experiment: key
  blocks visited with and without causal skipping, per block shape, beside the recorded GPU times; a shape whose tiles
  do not fit the GPU's shared memory is skipped with the reason (:func:`experiment_skip_reason`);
* :func:`launch_config` -- the launch (block sizes, warps, stages) of the exercise's kernel on this GPU, given to the
  student; :func:`shared_memory_limit`, :func:`fit_shared_memory` hold each launch to the GPU's shared memory
  (tests/test_gpu_limits.py compiles every launch for a T4, A10, L4 and H100);
* :func:`triton_course.attention_fast.fast_attention` -- the course's fastest attention on Hopper (TMA, warp specialisation, Gluon), beyond the
  exercise: :mod:`triton_course.attention_fast`, which the chapter's measurements time beside the model answer;
* :func:`check_fused`, :func:`fused_points` -- fusion: the memory a call holds besides q, k, v and o, read from the
  grader's re-run of its launch record, or measured the same way in the student's notebook (:func:`measured_scratch`);
* :func:`sdpa`, :func:`attention_by_heads`, :func:`speed_not_graded_reason` -- the yardstick, the float64 reference
  and the devices of the speed check (``triton_course.grading.throughput_points``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .bench import Sweep, flops_sweep
from .checks import CheckFailed, Comparison, Hint, explain_exception
from .columns import rjust
from .i18n import N_, _
from .plots import figure_text, plot_sweep


# ---------------------------------------------------------------------------------------------------
# The offset exercises
# ---------------------------------------------------------------------------------------------------

def true_base_offset(t: torch.Tensor, z: int, h: int) -> int:
    """Elements between ``t[0, 0, 0, 0]`` and ``t[z, h, 0, 0]`` in memory, read from the tensor itself."""
    return (t[z, h].data_ptr() - t.data_ptr()) // t.element_size()


def _call(fn: Callable, args: tuple, what: str):
    __tracebackhide__ = True
    try:
        return fn(*args)
    except NotImplementedError:
        raise
    except Exception as exc:
        raise CheckFailed(explain_exception(exc, f"{what}{args}")) from None


def _report(name: str, rows: list[tuple], header: tuple[str, ...], total: int, what: str) -> None:
    """Raise CheckFailed listing the wrong rows (at most 8), or print one ok line."""
    __tracebackhide__ = True
    if not rows:
        print(f"ok  {name}: {what}")
        return
    # TRANSLATORS: {what} describes the cases, such as "Z=2, H=3".
    lines = [_("{function}: {wrong} of {total} cases wrong ({what})").format(function=name, wrong=len(rows),
                                                                          total=total, what=what),
             "  " + "".join(rjust(h, 12) for h in header)]
    lines += ["  " + "".join(f"{str(v):>12}" for v in r) for r in rows[:8]]
    if len(rows) > 8:
        lines.append(_("  ... and {count} more").format(count=len(rows) - 8))
    raise CheckFailed("\n".join(lines))


def check_split(fn: Callable[[int, int], tuple[int, int]], Z: int, H: int) -> None:
    """``fn(off_hz, H)`` must return ``(off_z, off_h)`` for every program of a grid of Z*H."""
    __tracebackhide__ = True
    wrong = []
    for off_hz in range(Z * H):
        want = (off_hz // H, off_hz % H)
        got = _call(fn, (off_hz, H), getattr(fn, "__name__", "split"))
        if tuple(got) != want:
            wrong.append((off_hz, want, tuple(got)))
    _report(getattr(fn, "__name__", "split"), wrong, ("off_hz", _("expected"), _("got")), Z * H, f"Z={Z}, H={H}")


def check_base_offset(fn: Callable[[int, int, int, int], int], t: torch.Tensor) -> None:
    """``fn(off_z, off_h, stride_z, stride_h)`` must be the element offset of ``t[off_z, off_h]``."""
    __tracebackhide__ = True
    Z, H = t.shape[:2]
    wrong = []
    for z in range(Z):
        for h in range(H):
            want = true_base_offset(t, z, h)
            got = _call(fn, (z, h, t.stride(0), t.stride(1)), getattr(fn, "__name__", "base"))
            if got != want:
                wrong.append((z, h, want, got))
    layout = _("contiguous") if t.is_contiguous() else _("strides {strides}").format(strides=tuple(t.stride()))
    _report(getattr(fn, "__name__", "base"), wrong, ("off_z", "off_h", _("expected"), _("got")), Z * H,
            _("shape {shape}, {layout}").format(shape=list(t.shape), layout=layout))


def check_row_offset(fn: Callable[[int, int, int, int], int], Z: int, H: int, N: int, D: int = 4) -> None:
    """``fn(off_z, off_h, H, N)`` must be the row of ``q[off_z, off_h, 0]`` in ``q.view(Z*H*N, D)``."""
    __tracebackhide__ = True
    q = torch.empty(Z, H, N, D)
    wrong = []
    for z in range(Z):
        for h in range(H):
            want = true_base_offset(q, z, h) // D
            got = _call(fn, (z, h, H, N), getattr(fn, "__name__", "row"))
            if got != want:
                wrong.append((z, h, want, got))
    _report(getattr(fn, "__name__", "row"), wrong, ("off_z", "off_h", _("expected"), _("got")), Z * H,
            f"Z={Z}, H={H}, N={N}")


# ---------------------------------------------------------------------------------------------------
# Attention: reference, tolerances, hints
# ---------------------------------------------------------------------------------------------------

def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                        sm_scale: float | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q k^T * sm_scale) v, row i seeing keys 0..i only when ``causal``; in q's dtype.

    ``mask`` (optional, [queries, keys], True = keep) replaces the causal mask: the hints use it to compute
    what a given mistake would return."""
    N, D = q.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    s = (q @ k.transpose(-1, -2)) * scale
    if mask is not None:
        s = s.masked_fill(~mask.to(q.device), float("-inf"))
    elif causal:
        above = torch.ones(N, N, dtype=torch.bool, device=q.device).triu(1)
        s = s.masked_fill(above, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def attention_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(atol, rtol) for attention. fp16 and bf16 inputs reach the tensor cores exactly, and only P is rounded
    (to fp16 or bf16). fp32 inputs do not: ``tl.dot`` multiplies them as TF32 on Ampere and later GPUs, keeping
    10 of their 23 mantissa bits, so every score ``sm_scale * q.k`` carries an error in proportion to its own
    size, and the softmax passes that error on. The larger the scores, the larger the error: the hidden test
    with ``sm_scale = 1.0`` on D = 32 (scores up to about 15) is the worst case.

    That case's worst error was 0.43 of a 1e-2 tolerance in 3 draws on an H200, yet an honest copy failed it
    once in a class of 40 (tests/gpu/records/gpu_class_throughput_09_ray_1gpu.json): over many draws its tail crosses
    1e-2. fp32 therefore gets 2e-2, checked over fresh draws of every hidden test on an H200
    (lab/records/hidden_test_margins.json: this case's worst of 1000 draws is 0.58 of 2e-2, its 99th percentile
    0.36) and over thousands of draws of a TF32 emulation (tests/test_09_attention.py). Every mistake the
    chapter's example submissions make is off by far more (tests/test_09_attention.py).
    """
    return {torch.float32: (2e-2, 2e-2), torch.float16: (1e-2, 1e-2),
            torch.bfloat16: (3e-2, 3e-2)}.get(dtype, (1e-2, 1e-2))


#: The largest BLOCK_N of the chapter's GPU configurations: longer sequences span several key blocks there.
LARGEST_BLOCK_N = 128
#: The smallest BLOCK_N any configuration uses (the interpreter's): keys 0..15 lie in the first key block at
#: every block size, so a row whose largest score is among them never sees its running maximum rise.
SMALLEST_BLOCK_N = 16

# Each hint below fires on its own symptom, read from the output and the inputs, never merely because a
# case of its kind failed (tests/test_09_attention.py pairs each with the mistake it names and another one).


def _inputs(args) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool, float | None]:
    q, k, v = (a.detach().to("cpu", torch.float64) for a in args[:3])
    causal = bool(args[3]) if len(args) > 3 else False
    scale = args[4] if len(args) > 4 else None
    return q, k, v, causal, scale


def _rows_wrong(c: Comparison) -> torch.Tensor | None:
    """[Z, H, N] bool: the output row holds a wrong or unwritten element."""
    if len(c.shape) != 4:
        return None
    return c.wrong.reshape(c.shape).any(-1)


def _close(got: torch.Tensor, want: torch.Tensor, c: Comparison) -> torch.Tensor:
    return ((got - want).abs() <= c.atol + c.rtol * want.abs()) | (got == want)


def _matches(c: Comparison, want: torch.Tensor, rows: slice = slice(None)) -> bool:
    """The output equals ``want`` (within the check's tolerance) on the given query rows of every head."""
    got = c.got.reshape(c.shape)[:, :, rows]
    return bool(_close(got, want.reshape(c.shape)[:, :, rows], c).all()) and not bool(c.unwritten.any())


def _late_max_rows(args) -> torch.Tensor:
    """[Z, H, N] bool: the row's largest score lies past the first SMALLEST_BLOCK_N keys, so a kernel that
    never rescales (acc, l_i) is wrong there; rows whose maximum comes early come out right all the same."""
    q, k, _, causal, scale = _inputs(args)
    n, d = q.shape[-2], q.shape[-1]
    s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(d) if scale is None else scale)
    if causal:
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return s.argmax(-1) >= SMALLEST_BLOCK_N


def _spilled_rows(c: Comparison) -> bool:
    """N is ragged, slice [0, 0] is right and every wrong row of a later slice lies in a run from its row 0:
    the rows past N of one head were stored into the first rows of the next (a store without its row mask)."""
    rows = _rows_wrong(c)
    if rows is None or c.shape[2] % SMALLEST_BLOCK_N == 0:
        return False
    flat = rows.reshape(-1, c.shape[2])
    if bool(flat[0].any()) or not bool(flat.any()):
        return False
    for r in flat:
        wrong = int(r.sum())
        if wrong and (wrong >= min(c.shape[2], LARGEST_BLOCK_N) or not bool(r[:wrong].all())):
            return False
    return True


def _offsets_wrong(c: Comparison, args) -> bool:
    """Whole (z, h) slices are misplaced: some lost more rows to never-written output than others, or some hold
    another slice's answer, or the
    first slice (offset 0 under any formula) is right while another is wrong in rows that no softmax mistake
    touches (rows whose maximum score lies in the first key block)."""
    rows = _rows_wrong(c)
    if rows is None or c.shape[0] * c.shape[1] < 2 or not bool(rows.any()) or _spilled_rows(c):
        return False
    Z, H = c.shape[:2]
    unwritten_rows = c.unwritten.reshape(c.shape).any(-1).sum(-1).flatten()
    if bool((unwritten_rows != unwritten_rows[0]).any()):   # some slices lost more rows than others
        return True
    got = c.got.reshape(Z * H, -1)
    want = c.expected.reshape(Z * H, -1)
    bad = rows.reshape(Z * H, -1).any(-1)
    for i in torch.nonzero(bad).flatten().tolist():
        if any(j != i and bool(_close(got[i], want[j], c).all()) for j in range(Z * H)):
            return True
    late = _late_max_rows(args) if len(args) >= 3 else torch.zeros_like(rows)   # a copy has no softmax
    early_wrong = (rows & ~late).reshape(Z * H, -1).any(-1)
    return not bool(bad[0]) and bool(early_wrong.any())


def _batch_offset(c: Comparison, args) -> bool:
    """Slices are misplaced and a later batch's first head is among them."""
    rows = _rows_wrong(c)
    return _offsets_wrong(c, args) and c.shape[0] > 1 and bool(rows[1:, 0].any())


def _head_offset(c: Comparison, args) -> bool:
    """Slices are misplaced, head 0 of every batch is right and a later head is wrong."""
    rows = _rows_wrong(c)
    return (_offsets_wrong(c, args) and c.shape[1] > 1 and not bool(rows[:, 0].any())
            and bool(rows[:, 1:].any()))


def _strided_offset(c: Comparison, args) -> bool:
    """Slices are misplaced and an input is not contiguous."""
    return _offsets_wrong(c, args) and any(isinstance(a, torch.Tensor) and not a.is_contiguous() for a in args)


def _no_rescale(c: Comparison, args) -> bool:
    """Only rows whose maximum arrives in a later key block are wrong: the error comes with the number of key
    blocks and is absent where one key block holds the row's maximum."""
    rows = _rows_wrong(c)
    if rows is None or not bool(rows.any()) or bool(c.unwritten.any()):
        return False
    late = _late_max_rows(args)
    early = ~late
    slack = max(1, int(0.02 * int(early.sum())))  # near-ties on a GPU: a handful of rows at most
    return int(early.sum()) >= 1 and int((rows & early).sum()) < slack and bool((rows & late).any())


def _causal_row_zero(c: Comparison, args) -> bool:
    """Causal, every slice written, and row 0 (which sees key 0 alone) is NaN in every head, or every later
    row equals the strict mask key < query."""
    if not _inputs(args)[3] or len(c.shape) != 4 or bool(c.unwritten.any()):
        return False
    got = c.got.reshape(c.shape)
    if not bool(torch.isfinite(got[:, :, 0]).any()):
        return True
    q, k, v, _, scale = _inputs(args)
    n = q.shape[-2]
    if n < 2:
        return False
    strict = attention_reference(q[:, :, 1:], k, v, False, scale,
                                 mask=torch.ones(n - 1, n, dtype=torch.bool).triu(1) == 0)
    return _matches(c, torch.cat([c.expected.reshape(c.shape)[:, :, :1], strict], 2), slice(1, None))


def _causal_too_wide(c: Comparison, args) -> bool:
    """Causal, row 0 finite but wrong in every head (it sees later keys), yet the last row is right somewhere:
    the mask lets a row see keys after it, as a bound in whole blocks (or no mask) does."""
    rows = _rows_wrong(c)
    if not _inputs(args)[3] or rows is None or c.shape[2] < 2:
        return False
    got = c.got.reshape(c.shape)
    return (bool(rows[:, :, 0].all()) and bool(torch.isfinite(got[:, :, 0]).all())
            and not bool(rows[:, :, -1].all()))


def _scale_ignored(c: Comparison, args) -> bool:
    """An explicit sm_scale was passed and the output is attention at the default 1/sqrt(D) instead."""
    q, k, v, causal, scale = _inputs(args)
    if scale is None or len(c.shape) != 4:
        return False
    return _matches(c, attention_reference(q, k, v, causal, None))


def _log2e_missing(c: Comparison, args) -> bool:
    """The output is attention at sm_scale * ln 2 (exp2 without log2(e) folded in) or at sm_scale * log2(e)
    (log2(e) folded in, then exp instead of exp2)."""
    q, k, v, causal, scale = _inputs(args)
    if len(c.shape) != 4:
        return False
    base = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return any(_matches(c, attention_reference(q, k, v, causal, base * f)) for f in (math.log(2), 1 / math.log(2)))


def _keys_past_n_kept(c: Comparison, args) -> bool:
    """N is ragged and rows past N were stored (into the next head's first rows, or out of bounds), or the
    output equals attention whose keys were padded with zero keys and values up to a whole block (keys past N
    loaded as 0, never masked to -inf)."""
    if len(c.shape) != 4 or c.shape[2] % SMALLEST_BLOCK_N == 0:
        return False
    if _spilled_rows(c) or ((c.oob_before or c.oob_after) and not _offsets_wrong(c, args)):
        return True   # stores past the end of a head, not misplaced heads
    q, k, v, causal, scale = _inputs(args)
    if causal:
        return False
    n = q.shape[-2]
    for block in (16, 32, 64, 128):
        pad = -n % block
        if pad:
            zeros = q.new_zeros(*q.shape[:2], pad, q.shape[-1])
            if _matches(c, attention_reference(q, torch.cat([k, zeros], 2), torch.cat([v, zeros], 2), False, scale)):
                return True
    return False


#: Known traps of the attention kernel, each named only when the output shows its symptom.
ATTENTION_HINTS = [
    Hint(_batch_offset, "Whole (batch, head) slices are misplaced (never written, holding another slice's "
         "rows, or wrong while slice [0, 0] is right), and a later batch is among them: look at how off_z "
         "enters the offsets. With strides the batch moves by off_z * stride_z, and in a 2-D [Z*H*N, D] view a "
         "head starts at row off_z * H * N + off_h * N (off_z + off_h * N is right only for Z = 1)."),
    Hint(_head_offset, "Head 0 of every batch is right and later heads are misplaced: off_h must move the "
         "pointers by off_h * stride_h (and off_h = off_hz % H, not off_hz // H)."),
    Hint(_strided_offset, "These inputs are not contiguous (heads taken from a [Z, N, H, D] projection by a "
         "transpose) and whole slices are misplaced: compute every offset from the tensor's own strides, "
         "never from N * D."),
    Hint(_causal_row_zero, "Causal attention: query row i sees keys 0..i, its own position included (keep "
         "key <= query). Row 0 sees key 0 alone, so no row may be all -inf (that gives NaN)."),
    Hint(_causal_too_wide, "Causal attention: row 0 must equal v[0] (it sees key 0 alone), yet it is wrong in "
         "every head while later rows can be right: the mask lets rows see keys after them. Mask per element, "
         "not per block: inside the block on the diagonal, row i keeps keys up to i only, so a bound in whole "
         "blocks (keeping a key block by where it starts) is wrong for most rows."),
    Hint(_no_rescale, "Only rows whose largest score arrives after the first key block are wrong: the error "
         "comes with several key blocks and vanishes when one block holds the row's maximum. Look at the online "
         "softmax: when a new block raises the running maximum, acc and l_i must both be rescaled by "
         "alpha = exp(m_old - m_new) before the new block is added."),
    Hint(_scale_ignored, "This call passes sm_scale explicitly and your output is attention at the default "
         "1/sqrt(D): use sm_scale, and fall back on 1/sqrt(D) only when it is None."),
    Hint(_log2e_missing, "Your output is attention at a scale off by a factor ln 2: tl.exp2(x) is exp(x * ln 2), "
         "so fold log2(e) into qk_scale once and use exp2 throughout (or neither)."),
    Hint(_keys_past_n_kept, "N is not a multiple of the block and keys past N took part: mask the query rows "
         "past N on load and store, and give keys past N a score of -inf (a load with other=0 gives them "
         "a score of 0, not -inf)."),
]


def copy_reference(x: torch.Tensor) -> torch.Tensor:
    """What ``contiguous_heads(x)`` must return: x's values in a contiguous tensor."""
    return x.contiguous()


def exact(dtype: torch.dtype) -> tuple[float, float]:
    """A copy moves bits: no tolerance."""
    return 0.0, 0.0


def _rows_spilled(c: Comparison, args) -> bool:
    return _spilled_rows(c) or bool(c.oob_after and not _offsets_wrong(c, args))


#: The hints of the copy kernel (TODO 2): the offset hints of attention, and rows stored past N.
COPY_HINTS = ATTENTION_HINTS[:3] + [
    Hint(_rows_spilled, "N is not a multiple of BLOCK_M and rows past N were stored (into the next head's "
         "first rows, or past the end): mask the rows at or past N on the load and on the store."),
]


# ---------------------------------------------------------------------------------------------------
# Launch configurations
# ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AttentionConfig:
    """One launch of the attention kernel: block sizes, warps, pipeline depth, and two Hopper features that only
    the fast path beyond the exercise uses (:mod:`triton_course.attention_fast`; the exercise's kernel reads through
    pointers and ignores them).

    ``tma``: read q, k, v through tensor descriptors (the Tensor Memory Accelerator, TMA), Hopper and later only.
    ``warp_spec``: one unmasked loop, warp-specialised by Triton (a producer warp group feeds consumer groups),
    only without a causal mask and with N a multiple of ``block_n``; Triton runs it with 3x ``num_warps`` warps."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    tma: bool = False
    warp_spec: bool = False
    up_to_n: int | None = None   # in a table entry of several launches: the longest N this one serves

    @property
    def launch(self) -> dict:
        """The exercise's kernel's keyword arguments for this configuration: ``BLOCK_M``, ``BLOCK_N``,
        ``num_warps``, ``num_stages``."""
        return {"BLOCK_M": self.block_m, "BLOCK_N": self.block_n, "num_warps": self.num_warps,
                "num_stages": self.num_stages}

    def launch_for(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor) -> dict:
        """The fast path's keyword arguments (:mod:`triton_course.attention_fast`): :attr:`launch`, ``TMA`` and
        ``WARP_SPEC`` and, with ``tma`` and without ``warp_spec``, tensor descriptors made here on the host
        (``q_desc`` ... ``o_desc``) for the four [Z, H, N, D] tensors, one tile per [1, 1, block, D] box: made
        once per launch instead of by every program, which costs each program a few microseconds. The
        warp-specialised loop gets none (Triton 3.6 runs it only with descriptors made in the kernel), so its
        kernel makes its own."""
        args = {**self.launch, "TMA": self.tma, "WARP_SPEC": self.warp_spec}
        if self.tma and not self.warp_spec:
            from triton.tools.tensor_descriptor import TensorDescriptor

            for name, t, rows in (("q_desc", q, self.block_m), ("k_desc", k, self.block_n),
                                  ("v_desc", v, self.block_n), ("o_desc", out, self.block_m)):
                args[name] = TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, rows, t.shape[-1]])
        return args

    def describe(self) -> str:
        extra = ((", TMA" if self.tma else "") + (", warp-specialised" if self.warp_spec else "")
                 + (f" (N <= {self.up_to_n})" if self.up_to_n else ""))
        return (f"BLOCK_M={self.block_m}, BLOCK_N={self.block_n}, {self.num_warps} warps, "
                f"{self.num_stages} stages{extra}")


#: The interpreter's configuration: small blocks, so that a CPU run visits several key blocks.
INTERPRETER_CONFIG = AttentionConfig(32, 16, 4, 1)
#: Hopper (H100, H200), 16-bit inputs, by (head dim rounded up to 64 or 128, causal): the exercise's kernel (pointer
#: loads, masks only in the last stage) at the fastest of its launches that lab/sweeps/attention_sweep.py timed
#: on an H200 (the "ptr" rows of solutions/09_attention/records/09_attention_sweep.json and _focus.json, Triton 3.6:
#: 0.91-1.04 of SDPA at D = 64 for N from 1024 to 16384, 0.73-0.82 at D = 128; recorded_pointer_launches).
POINTER_CONFIGS = {(64, False): AttentionConfig(128, 64, 8, 3), (64, True): AttentionConfig(64, 64, 4, 3),
                   (128, False): AttentionConfig(64, 64, 4, 3), (128, True): AttentionConfig(64, 64, 4, 3)}
#: Ampere/Ada (A10, A100, L4, ...): 128 x 64 blocks for D <= 64, 64 x 64 for D = 128 (shared memory is
#: 100-164 KB per SM there), pointer loads.
AMPERE_CONFIGS = {64: AttentionConfig(128, 64, 4, 2), 128: AttentionConfig(64, 64, 4, 2)}
#: Turing (T4, 64 KB of shared memory; tl.dot runs on the FP32 units there): small blocks, no pipelining.
TURING_CONFIG = AttentionConfig(64, 32, 4, 1)

#: Shared memory one block may opt in to, by compute capability (CUDA Programming Guide), for when no GPU can be
#: asked (``shared_memory_per_block_optin`` of the device properties, which :func:`shared_memory_limit` reads on one).
SHARED_MEMORY_BY_CC = {(7, 0): 98304, (7, 5): 65536, (8, 0): 166912, (8, 6): 101376, (8, 7): 166912,
                       (8, 9): 101376, (9, 0): 232448, (10, 0): 232448, (12, 0): 101376}


def shared_memory_limit(compute_capability: tuple[int, int] | None = None) -> int | None:
    """Bytes of shared memory one program may use: on this process's GPU read from its properties (given no
    compute capability), otherwise :data:`SHARED_MEMORY_BY_CC` for the given one (the nearest earlier entry of its
    major version when it is not listed). None under the interpreter, which has no such limit."""
    from .device import current

    if compute_capability is None:
        dev = current()
        if dev.interpreted or dev.compute_capability is None:
            return None
        compute_capability = dev.compute_capability
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            optin = getattr(props, "shared_memory_per_block_optin", None)
            if optin:
                return int(optin)
    known = [cc for cc in SHARED_MEMORY_BY_CC if cc[0] == compute_capability[0] and cc <= compute_capability]
    return SHARED_MEMORY_BY_CC[max(known)] if known else min(SHARED_MEMORY_BY_CC.values())


def estimated_shared_bytes(config: AttentionConfig, head_dim: int, element_size: int) -> int:
    """Shared memory the attention kernel is expected to take with this launch: the q tile and, per pipeline stage,
    a k and a v tile. tests/test_gpu_limits.py compiles every launch the rules pick for each GPU and holds the
    compiler's own figure to that GPU's limit, so an estimate that falls short there fails the suite."""
    return element_size * max(head_dim, 16) * (config.block_m + 2 * max(config.num_stages, 1) * config.block_n)


def fit_shared_memory(config: AttentionConfig, head_dim: int, element_size: int, limit: int | None
                      ) -> AttentionConfig:
    """``config``, or the nearest smaller launch whose :func:`estimated_shared_bytes` fits in ``limit``: fewer
    pipeline stages first (the tiles stay large), then half the key block, then half the query block (BLOCK_N
    always dividing BLOCK_M, as the causal stages need). Raises ValueError when not even 16 x 16 fits."""
    fitted = config
    while limit is not None and estimated_shared_bytes(fitted, head_dim, element_size) > limit:
        if fitted.num_stages > 1:
            fitted = dataclasses.replace(fitted, num_stages=fitted.num_stages - 1)
        elif fitted.block_n > 16:
            fitted = dataclasses.replace(fitted, block_n=fitted.block_n // 2)
        elif fitted.block_m > 16:
            fitted = dataclasses.replace(fitted, block_m=fitted.block_m // 2)
        else:
            raise ValueError(_("no attention launch at head dim {head_dim} fits in {limit} bytes of shared "
                               "memory").format(head_dim=head_dim, limit=f"{limit:,}"))
    return fitted


_PINNED: list[AttentionConfig] = []
_TABLE_ONLY: list[bool] = []


@contextlib.contextmanager
def pinned_config(config: AttentionConfig):
    """Within the block, :func:`launch_config` returns ``config`` (without TMA and warp specialisation, which the
    exercise's kernel does not take), and :func:`fast_launch_config` returns it too (TMA and warp specialisation
    dropped where the inputs or the GPU do not allow them), the fast path's Gluon kernel standing aside
    (:func:`gluon_path_allowed`): for experiments and sweeps."""
    _PINNED.append(config)
    try:
        yield config
    finally:
        _PINNED.pop()


@contextlib.contextmanager
def table_launches_only():
    """Within the block :func:`triton_course.attention_fast.fast_attention` launches its Triton kernel as the launch table says, never its
    Hopper path in Gluon (:func:`gluon_path_allowed`): for sweeps that time the table itself."""
    _TABLE_ONLY.append(True)
    try:
        yield
    finally:
        _TABLE_ONLY.pop()


def through_launch_table(attention: Callable) -> Callable:
    """``attention`` with each call inside :func:`table_launches_only`: how the sweeps of lab/ time the fast
    path's Triton kernel as its launch table launches it, its Gluon path on Hopper aside."""
    @functools.wraps(attention)
    def held_to_the_table(*args, **kwargs):
        with table_launches_only():
            return attention(*args, **kwargs)
    return held_to_the_table


def gluon_path_allowed() -> bool:
    """False inside :func:`pinned_config` or :func:`table_launches_only`: :func:`triton_course.attention_fast.fast_attention` then runs the
    launch asked for, not its Hopper path in Gluon. Whether the grader records a call plays no part: the fast path
    is the course's, no part of a graded answer."""
    return not (_PINNED or _TABLE_ONLY)


def tma_layout_ok(*tensors: torch.Tensor) -> bool:
    """Whether a tensor descriptor can address these [Z, H, N, D] tensors: the last dimension contiguous and
    at least 16 bytes wide, every other stride and the first element 16-byte aligned (so every head's start is)."""
    for t in tensors:
        size = t.element_size()
        if t.stride(-1) != 1 or t.data_ptr() % 16 or any((s * size) % 16 for s in t.stride()[:-1]):
            return False
        if t.shape[-1] * size < 16:
            return False
    return True


def tma_ready(*tensors: torch.Tensor) -> bool:
    """Whether the kernel can read these tensors through TMA here: a GPU with the Tensor Memory Accelerator (compute
    capability 9.0 or newer) and a layout a descriptor can address (:func:`tma_layout_ok`)."""
    from .device import current

    dev = current()
    if dev.interpreted or dev.compute_capability is None or dev.compute_capability < (9, 0):
        return False
    return tma_layout_ok(*tensors)


#: An entry of a Hopper table: one launch for every N, or launches by sequence length (each but the
#: last with ``up_to_n`` set, shortest first).
TableEntry = AttentionConfig | tuple[AttentionConfig, ...]


def for_length(entry: TableEntry, n: int) -> AttentionConfig:
    """The launch of a table entry for sequences of length n: the first whose ``up_to_n`` is unset or >= n."""
    if isinstance(entry, AttentionConfig):
        return entry
    for config in entry:
        if config.up_to_n is None or n <= config.up_to_n:
            return config
    raise ValueError(_("no launch of {entry} serves N = {n}: give the last one no up_to_n").format(entry=entry, n=n))


def describe_entry(entry: TableEntry) -> str:
    """A table entry in words: its launch, or its launches by length."""
    return entry.describe() if isinstance(entry, AttentionConfig) else "; ".join(c.describe() for c in entry)


def _launch_rule(q: torch.Tensor, causal: bool, hopper_configs: dict[tuple[int, bool], TableEntry]
                 ) -> tuple[AttentionConfig, bool]:
    """(the launch for these inputs on this device before the Hopper features are settled, whether it was pinned):
    the pinned one inside :func:`pinned_config`; the interpreter's; on Hopper and later ``hopper_configs[(64 or
    128, causal)]`` for 16-bit inputs (the launch for this N of an entry by length, :func:`for_length`), and
    float32 :data:`AMPERE_CONFIGS` (float32 tiles need twice the shared memory); Ampere/Ada :data:`AMPERE_CONFIGS`;
    Turing :data:`TURING_CONFIG`. On a GPU a launch not pinned is shrunk until its tiles fit the GPU's shared
    memory (:func:`fit_shared_memory`: float32 at D = 128 takes 1 stage on an A10 or L4). A causal launch whose
    BLOCK_N does not divide BLOCK_M is refused (ValueError): the kernel's unmasked stage stops at start_m."""
    from .device import current

    dev = current()
    head_dim = 64 if q.shape[-1] <= 64 else 128
    pinned = bool(_PINNED)
    if pinned:
        config = _PINNED[-1]
    elif dev.interpreted:
        config = INTERPRETER_CONFIG
    elif dev.compute_capability is not None and dev.compute_capability >= (9, 0):
        if q.element_size() > 2:  # the table is measured on 16-bit inputs; float32 tiles need twice its shared memory
            config = AMPERE_CONFIGS[head_dim]
        else:
            config = for_length(hopper_configs[(head_dim, bool(causal))], q.shape[2])
    elif dev.compute_capability is not None and dev.compute_capability >= (8, 0):
        config = AMPERE_CONFIGS[head_dim]
    else:
        config = TURING_CONFIG
    if not pinned and not dev.interpreted:   # a launch this GPU's shared memory holds (an A10 has 99 KB, a T4 64)
        config = fit_shared_memory(config, q.shape[-1], q.element_size(), shared_memory_limit())
    if causal and config.block_m % config.block_n:
        # the unmasked stage runs whole key blocks up to start_m, a multiple of BLOCK_M: with BLOCK_N not dividing
        # it, its last block reaches past the diagonal unmasked (a 64 x 128 launch was 0.64 off on the H200)
        raise ValueError(_("causal attention needs BLOCK_N to divide BLOCK_M, got {launch}").format(
            launch=config.describe()))
    return config, pinned


def launch_config(q: torch.Tensor, causal: bool) -> AttentionConfig:
    """BLOCK_M, BLOCK_N, warps and pipeline stages for the exercise's kernel (pointer loads) on this device, for
    inputs like ``q`` ([Z, H, N, D]): on Hopper and later :data:`POINTER_CONFIGS` for 16-bit inputs, float32 and
    Ampere/Ada :data:`AMPERE_CONFIGS`, Turing :data:`TURING_CONFIG`, the interpreter :data:`INTERPRETER_CONFIG`
    (small blocks, so that a CPU run visits several key blocks), each held to the GPU's shared memory
    (:func:`fit_shared_memory`); inside :func:`pinned_config` the pinned one. BLOCK_N always divides BLOCK_M, which
    the causal stages rely on (a causal launch that breaks it is refused with ValueError)."""
    config, _ = _launch_rule(q, causal, POINTER_CONFIGS)
    if config.tma or config.warp_spec:
        config = dataclasses.replace(config, tma=False, warp_spec=False)
    return config


def fast_launch_config(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                       hopper_configs: dict[tuple[int, bool], TableEntry]) -> AttentionConfig:
    """The launch of the fast path (:mod:`triton_course.attention_fast`) for these inputs on this device: the rule
    of :func:`launch_config` with ``hopper_configs`` as the Hopper table (its ``HOPPER_CONFIGS``), then TMA only
    when :func:`tma_ready`, and warp specialisation only with TMA, without a causal mask and with N a multiple of
    BLOCK_N. Inside :func:`pinned_config` the pinned one, with the same checks, except that the interpreter runs TMA
    and warp-specialised configurations too (it emulates descriptors and ignores warp specialisation), so that tests
    on the CPU reach the code paths a Hopper GPU takes."""
    from .device import current

    dev = current()
    config, pinned = _launch_rule(q, causal, hopper_configs)
    emulated = pinned and dev.interpreted
    tma = config.tma and (tma_layout_ok(q, k, v) if emulated else tma_ready(q, k, v))
    warp_spec = config.warp_spec and (tma or emulated) and not causal and q.shape[2] % config.block_n == 0
    if (tma, warp_spec) != (config.tma, config.warp_spec):
        config = dataclasses.replace(config, tma=tma, warp_spec=warp_spec)
    if tma and not dev.interpreted:
        _use_tma_scratch()
    return config


def _tma_scratch(size: int, alignment: int, stream) -> torch.Tensor:
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _use_tma_scratch() -> None:
    """Tensor descriptors made inside a kernel need global scratch memory; Triton asks this allocator for it.
    Set before every launch: a Jupyter cell may run in its own copy of the context Triton keeps it in."""
    import triton

    triton.set_allocator(_tma_scratch)


# ---------------------------------------------------------------------------------------------------
# The experiment: block sizes and causal skipping
# ---------------------------------------------------------------------------------------------------

def tiles_visited(n: int, block_m: int, block_n: int, causal: bool) -> int:
    """(query block, key block) pairs the notebook's kernel visits for one head of length n: every key block
    without a causal mask; with it, the key blocks before each query block plus its diagonal blocks."""
    total = 0
    for start_m in range(0, n, block_m):
        stop = min(start_m + block_m, n) if causal else n
        total += -(-stop // block_n)
    return total


@contextlib.contextmanager
def _counting_dots():
    """Count the tl.dot calls the interpreter executes (two per key block the attention kernel visits)."""
    from triton.runtime import interpreter

    builder = getattr(interpreter, "InterpreterBuilder", None)
    original = getattr(builder, "create_dot", None)
    if original is None:   # an internal API of Triton's interpreter: say so when a new Triton moves it
        raise RuntimeError(_("cannot count tl.dot calls: this Triton's interpreter has no "
                             "InterpreterBuilder.create_dot (the experiment reads that internal API)"))
    calls = [0]

    def create_dot(self, *args, **kwargs):
        calls[0] += 1
        return original(self, *args, **kwargs)

    builder.create_dot = create_dot
    try:
        yield calls
    finally:
        builder.create_dot = original


@dataclass
class BlockRow:
    """One block shape of :func:`causal_block_sweep`."""

    block_m: int
    block_n: int
    tiles_full: int
    tiles_causal: int
    counted: bool                 # tiles counted from the kernel's own tl.dot calls (interpreter)
    ms_full: float | None = None  # measured on this GPU
    ms_causal: float | None = None

    @property
    def predicted_time_ratio(self) -> float:
        """causal / non-causal time if time followed the tiles visited."""
        return self.tiles_causal / self.tiles_full

    @property
    def measured_time_ratio(self) -> float | None:
        return None if self.ms_full is None else self.ms_causal / self.ms_full


def experiment_launch(block_m: int, block_n: int, interpreted: bool) -> AttentionConfig:
    """The launch :func:`causal_block_sweep` pins for one block shape: 4 warps up to 64 query rows and 8 beyond,
    2 pipeline stages on a GPU (1 under the interpreter, which has no pipeline)."""
    return AttentionConfig(block_m, block_n, 4 if block_m <= 64 else 8, 1 if interpreted else 2)


def experiment_skip_reason(config: AttentionConfig, head_dim: int, element_size: int,
                           limit: int | None) -> str | None:
    """Why the block-size experiment leaves out this launch on a GPU with ``limit`` bytes of shared memory per
    program, or None when it runs it: the kernel would need more shared memory than the GPU has (a 128 x 128
    launch at D = 64 in float16 takes 96 KB on a T4, which has 64 KB)."""
    need = estimated_shared_bytes(config, head_dim, element_size)
    if limit is None or need <= limit:
        return None
    return _("BLOCK_M={block_m}, BLOCK_N={block_n} skipped: its tiles need about {need} bytes of shared memory per "
             "program at D = {head_dim}, and this GPU has {limit}").format(
        block_m=config.block_m, block_n=config.block_n, need=f"{need:,}", head_dim=head_dim, limit=f"{limit:,}")


def causal_block_sweep(attention: Callable, kernel, blocks: list[tuple[int, int]], n: int, d: int,
                       dtype: torch.dtype, device: str, heads: int = 1) -> list[BlockRow]:
    """For each (BLOCK_M, BLOCK_N): the tiles the student's kernel visits per head with and without the causal
    mask (under the interpreter counted from its own tl.dot calls, two per tile) and, on a GPU, its time in
    both modes. On a GPU pass enough ``heads`` that programs outnumber the SMs: with few programs the longest
    one (the last query block, which visits every key block either way) sets the time. The first head's
    output is checked against float64. A block shape whose tiles do not fit this GPU's shared memory is left out,
    with a printed line that says why (:func:`experiment_skip_reason`), as is one Triton refuses for its resources."""
    from .device import current

    q, k, v = (torch.randn(1, heads, n, d, device=device, dtype=dtype) for _ in range(3))
    interpreted, limit = current().interpreted, shared_memory_limit()
    rows = []
    for block_m, block_n in blocks:
        config = experiment_launch(block_m, block_n, interpreted)
        reason = experiment_skip_reason(config, d, q.element_size(), limit)
        if reason is None:
            reason = _sweep_one(attention, config, q, k, v, heads, interpreted, dtype, rows)
        if reason is not None:
            print(reason)
    return rows


def _sweep_one(attention: Callable, config: AttentionConfig, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               heads: int, interpreted: bool, dtype: torch.dtype, rows: list[BlockRow]) -> str | None:
    """One block shape of :func:`causal_block_sweep`, appended to ``rows``; or why it could not run (Triton
    refused the launch for the resources it needs), and nothing appended."""
    from triton.runtime.errors import OutOfResources

    from .bench import time_ms

    n, block_m, block_n = q.shape[2], config.block_m, config.block_n
    row = BlockRow(block_m, block_n, tiles_visited(n, block_m, block_n, False),
                   tiles_visited(n, block_m, block_n, True), counted=interpreted)
    try:
        with pinned_config(config):
            for causal in (False, True):
                if interpreted:
                    with _counting_dots() as calls:
                        out = attention(q, k, v, causal)
                    if calls[0] == 0:   # the interpreter stopped calling what _counting_dots patches
                        raise RuntimeError(_("counted no tl.dot call: this Triton's interpreter no longer goes "
                                             "through InterpreterBuilder.create_dot, which the experiment patches"))
                    if calls[0] % 2:
                        raise CheckFailed(_("expected two tl.dot calls per key block, counted {count}").format(
                            count=calls[0]))
                    setattr(row, "tiles_causal" if causal else "tiles_full", calls[0] // (2 * heads))
                else:
                    out = attention(q, k, v, causal)
                    ms = time_ms(lambda: attention(q, k, v, causal))
                    setattr(row, "ms_causal" if causal else "ms_full", ms)
                want = attention_reference(*(t[:, :1].double() for t in (q, k, v)), causal)
                atol, rtol = attention_tolerance(dtype)
                if not torch.allclose(out[:, :1].double(), want, atol=atol, rtol=rtol):
                    raise CheckFailed(_("attention is wrong at BLOCK_M={block_m}, BLOCK_N={block_n}, "
                                        "causal={causal}: run the self-check first").format(
                        block_m=block_m, block_n=block_n, causal=causal))
    except OutOfResources as exc:
        # TRANSLATORS: {error} is Triton's own message, in English.
        return _("BLOCK_M={block_m}, BLOCK_N={block_n} skipped: this GPU refused the launch ({error})").format(
            block_m=block_m, block_n=block_n, error=exc)
    rows.append(row)
    return None


def recorded_causal_ratios(n: int, d: int) -> tuple[dict[tuple[int, int, int, int], tuple[float, float]], str]:
    """Recorded causal / non-causal times per block configuration at (n, d), float16, Z = 4,
    H = 2048 // d: ``{(BLOCK_M, BLOCK_N, num_warps, num_stages): (ms_full, ms_causal)}`` and where they were
    recorded. Empty when solutions/09_attention/records/09_attention.json is not in this copy or lacks the size."""
    from .gpus import recorded

    data, source = recorded("09_attention")
    if data is None:
        return {}, source
    found: dict[bool, dict] = {}
    for row in data.get("sizes", []):
        if row["N"] == n and row["D"] == d and row.get("dtype", "float16") == "float16":
            found[row["causal"]] = row.get("config_ms", {})
    out = {}
    for cfg, ms in found.get(False, {}).items():
        if cfg in found.get(True, {}):
            fields = dict(part.split(": ") for part in cfg.split(", "))
            key = tuple(int(fields[f]) for f in ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages"))
            out[key] = (ms, found[True][cfg])
    # TRANSLATORS: {source} says where figures were recorded ("recorded on an H200 (...)").
    return out, _("{source}, each block shape's time, N={n}, D={d}").format(source=source, n=n, d=d)


def _record(name: str) -> dict | None:
    """The chapter's record ``solutions/09_attention/records/<name>.json`` as a dict, or None when this copy of the
    course has no such file."""
    import json

    from .gpus import record_path

    path = record_path("09_attention", name)
    return json.loads(path.read_text()) if path.exists() else None


def sdpa_backend_of(kernel_names: list[str]) -> str:
    """The SDPA backend that CUDA kernels with these names (as the profiler lists them) belong to, in words.
    cuDNN is tried first: its kernels' names also contain "flash" (``..._sdpa_sm90_flash_fprop_...``)."""
    text = " ".join(kernel_names).lower()
    if "cudnn" in text:
        return "cuDNN attention"
    if "flash" in text:
        return "FlashAttention-2 (PyTorch's flash backend)"
    if "fmha" in text or "efficient" in text or "cutlass" in text:
        return "memory-efficient attention (CUTLASS)"
    return "math (unfused matmuls and softmax)"


def recorded_sdpa_backend() -> str:
    """Which kernel PyTorch's scaled_dot_product_attention ran in the recorded comparison, in words: from
    solutions/09_attention/records/09_attention.json, or else from the launch sweep's record
    (09_attention_sweep.json)."""
    from .gpus import recorded

    data, _source = recorded("09_attention")
    backend = (data or {}).get("sdpa_backend")
    # TRANSLATORS: {backend} is an SDPA backend as recorded, in English ("cuDNN attention"); {kernel} a kernel's name.
    if backend:
        return _("{backend} (profiler kernel: {kernel})").format(backend=backend.get("backend", "?"),
                                                                 kernel=backend.get("kernel", "?"))
    backend = ((_record("09_attention_sweep") or {}).get("sdpa") or {}).get("backend")
    if backend:
        return _("{backend} (recorded by the launch sweep, {file})").format(
            backend=backend, file="solutions/09_attention/records/09_attention_sweep.json")
    return _("not recorded in this copy of the course")


def recorded_gluon_path() -> dict[str, dict]:
    """The fast path's Gluon kernel at D = 128 as 09_attention_gluon.json timed it beside SDPA and the launch
    table: {case: {"n": [N...], "reference": [its TFLOP/s over SDPA's, by N], "table": [the same for the launch
    table's Triton kernel]}} for the D = 128 cases. Empty when this copy has no such file."""
    data = _record("09_attention_gluon")
    out: dict[str, dict] = {}
    for row in sorted((data or {}).get("rows") or [], key=lambda r: r["N"]):
        if row["D"] != 128:
            continue
        case = out.setdefault("D=128" + (", causal" if row["causal"] else ""), {"n": [], "reference": [], "table": []})
        case["n"].append(row["N"])
        case["reference"].append(row["ratio_to_sdpa"]["notebook reference"])
        case["table"].append(row["ratio_to_sdpa"]["launch table"])
    return out


def recorded_table_launches() -> dict[str, dict]:
    """The focused sweep's figures (09_attention_focus.json) for the launches each case of the fast path's table
    now takes: {case: {"launch", "tflops", "sdpa_tflops" (both at N = 16384), "geomean", "worst"}}, the last
    two the chosen launch's TFLOP/s over SDPA's across the sweep's N (a case's winner "table" lists its launches
    by length, shortest first; an older file names one launch, "best"). Empty when this copy has no such file."""
    data = _record("09_attention_focus")
    out = {}
    for case, winner in ((data or {}).get("winners") or {}).items():
        table = winner.get("table") or [{"launch": winner["best"], "up_to_n": None}]
        rows = sorted((r for r in data["rows"] if r["dtype"] == "float16"
                       and f"D={r['D']}" + (", causal" if r["causal"] else "") == case), key=lambda r: r["N"])
        ratios = []
        for r in rows:
            name = next(t["launch"] for t in table if t["up_to_n"] is None or r["N"] <= t["up_to_n"])
            if name not in r["tflops"]:
                break
            ratios.append(r["ratio_to_sdpa"][name])
        if rows and len(ratios) == len(rows):
            last = table[-1]["launch"]
            out[case] = {"launch": ", ".join(t["launch"] + (f" (N <= {t['up_to_n']})" if t["up_to_n"] else "")
                                             for t in table),
                         "tflops": rows[-1]["tflops"][last], "sdpa_tflops": rows[-1]["tflops"]["SDPA"],
                         "geomean": round(math.exp(sum(map(math.log, ratios)) / len(ratios)), 3),
                         "worst": min(ratios)}
    return out


def recorded_pointer_launches() -> dict[str, dict]:
    """The exercise's kernel (pointer loads, masks in the last stage only) at the launches :data:`POINTER_CONFIGS`
    takes on Hopper, as the focused launch sweep timed it on an H200 beside SDPA (its "ptr" rows,
    09_attention_focus.json, Triton 3.6): {case: {"launch", "tflops" and "sdpa_tflops" at the longest N, "n" (the
    N timed), "geomean" and "worst" of its TFLOP/s over SDPA's across them}}. Empty when this copy has no such file."""
    data = _record("09_attention_focus")
    out = {}
    for (d, causal), config in POINTER_CONFIGS.items():
        name = f"ptr {config.block_m}x{config.block_n} w{config.num_warps} s{config.num_stages}"
        rows = sorted((r for r in (data or {}).get("rows") or [] if r["dtype"] == "float16" and r["D"] == d
                       and r["causal"] == causal and name in r["tflops"]), key=lambda r: r["N"])
        if not rows:
            continue
        ratios = [r["ratio_to_sdpa"][name] for r in rows]
        out[f"D={d}" + (", causal" if causal else "")] = {
            "launch": name, "tflops": rows[-1]["tflops"][name], "sdpa_tflops": rows[-1]["tflops"]["SDPA"],
            "n": [r["N"] for r in rows], "geomean": round(math.exp(sum(map(math.log, ratios)) / len(ratios)), 3),
            "worst": min(ratios)}
    return out


# ---------------------------------------------------------------------------------------------------
# Fusion: what a call holds in memory besides q, k, v and o
# ---------------------------------------------------------------------------------------------------

#: A fused attention may hold this many times the bytes of q, k, v and o besides them (contiguous copies of
#: strided inputs, heads padded to 16 columns, a log-sum-exp per row), plus FUSED_SLACK bytes (the grader's guard
#: regions around each allocation, a lock or a descriptor): memory that grows as Z*H*N*D. Storing the scores or
#: the probabilities takes Z*H*N*N elements, N/D times the bytes of q, which at the sizes checked is far more.
FUSED_FACTOR = 2
FUSED_SLACK = 128 << 10


def fused_allowance(q: torch.Tensor) -> int:
    """Bytes a fused attention on inputs shaped like ``q`` ([Z, H, N, D]) may hold besides q, k, v and o:
    :data:`FUSED_FACTOR` times the four tensors (heads counted at least 16 wide, as ``tl.dot`` needs), plus
    :data:`FUSED_SLACK`."""
    Z, H, N, D = q.shape
    return FUSED_FACTOR * 4 * Z * H * N * max(D, 16) * q.element_size() + FUSED_SLACK


def beyond_outputs(outputs) -> int:
    """Bytes of the outputs' storages besides the outputs' own elements (and the guard regions the grader puts
    around every allocation): room where a kernel could have kept its scores and handed them back unseen, after the
    output or in gaps between its rows (a strided view of a larger storage)."""
    from .checks import DEFAULT_PAD

    extra = 0
    for t in outputs if isinstance(outputs, (tuple, list)) else (outputs,):
        if isinstance(t, torch.Tensor):
            own = (t.numel() + 2 * DEFAULT_PAD) * t.element_size()
            extra += max(0, t.untyped_storage().nbytes() - own)
    return extra


def measured_scratch(fn: Callable, args) -> tuple[object, int]:
    """(``fn(*args)``, bytes the call held besides its tensor arguments and its outputs): the call recorded as the
    grader records a graded call (:class:`triton_course.relaunch.LaunchRecord`), every storage it allocates or
    uses from before the call counted, and the outputs' storages beyond the outputs (:func:`beyond_outputs`)."""
    from .harness import OperatorLog
    from .integrity import KernelLaunches
    from .relaunch import LaunchRecord, StorageIds, scratch_bytes, storage_sizes

    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    record = LaunchRecord(tensors, StorageIds())   # ids of its own: every storage from before the call counts
    launches = KernelLaunches(record)
    with launches, OperatorLog(tensors, launches, record):
        out = fn(*args)
    outs = [t for t in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(t, torch.Tensor)]
    record.finish(outs)
    made = record.as_dict()
    sizes = storage_sizes(made)
    return out, scratch_bytes(made, lambda sid: sizes.get(sid, 0)) + beyond_outputs(outs)


class _Held:
    """``fn`` as :func:`triton_course.checks.check` calls it, keeping the bytes each call held besides its inputs
    and outputs: in the grader, what the judge's re-run of the call's launch record held (``CallResult.rerun``),
    which the student's process cannot forge; without the grader, :func:`measured_scratch`."""

    def __init__(self, fn: Callable):
        self.fn, self.held = fn, []
        self.__name__ = getattr(fn, "__name__", "attention")
        if hasattr(fn, "remote_call"):
            self.remote_call = self._remote

    def _remote(self, args, kwargs=None, **named):
        result = self.fn.remote_call(args, kwargs, **named)
        if result.rerun is None:
            raise CheckFailed(_("{function}: the grader has no record of this call's launches to read its "
                                "memory from (a bug of the course, not of your code)").format(function=self.__name__))
        self.held.append(result.rerun.scratch_bytes + beyond_outputs(result.output))
        return result

    def __call__(self, *args):
        out, held = measured_scratch(self.fn, args)
        self.held.append(held)
        return out


def check_fused(fn: Callable, cases, reference: Callable, *, tolerances: Callable | None = None,
                hints: tuple | list = (), quiet: bool = False) -> None:
    """Each case (q, k, v, ...) must be right (:func:`triton_course.checks.check`) and the call must hold at most
    :func:`fused_allowance` bytes besides q, k, v and its output; raises :class:`CheckFailed` naming the bytes
    found against the bytes allowed. Pick N well above D: the N x N scores then far exceed the allowance."""
    __tracebackhide__ = True
    from .checks import check, describe_inputs

    tolerances = tolerances or attention_tolerance
    held = _Held(fn)
    for args in cases:
        q = args[0]
        atol, rtol = tolerances(q.dtype)
        check(held, args, reference, atol=atol, rtol=rtol, hints=hints)
        found, allowed = held.held[-1], fused_allowance(q)
        Z, H, N, _head_dim = q.shape
        label = f"{held.__name__}({describe_inputs(args)})"
        if found > allowed:
            raise CheckFailed(_(
                "{call} is right, but not fused: the call held {found} bytes of memory besides q, k, v and its "
                "output, and a fused attention needs at most {allowed} here ({factor} x the bytes of q, k, v and o, "
                "plus {slack}: memory that grows as Z*H*N*D). The N x N scores of these {heads} head(s) are "
                "{scores} bytes in {dtype}: S or P went through memory. Keep each block of scores and probabilities "
                "in registers, inside one kernel (the online softmax), and never allocate an [N, N] buffer.").format(
                call=label, found=f"{found:,}", allowed=f"{allowed:,}", factor=FUSED_FACTOR, slack=f"{FUSED_SLACK:,}",
                heads=Z * H, scores=f"{Z * H * N * N * q.element_size():,}", dtype=str(q.dtype)[6:]))
        if not quiet:
            print(_("ok  {call}: fused, {found} bytes held besides q, k, v and o (at most {allowed})").format(
                call=label, found=f"{found:,}", allowed=f"{allowed:,}"))


def fused_points(fn: Callable, cases, reference: Callable, *, points: float, tolerances: Callable | None = None,
                 hints: tuple | list = ()) -> float:
    """The fusion check of a hidden test (:func:`check_fused`, stderr kept quiet): ``points`` when every case is
    right and fused; a :class:`CheckFailed` that says why otherwise. The last expression of a graded cell is its
    score. It runs on the CPU too: the memory a call holds does not depend on the device."""
    __tracebackhide__ = True
    from .grading import quiet_stderr

    with quiet_stderr():
        check_fused(fn, cases, reference, tolerances=tolerances, hints=hints)
    return float(points)


# ---------------------------------------------------------------------------------------------------
# Speed against PyTorch's scaled_dot_product_attention
# ---------------------------------------------------------------------------------------------------

def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """PyTorch's ``scaled_dot_product_attention``: the yardstick of the speed check (cuDNN's fused attention on
    the H200, solutions/09_attention/records/09_attention.json's ``sdpa_backend``)."""
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))


#: float64 scores the reference of the speed check holds at once (128 MiB; with the softmax's copies about half
#: a GiB): it goes through the heads in groups. At 2 GiB, ten submissions graded at once on one H200 kept 8 GiB
#: each in PyTorch's cache and filled the GPU: seven honest copies' speed tests ran out of memory
#: (tests/gpu/records/gpu_class_throughput_09_class_oom.json).
REFERENCE_SCORES = 1 << 24


def attention_by_heads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                       sm_scale: float | None = None) -> torch.Tensor:
    """:func:`attention_reference`, a group of heads at a time, so that at most :data:`REFERENCE_SCORES` scores
    exist at once: the grader checks every timed output of the speed check (Z = 4, H = 32, N = 4096 in float64
    would be 17 GB of scores in one piece)."""
    Z, H, N, D = q.shape
    heads = max(1, REFERENCE_SCORES // max(1, N * N))
    out = torch.empty(Z * H, N, D, dtype=q.dtype, device=q.device)
    flat = [t.reshape(Z * H, N, D) for t in (q, k, v)]
    for i in range(0, Z * H, heads):
        out[i:i + heads] = attention_reference(*(t[i:i + heads] for t in flat), causal, sm_scale)
    return out.view(Z, H, N, D)


def speed_not_graded_reason() -> str | None:
    """Why attention's speed cannot be compared with SDPA on this GPU (None: it can): where ``tl.dot`` has no tensor
    cores (compute capability below 8.0, the T4) while SDPA uses them, no kernel of this chapter could pass."""
    from .device import current

    dev = current()
    if dev.is_gpu and dev.compute_capability is not None and dev.compute_capability < (8, 0):
        return _("on {gpu} tl.dot runs on FMA units (no tensor cores with current Triton) while SDPA uses "
                 "tensor cores, so attention's speed is not compared with it on this GPU.").format(gpu=dev.name)
    return None


# ---------------------------------------------------------------------------------------------------
# TFLOP/s sweeps
# ---------------------------------------------------------------------------------------------------

#: TFLOP/s sweeps and their plot are the course's shared ones (triton_course.bench, triton_course.plots).
tflops_sweep = flops_sweep


def exp_ceiling_tflops(sfu_tops: float, head_dim: int) -> float:
    """Attention TFLOP/s (matmul FLOPs) at which the special-function units are busy all the time: each score
    needs one exp (``sfu_tops`` x 1e12 per second) and brings 4 * head_dim matmul FLOPs."""
    return sfu_tops * 4 * head_dim


def dot_runs_on_tensor_cores() -> bool:
    """Whether ``tl.dot`` compiles to tensor-core instructions here: compute capability 8.0 and newer. On a T4
    (7.5) current Triton runs it on the FP32 units (FMA), and under the interpreter there is no GPU at all."""
    from .matmul import dot_uses_tensor_cores

    return dot_uses_tensor_cores()


def attention_roofs():
    """(the roof of the two matmuls, the roof of the exponentials) on this device, as two
    :class:`triton_course.roofline.Roof`.

    The matmuls: the fp16 tensor cores (a measured fp16 matmul) where ``tl.dot`` reaches them; on a T4, where it
    runs on the FP32 units, a measured fp32 matmul (``compute="fp32"``). The exponentials: 16 special-function
    operations per clock per SM, a hardware constant, so taken from the datasheet of this GPU model (its FP32
    rate x 16 / 2 / FP32 lanes per SM), not from how well cuBLAS's SGEMM does; a GPU the course has no datasheet
    for falls back to :func:`triton_course.roofline.device_roof`. Without a GPU, the H200's datasheet for both
    (the roofs say so)."""
    from .device import current
    from .gpus import spec_for
    from .roofline import Roof, device_roof, sfu_tops, sources

    dev = current()
    if dev.interpreted:
        return device_roof("fp16_tensor"), device_roof("sfu")
    matmuls = device_roof("fp16_tensor" if dot_runs_on_tensor_cores() else "fp32")
    spec = spec_for(dev.name)
    if spec is None:
        return matmuls, device_roof("sfu")
    return matmuls, Roof(matmuls.bandwidth_gbps, sfu_tops(spec.fp32_tflops, spec.compute_capability),
                         **sources(N_("datasheet of the {gpu}: 16 special-function ops per clock per SM"),
                                   gpu=spec.name), compute="sfu")


#: The longest sequence the benchmark times where tl.dot has no tensor cores: one call at N = 16384 (Z = 4,
#: H * D = 2048) is 8.8 TFLOP, over a second on a T4's 8.1 TFLOP/s of FP32 units, and a sweep times dozens.
FMA_LONGEST_N = 4096


def benchmark_lengths(lengths: list[int]) -> list[int]:
    """The sequence lengths of the benchmark this device times: all of them where ``tl.dot`` runs on tensor cores
    (and under the interpreter, which is given its own short list), those up to :data:`FMA_LONGEST_N` on a T4."""
    from .device import current

    if current().interpreted or dot_runs_on_tensor_cores():
        return list(lengths)
    return [n for n in lengths if n <= FMA_LONGEST_N]


def plot_tflops(sweep: Sweep, title: str, tensor_roof=None, sfu_roof=None, head_dim: int | None = None,
                ax=None):
    """TFLOP/s against sequence length (:func:`triton_course.plots.plot_sweep`). On a GPU, with the roofs given, it
    also draws the matmuls' roof (the units it names: fp16 tensor cores, or the FP32 units where ``tl.dot`` has
    no tensor cores), the ceiling the exponentials set on the special-function units at this head dimension, and
    the rate if the two units took turns instead of overlapping, each labelled with its units."""
    from .roofline import COMPUTE_UNITS

    ax = plot_sweep(sweep, title, ax=ax)
    if sweep.interpreted or tensor_roof is None:
        return ax
    units = figure_text(COMPUTE_UNITS[tensor_roof.compute][0])
    # TRANSLATORS: a figure's legend; {units} names the units, such as "fp16 tensor cores (dense)".
    ax.axhline(tensor_roof.peak_tflops, color="black", linestyle=":",
               label=figure_text(N_("roof of the matmuls: {units}, {peak} TFLOP/s")).format(
                   units=units, peak=f"{tensor_roof.peak_tflops:,.0f}"))
    if sfu_roof is not None and head_dim:
        ceiling = exp_ceiling_tflops(sfu_roof.peak_tflops, head_dim)
        # TRANSLATORS: a figure's legend; {ceiling} is in TFLOP/s.
        ax.axhline(ceiling, color="tab:red", linestyle="-.",
                   label=figure_text(N_("ceiling of the exps: special-function units, one exp per {flops} FLOPs "
                                        "({ceiling})")).format(flops=4 * head_dim, ceiling=f"{ceiling:,.0f}"))
        in_turn = 1 / (1 / tensor_roof.peak_tflops + 1 / ceiling)
        # TRANSLATORS: a figure's legend; {rate} is in TFLOP/s.
        ax.axhline(in_turn, color="tab:purple", linestyle="--",
                   label=figure_text(N_("matmuls and exps in turn, never overlapped ({rate})")).format(
                       rate=f"{in_turn:,.0f}"))
    ax.set_ylim(0, 1.1 * max(tensor_roof.peak_tflops, *(v for vs in sweep.series.values() for v in vs)))
    ax.legend(fontsize=7)
    return ax
