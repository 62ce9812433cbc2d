"""Matrix-multiplication helpers for chapter 07: the budget, the check, the experiments, the graded speed.

A matmul is judged by arithmetic, not bytes: ``C = A @ B`` with A [M, K] and B [K, N] does ``2*M*N*K``
floating-point operations (one multiply and one add per term), and TFLOP/s is that count over the
median time. The yardstick is the vendor library measured in the same process (cuBLAS through
``torch``), because a matmul is compute bound and the datasheet peak is never reached in practice.

* :func:`matmul_flops`, :func:`matmul_bytes`, :func:`tflops` -- the budget and the unit;
* :func:`dot_uses_tensor_cores` -- whether ``tl.dot`` reaches tensor cores on this device;
* :func:`reference`, :func:`tolerance`, :func:`make`, :data:`HINTS` -- the check of ``matmul_relu`` and the
  hints that name its known traps, each only on its own symptom;
* :func:`launch_config` -- the launch rule the chapter gives: tiles, warps and pipeline depth from the shape and
  the GPU (its SM count and shared memory);
* :func:`launch` -- the chapter's kernel launched with given meta-parameters, for the experiments;
* :func:`programs_per_wave` -- the programs that run at once on the running GPU (SMs x programs per SM);
* :func:`compile_report` -- a kernel compiled for a GPU that need not be here (sm_90 by default), and
  what its PTX shows: 16-byte asynchronous copies or 2-byte loads, tensor-core instructions, shared
  memory and its swizzled layout;
* :func:`wavefronts` -- shared-memory bank conflicts of one warp's access, for the swizzling cell;
* :func:`kernel_table`, :func:`read_kernel_name` -- the GPU kernels a call runs, and what their names say;
* :func:`recorded_sweep`, :func:`recorded_focus` -- the H200 figures of ``lab/sweeps/matmul_sweep.py`` (and of
  its ``--focus`` mode), shown beside a student's run;
* :func:`compile_tma_reports` -- what the compiler made of the fast path's Hopper kernel (tensor descriptors,
  :mod:`triton_course.matmul_fast`), registers and spills included;
* :func:`flops_sweep` and :func:`plot_flops` -- TFLOP/s against size for several implementations;
* :func:`tflops_points` -- the performance check of a hidden test (a fraction of torch's TFLOP/s).
"""

from __future__ import annotations

import functools
import json
import math
import re
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from .bench import Sweep, flops_sweep, steady_rounds, time_ms  # noqa: F401 -- re-exported for chapter 07
from .checks import CheckFailed, Comparison, Hint, explain_exception
from .device import current
from .gpus import recorded, recorded_on
from .grading import NOT_GRADED, passed, quiet_stderr, require_launch_per_call, throughput_verdict
from .i18n import _
from .plots import plot_sweep


def matmul_flops(m: int, n: int, k: int) -> int:
    """Floating-point operations of an [m, k] @ [k, n] product: one multiply and one add per term."""
    return 2 * m * n * k


def matmul_bytes(m: int, n: int, k: int, element_size: int) -> int:
    """Bytes a matmul must move at the least: read A and B once, write C once."""
    return (m * k + k * n + m * n) * element_size


def tflops(flops: int | float, ms: float) -> float:
    """Tera (1e12) floating-point operations per second for ``flops`` done in ``ms`` milliseconds."""
    return flops / (ms * 1e-3) / 1e12


def dot_uses_tensor_cores() -> bool:
    """True on GPUs of compute capability 8.0 and newer, where ``tl.dot`` compiles to tensor-core
    instructions. With current Triton, older GPUs (the T4 is sm_75) run ``tl.dot`` on the FMA units."""
    dev = current()
    return dev.is_gpu and dev.compute_capability is not None and dev.compute_capability >= (8, 0)


def relative_tflops(fn: Callable[..., object], baseline: Callable[..., object],
                    make_inputs: Callable[[], Sequence[object]], flops: int) -> tuple[float, float]:
    """(TFLOP/s of ``fn``, TFLOP/s of ``baseline``): both timed back to back on the same fresh inputs,
    in turn, round after round, so that clocks and temperature treat them alike (:func:`steady_rounds`)."""
    times = steady_rounds({"fn": fn, "baseline": baseline}, make_inputs)
    return tflops(flops, statistics.median(times["fn"])), tflops(flops, statistics.median(times["baseline"]))


