"""Helpers for the attention chapter (09): offset checks, a float64 reference, hints and a TFLOP/s sweep.

* :func:`check_split`, :func:`check_base_offset`, :func:`check_row_offset` -- grade the offset exercises
  against the truth read from real tensors (element offsets of ``t[z, h]`` in their storage), and print a
  table of every ``(z, h)`` a formula gets wrong;
* :func:`attention_reference` -- softmax(q k^T * scale) v in float64, with an optional causal mask;
* :func:`attention_tolerance` and :data:`ATTENTION_HINTS` -- for ``utils.checks.check_all``;
* :func:`tflops_sweep`, :func:`plot_tflops` -- TFLOP/s against sequence length next to PyTorch.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from utils.bench import Sweep, flops_sweep
from utils.checks import CheckFailed, Comparison, Hint, explain_exception
from utils.plots import plot_sweep


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
    lines = [f"{name}: {len(rows)} of {total} cases wrong ({what})",
             "  " + "".join(f"{h:>12}" for h in header)]
    lines += ["  " + "".join(f"{str(v):>12}" for v in r) for r in rows[:8]]
    if len(rows) > 8:
        lines.append(f"  ... and {len(rows) - 8} more")
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
    _report(getattr(fn, "__name__", "split"), wrong, ("off_hz", "expected", "got"), Z * H, f"Z={Z}, H={H}")


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
    layout = "contiguous" if t.is_contiguous() else f"strides {tuple(t.stride())}"
    _report(getattr(fn, "__name__", "base"), wrong, ("off_z", "off_h", "expected", "got"), Z * H,
            f"shape {list(t.shape)}, {layout}")


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
    _report(getattr(fn, "__name__", "row"), wrong, ("off_z", "off_h", "expected", "got"), Z * H,
            f"Z={Z}, H={H}, N={N}")


# ---------------------------------------------------------------------------------------------------
# Attention: reference, tolerances, hints
# ---------------------------------------------------------------------------------------------------

def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                        sm_scale: float | None = None) -> torch.Tensor:
    """softmax(q k^T * sm_scale) v, row i seeing keys 0..i only when ``causal``; in q's dtype."""
    N, D = q.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        above = torch.ones(N, N, dtype=torch.bool, device=q.device).triu(1)
        s = s.masked_fill(above, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def attention_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(atol, rtol) for attention: fp32 dots run as tf32 on Ampere and later GPUs, fp16 rounds P to fp16.

    Measured on an H200 (results/09_attention.json, ``gpu_accuracy``): the reference kernel's worst fp32
    error was 0.85 of a 5e-3 tolerance, so fp32 gets 1e-2 (a 2x margin); fp16's worst was 0.04 of 1e-2.
    Every mistake the chapter's example submissions make is off by far more than either.
    """
    return {torch.float32: (1e-2, 1e-2), torch.float16: (1e-2, 1e-2)}.get(dtype, (1e-2, 1e-2))


#: The largest BLOCK_N of the chapter's GPU configurations: longer sequences span several key blocks there.
LARGEST_BLOCK_N = 128


def _wrong_4d(c: Comparison) -> torch.Tensor | None:
    if len(c.shape) != 4:
        return None
    return c.wrong.reshape(c.shape)


def _several_batches(c: Comparison, args) -> bool:
    w = _wrong_4d(c)
    return w is not None and c.shape[0] > 1 and bool(w.any())


def _only_later_heads(c: Comparison, args) -> bool:
    w = _wrong_4d(c)
    return w is not None and c.shape[1] > 1 and not bool(w[:, 0].any()) and bool(w[:, 1:].any())


def _strided(c: Comparison, args) -> bool:
    return any(isinstance(a, torch.Tensor) and not a.is_contiguous() for a in args)


def _causal(c: Comparison, args) -> bool:
    return len(args) > 3 and bool(args[3])


def _explicit_scale(c: Comparison, args) -> bool:
    return len(args) > 4 and args[4] is not None


def _several_key_blocks(c: Comparison, args) -> bool:
    w = _wrong_4d(c)
    return w is not None and c.shape[2] > LARGEST_BLOCK_N and bool(w.any())


def _ragged(c: Comparison, args) -> bool:
    w = _wrong_4d(c)
    return (w is not None and c.shape[2] % 16 != 0 and bool(w[:, :, -1].any())
            and not bool(w[:, :, 0].any()))


#: Known traps of the attention kernel, named when a check fails on inputs that expose them.
ATTENTION_HINTS = [
    Hint(_several_batches, "This input has Z > 1 sequences. If your kernel passes with Z = 1, look at how "
         "off_z enters the offsets: with strides the batch moves by off_z * stride_z, and in a 2-D "
         "[Z*H*N, D] view a head starts at row off_z * H * N + off_h * N (off_z + off_h * N is right only "
         "for Z = 1). A wrong batch offset also lets batch 1 overwrite batch 0's output, so every batch "
         "can look wrong."),
    Hint(_only_later_heads, "Head 0 is right and later heads are wrong: off_h must move the pointers by "
         "off_h * stride_h (and off_h = off_hz % H, not off_hz // H)."),
    Hint(_strided, "These inputs are not contiguous (heads taken from a [Z, N, H, D] projection by a "
         "transpose): compute every offset from the tensor's own strides, never from N * D."),
    Hint(_causal, "Causal attention: query row i sees keys 0..i, its own position included "
         "(keep where key <= query). Every query row has at least one key, so no row may be all -inf. Mask "
         "per element, not per block: inside the block on the diagonal, row i keeps keys up to i only, so a "
         "bound in whole blocks (keeping or skipping a key block by where it starts) is wrong for most rows."),
    Hint(_several_key_blocks, "N spans several key blocks here, even at a GPU's largest BLOCK_N (128). If "
         "shorter sequences pass, look at the online softmax: when a new block raises the running maximum, "
         "acc and l_i must both be rescaled by alpha = exp(m_old - m_new) before the new block is added."),
    Hint(_explicit_scale, "This call passes sm_scale explicitly: use it, and fall back on 1/sqrt(D) only "
         "when it is None."),
    Hint(_ragged, "The last rows are wrong and N is not a multiple of the block: mask the query rows past "
         "N on load and store, and give keys past N a score of -inf."),
]


# ---------------------------------------------------------------------------------------------------
# TFLOP/s sweeps
# ---------------------------------------------------------------------------------------------------

#: TFLOP/s sweeps and their plot are the course's shared ones (utils.bench, utils.plots).
tflops_sweep = flops_sweep


def plot_tflops(sweep: Sweep, title: str, ax=None):
    """TFLOP/s against sequence length (:func:`utils.plots.plot_sweep`)."""
    return plot_sweep(sweep, title, ax=ax)
