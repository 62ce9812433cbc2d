"""Timing kernels the way the course reports them.

* :func:`time_ms` -- median of repeated runs, timed with CUDA events by ``triton.testing.do_bench``,
  which also flushes the L2 cache before every run (so we measure HBM, not cache).
* :func:`gbps` -- bandwidth from the bytes that *must* move: each input read once, each output
  written once. Extra traffic a kernel causes shows up as a lower GB/s, which is the point.
* :func:`copy_bandwidth` -- the ceiling: a device-to-device copy measured in this process. Targets are
  fractions of it, so they mean the same on a T4 and on an H200.
* :func:`bandwidth_sweep` -- GB/s against problem size for several implementations, for the plots.

Under Triton's interpreter nothing here measures the GPU; :func:`bandwidth_sweep` then times one run
with the host clock, so the plot still draws, and says that its numbers are not performance.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import torch

from utils.device import current, require_gpu

#: Set by the grader so that every submission in one run is held to the same calibrated ceiling.
COPY_GBPS_ENV = "COURSE_COPY_GBPS"


_LAST_TIMED = [0.0]


def _spin_up(ms: float = 100.0) -> None:
    """Keep the GPU busy for ``ms`` so that its clocks are up before a timing starts.

    An idle GPU drops its clocks (an H200 idles at 345 MHz); after a few seconds of host work, such as
    a torch.compile, the first microsecond-scale kernels timed would otherwise run at a fraction of
    their speed. Skipped when the previous timing ended less than a second ago.
    """
    if time.perf_counter() - _LAST_TIMED[0] < 1.0:
        return
    buf = torch.empty(2**24, device="cuda")
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        for _ in range(20):
            buf.mul_(1.0)
        torch.cuda.synchronize()
    del buf


def time_ms(fn: Callable[[], object], *, warmup_ms: int = 25, rep_ms: int = 100) -> float:
    """Median milliseconds per call of ``fn`` on the GPU (events, L2 flushed, warm-up excluded)."""
    require_gpu("Timing a kernel")
    import triton.testing
    _spin_up()
    ms = float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))
    _LAST_TIMED[0] = time.perf_counter()
    return ms


def gbps(nbytes: int | float, ms: float) -> float:
    """Gigabytes (1e9 bytes) per second for ``nbytes`` moved in ``ms`` milliseconds."""
    return nbytes / (ms * 1e-3) / 1e9


@lru_cache(maxsize=None)
def copy_bandwidth() -> float:
    """Device-to-device copy bandwidth in GB/s (bytes read + bytes written), measured here once.

    The grader may fix it for a whole run through the ``COURSE_COPY_GBPS`` environment variable.
    """
    if os.environ.get(COPY_GBPS_ENV):
        return float(os.environ[COPY_GBPS_ENV])
    require_gpu("Measuring copy bandwidth")
    free, _ = torch.cuda.mem_get_info()
    n = 2**28 if free > 8 * 2**30 else 2**26   # 1 GiB or 256 MiB of fp32: far larger than any L2
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), rep_ms=200)
    del src, dst
    torch.cuda.empty_cache()
    return gbps(2 * n * 4, ms)


def measure_gbps(fn: Callable[..., object], make_inputs: Callable[[], Sequence[object]], nbytes: int,
                 *, input_sets: int = 3) -> float:
    """GB/s of ``fn(*inputs)``: the median over ``input_sets`` fresh input sets of each set's median time."""
    times = []
    for _ in range(input_sets):
        inputs = make_inputs()
        times.append(time_ms(lambda: fn(*inputs)))
        del inputs
    return gbps(nbytes, statistics.median(times))


@dataclass
class Sweep:
    """Throughput of several implementations by problem size: GB/s or TFLOP/s on a GPU; under the
    interpreter the same quantity by host clock (the plot and the table say it is not GPU performance)."""

    sizes: list[int]
    xlabel: str
    series: dict[str, list[float]] = field(default_factory=dict)
    interpreted: bool = False
    copy_gbps: float | None = None
    unit: str = "GB/s"

    def table(self) -> str:
        names = list(self.series)
        width = max(14, *(len(n) + 2 for n in names)) if names else 14
        head = f"{self.xlabel:>12} " + " ".join(f"{n:>{width}}" for n in names)
        fmt = "{:>%d.3g}" % width if self.interpreted or self.unit != "GB/s" else "{:>%d,.0f}" % width
        rows = [head] + [f"{s:>12} " + " ".join(fmt.format(self.series[n][i]) for n in names)
                         for i, s in enumerate(self.sizes)]
        unit = f"{self.unit} by host clock (interpreter: not GPU performance)" if self.interpreted else self.unit
        return "\n".join(rows + [unit])


_SCALE = {"GB/s": 1e9, "TFLOP/s": 1e12}


def throughput_sweep(impls: dict[str, Callable[..., object]], make_inputs: Callable[[int], Sequence[object]],
                     work: Callable[[int], float], sizes: Sequence[int], xlabel: str = "size",
                     unit: str = "GB/s") -> Sweep:
    """Time every implementation at every size and divide ``work(size)`` (bytes for GB/s, FLOPs for
    TFLOP/s) by the median time. Each implementation is called once before it is timed, so compilation
    and autotuning stay out of the numbers; under the interpreter one call is timed by the host clock."""
    interpreted = current().interpreted
    sweep = Sweep(list(sizes), xlabel, {name: [] for name in impls}, interpreted,
                  None if interpreted or unit != "GB/s" else copy_bandwidth(), unit)
    for size in sizes:
        inputs = make_inputs(size)
        for name, fn in impls.items():
            if interpreted:
                start = time.perf_counter()
                fn(*inputs)
                ms = (time.perf_counter() - start) * 1e3
            else:
                fn(*inputs)
                ms = time_ms(lambda: fn(*inputs))
            sweep.series[name].append(work(size) / (ms * 1e-3) / _SCALE[unit])
        del inputs
    return sweep


def bandwidth_sweep(impls: dict[str, Callable[..., object]], make_inputs: Callable[[int], Sequence[object]],
                    nbytes: Callable[[int], int], sizes: Sequence[int], xlabel: str = "size") -> Sweep:
    """GB/s of every implementation at every size, from the bytes that must move (``nbytes(size)``)."""
    return throughput_sweep(impls, make_inputs, nbytes, sizes, xlabel, "GB/s")


def flops_sweep(impls: dict[str, Callable[..., object]], make_inputs: Callable[[int], Sequence[object]],
                flops: Callable[[int], float], sizes: Sequence[int], xlabel: str = "size") -> Sweep:
    """TFLOP/s of every implementation at every size, from the FLOPs that must be done (``flops(size)``)."""
    return throughput_sweep(impls, make_inputs, flops, sizes, xlabel, "TFLOP/s")