def tflops_points(fn: Callable[..., object], baseline: Callable[..., object],
                  make_inputs: Callable[[], Sequence[object]], flops: int, *, fraction: float,
                  points: float, what: str, baseline_name: str = "torch",
                  reference: Callable[..., object] | None = None,
                  tolerances: Callable[[object], tuple[float, float]] | None = None) -> float:
    """Points for reaching ``fraction`` of ``baseline``'s TFLOP/s on this GPU.

    0 points and a NOT GRADED line under the interpreter, and on GPUs where ``tl.dot`` has no tensor
    cores (compute capability below 8.0) while the library still uses them: no kernel could pass there.
    The last expression of a graded cell is its score, so a hidden test ends with this call.

    Called by the grader's judge with the student's function as a proxy (``fn.remote_call``), the
    student's function is timed in its sandboxed kernel on inputs drawn from secret keys, every timed
    output checked against ``reference`` with ``tolerances`` (:func:`grader.judge_timing.timed_round`, best
    of up to three rounds), while ``baseline`` (trusted code) is timed here, in the judge's own process on
    the same GPU, with :func:`triton_course.bench.steady_ms`.
    """
    __tracebackhide__ = True
    dev = current()
    remote = hasattr(fn, "remote_call")
    if remote:
        on_cpu = dev.interpreted and fn.judge_timing.protocol_only
    else:
        on_cpu = False
    if dev.interpreted and not on_cpu:
        # TRANSLATORS: {not_graded} is "NOT GRADED", which the grader looks for at the start of the line: keep it
        # first and untranslated.
        print(_("{not_graded}: the speed of {what} can only be measured on a CUDA GPU, and this run used "
                "Triton's interpreter on the CPU. 0 of {points} points are awarded for it here; the "
                "instructor grades it on a GPU.").format(not_graded=NOT_GRADED, what=what, points=f"{points:g}"))
        return 0.0
    if remote and (reference is None or tolerances is None):
        raise CheckFailed(_("{what}: this hidden test gives no reference to check the timed outputs with "
                            "(a bug of the course, not of your code)").format(what=what))
    if not dev.interpreted and not dot_uses_tensor_cores():
        # TRANSLATORS: {not_graded} is "NOT GRADED": keep it first and untranslated. {gpu} is the GPU's name,
        # {baseline} a library ("cuBLAS").
        print(_("{not_graded}: on {gpu} tl.dot runs on FMA units (no tensor cores with current Triton) while "
                "{baseline} uses tensor cores, so {what} is not compared with it here. 0 of {points} points are "
                "awarded on this GPU; the instructor grades it on an sm_80 or newer GPU.").format(
            not_graded=NOT_GRADED, gpu=dev.name, baseline=baseline_name, what=what, points=f"{points:g}"))
        return 0.0
    if remote:
        ours, theirs = _remote_tflops(fn, baseline, make_inputs, flops, fraction=0.0 if on_cpu else fraction,
                                      what=what, reference=reference, tolerances=tolerances)
        if on_cpu:
            fraction = 0.0   # the interpreter's numbers mean nothing: only the protocol is exercised
    else:
        from .integrity import LaunchesPerCall

        with quiet_stderr():
            try:
                with LaunchesPerCall(fn) as timed:
                    ours, theirs = relative_tflops(timed, baseline, make_inputs, flops)
            except Exception as exc:
                raise CheckFailed(explain_exception(exc, what)) from None
            require_launch_per_call(timed, what)
    verdict = throughput_verdict(what, ours, theirs, fraction, baseline_name, "TFLOP/s")
    if ours < fraction * theirs:
        raise CheckFailed(_("{verdict}. Does the launcher take launch_config's tiles, warps and stages (at least "
                            "64x64 tiles for tensor cores, num_stages 3-4 for pipelining), is the accumulator float32, "
                            "and does the kernel follow GROUP_M's grouped order?").format(verdict=verdict))
    print(passed(verdict))
    return float(points)


def _remote_tflops(fn, baseline: Callable[..., object], make_inputs: Callable[[], Sequence[object]], flops: int,
                   *, fraction: float, what: str, reference, tolerances) -> tuple[float, float]:
    """(TFLOP/s of the student's proxy ``fn``, TFLOP/s of ``baseline``) for the judge.

    The baseline is trusted code, timed here on the judge's own GPU (the GPU the student's kernel uses);
    the student's function is timed in verified rounds (:func:`grader.judge_timing.best_verified_ms`),
    stopping at the first that reaches ``fraction`` of the baseline: its best round counts."""
    import time

    import torch

    templates = list(make_inputs())
    # the student's own sandboxes are frozen too: their threads or queued work must not slow the baseline
    with quiet_stderr(), fn.session.gpu_lock.exclusive(quiet=fn.session.own_sandboxes):
        if current().is_gpu:
            from .bench import steady_ms

            theirs_ms = steady_ms(baseline, make_inputs)
            torch.cuda.synchronize()
            torch.cuda.empty_cache()   # the student's kernel shares this GPU: leave it the memory
        else:   # the interpreter (the course's own tests of this protocol): a wall clock, numbers meaningless
            baseline(*templates)
            t0 = time.perf_counter()
            baseline(*templates)
            theirs_ms = max((time.perf_counter() - t0) * 1e3, 1e-6)
    theirs = tflops(flops, theirs_ms)
    ours = tflops(flops, fn.judge_timing.best_verified_ms(templates, reference, tolerances, what=what,
                                                          good_enough=lambda ms: tflops(flops, ms) >= fraction * theirs))
    return ours, theirs


def plot_flops(sweep: Sweep, title: str, ax=None, peak_tflops: float | None = None):
    """TFLOP/s against size: :func:`triton_course.plots.plot_sweep` with the datasheet's matrix peak as ceiling."""
    return plot_sweep(sweep, title, ax=ax, peak_tflops=peak_tflops)


# ---------------------------------------------------------------------------------------------------
# The check: reference, tolerances, inputs, and hints that fire only on their own symptom
# ---------------------------------------------------------------------------------------------------

def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """relu(a @ b), computed in the inputs' dtype (float64 when the check calls it)."""
    return torch.relu(a @ b)


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(atol, rtol) for a float32 sum rounded once to ``dtype``: rtol four times float16's unit roundoff
    (2^-11), twice bfloat16's (2^-8, 8 bits of precision); atol for float32 noise on outputs near 0."""
    return {torch.bfloat16: (1e-2, 8e-3)}.get(dtype, (1e-2, 2e-3))


