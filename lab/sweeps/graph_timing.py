"""Side-by-side timing with no host in the timed region: each function's calls replayed from a CUDA graph.

``triton_course.bench.steady_rounds`` queues a round's calls behind a GPU sleep, so that the host's launch cost
stays out of the time. At the 2% level it cannot tell one kernel from itself: A/A tests on an H200
(lab/sweeps/timing_position.py) timed chapter 06's RMSNorm through the notebook's launcher at three places in a
round and through a lean launcher of the same compiled launch, and found the three timings of the notebook's
launcher up to 20% apart (the first in the round fastest, faster than a same-size copy) and the lean launcher 4-6%
behind their median (solutions/06_rmsnorm/records/06_rmsnorm_timing_position.json); behind one sleep of the same length for all, 20 us of extra
host time a call moved nothing, yet the notebook's launcher stayed 3% ahead of the lean one
(lab/records/timing_position_sleep.json). Issue 15 counts a reference within 2% of a peer as a match, so the sweeps
that decide it time with :func:`graph_rounds` instead.

:func:`graph_rounds` captures each function's calls once in a CUDA graph (on input sets rotating through 16 L2
sizes of fresh random data; every output kept, so each call writes fresh memory of the graph's own pool), and
replays the graphs in a new random order each round, between CUDA events, with nothing of the host in the timed
region; the first round warms up and is not counted. Its A/A test (solutions/06_rmsnorm/records/06_rmsnorm_timing_position_graphs.json, 9 rounds)
put the three timings of one compiled launch within 0.6% (4096 x 4096 float16) and 0.1% (262144 x 64 float32) of
each other. Two variants measured there are worse and are options only: charging each call for its write-backs as
steady_rounds does (a read of 256 MB closes the timed region, the same read on a clean L2 is subtracted) spread the
same three timings over 0.8-1.9%, the variance of the two flushes; capturing afresh each round behind a pad of
random size, so that the outputs land somewhere new, spread them over 5-6%. Not charged, up to one L2 of dirty
output lines (about 2% of a round's writes here) is written back after the timed region: the same share for every
function with outputs of the same size, which is what these comparisons need.
"""

from __future__ import annotations

import random
from typing import Callable, Sequence

import torch

from triton_course.bench import FLUSH_BYTES, call_plan, rotating_sets, tensor_bytes

ROTATE_L2S = 16           # input sets: at least this many L2 sizes in all (steady_rounds: 4)
OUTPUT_BUDGET = 4 * 2**30  # bytes of outputs a function's graph may keep (fewer calls for large outputs)
MEMORY_SHARE = 0.5         # and all graphs alive at once at most this share of the GPU's free memory

METHOD = ("graph_timing.graph_rounds: each function's calls captured once in a CUDA graph on input sets rotating "
          "through 16x the L2, every output kept; the graphs replayed in a random order each round with no host in "
          "the timed region, the first round not counted; median of rounds. Bytes that must move: each input read "
          "once, each output written once")


