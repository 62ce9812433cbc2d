"""Helpers for chapter 11, FlashAttention-2's backward: references, tolerances, hints, counts and the launch rule.

* :func:`lse_reference` -- attention's output and the natural log-sum-exp of each row's scaled scores, in float64;
* :func:`grads_reference` -- dq, dk, dv of attention for an upstream gradient ``do``, written out as the backward's
  formulas (D = rowsum(dO * O), dS = P * (dP - D)), with switches that compute what a known mistake returns;
  :func:`autograd_grads` is the same by float64 autograd, which the chapter's tests hold it to;
* :func:`backward_tolerance` and :data:`BACKWARD_HINTS` -- for ``triton_course.checks.check_all``;
* :func:`check_autograd` -- ``loss.backward()`` through the student's ``torch.autograd.Function`` against float64
  autograd (the self-check: the graded calls go through the Function's forward and backward without the engine);
* :func:`backward_flops`, :func:`training_flops`, :func:`backward_bytes`, :func:`executed_backward_flops` -- what the
  backward must compute and move, counted as every chapter counts;
* :func:`backward_config` -- the block sizes and launch of the two backward kernels on this device;
* :func:`sdpa_grads`, :func:`grads_by_heads` -- the yardstick of the speed check (PyTorch's SDPA forward and
  backward) and the float64 reference of its timed outputs, a group of heads at a time;
* :func:`recorded_backward` -- what ``solutions/11_attention_backward/records/11_attention_backward.json`` holds, if
  anything (``python tests/gpu/measure.py 11_attention_backward`` writes it on a GPU).

Sources (facts, not code): T. Dao, FlashAttention-2 (2023), Algorithm 2 (the backward); Triton's fused-attention
tutorial (06), whose backward splits dK/dV and dQ into two loops; Stanford CS336, assignment 2.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from .checks import CheckFailed, Comparison, Hint
from .i18n import _

OUTPUTS = ("dq", "dk", "dv")
RECORD = Path(__file__).resolve().parent.parent / "solutions" / "11_attention_backward" / "records" / \
    "11_attention_backward.json"


# ---------------------------------------------------------------------------------------------------
# References
# ---------------------------------------------------------------------------------------------------

def _scale(q: torch.Tensor, sm_scale: float | None) -> float:
    return 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else float(sm_scale)


def _causal_above(n: int, device) -> torch.Tensor:
    """[n, n] bool: True where the key comes after the query (masked when causal)."""
    return torch.ones(n, n, dtype=torch.bool, device=device).triu(1)


def lse_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                  sm_scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(softmax(q k^T * scale) v, logsumexp over keys of q k^T * scale): the forward's output and what it saves."""
    s = (q @ k.transpose(-1, -2)) * _scale(q, sm_scale)
    if causal:
        s = s.masked_fill(_causal_above(q.shape[-2], q.device), float("-inf"))
    return torch.softmax(s, dim=-1) @ v, torch.logsumexp(s, dim=-1)