def make(m: int, n: int, k: int, *, transpose_a: bool = False, transpose_b: bool = False,
         dtype: torch.dtype = torch.float16, device: torch.device | str | None = None
         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh random ``a`` [m, k] and ``b`` [k, n]; a transposed operand is the ``.t()`` view of a
    row-major tensor (column-major, strides ``(1, rows)``), as ``x @ w.t()`` hands it over."""
    device = device if device is not None else current().torch_device
    a = (torch.randn(k, m, device=device, dtype=dtype).t() if transpose_a
         else torch.randn(m, k, device=device, dtype=dtype))
    b = (torch.randn(n, k, device=device, dtype=dtype).t() if transpose_b
         else torch.randn(k, n, device=device, dtype=dtype))
    return a, b


def _as_row_major(t: torch.Tensor) -> torch.Tensor:
    """The memory of a non-contiguous 2-D view read as if it were a row-major tensor of its shape."""
    return t.as_strided(t.shape, (t.shape[1], 1), t.storage_offset())


def _matches(c: Comparison, out: torch.Tensor) -> bool:
    """``out`` (float64) equals what the kernel returned, within the check's tolerance, almost everywhere."""
    want = out.reshape(-1).cpu()
    close = (c.got - want).abs() <= c.atol + c.rtol * want.abs()
    return bool(close.double().mean() > 0.99)


def _read_row_major(c: Comparison, args: Sequence[torch.Tensor]) -> bool:
    """The output is relu(a @ b) with a transposed input read as if it were row-major."""
    a, b = args[0], args[1]
    candidates = []
    if not a.is_contiguous():
        candidates.append((_as_row_major(a), b))
    if not b.is_contiguous():
        candidates.append((a, _as_row_major(b)))
    if not a.is_contiguous() and not b.is_contiguous():
        candidates.append((_as_row_major(a), _as_row_major(b)))
    return any(_matches(c, torch.relu(x.double() @ y.double())) for x, y in candidates)


def _relu_on_partial_sums(c: Comparison, args: Sequence[torch.Tensor]) -> bool:
    """No output below its expected value, and outputs whose dot product is negative came out positive.

    ReLU inside the K loop keeps every partial sum at 0 or above, so the result is never smaller than the
    true one, and a sum that ends negative may still end positive. A float16 running sum errs both ways
    and by rounding only; a scaled output keeps its zeros."""
    finite = torch.isfinite(c.got)
    if not bool(finite.all()) or not bool(c.wrong.any()):
        return False
    if bool((c.got[c.wrong] < c.expected[c.wrong]).any()):
        return False
    should_be_zero = c.expected == 0
    lifted = should_be_zero & (c.got > c.atol + 0.05 * float(c.expected.abs().max()))
    return bool(should_be_zero.any()) and float(lifted.sum()) >= max(3.0, 0.05 * float(should_be_zero.sum()))


def _rounding_only(c: Comparison, args: Sequence[torch.Tensor]) -> bool:
    """Every wrong output is off by under 1% of the size of the sums (the largest output, or the typical size of
    a partial sum, |a| @ |b| over sqrt(K), when that is larger: a single small output can still carry its
    partial sums' rounding), and (when there are enough of them to tell) wrong in both directions: the
    signature of rounding, not of a wrong formula."""
    if not bool(c.wrong.any()) or not bool(torch.isfinite(c.got).all()) or bool(c.unwritten.any()):
        return False
    diff = (c.got - c.expected)[c.wrong]
    a, b = (t.detach().float() for t in args[:2])
    partial = float((a.abs() @ b.abs()).max()) / math.sqrt(max(a.shape[1], 1))
    if float(diff.abs().max()) >= 0.01 * max(float(c.expected.abs().max()), partial):
        return False
    up = float((diff > 0).double().mean())
    return len(diff) < 10 or 0.1 <= up <= 0.9


def _all_zero(c: Comparison, args: Sequence[torch.Tensor]) -> bool:
    """(Nearly) every output whose reference is clearly positive came out exactly 0: no sum reached the
    epilogue (a K loop that never runs, or tl.dot results never added into acc), or every sum is NaN."""
    positive = c.expected > c.atol
    n = int(positive.sum())
    return n > 0 and int(((c.got == 0) & positive).sum()) >= 0.98 * n


def _more_zeros_than_relu(c: Comparison, args: Sequence[torch.Tensor]) -> bool:
    """Far more zeros than the reference has, but not every output: some sums read past the end of K."""
    excess = float((c.got == 0).double().mean()) > float((c.expected == 0).double().mean()) + 0.2
    return excess and not _all_zero(c, args)


HINTS = [
    Hint(lambda c, args: bool((c.got < 0).any()),
         "Some outputs are negative: apply ReLU (tl.maximum(acc, 0.0)) to the accumulator after the K loop."),
    Hint(lambda c, args: bool((torch.isnan(c.got) & ~torch.isnan(c.expected) & ~c.unwritten).any()),
         "NaN where the reference is finite: a load read past the end of a or b (the guard region reads as "
         "NaN). Mask the K dimension too (rk < K - k0) with other=0.0, not only rows and columns."),
    Hint(_all_zero,
         "Every output is 0, even where the reference is positive: does the K loop run (for k0 in range(0, K, "
         "BLOCK_K)) and add each tl.dot into acc (acc = tl.dot(a, b, acc))? If it does, and K is not a "
         "multiple of BLOCK_K, look at the last step: a load past the end of K without a K mask (rk < K - k0, "
         "other=0.0) reads NaN here (the guard region), every sum becomes NaN, and tl.maximum(NaN, 0.0) gives 0."),
    Hint(_more_zeros_than_relu,
         "Far more outputs are 0 than ReLU explains: loads past the end of a or b read NaN (the guard region "
         "here, garbage on a GPU) and tl.maximum(NaN, 0.0) gives 0. Mask the K dimension at every load of the "
         "loop (rk < K - k0, other=0.0), not only rows and columns."),
    Hint(_relu_on_partial_sums,
         "Outputs whose dot product is negative came out positive, and none is below its expected value: "
         "ReLU was applied to a *partial* sum inside the K loop, which drops negative parts that later steps "
         "would have added. Apply it once, after the loop."),
    Hint(_read_row_major,
         "Your output is relu(a @ b) computed as if the transposed input were row-major: build every pointer "
         "from the strides you are given (stride_bk, stride_bn, ...), never from N or K."),
    Hint(_rounding_only,
         "Every wrong output is off by only a little (under 1% of the largest output), some up and some "
         "down: rounding, not a wrong formula. Is the running sum kept in float16? Accumulate in float32 "
         "(tl.zeros(..., dtype=tl.float32)) and convert only once, at the store."),
    Hint(lambda c, args: bool(c.unwritten.any()),
         "Parts of the output were never written: does the grid have cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N) "
         "programs, and does each program find a tile of its own? In grouped order the last group may hold "
         "fewer than GROUP_M tile rows (the min in tile_of)."),
]


# ---------------------------------------------------------------------------------------------------
# The launch rule: tiles, warps and pipeline depth for the chapter's kernel (given code, not the exercise)
# ---------------------------------------------------------------------------------------------------

#: Tiles the rule picks from where ``tl.dot`` uses tensor cores, largest first: (BLOCK_M, BLOCK_N, num_warps).
#: Bigger tiles do more multiply-adds per byte loaded (``BLOCK_M*BLOCK_N/(BLOCK_M+BLOCK_N)`` FLOP per byte) but
#: number fewer; 128 x 256 keeps a 128 KB accumulator in the registers of 8 warps (128 float32 per thread).
TENSOR_CORE_TILES = ((128, 256, 8), (128, 128, 4), (64, 128, 4), (64, 64, 4))
#: Elements along K per step of the K loop on tensor cores: 128 bytes of a 16-bit row, one swizzled line.
TENSOR_CORE_BLOCK_K = 64
#: Program order: groups of 8 tile rows (the GROUP_M experiment's fastest on the recorded H200, with 16).
GROUP_M = 8
#: The pipeline: at most this many K steps in flight (Hopper fits 4 of 128 x 256 x 64), and a tensor-core tile is
#: taken only where at least MIN_STAGES fit in the GPU's shared memory.
MAX_STAGES, MIN_STAGES = 4, 3
#: Under the interpreter: small tiles, so that a CPU run visits several tiles, groups and K steps at small sizes.
INTERPRETER_LAUNCH = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=2, num_warps=4, num_stages=1)
#: Where ``tl.dot`` runs on FMA units (a T4, compute capability 7.5: 64 KB of shared memory, no ``cp.async`` to
#: pipeline with): small tiles, over 8 warps (with 4, a thread's share of the products spills its registers there).
FMA_LAUNCH = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=8, num_warps=8, num_stages=2)
#: Shared memory one program may use, by compute capability (the CUDA programming guide), for when no GPU can be
#: asked (on one, ``shared_memory_per_block_optin`` of its properties).
SHARED_MEMORY_BY_CC = {(7, 5): 65536, (8, 0): 166912, (8, 6): 101376, (8, 7): 166912, (8, 9): 101376,
                       (9, 0): 232448, (10, 0): 232448, (12, 0): 101376}


