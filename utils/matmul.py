"""Matrix-multiplication helpers for chapter 07: FLOP counts, TFLOP/s sweeps and plots, the graded check.

A matmul is judged by arithmetic, not bytes: ``C = A @ B`` with A [M, K] and B [K, N] does ``2*M*N*K``
floating-point operations (one multiply and one add per term), and TFLOP/s is that count over the
median time. The yardstick is the vendor library measured in the same process (cuBLAS through
``torch``), because a matmul is compute bound and the datasheet peak is never reached in practice.

* :func:`matmul_flops`, :func:`matmul_bytes`, :func:`tflops` -- the budget and the unit;
* :func:`dot_uses_tensor_cores` -- whether ``tl.dot`` reaches tensor cores on this device;
* :func:`flops_sweep` and :func:`plot_flops` -- TFLOP/s against size for several implementations;
* :func:`tflops_points` -- the performance check of a hidden test (a fraction of torch's TFLOP/s).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from .bench import Sweep, flops_sweep, steady_rounds, time_ms  # noqa: F401 -- re-exported for chapter 07
from .checks import CheckFailed, explain_exception
from .device import current
from .grading import NOT_GRADED, quiet_stderr, require_launch_per_call
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
        from grader.judge_timing import timing_on_cpu

        on_cpu = dev.interpreted and timing_on_cpu()
    else:
        on_cpu = False
    if dev.interpreted and not on_cpu:
        print(f"{NOT_GRADED}: the speed of {what} can only be measured on a CUDA GPU, and this run used "
              f"Triton's interpreter on the CPU. 0 of {points:g} points are awarded for it here; the "
              "instructor grades it on a GPU.")
        return 0.0
    if remote and (reference is None or tolerances is None):
        raise CheckFailed(f"{what}: this hidden test gives no reference to check the timed outputs with "
                          "(a bug of the course, not of your code)")
    if not dev.interpreted and not dot_uses_tensor_cores():
        print(f"{NOT_GRADED}: on {dev.name} tl.dot runs on FMA units (no tensor cores with current Triton) "
              f"while {baseline_name} uses tensor cores, so {what} is not compared with it here. 0 of "
              f"{points:g} points are awarded on this GPU; the instructor grades it on an sm_80 or newer GPU.")
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
    verdict = (f"{what}: {ours:,.1f} TFLOP/s = {ours / theirs:.0%} of {baseline_name} ({theirs:,.1f} TFLOP/s); "
               f"target {fraction:.0%}")
    if ours < fraction * theirs:
        raise CheckFailed(verdict + ". Are the tiles large enough (at least 64x64) for tensor cores, is "
                          "the accumulator float32, and do the autotuning configs include pipelining "
                          "(num_stages 3-4) and grouped ordering?")
    print(verdict + ": passed")
    return float(points)


def _remote_tflops(fn, baseline: Callable[..., object], make_inputs: Callable[[], Sequence[object]], flops: int,
                   *, fraction: float, what: str, reference, tolerances) -> tuple[float, float]:
    """(TFLOP/s of the student's proxy ``fn``, TFLOP/s of ``baseline``) for the judge.

    The baseline is trusted code, timed here on the judge's own GPU (the GPU the student's kernel uses);
    the student's function is timed in verified rounds (:func:`grader.judge_timing.best_verified_ms`),
    stopping at the first that reaches ``fraction`` of the baseline: its best round counts."""
    import time

    import torch

    from grader.judge_timing import best_verified_ms

    templates = list(make_inputs())
    with quiet_stderr(), fn.session.gpu_lock.exclusive():
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
    ours = tflops(flops, best_verified_ms(fn, templates, reference, tolerances, what=what,
                                          good_enough=lambda ms: tflops(flops, ms) >= fraction * theirs))
    return ours, theirs


def plot_flops(sweep: Sweep, title: str, ax=None, peak_tflops: float | None = None):
    """TFLOP/s against size: :func:`triton_course.plots.plot_sweep` with the datasheet's matrix peak as ceiling."""
    return plot_sweep(sweep, title, ax=ax, peak_tflops=peak_tflops)