def _capture(fn: Callable[..., object], sets: list, calls: int) -> tuple[torch.cuda.CUDAGraph, list]:
    """A CUDA graph of ``calls`` calls of fn on the rotating sets, and the outputs it writes (all kept: every call
    writes fresh memory, placed the same way for every function, in the graph's own pool)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):      # a call on a side stream first, as PyTorch asks before a capture
        fn(*sets[0])
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kept = [fn(*sets[i % len(sets)]) for i in range(calls)]
    return graph, kept


def graph_rounds(fns: dict[str, Callable[..., object]], make_inputs: Callable[[], Sequence[object]], *,
                 rounds: int = 7, failed: dict[str, str] | None = None, seed: int = 0, recapture: bool = False,
                 shuffle: bool = True, charge_writebacks: bool = False) -> dict[str, list[float]]:
    """Milliseconds per call of each function, ``{name: [ms of each round]}``, replayed from CUDA graphs.

    The defaults are the method of the module's docstring. ``shuffle``: a new random order each round (from
    ``seed``); ``charge_writebacks``: a read flush closes the timed region and a clean one is subtracted, as in
    steady_rounds; ``recapture``: each round captures afresh behind a pad of random size (outputs placed anew).
    A function that cannot be captured (it synchronises, or reads a value back to the host) is left out of the
    result, and ``failed[name]`` says why when ``failed`` is given."""
    if not torch.cuda.is_available():
        raise RuntimeError("graph_rounds times CUDA graphs: it needs a CUDA GPU")
    first = tuple(make_inputs())
    usable, plans = {}, {}
    out_bytes = 0
    for name, fn in fns.items():        # compile, autotune and warm up outside any capture
        try:
            out_bytes = max(out_bytes, tensor_bytes(fn(*first)))
            usable[name] = fn
        except Exception as e:  # noqa: BLE001 - reported, not fatal to the other functions
            if failed is not None:
                failed[name] = f"{type(e).__name__}: {str(e)[:200]}"
    sets = rotating_sets(make_inputs, first, out_bytes, l2s=ROTATE_L2S, max_sets=128)
    flush = torch.empty(FLUSH_BYTES // 4, device="cuda")
    # recaptured, one graph is alive at a time; captured once, all of them are
    budget = min(OUTPUT_BUDGET, int(MEMORY_SHARE * torch.cuda.mem_get_info()[0]) // (1 if recapture else max(1, len(usable))))
    for name, fn in list(usable.items()):
        calls, _ = call_plan(fn, sets)
        plans[name] = max(2, min(calls, budget // max(out_bytes, 1)))
    rng = random.Random(seed)
    times: dict[str, list[float]] = {name: [] for name in usable}
    kept_graphs: dict[str, tuple] = {}

    def graph_of(name: str):
        if name in kept_graphs:
            return kept_graphs[name]
        torch.cuda.empty_cache()
        # behind a pad of random size: the outputs land somewhere else each capture
        pad = torch.empty(rng.randrange(1, 64) * 2**21, dtype=torch.uint8, device="cuda") if recapture else None
        captured = (*_capture(usable[name], sets, plans[name]), pad)
        captured[0].replay()                            # untimed: the graph's upload and first run
        if not recapture:
            kept_graphs[name] = captured
        return captured

    for r in range(rounds + (0 if recapture else 1)):   # with one capture, round 0 is a warm-up, not counted
        order = list(usable)
        if shuffle:
            rng.shuffle(order)                      # no function always first, or always after the same one
        for name in order:
            try:
                graph = graph_of(name)[0]
            except Exception as e:  # noqa: BLE001
                if failed is not None:
                    failed[name] = f"not capturable in a CUDA graph: {type(e).__name__}: {str(e)[:200]}"
                usable.pop(name)
                times.pop(name)
                torch.cuda.synchronize()
                continue
            flush.sum()
            torch.cuda.synchronize()
            marks = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
            marks[0].record()
            flush.sum()                                 # a flush on a clean L2, timed alone
            marks[1].record()
            marks[2].record()
            graph.replay()
            if charge_writebacks:
                flush.sum()                             # writes back what the calls left dirty
            marks[3].record()
            torch.cuda.synchronize()
            ms = marks[2].elapsed_time(marks[3]) - (marks[0].elapsed_time(marks[1]) if charge_writebacks else 0.0)
            if recapture or r:
                times[name].append(max(ms / plans[name], 1e-6))
            del graph
    kept_graphs.clear()
    sets.clear()
    del flush
    torch.cuda.empty_cache()
    return times


def attention_against_sdpa(fns: dict[str, Callable[..., object]], make_inputs: Callable[..., Sequence[object]], *,
                           d: int, causal: bool, z: int, h: int, ns: Sequence[int], failed: dict[str, str] | None = None,
                           rounds: int = 7):
    """Chapter 09's comparison at each N of ``ns``: SDPA (causal or not) joins ``fns``, and all are timed by
    :func:`graph_rounds` on ``make_inputs(z, h, n, d)``. Yields ``(row, times)`` per N: the row holds D, causal, N,
    Z, H, each function's TFLOP/s (4 Z H N^2 D, halved when causal, over its median time) and its ratio to SDPA's;
    ``times`` is graph_rounds' answer."""
    import statistics

    import torch.nn.functional as F

    fns = {**fns, "SDPA": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)}
    for n in ns:
        times = graph_rounds(fns, lambda: make_inputs(z, h, n, d), rounds=rounds, failed=failed)
        flops = 4 * z * h * n * n * d / (2 if causal else 1)
        tf = {k: round(flops / statistics.median(t) / 1e9, 1) for k, t in times.items()}
        yield {"D": d, "causal": causal, "N": n, "Z": z, "H": h, "tflops": tf,
               "ratio_to_sdpa": {k: round(v / tf["SDPA"], 3) for k, v in tf.items()}}, times