def shared_memory_per_program(compute_capability: tuple[int, int] | None = None) -> int:
    """Bytes of shared memory one program may use: the running GPU's (given no compute capability), else
    :data:`SHARED_MEMORY_BY_CC`'s entry (the nearest earlier one of the same major version)."""
    if compute_capability is None:
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        optin = getattr(props, "shared_memory_per_block_optin", None)
        if optin:
            return int(optin)
        compute_capability = (props.major, props.minor)
    cc = tuple(compute_capability)
    known = [k for k in SHARED_MEMORY_BY_CC if k[0] == cc[0] and k <= cc]
    return SHARED_MEMORY_BY_CC[max(known)] if known else min(SHARED_MEMORY_BY_CC.values())


def launch_config(m: int, n: int, k: int, dtype: torch.dtype = torch.float16, *, sms: int | None = None,
                  compute_capability: tuple[int, int] | None = None,
                  shared_memory: int | None = None) -> dict[str, int]:
    """Meta-parameters of the chapter's kernel for an [m, k] @ [k, n] product of ``dtype``: ``BLOCK_M``,
    ``BLOCK_N``, ``BLOCK_K``, ``GROUP_M``, ``num_warps``, ``num_stages``, ready for ``kernel[grid](..., **meta)``.

    On a GPU whose ``tl.dot`` uses tensor cores: the largest tile of :data:`TENSOR_CORE_TILES` of which there are
    at least half as many as the GPU has SMs (one wave: a program per SM), so that a small product is not left to
    a few SMs; with as many pipeline stages as fit in shared memory, up to :data:`MAX_STAGES` (a tile that fits
    fewer than :data:`MIN_STAGES` is passed over). Where no tile is numerous enough, the smallest that fits. On an
    H200 (132 SMs, 227 KB): 128 x 256 x 64 with 4 stages at 4096^3, 64 x 128 x 64 at 1024^3. Elsewhere
    :data:`FMA_LAUNCH` (no tensor cores) or :data:`INTERPRETER_LAUNCH`. ``sms``, ``compute_capability`` and
    ``shared_memory`` describe another GPU than this process's (the course's tests use them)."""
    if compute_capability is None:   # this process's GPU
        dev = current()
        if dev.interpreted:
            return dict(INTERPRETER_LAUNCH)
        if dev.compute_capability < (8, 0):
            return dict(FMA_LAUNCH)
        sms = sms or dev.sms or programs_per_wave()[0]
        shared_memory = shared_memory or shared_memory_per_program()
    elif tuple(compute_capability) < (8, 0):
        return dict(FMA_LAUNCH)
    else:
        shared_memory = shared_memory or shared_memory_per_program(tuple(compute_capability))
        if sms is None:
            raise ValueError(_("launch_config for another GPU than this process's needs its SM count (sms)"))
    return dict(_tensor_core_launch(m, n, dtype.itemsize, sms, shared_memory))


