"""Timing kernels the way the course reports them.

* :func:`steady_ms` -- milliseconds per call of a kernel running back to back, as it would inside a
  model: many calls queued while the GPU is held busy (so the host never sets the pace), on rotating
  input sets that together are several times the L2 (so every call reads from HBM), each call charged
  for writing back its own output. Every GB/s and TFLOP/s the course reports comes from it.
* :func:`steady_rounds` -- the same for several implementations on the same inputs, timed in turn.
* :func:`time_ms` -- one call at a time: the median of ``triton.testing.do_bench`` (CUDA events, the L2
  emptied before every call). Chapter 02 teaches it; it suits kernels long enough that a few
  microseconds around each call do not matter.
* :func:`gbps` -- bandwidth from the bytes that *must* move: each input read once, each output
  written once. Extra traffic a kernel causes shows up as a lower GB/s, which is the point.
* :func:`copy_bandwidth` -- the ceiling: a device-to-device copy measured in this process the same way.
  Targets are fractions of it, so they mean the same on a T4 and on an H200.
* :func:`bandwidth_sweep` -- GB/s against problem size for several implementations, for the plots.

Why not do_bench for bandwidth: it empties the L2 by *writing* a buffer, which leaves the L2 full of
dirty lines that the timed kernel then writes back for it, and emptying it by *reading* instead leaves
part of the kernel's own output unwritten in the L2 when the timing stops. On an H200, for 64 MB of
traffic, the first reads 9% under the steady state and the second 4% over
(``solutions/02_benchmarking/records/02_benchmarking_timing_method.json``, from ``lab/sweeps/timing_method.py``).

Under Triton's interpreter nothing here measures the GPU; :func:`bandwidth_sweep` then times one run
with the host clock, so the plot still draws, and says that its numbers are not performance.
"""

from __future__ import annotations

import collections
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import torch

from .device import current, require_gpu
from .i18n import _

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
    # TRANSLATORS: the subject of "... needs a CUDA GPU; this session runs Triton's interpreter on the CPU."
    require_gpu(_("Timing a kernel"))
    import triton.testing
    _spin_up()
    ms = float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))
    _LAST_TIMED[0] = time.perf_counter()
    return ms


#: How the course measures throughput, as recorded in every results file.
METHOD = ("triton_course.bench.steady_ms: back-to-back calls queued behind a GPU sleep, on rotating input sets of "
          "4x the L2, each charged for its write-backs (a read flush closes the timed region, a clean "
          "flush timed alone is subtracted); median of rounds. Bytes that must move: each input read "
          "once, each output written once")
#: The rotating input sets add up to this many L2 sizes, so no call finds its inputs in the L2.
ROTATE_L2S = 4
#: GPU time one timed round aims for, and the bounds on its number of calls.
ROUND_MS = 2.0
MIN_CALLS, MAX_CALLS = 8, 256
#: Bytes read to empty the L2: several times the largest L2 (60 MB on an H200).
FLUSH_BYTES = 256 * 2**20


def tensor_bytes(obj: object) -> int:
    """Bytes held by the tensors in ``obj`` (a tensor, or a tuple/list of them and other values)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (tuple, list)):
        return sum(tensor_bytes(o) for o in obj)
    return 0


def sleep_cycles_per_ms() -> float:
    """Clock cycles ``torch.cuda._sleep`` spins per millisecond on this GPU, measured with events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(1_000_000)
    end.record()
    torch.cuda.synchronize()
    return 1_000_000 / max(start.elapsed_time(end), 1e-3)


def rotating_sets(make_inputs: Callable[[], Sequence[object]], first: tuple, out_bytes: int, *,
                  l2s: float = ROTATE_L2S, max_sets: int = 64) -> list[tuple]:
    """``first`` and more input sets from ``make_inputs()``: as many as, with an output of ``out_bytes`` each, add
    up to ``l2s`` L2 sizes (2 to ``max_sets``), so that no timed call finds its data in the L2."""
    per_set = tensor_bytes(first) + out_bytes
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    n_sets = min(max_sets, max(2, math.ceil(l2s * l2 / max(per_set, 1))))
    return [first] + [tuple(make_inputs()) for _ in range(n_sets - 1)]