def grads_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor, causal: bool = False,
                    sm_scale: float | None = None, *, unshifted: bool = False, no_delta: bool = False,
                    unmasked_backward: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of o = softmax(q k^T * scale) v for the upstream gradient ``do``, from the backward's formulas:
    P from the saved log-sum-exp L, dV = P^T dO, dP = dO V^T, D = rowsum(dO * O), dS = P * (dP - D),
    dQ = scale dS K, dK = scale dS^T Q. The switches give what a mistake computes instead: ``unshifted`` P = exp(S)
    (L never subtracted), ``no_delta`` dS = P * dP, ``unmasked_backward`` P recomputed without the causal mask."""
    scale = _scale(q, sm_scale)
    s = (q @ k.transpose(-1, -2)) * scale
    masked = s.masked_fill(_causal_above(q.shape[-2], q.device), float("-inf")) if causal else s
    lse = torch.logsumexp(masked, dim=-1, keepdim=True)
    o = torch.exp(masked - lse) @ v
    recomputed = s if unmasked_backward else masked
    p = torch.exp(recomputed) if unshifted else torch.exp(recomputed - lse)
    dv = p.transpose(-1, -2) @ do
    dp = do @ v.transpose(-1, -2)
    delta = 0.0 if no_delta else (do * o).sum(-1, keepdim=True)
    ds = p * (dp - delta)
    return (ds @ k) * scale, (ds.transpose(-1, -2) @ q) * scale, dv


def autograd_grads(q, k, v, do, causal=False, sm_scale=None):
    """The same gradients by float64 autograd through the plain formula (the chapter's tests compare the two)."""
    from .attention import attention_reference

    leaves = [t.detach().to(torch.float64).requires_grad_() for t in (q, k, v)]
    o = attention_reference(*leaves, causal, sm_scale)
    return torch.autograd.grad(o, leaves, do.to(torch.float64))


def backward_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(atol, rtol) of every gradient. float32 inputs multiply as TF32 on Ampere and later GPUs (about 3 decimal
    digits), and the backward chains three products where the forward chains two; float16 and bfloat16 round P and dS
    to 16 bits before the products. An estimate, checked in the interpreter (exact products) and to be checked over
    many draws on a GPU, as chapter 09's tolerance was (float32 gets chapter 09's 2e-2 and half as much again for the
    third product)."""
    return {torch.float32: (3e-2, 3e-2), torch.float16: (2e-2, 2e-2),
            torch.bfloat16: (6e-2, 6e-2)}.get(dtype, (2e-2, 2e-2))


def lse_tolerance(dtype: torch.dtype) -> list[tuple[float, float]]:
    """(atol, rtol) of the output (chapter 09's) and of the log-sum-exp, which the kernel keeps in float32."""
    from .attention import attention_tolerance

    return [attention_tolerance(dtype), (1e-2, 1e-3)]


#: The loss scale of the loss-scaled check: mixed-precision training multiplies the loss, hence dO, by such a factor
#: so that small gradients survive float16.
LOSS_SCALE = 4096.0
#: The keys' shared component in that check: dq's partial sums carry it, its total does not (each row of dS sums to 0).
KEY_OFFSET = 8.0


def loss_scaled_inputs(z: int, h: int, n: int, d: int, device, dtype=torch.float16):
    """(q, k, v, do) whose dq fits ``dtype`` while its partial sums over keys do not: keys share a component
    KEY_OFFSET * w, values point along +u for the first half of the keys and -u for the rest, and dO = LOSS_SCALE * u.
    The first half's dS are positive and the second half's negative, so a running dq climbs to about
    KEY_OFFSET * sm_scale * LOSS_SCALE * D / 2 (some 90,000 at D = 32) before it comes back down."""
    u = torch.randn(z, h, 1, d, device=device)
    u = u / u.norm(dim=-1, keepdim=True) * math.sqrt(d)
    w = torch.randn(z, h, 1, d, device=device)
    sign = torch.where(torch.arange(n, device=device) < n // 2, 1.0, -1.0)[None, None, :, None]
    q = 0.3 * torch.randn(z, h, n, d, device=device)
    k = KEY_OFFSET * w + torch.randn(z, h, n, d, device=device)
    v = sign * u + 0.1 * torch.randn(z, h, n, d, device=device)
    do = LOSS_SCALE * (u + 0.1 * torch.randn(z, h, n, d, device=device))
    return tuple(t.to(dtype) for t in (q, k, v, do))


def loss_scaled_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """Gradients are LOSS_SCALE times larger: so is the absolute tolerance (0.1 * LOSS_SCALE, about 1% of dq's
    largest values); a float16 accumulator's inf is off by more than any tolerance."""
    return 0.1 * LOSS_SCALE, 2e-2


# ---------------------------------------------------------------------------------------------------
# Hints: each fires on its own symptom, read from the output and the inputs
# ---------------------------------------------------------------------------------------------------

def _args(args) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, bool, float | None]:
    q, k, v, do = (a.detach().to("cpu", torch.float64) for a in args[:4])
    causal = bool(args[4]) if len(args) > 4 else False
    scale = args[5] if len(args) > 5 else None
    return q, k, v, do, causal, scale


def _near(c: Comparison, want: torch.Tensor, loose: float = 4.0) -> bool:
    """The output is ``want`` within ``loose`` times the check's tolerance, and was written everywhere."""
    got = c.got.reshape(c.shape)
    want = want.reshape(c.shape)
    ok = (got - want).abs() <= loose * (c.atol + c.rtol * want.abs())
    return bool(ok.all()) and not bool(c.unwritten.any())


def _mistake(index: int, **switch) -> Callable[[Comparison, object], bool]:
    def applies(c: Comparison, args) -> bool:
        q, k, v, do, causal, scale = _args(args)
        return _near(c, grads_reference(q, k, v, do, causal, scale, **switch)[index])
    return applies


def _causal_mask_missing_dv(c: Comparison, args) -> bool:
    """Causal, dv wrong, yet right for key 0 in every head (every query sees key 0, so no mask touches it), and wrong
    for the last key (which only the last query may see): P was recomputed without the causal mask."""
    causal = _args(args)[4]
    if not causal or len(c.shape) != 4 or c.shape[2] < 2 or bool(c.unwritten.any()):
        return False
    wrong = c.wrong.reshape(c.shape).any(-1)
    return not bool(wrong[:, :, 0].any()) and bool(wrong[:, :, -1].any())


def _causal_mask_missing_dq(c: Comparison, args) -> bool:
    """Causal, dq wrong for query 0 (which may see key 0 alone) yet right for the last query (which sees every key)
    somewhere: P was recomputed without the causal mask."""
    causal = _args(args)[4]
    if not causal or len(c.shape) != 4 or c.shape[2] < 2 or bool(c.unwritten.any()):
        return False
    wrong = c.wrong.reshape(c.shape).any(-1)
    return bool(wrong[:, :, 0].any()) and not bool(wrong[:, :, -1].all())


def _dq_overflowed(c: Comparison, args) -> bool:
    """16-bit inputs, and dq holds inf or NaN where the true gradient is finite and fits the dtype: its partial sums
    over key blocks passed the dtype's largest value, in an accumulator of that dtype."""
    if args[0].dtype not in (torch.float16, torch.bfloat16) or bool(c.unwritten.any()):
        return False
    bad = ~torch.isfinite(c.got) & torch.isfinite(c.expected)
    return bool(bad.any()) and float(c.expected.abs().max()) < torch.finfo(args[0].dtype).max


#: Known traps of the backward, each named only when the output shows its symptom.
BACKWARD_HINTS = [
    Hint(_mistake(0, unshifted=True),
         "dq is what you get with P = exp(S): recompute P as exp(S * scale - L), subtracting the log-sum-exp L that "
         "the forward saved for each query row (in exp2 units: exp2(S * qk_scale - L * log2(e))).", "dq"),
    Hint(_mistake(2, unshifted=True),
         "dv is what you get with P = exp(S): subtract the saved log-sum-exp L of each query row before "
         "exponentiating, or P is not the forward's softmax.", "dv"),
    Hint(_mistake(0, no_delta=True),
         "dq is what dS = P * dP gives: the softmax's Jacobian subtracts each row's D = rowsum(dO * O), so "
         "dS = P * (dP - D). Load D (the first kernel's output) for the block's query rows.", "dq"),
    Hint(_mistake(1, no_delta=True),
         "dk is what dS = P * dP gives: it must be dS = P * (dP - D), with D = rowsum(dO * O) loaded for each "
         "query row of the block.", "dk"),
    Hint(_causal_mask_missing_dv,
         "Causal, and dv is right for key 0 but wrong for the last key, which only the last query may see: P is "
         "recomputed without the causal mask. Keys after a query need P = 0 in the backward too (keep key <= "
         "query): the forward's mask does not carry over.", "dv"),
    Hint(_causal_mask_missing_dq,
         "Causal, and dq is wrong for query 0, which sees key 0 alone: apply key <= query when you recompute P in "
         "the dQ kernel as well.", "dq"),
    Hint(_dq_overflowed,
         "dq overflowed to inf in a 16-bit dtype although the true gradient fits it: with a scaled loss, dq's partial "
         "sums over key blocks pass 65,504 long before the total does. Accumulate dq in float32 (tl.zeros(..., "
         "tl.float32) as tl.dot's accumulator) and cast only at the store.", "dq"),
]


def check_autograd(attention: Callable, cases, *, tolerances: Callable = backward_tolerance) -> None:
    """``attention(q, k, v, causal, sm_scale)`` (the student's autograd Function applied) with ``loss =
    (o * do).sum()``, ``loss.backward()``: q.grad, k.grad and v.grad must equal float64 autograd's; raises
    :class:`CheckFailed` naming the gradient and the case. Runs in this process (a self-check, not a graded call)."""
    __tracebackhide__ = True
    from .checks import compare, describe, describe_inputs

    for case in cases:
        q, k, v, do, *rest = case
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        # TRANSLATORS: {call} is a call such as "attention(float16[1, 2, 64, 32], ...)".
        label = _("{call} then loss.backward()").format(call=f"attention({describe_inputs((q, k, v, *rest))})")
        try:
            o = attention(*leaves, *rest)
            (o * do).sum().backward()
        except Exception as exc:
            from .checks import explain_exception
            raise CheckFailed(explain_exception(exc, label)) from None
        want = autograd_grads(q, k, v, do, *rest)
        atol, rtol = tolerances(q.dtype)
        for name, leaf, w in zip(OUTPUTS, leaves, want):
            if leaf.grad is None:
                # TRANSLATORS: {tensor} is q, k or v.
                raise CheckFailed(_("{call}: {tensor}.grad is None. Does forward return the output of your "
                                    "kernels, and backward return (dq, dk, dv, None, None) in the order of forward's "
                                    "arguments?").format(call=label, tensor=name[1:]))
            c = compare(leaf.grad, w, atol=atol, rtol=rtol)
            if not c.ok:
                # TRANSLATORS: {tensor} is q, k or v; {report} the explanation of the wrong values, several lines.
                raise CheckFailed(_("{call}: {tensor}.grad is wrong.\n{report}\nHint: backward must return one "
                                    "gradient per argument of forward, in order: (dq, dk, dv, None, None).").format(
                    call=label, tensor=name[1:], report=describe(c)))
        print(f"ok  {label}")


# ---------------------------------------------------------------------------------------------------
# Counting
# ---------------------------------------------------------------------------------------------------

def backward_flops(Z: int, H: int, N: int, D: int, causal: bool = False) -> float:
    """FLOPs of the backward's five products (S again, dV, dP, dQ, dK: 2N^2D each per head), half of it causal."""
    return 10 * Z * H * N * N * D / (2 if causal else 1)


def training_flops(Z: int, H: int, N: int, D: int, causal: bool = False) -> float:
    """Forward (4 N^2 D per head) plus backward (10 N^2 D): the work of one call of ``attention_grads``."""
    return 14 * Z * H * N * N * D / (2 if causal else 1)


def executed_backward_flops(Z: int, H: int, N: int, D: int, causal: bool = False) -> float:
    """FLOPs the two-kernel backward executes: S and dP are computed in both kernels, 14 N^2 D per head."""
    return 14 * Z * H * N * N * D / (2 if causal else 1)


def backward_bytes(Z: int, H: int, N: int, D: int, element_size: int) -> int:
    """Bytes the backward must move, each once: read q, k, v, o, dO and L (float32), write dq, dk, dv."""
    return 8 * Z * H * N * D * element_size + 4 * Z * H * N


# ---------------------------------------------------------------------------------------------------
# The launch
# ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BackwardConfig:
    """Block sizes of the backward. The dK/dV kernel keeps ``block_kv`` keys per program and walks over queries
    ``block_q_step`` at a time; the dQ kernel keeps ``block_q`` queries and walks over keys ``block_kv_step`` at a
    time. Each step divides its program's block, so that causal loops start and stop on whole steps."""

    block_kv: int
    block_q_step: int
    block_q: int
    block_kv_step: int
    num_warps: int
    num_stages: int

    def describe(self) -> str:
        return (f"dK/dV: {self.block_kv} keys x {self.block_q_step} queries; dQ: {self.block_q} queries x "
                f"{self.block_kv_step} keys; {self.num_warps} warps, {self.num_stages} stages")


#: The interpreter: small blocks, so that a CPU run visits several blocks of every loop.
INTERPRETER_BACKWARD = BackwardConfig(16, 16, 16, 16, 4, 1)
#: Hopper, 16-bit inputs, D <= 64: 128 keys held and 32 queries streamed (Triton's tutorial 06's dK/dV shape), 64
#: queries held and 64 keys streamed for dQ, 4 warps, 3 stages. Chosen on an H100 by
#: ``python lab/sweeps/attention_backward_launches.py`` (records/11_attention_backward_launches.json), which timed each
#: kernel at 40 launches: forward + backward went from 0.56 of SDPA (the first estimate: tutorial 06's blocks with 8 warps
#: and 2 stages; the tutorial's own are 4 and 5) to 0.85.
GPU_BACKWARD = BackwardConfig(128, 32, 64, 64, 4, 3)
#: Hopper, 16-bit inputs, D = 128: the same sweep's choice, 64 x 64 blocks in both kernels, 4 warps, 2 stages.
WIDE_BACKWARD = BackwardConfig(64, 64, 64, 64, 4, 2)
#: float32 inputs, and Ampere or Ada (an A100's, A10's or L4's shared memory): halved blocks, never swept on a GPU.
SMALL_BACKWARD = BackwardConfig(64, 32, 64, 32, 4, 2)
#: Turing (T4: 64 KB of shared memory, tl.dot on the FMA units).
TURING_BACKWARD = BackwardConfig(64, 16, 64, 16, 4, 1)
#: Blocks halved where a head of 128 (or float32's wider tiles) would not fit the shared memory: a T4 at D = 128
#: (64 KB; the 64-block launch needs 74-86 KB) and an A10 or L4 in float32 at D = 128 (99 KB; it needs 115 KB),
#: found by compiling for those GPUs (tests/test_gpu_limits.py).
NARROW_BACKWARD = BackwardConfig(32, 16, 32, 16, 4, 1)


def backward_config(q: torch.Tensor, causal: bool = False) -> BackwardConfig:
    """The backward's launch for inputs like ``q`` on this device."""
    from .device import current

    dev = current()
    if dev.interpreted:
        return INTERPRETER_BACKWARD
    cc = dev.compute_capability or (8, 0)
    wide = q.shape[-1] > 64
    if cc < (8, 0):
        return NARROW_BACKWARD if wide else TURING_BACKWARD
    if cc < (9, 0) and wide and q.element_size() > 2:
        return NARROW_BACKWARD
    if q.element_size() > 2 or cc < (9, 0):
        return SMALL_BACKWARD
    return WIDE_BACKWARD if wide else GPU_BACKWARD


# ---------------------------------------------------------------------------------------------------
# Speed: the yardstick and the reference of its timed outputs
# ---------------------------------------------------------------------------------------------------

def sdpa_grads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor, causal: bool = False):
    """(dq, dk, dv) by PyTorch's SDPA forward and its backward (cuDNN's or FlashAttention's on an H200): what one
    call of ``attention_grads`` is timed against."""
    import torch.nn.functional as F

    with torch.enable_grad():   # a timing loop may run under no_grad
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        o = F.scaled_dot_product_attention(*leaves, is_causal=bool(causal))
        return torch.autograd.grad(o, leaves, do)


#: float64 scores held at once by :func:`grads_by_heads` (its P, dP and dS are three times that).
REFERENCE_SCORES = 1 << 23


def grads_by_heads(q, k, v, do, causal=False, sm_scale=None):
    """:func:`grads_reference` a group of heads at a time, so that N = 4096 and more stays in bounded memory."""
    Z, H, N, D = q.shape
    heads = max(1, REFERENCE_SCORES // max(1, N * N))
    flat = [t.reshape(Z * H, N, D) for t in (q, k, v, do)]
    out = [torch.empty(Z * H, N, D, dtype=q.dtype, device=q.device) for _ in range(3)]
    for i in range(0, Z * H, heads):
        for o, g in zip(out, grads_reference(*(t[i:i + heads] for t in flat), causal, sm_scale)):
            o[i:i + heads] = g
    return tuple(o.view(Z, H, N, D) for o in out)


def recorded_backward() -> dict | None:
    """The measurement of ``records/11_attention_backward.json`` (None when no GPU has run measure.py yet)."""
    if not RECORD.is_file():
        return None
    return json.loads(RECORD.read_text())