@functools.lru_cache(maxsize=4096)
def _tensor_core_launch(m: int, n: int, element_size: int, sms: int, shared_memory: int) -> tuple:
    """:func:`launch_config` on tensor cores, as (name, value) pairs (kept per shape: the host's time per call)."""
    fitting = None
    for block_m, block_n, warps in TENSOR_CORE_TILES:
        stage_bytes = (block_m + block_n) * TENSOR_CORE_BLOCK_K * element_size   # a block of A and one of B
        stages = min(MAX_STAGES, shared_memory // stage_bytes)
        if stages < MIN_STAGES:
            continue
        fitting = dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=TENSOR_CORE_BLOCK_K, GROUP_M=GROUP_M,
                       num_warps=warps, num_stages=stages)
        if 2 * -(-m // block_m) * -(-n // block_n) >= sms:
            break
    if fitting is None:
        raise ValueError(_("no tile of {tiles} fits {stages} stages in {bytes} bytes").format(
            tiles=TENSOR_CORE_TILES, stages=MIN_STAGES, bytes=shared_memory))
    return tuple(fitting.items())


# ---------------------------------------------------------------------------------------------------
# Experiments: the chapter's kernel with chosen meta-parameters
# ---------------------------------------------------------------------------------------------------

def launch(kernel, a: torch.Tensor, b: torch.Tensor, *, aligned: bool = False, programs: int | None = None,
           out: torch.Tensor | None = None, **meta) -> torch.Tensor:
    """relu(a @ b) by ``kernel`` (the signature of chapter 07's ``matmul_relu_kernel``) launched with the
    meta-parameters given (``BLOCK_M``, ``BLOCK_N``, ``BLOCK_K``, ``GROUP_M``, ``num_warps``, ``num_stages``),
    for the experiments. ``aligned`` is passed as ``ALIGNED``; ``programs`` launches only the first that
    many programs (the tiles they write show the program order); ``out`` receives the result."""
    return _launch(kernel, a, b, aligned=aligned, programs=programs, out=out, **meta)[0]


def _launch(kernel, a: torch.Tensor, b: torch.Tensor, *, aligned: bool = False, programs: int | None = None,
            out: torch.Tensor | None = None, **meta) -> tuple[torch.Tensor, object]:
    """:func:`launch`, returning also what the launch returned (the compiled kernel on a GPU, None in the
    interpreter)."""
    m, k = a.shape
    n = b.shape[1]
    c = out if out is not None else torch.empty((m, n), device=a.device, dtype=a.dtype)
    tiles = -(-m // meta["BLOCK_M"]) * -(-n // meta["BLOCK_N"])
    compiled = kernel[(programs if programs is not None else tiles,)](
        a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        ALIGNED=aligned, **meta)
    return c, compiled


def programs_per_wave(kernel=None, a: torch.Tensor | None = None, b: torch.Tensor | None = None,
                      **meta) -> tuple[int, str]:
    """``(programs that run at once, how that was found)``: the running GPU's SM count
    (``multi_processor_count``) times the programs of ``kernel`` launched on ``a``, ``b`` with ``meta`` that fit on
    one SM, as the CUDA driver counts them (one per SM when no kernel is given). Without a GPU, the interpreter
    has no SMs: the figures recorded on a GPU in ``solutions/01_gpu_model/records/01_gpu_model.json`` stand in,
    and the text says so."""
    dev = current()
    if dev.is_gpu:
        props = torch.cuda.get_device_properties(a.device if a is not None else torch.cuda.current_device())
        sms, per_sm = props.multi_processor_count, 1
        if kernel is not None:
            from .occupancy import driver_active_blocks
            per_sm = driver_active_blocks(_launch(kernel, a, b, programs=1, **meta)[1]) or 1
        if kernel is not None:
            return sms * per_sm, _("{gpu}: {sms} SMs x {per_sm} program(s) of this launch per SM = {programs} "
                                   "programs per wave").format(gpu=props.name, sms=sms, per_sm=per_sm,
                                                               programs=sms * per_sm)
        return sms * per_sm, _("{gpu}: {sms} SMs x one program per SM = {programs} programs per wave").format(
            gpu=props.name, sms=sms, programs=sms * per_sm)
    return _recorded_wave(meta)


def _recorded_wave(meta: dict) -> tuple[int, str]:
    """The wave of :func:`programs_per_wave` without a GPU: the recorded GPU's SM count times the programs per
    SM the driver gave there for the same tile, stages and warps (one, if that tile was not recorded)."""
    from .gpus import GPU_SPECS, spec_for
    data, _source = recorded("01_gpu_model")
    spec = spec_for((data or {}).get("device", "")) or GPU_SPECS["H200"]
    path = "solutions/01_gpu_model/records/01_gpu_model.json"
    source = path if data else _("its datasheet ({file} is not here)").format(file=path)
    name = (f"tile_matmul {meta.get('BLOCK_M')}x{meta.get('BLOCK_N')}x{meta.get('BLOCK_K')} "
            f"stages={meta.get('num_stages')}")
    per_sm = next((k["driver_active_blocks"] for k in (data or {}).get("kernels", [])
                   if k["kernel"] == name and k["num_warps"] == meta.get("num_warps")), 1)
    # TRANSLATORS: {source} is a file's path, or "its datasheet (... is not here)".
    return spec.sms * per_sm, _("no GPU: Triton's interpreter has no SM count, so this assumes the {gpu} of "
                                "{source}, {sms} SMs x {per_sm} program(s) per SM = {programs} programs per "
                                "wave").format(gpu=spec.name, source=source, sms=spec.sms, per_sm=per_sm,
                                               programs=spec.sms * per_sm)


def tile_map(c: torch.Tensor, block_m: int, block_n: int) -> list[str]:
    """One text line per tile row: ``#`` for a tile whose outputs were written (not NaN), ``.`` otherwise."""
    rows = []
    for i in range(0, c.shape[0], block_m):
        rows.append("".join("#" if bool(torch.isfinite(c[i:i + block_m, j:j + block_n]).all()) else "."
                            for j in range(0, c.shape[1], block_n)))
    return rows


@dataclass
class CompileReport:
    """What one compilation of a kernel contains, read from its PTX and TTGIR."""

    arch: int
    instructions: Counter                 # PTX opcode -> count (loads, stores, copies, tensor-core ops)
    shared_bytes: int
    shared_layouts: list[str] = field(default_factory=list)
    registers: int | None = None          # per thread, from the cubin (None: no cuobjdump beside Triton)
    stack_bytes: int | None = None        # the stack frame: registers spilled to local memory

    def count(self, prefix: str) -> int:
        """How many instructions start with ``prefix`` (e.g. "cp.async.cg.shared.global", "ld.global")."""
        return sum(n for op, n in self.instructions.items() if op.startswith(prefix))

    @property
    def async_copies(self) -> int:
        """Asynchronous global-to-shared copies (``cp.async``, 16 bytes each here): the software pipeline."""
        return self.count("cp.async.cg.shared.global") + self.count("cp.async.ca.shared.global")

    @property
    def two_byte_loads(self) -> int:
        """Global loads of one 16-bit element at a time (``ld.global.b16``): no vectors, no pipeline."""
        return self.count("ld.global.b16") + self.count("ld.global.u16")

    @property
    def tensor_core_ops(self) -> int:
        return self.count("wgmma.mma_async") + self.count("mma.sync")

    @property
    def tma_loads(self) -> int:
        """Tile copies global -> shared by the TMA unit (``cp.async.bulk.tensor``, Hopper)."""
        return self.count("cp.async.bulk.tensor") - self.tma_stores

    @property
    def tma_stores(self) -> int:
        return sum(n for op, n in self.instructions.items()
                   if op.startswith("cp.async.bulk.tensor") and ".global.shared" in op)

    def summary(self) -> str:
        # TRANSLATORS: one line of the compiler's report; each count is right-aligned in 3 columns.
        return _("sm_{arch}: {async_copies} cp.async of 16 B, {loads} ld.global of 2 B, {wide_stores} 16-byte "
                 "stores, {narrow_stores} 2-byte stores, {tensor_core_ops} tensor-core ops, {shared_kb} KB shared "
                 "memory").format(arch=self.arch, async_copies=f"{self.async_copies:>3}",
                                  loads=f"{self.two_byte_loads:>3}", wide_stores=f"{self.count('st.global.v4'):>3}",
                                  narrow_stores=f"{self.count('st.global.b16'):>3}",
                                  tensor_core_ops=f"{self.tensor_core_ops:>3}",
                                  shared_kb=f"{self.shared_bytes // 1024:>3}")


_TRITON_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}

#: Run in a fresh Python without TRITON_INTERPRET: Triton's interpreter leaves patched language functions
#: behind after a kernel calls a library function such as tl.cdiv, and a compiler in that process trips over them.
_COMPILE_DRIVER = r"""
import json, os, re, subprocess, sys, tempfile, types
from collections import Counter
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
job = json.loads(sys.stdin.read())
module = types.ModuleType("kernel_under_report")
module.__dict__.update(triton=triton, tl=tl)
sys.modules[module.__name__] = module
import linecache
linecache.cache["<kernel_under_report>"] = (len(job["source"]), None, job["source"].splitlines(True),
                                            "<kernel_under_report>")
exec(compile(job["source"], "<kernel_under_report>", "exec"), module.__dict__)
fn = module.__dict__[job["name"]]
out = []
for case in job["cases"]:
    attrs = {(int(k),): [["tt.divisibility", 16]] for k in case["divisible"]}
    src = triton.compiler.ASTSource(fn=fn, signature=case["signature"], constexprs=case["constants"], attrs=attrs)
    compiled = triton.compile(src, target=GPUTarget("cuda", case["arch"], 32),
                              options={"num_warps": case["num_warps"], "num_stages": case["num_stages"]})
    ptx, ttgir = compiled.asm["ptx"], compiled.asm["ttgir"]
    ops = Counter(re.findall(r"^\s*(?:@!?%p\d+\s+)?((?:ld|st|cp|wgmma|mma|ldmatrix)\.[\w.]+)", ptx, re.M))
    layouts = sorted(set(re.findall(r"#ttg\.\w+_shared<\{[^}]*\}>", ttgir)))
    regs = stack = None
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if "cubin" in compiled.asm and os.path.exists(tool):
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(compiled.asm["cubin"])
            f.flush()
            usage = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
        found = re.search(r"REG:(\d+)", usage), re.search(r"STACK:(\d+)", usage)
        regs, stack = (int(m.group(1)) if m else None for m in found)
    out.append({"ops": dict(ops), "shared": int(compiled.metadata.shared), "layouts": layouts, "regs": regs,
                "stack": stack})
print(json.dumps(out))
"""


def _jit_source(kernel) -> tuple[str, str]:
    """(name, source) of a @triton.jit kernel and of the @triton.jit functions it calls, decorators
    replaced by a plain @triton.jit."""
    import inspect
    import textwrap

    seen, parts = set(), []

    def add(obj) -> None:
        fn = getattr(obj, "fn", obj)
        while hasattr(fn, "fn"):          # autotuner / heuristics wrappers
            fn = fn.fn
        if fn.__name__ in seen:
            return
        seen.add(fn.__name__)
        lines = textwrap.dedent(inspect.getsource(fn)).splitlines()
        body = lines[next(i for i, line in enumerate(lines) if line.startswith("def ")):]
        parts.append("@triton.jit\n" + "\n".join(body) + "\n")
        for name in fn.__code__.co_names:
            other = fn.__globals__.get(name)
            if other is not None and type(other).__name__ in ("JITFunction", "InterpretedFunction"):
                add(other)

    add(kernel)
    return getattr(getattr(kernel, "fn", kernel), "__name__"), "\n\n".join(reversed(parts))


def _arg_names(kernel) -> list[str]:
    import inspect

    fn = getattr(kernel, "fn", kernel)
    while hasattr(fn, "fn"):
        fn = fn.fn
    return list(inspect.signature(fn).parameters)


def compile_reports(kernel, cases: Sequence[dict]) -> list[CompileReport]:
    """Compile chapter 07's ``kernel`` once per case and read what the compiler produced (see
    :func:`compile_report` for a case's keys), all in one fresh Python process."""
    names = _arg_names(kernel)
    jobs = []
    for case in cases:
        case = dict(case)
        m, n, k = case.pop("m"), case.pop("n"), case.pop("k")
        aligned = case.pop("aligned")
        arch = case.pop("arch", 90)
        dtype = case.pop("dtype", torch.float16)
        a_strides = (1, m) if case.pop("transpose_a", False) else (k, 1)
        b_strides = (1, k) if case.pop("transpose_b", False) else (n, 1)
        num_warps, num_stages = case.pop("num_warps", 8), case.pop("num_stages", 3)
        ints = {"M": m, "N": n, "K": k, "stride_am": a_strides[0], "stride_ak": a_strides[1],
                "stride_bk": b_strides[0], "stride_bn": b_strides[1], "stride_cm": n, "stride_cn": 1}
        meta = dict(case, ALIGNED=aligned)
        signature, constants, divisible = {}, {}, []
        for i, arg in enumerate(names):
            if arg.endswith("_ptr"):
                signature[arg] = "*" + _TRITON_DTYPES[dtype]
                divisible.append(i)   # torch allocations are aligned to far more than 16 bytes
            elif arg in ints and ints[arg] == 1:
                signature[arg], constants[arg] = "constexpr", 1
            elif arg in ints:
                signature[arg] = "i32"
                if ints[arg] % 16 == 0:
                    divisible.append(i)
            else:
                signature[arg], constants[arg] = "constexpr", meta[arg]
        jobs.append({"signature": signature, "constants": constants, "divisible": divisible, "arch": arch,
                     "num_warps": num_warps, "num_stages": num_stages})
    return _run_compile_driver(kernel, jobs)


def _run_compile_driver(kernel, jobs: list[dict]) -> list[CompileReport]:
    """Compile ``kernel`` once per job (signature, constants, divisible, arch, num_warps, num_stages) in a
    fresh Python process, and read what the compiler produced."""
    import os
    import subprocess
    import sys

    name, source = _jit_source(kernel)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", _COMPILE_DRIVER], input=json.dumps(
        {"name": name, "source": source, "cases": jobs}), capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.strip().splitlines() if line.strip()][-6:]
        # TRANSLATORS: {error} is the last lines of the compiler's own message, indented.
        raise CheckFailed(_("compiling {kernel} for the report failed:\n  {error}").format(
            kernel=name, error="\n  ".join(lines)))
    return [CompileReport(job["arch"], Counter(r["ops"]), r["shared"], r["layouts"], r.get("regs"), r.get("stack"))
            for job, r in zip(jobs, json.loads(proc.stdout.strip().splitlines()[-1]))]