def call_plan(fn: Callable[..., object], sets: Sequence[tuple]) -> tuple[int, float]:
    """(calls per timed round, host milliseconds per call) for ``fn``, from one warm-up call on every input set:
    the calls of a round aim at :data:`ROUND_MS` of GPU time (events), at least :data:`MIN_CALLS` and one per set,
    at most :data:`MAX_CALLS`."""
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    host = time.perf_counter()
    start.record()
    kept = [fn(*inputs) for inputs in sets]
    end.record()
    host_ms = (time.perf_counter() - host) * 1e3 / len(sets)
    torch.cuda.synchronize()
    del kept
    gpu_ms = max(start.elapsed_time(end) / len(sets), 1e-3)
    return min(MAX_CALLS, max(MIN_CALLS, len(sets), math.ceil(ROUND_MS / gpu_ms))), host_ms


def steady_rounds(fns: dict[str, Callable[..., object]], make_inputs: Callable[[], Sequence[object]], *,
                  rounds: int = 7) -> dict[str, list[float]]:
    """Milliseconds per call of each function, in back-to-back calls: ``{name: [ms of each round]}``.

    Every function runs on the same rotating input sets (from ``make_inputs()``, fresh random data, as
    many sets as make up :data:`ROTATE_L2S` L2 sizes), and the functions are timed in turn, round after
    round, so that clocks and temperature treat them alike. In a round, the GPU first sleeps while the
    host queues all the calls (its launch overhead stays out, as it does inside a model), the calls run
    back to back, and a read of a buffer larger than the L2 writes back whatever output they left in it.
    A round's time is the span from the first call to the end of that flush, less a flush timed alone
    on a clean L2, divided by the calls. Outputs are kept for as many calls as there are input sets, so
    they rotate through fresh memory too. The first call of each function (compilation, autotuning)
    happens before any timing.

    Resolution: a few percent, not better. On an H200 one compiled RMSNorm launch, called through two
    launchers of different host cost, timed 4-6% apart, and the same launcher at three places in a round
    up to 20% apart (solutions/06_rmsnorm/records/06_rmsnorm_timing_position.json). Good enough to tell a kernel from PyTorch's; for
    comparisons at the 2% level, lab/sweeps/graph_timing.py replays each function from a CUDA graph.
    """
    require_gpu(_("Timing a kernel"))
    _spin_up()
    first = tuple(make_inputs())
    out_bytes = max(tensor_bytes(fn(*first)) for fn in fns.values())     # compile / autotune, untimed
    sets = rotating_sets(make_inputs, first, out_bytes)
    n_sets = len(sets)
    flush = torch.empty(FLUSH_BYTES // 4, device="cuda")
    cycles_per_ms = sleep_cycles_per_ms()
    plans = {}
    for name, fn in fns.items():        # warm up on every set; estimate GPU and host time per call
        calls, host_ms = call_plan(fn, sets)
        plans[name] = [calls, host_ms * calls * 1.5 + 1.0]      # calls, sleep in ms
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _round in range(rounds):
        for name, fn in fns.items():
            for _attempt in range(4):   # a round in which the host fell behind the GPU is redone
                calls, sleep_ms = plans[name]
                kept = collections.deque(maxlen=n_sets)
                flush.sum()
                torch.cuda.synchronize()
                marks = [torch.cuda.Event(enable_timing=True) for _mark in range(4)]
                marks[0].record()
                flush.sum()                             # a flush on a clean L2, timed alone
                marks[1].record()
                torch.cuda._sleep(int(sleep_ms * cycles_per_ms))
                marks[2].record()
                host = time.perf_counter()
                for i in range(calls):
                    kept.append(fn(*sets[i % n_sets]))
                host_ms = (time.perf_counter() - host) * 1e3
                flush.sum()                             # writes back what the calls left dirty
                marks[3].record()
                torch.cuda.synchronize()
                del kept
                if host_ms < 0.9 * marks[1].elapsed_time(marks[2]):
                    break
                plans[name][1] = 2 * max(sleep_ms, host_ms)
            times[name].append(max((marks[2].elapsed_time(marks[3]) - marks[0].elapsed_time(marks[1])) / calls,
                                   1e-6))
    del sets, flush
    _LAST_TIMED[0] = time.perf_counter()
    return times


def steady_ms(fn: Callable[..., object], make_inputs: Callable[[], Sequence[object]], *,
              rounds: int = 7) -> float:
    """Median milliseconds per call of ``fn(*inputs)`` running back to back (see :func:`steady_rounds`)."""
    return statistics.median(steady_rounds({"fn": fn}, make_inputs, rounds=rounds)["fn"])


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
    require_gpu(_("Measuring copy bandwidth"))
    free, _total = torch.cuda.mem_get_info()
    n = 2**28 if free > 16 * 2**30 else 2**26   # 1 GiB or 256 MiB of fp32 a tensor: far larger than any L2
    ms = steady_ms(torch.clone, lambda: (torch.randn(n, device="cuda"),), rounds=5)
    torch.cuda.empty_cache()
    return gbps(2 * n * 4, ms)


def measure_gbps(fn: Callable[..., object], make_inputs: Callable[[], Sequence[object]], nbytes: int) -> float:
    """GB/s of ``fn(*inputs)`` running back to back on fresh inputs from ``make_inputs`` (:func:`steady_ms`)."""
    return gbps(nbytes, steady_ms(fn, make_inputs))


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
        unit = _("{unit} by host clock (interpreter: not GPU performance)").format(unit=self.unit) \
            if self.interpreted else self.unit
        return "\n".join(rows + [unit])


_SCALE = {"GB/s": 1e9, "TFLOP/s": 1e12}


def throughput_sweep(impls: dict[str, Callable[..., object]], make_inputs: Callable[[int], Sequence[object]],
                     work: Callable[[int], float], sizes: Sequence[int], xlabel: str = "size",
                     unit: str = "GB/s", per_call: bool = False) -> Sweep:
    """Time every implementation at every size and divide ``work(size)`` (bytes for GB/s, FLOPs for
    TFLOP/s) by its time per call: on a GPU, :func:`steady_rounds` of all implementations on the same
    fresh inputs of each size (compilation and autotuning stay out of the numbers), or with
    ``per_call`` :func:`time_ms` of one call at a time (do_bench: launch overhead shows wherever the
    host is slower than the GPU); under the interpreter one call timed by the host clock."""
    interpreted = current().interpreted
    sweep = Sweep(list(sizes), xlabel, {name: [] for name in impls}, interpreted,
                  None if interpreted or unit != "GB/s" else copy_bandwidth(), unit)
    for size in sizes:
        if interpreted:
            inputs = make_inputs(size)
            times = {}
            for name, fn in impls.items():
                start = time.perf_counter()
                fn(*inputs)
                times[name] = (time.perf_counter() - start) * 1e3
            del inputs
        elif per_call:
            inputs = make_inputs(size)
            times = {}
            for name, fn in impls.items():
                fn(*inputs)
                times[name] = time_ms(lambda: fn(*inputs))
            del inputs
        else:
            times = {name: statistics.median(t) for name, t in
                     steady_rounds(impls, lambda: make_inputs(size), rounds=5).items()}
        for name in impls:
            sweep.series[name].append(work(size) / (times[name] * 1e-3) / _SCALE[unit])
    return sweep


def bandwidth_sweep(impls: dict[str, Callable[..., object]], make_inputs: Callable[[int], Sequence[object]],
                    nbytes: Callable[[int], int], sizes: Sequence[int], xlabel: str = "size", *,
                    per_call: bool = False) -> Sweep:
    """GB/s of every implementation at every size, from the bytes that must move (``nbytes(size)``);
    ``per_call`` times one call at a time with do_bench instead of back to back (chapter 02)."""
    return throughput_sweep(impls, make_inputs, nbytes, sizes, xlabel, "GB/s", per_call)


def flops_sweep(impls: dict[str, Callable[..., object]], make_inputs: Callable[[int], Sequence[object]],
                flops: Callable[[int], float], sizes: Sequence[int], xlabel: str = "size") -> Sweep:
    """TFLOP/s of every implementation at every size, from the FLOPs that must be done (``flops(size)``)."""
    return throughput_sweep(impls, make_inputs, flops, sizes, xlabel, "TFLOP/s")