def compile_tma_reports(kernel, cases: Sequence[dict]) -> list[CompileReport]:
    """Compile the fast path's Hopper kernel (:mod:`triton_course.matmul_fast`'s ``matmul_relu_tma_kernel``:
    descriptors of a, b, b's extra columns, c and c's extra columns, then the pieces' buffer and five integers)
    once per case:
    ``tile`` (its meta-parameters, ``num_stages`` and ``num_warps`` among them), ``transpose_b``,
    ``split_tail``, and optionally ``dtype`` (float16), ``programs`` (132) and ``arch`` (90). Needs no GPU."""
    jobs = []
    names = _arg_names(kernel)
    for case in cases:
        tile = dict(case["tile"])
        dt = _TRITON_DTYPES[case.get("dtype", torch.float16)]
        bm, bn, bk = tile["BLOCK_M"], tile["BLOCK_N"], tile["BLOCK_K"]
        b_t = case.get("transpose_b", False)
        half = bn // 2 if tile.get("HALVES") else bn
        extra = tile.pop("EXTRA_N", 0)
        e = extra or bn
        signature = {"a_desc": f"tensordesc<{dt}[{bm}, {bk}]>",
                     "b_desc": f"tensordesc<{dt}[{bn}, {bk}]>" if b_t else f"tensordesc<{dt}[{bk}, {bn}]>",
                     "b2_desc": f"tensordesc<{dt}[{e}, {bk}]>" if b_t else f"tensordesc<{dt}[{bk}, {e}]>",
                     "c_desc": f"tensordesc<{dt}[{bm}, {half}]>",
                     "c2_desc": f"tensordesc<{dt}[{bm}, {extra or half}]>",
                     "partial_ptr": "*fp32"}
        num_warps, num_stages = tile.pop("num_warps"), tile.pop("num_stages")
        constants = dict(tile, EXTRA_N=extra, B_T=b_t, PROGRAMS=case.get("programs", 132),
                         SPLIT_TAIL=case["split_tail"])
        for arg in names:
            if arg not in signature:
                signature[arg] = "constexpr" if arg in constants else "i32"
        divisible = [i for i, arg in enumerate(names) if arg.endswith("_ptr")]
        jobs.append({"signature": signature, "constants": constants, "divisible": divisible,
                     "arch": case.get("arch", 90), "num_warps": num_warps, "num_stages": num_stages})
    return _run_compile_driver(kernel, jobs)


def compile_report(kernel, *, m: int, n: int, k: int, aligned: bool, **case) -> CompileReport:
    """Compile chapter 07's ``kernel`` for GPU architecture ``arch`` (default 90: H100/H200) the way Triton
    would for contiguous (``transpose_a``/``transpose_b``: column-major) operands of these sizes, with
    ``ALIGNED=aligned`` and the given meta-parameters (``BLOCK_M``, ..., ``num_warps``, ``num_stages``),
    and read what the compiler produced.

    Triton specialises each integer argument on its value: 1 becomes a constant, a multiple of 16 is
    marked divisible by 16, anything else (3000, say) is just an integer; a pointer aligned to 16 bytes is
    marked so. Compiling needs no GPU (Triton ships the PTX assembler), so this runs on a laptop too.
    """
    return compile_reports(kernel, [dict(case, m=m, n=n, k=k, aligned=aligned)])[0]


# ---------------------------------------------------------------------------------------------------
# Shared-memory banks
# ---------------------------------------------------------------------------------------------------

BANKS, BANK_BYTES = 32, 4


def wavefronts(byte_addresses: Sequence[int], access_bytes: int = 16) -> int:
    """Shared-memory passes one warp-wide access needs: each thread reads ``access_bytes`` from its address;
    shared memory serves one 4-byte word per bank per pass, so the pass count is the largest number of
    different words any one of the 32 banks holds (1: conflict-free)."""
    words_by_bank: dict[int, set[int]] = {}
    for address in byte_addresses:
        for word in range(address // BANK_BYTES, (address + access_bytes - 1) // BANK_BYTES + 1):
            words_by_bank.setdefault(word % BANKS, set()).add(word)
    return max(len(words) for words in words_by_bank.values())


# ---------------------------------------------------------------------------------------------------
# Kernel names in a profiler table
# ---------------------------------------------------------------------------------------------------

def kernel_table(fn: Callable[..., object], *args: object, calls: int = 3) -> list[dict[str, object]]:
    """The GPU kernels ``fn(*args)`` launches, from ``torch.profiler`` over ``calls`` calls (after a warm-up
    call): ``[{"name", "calls", "us_per_call"}]``, longest first. Needs a CUDA GPU."""
    from torch.profiler import ProfilerActivity, profile

    from .device import require_gpu

    require_gpu(_("Profiling kernels"))
    fn(*args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _call in range(calls):
            fn(*args)
        torch.cuda.synchronize()
    rows = []
    for event in prof.key_averages():
        device_us = getattr(event, "device_time_total", None)
        if device_us is None:
            device_us = getattr(event, "cuda_time_total", 0)
        if device_us and event.count:
            rows.append({"name": event.key, "calls": event.count // calls or event.count,
                         "us_per_call": round(device_us / calls, 1)})
    return sorted(rows, key=lambda r: -r["us_per_call"])


#: (pattern, what a match says): tokens of GPU kernel names, read the way the CUTLASS profiler documents
#: its own kernel names (media/docs/cpp/profiler.md, "CUTLASS 3.0 GEMM procedural names"). cuBLAS's own
#: names (sm90_xmma_..., nvjet_...) are not documented; where they use the same tokens, reading them the
#: same way is an analogy, not a specification.
NAME_TOKENS: list[tuple[str, Callable[[re.Match], str]]] = [
    (r"^triton_tem_", lambda m: _("torch.compile (Inductor): a Triton template kernel (its matmul template); "
                                  "the words after 'fused_' name the operations fused into it")),
    (r"^triton_poi_", lambda m: _("torch.compile (Inductor): a generated Triton pointwise kernel")),
    (r"^triton_(?:red|per)_", lambda m: _("torch.compile (Inductor): a generated Triton reduction kernel")),
    (r"^nvjet", lambda m: _("cuBLAS (CUDA 12.8 and newer): one of its 'nvjet' GEMM kernels; the name format "
                            "is not documented")),
    (r"xmma", lambda m: _("cuBLAS: an NVIDIA-internal tensor-core GEMM kernel; the name format is not documented")),
    (r"^cutlass", lambda m: _("CUTLASS: named by the documented CUTLASS convention")),
    (r"at::native::.*elementwise", lambda m: _("PyTorch's own CUDA kernel for an element-wise operation "
                                                "(here the ReLU, as clamp_min)")),
    # TRANSLATORS: {major}.{minor} is a compute capability such as 9.0.
    (r"sm_?(\d)(\d{1,2})(?!\d)", lambda m: _("built for compute capability {major}.{minor} "
                                              "(sm_{major}{minor})").format(major=m[1], minor=m[2])),
    # TRANSLATORS: {dtypes} lists the data-type tokens of a kernel name, such as "f16 f16 f32".
    (r"tf32|bf16|f16|f32|e4m3|e5m2", lambda m: _("data types, in order: {dtypes}").format(
        dtypes=" ".join(re.findall(r"tf32|bf16|f16|f32|e4m3|e5m2", m.string)))),
    (r"(?<![\dx])(\d+)x(\d+)x(\d+)(?![\dx])", lambda m: _("a tile of {m} x {n} x {k}: CUTLASS writes its "
                                                          "thread-block tile M x N x K this way").format(
        m=m[1], n=m[2], k=m[3])),
    (r"_(\d{2,3})x(\d{2,3})_", lambda m: _("a tile {m} x {n} (M x N, by analogy with CUTLASS's tile)").format(
        m=m[1], n=m[2])),
    # TRANSLATORS: {layouts} is a token such as "tn"; n and t stay as they are.
    (r"_(tn|nt|nn|tt|ntn|tnn|nnn|ttn|tnt|nnt|NN|NT|TN|TT|NNT|NTN|TNT|TTN)(?=_|$)",
     lambda m: _("operand layouts {layouts}: n = column-major, t = row-major, as column-major BLAS sees them "
                 "(a row-major PyTorch matrix is a transposed column-major one)").format(layouts=m[1])),
    (r"warpspecialized|coop|pingpong", lambda m: _("a Hopper schedule: warp-specialised warps that load while "
                                                   "others compute (cooperative or ping-pong)")),
]


def read_kernel_name(name: str) -> list[str]:
    """What the tokens of a kernel name say, one line per token found (see :data:`NAME_TOKENS`). A Triton
    kernel of your own is named after its Python function, so none of these apply to it."""
    return [say(match) for pattern, say in NAME_TOKENS if (match := re.search(pattern, name))]


# ---------------------------------------------------------------------------------------------------
# Recorded figures
# ---------------------------------------------------------------------------------------------------

SWEEP_FILE = "07_matmul_relu_sweep.json"
FOCUS_FILE = "07_matmul_relu_focus.json"
ALIGNMENT_FILE = "07_matmul_relu_alignment.json"


def _recorded_07(file: str, made_by: str) -> tuple[dict | None, str]:
    """:func:`triton_course.gpus.recorded` for one of chapter 07's records other than its own
    (``solutions/07_matmul_relu/records/<file>``)."""
    from .gpus import record_path

    path = record_path("07_matmul_relu", file.removesuffix(".json"))
    shown = f"solutions/07_matmul_relu/records/{path.name}"
    if not path.exists():
        return None, _("no recorded figures: {file} is not in this copy of the course; it is made on a GPU by "
                       "`{command}`").format(file=shown, command=made_by)
    data = json.loads(path.read_text())
    where = data.get("device", "GPU").replace("NVIDIA ", "")
    return data, recorded_on(where, shown, data.get("command", "?"))


def recorded_sweep() -> tuple[dict | None, str]:
    """``(solutions/07_matmul_relu/records/07_matmul_relu_sweep.json as a dict, "recorded on an H200 (..., made by
    `...`)")``, or ``(None, why)`` when this copy of the course has no such file. Its "reference" is the fast path
    (:mod:`triton_course.matmul_fast`)."""
    return _recorded_07(SWEEP_FILE, "python lab/sweeps/matmul_sweep.py")


def recorded_focus() -> tuple[dict | None, str]:
    """``(solutions/07_matmul_relu/records/07_matmul_relu_focus.json as a dict, "recorded on an H200 (...)")``: the
    fast path's Hopper tiles (:mod:`triton_course.matmul_fast`, "reference" in the file) and its candidate tiles
    at the shapes where the first sweep fell short; ``(None, why)`` without it."""
    return _recorded_07(FOCUS_FILE, "python lab/sweeps/matmul_sweep.py --focus")


def recorded_alignment() -> tuple[dict | None, str]:
    """``(solutions/07_matmul_relu/records/07_matmul_relu_alignment.json as a dict, "recorded on an H200 (...)")``:
    the fast path ("reference" in the file) and cuBLAS at sizes near 3000 and at 3000^3 with every row moved onto
    a 128-byte boundary; ``(None, why)`` without it."""
    return _recorded_07(ALIGNMENT_FILE, "python lab/sweeps/matmul_alignment.py")
