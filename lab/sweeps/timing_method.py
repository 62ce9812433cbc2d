"""How the way a kernel is timed changes the GB/s it reports: the evidence behind utils/bench.py.

    python lab/sweeps/timing_method.py     (on a GPU; writes solutions/02_benchmarking/records/02_benchmarking_timing_method.json)

Every method times the same callables on the same GPU in one process:

* ``write_flush``: one call at a time, CUDA events around it, the L2 emptied before each call by
  *writing* a 256 MB buffer, as ``triton.testing.do_bench`` does. The flush leaves the L2 full of dirty
  lines, which the timed kernel then has to write back for it.
* ``read_flush``: the same, the L2 emptied by *reading* a 256 MB buffer: cold but clean.
* ``no_flush``: the same with no flush (the inputs partly stay in the L2 between calls).
* ``steady``: many calls back to back on rotating input sets whose footprint is several times the L2,
  the host queueing them while the GPU is held busy (so no launch gap is the host's), then a read
  flush inside the timed region so that every call pays for writing back its own output; a clean
  flush timed alone is subtracted. This is the throughput a kernel has inside a model.

``ratio_to_steady`` says how far each per-call method is from that steady state. The copy rows give
the ceiling at each size; the kernels are the chapter 05/06 references and their one-row baselines.
"""
from __future__ import annotations

import collections
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "lab" / "sweeps"))

import torch  # noqa: E402

from grader.course import solution_notebook  # noqa: E402
from grader.notebook_code import load_namespace  # noqa: E402
from records import provenance  # noqa: E402

FLUSH: list[torch.Tensor] = []   # the 256 MB buffer that empties the L2, allocated by main()
ROUNDS = 7


def flush_write() -> None:
    FLUSH[0].zero_()


def flush_read() -> None:
    FLUSH[0].sum()


def per_call_ms(fn, flush, reps: int = 200) -> float:
    for _ in range(10):
        if flush is not None:
            flush()
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends):
        if flush is not None:
            flush()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def steady_ms(fn, input_sets, calls: int) -> tuple[float, bool]:
    """ms per call of back-to-back calls on rotating input sets, each charged for its write-backs.
    Also returns whether the host queued every call before the GPU reached them (no host gaps).

    The recipe of :func:`triton_course.bench.steady_rounds`, kept open here so that it runs on the very input
    sets the per-call methods use and reports the host check that steady_rounds acts on silently."""
    keep = collections.deque(maxlen=len(input_sets))   # outputs rotate through as many buffers as inputs
    for inputs in input_sets:
        keep.append(fn(*inputs))
    flush_read()
    torch.cuda.synchronize()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(5)]
    ev[0].record()
    flush_read()                        # a clean flush alone, timed: subtracted below
    ev[1].record()
    torch.cuda._sleep(20_000_000)       # about 10 ms at full clock: the host queues every call meanwhile
    ev[2].record()
    host_start = time.perf_counter()
    for i in range(calls):
        keep.append(fn(*input_sets[i % len(input_sets)]))
    host_s = time.perf_counter() - host_start
    flush_read()                        # writes back whatever the calls left dirty in the L2
    ev[3].record()
    torch.cuda.synchronize()
    ahead = ev[1].elapsed_time(ev[2]) > host_s * 1e3 * 1.2
    return (ev[2].elapsed_time(ev[3]) - ev[0].elapsed_time(ev[1])) / calls, ahead


def methods(fn, input_sets, nbytes: int) -> dict[str, object]:
    """GB/s of fn by each method, median over ROUNDS interleaved rounds."""
    set0 = input_sets[0]
    call = lambda: fn(*set0)  # noqa: E731
    calls = max(2 * len(input_sets), min(96, int(4e9 / nbytes)))
    t = {k: [] for k in ("write_flush", "read_flush", "no_flush", "steady")}
    ahead = True
    for _ in range(ROUNDS):
        t["write_flush"].append(per_call_ms(call, flush_write))
        t["read_flush"].append(per_call_ms(call, flush_read))
        t["no_flush"].append(per_call_ms(call, None))
        ms, ok = steady_ms(fn, input_sets, calls)
        t["steady"].append(ms)
        ahead &= ok
    g = {k: round(nbytes / statistics.median(v) / 1e6, 1) for k, v in t.items()}
    row: dict[str, object] = {"gbps": g, "steady_calls": calls, "steady_host_stayed_ahead": ahead,
                              "spread": {k: round((max(v) - min(v)) / statistics.median(v), 3) for k, v in t.items()}}
    row["ratio_to_steady"] = {k: round(g[k] / g["steady"], 3) for k in g if k != "steady"}
    return row


def sets_for(make, nbytes: int) -> list:
    n = max(3, -(-4 * 60 * 2**20 // nbytes))   # at least four 60 MB L2s of traffic across the sets
    return [make() for _ in range(n)]


def chapter_module(chapter: str):
    spec = importlib.util.spec_from_file_location(f"m{chapter}", ROOT / "solutions" / chapter / "measure.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def summary(record: dict) -> list[str]:
    """One line per copy size and kernel: GB/s by each method and the per-call methods' ratio to steady."""
    lines = []
    for group in ("copy", "kernels"):
        for name, row in record[group].items():
            g, r = row["gbps"], row["ratio_to_steady"]
            lines.append(f"{'copy of ' if group == 'copy' else ''}{name}: steady {g['steady']:,.0f} GB/s; "
                         f"write flush x{r['write_flush']}, read flush x{r['read_flush']}, no flush x{r['no_flush']}")
    return lines


def main() -> None:
    FLUSH.append(torch.empty(256 * 2**20 // 4, device="cuda"))
    out = {**provenance("timing_method", "python lab/sweeps/timing_method.py"),
           "l2_bytes": torch.cuda.get_device_properties(0).L2_cache_size, "rounds": ROUNDS}
    warm = torch.empty(2**26, device="cuda")
    for _ in range(3000):
        warm.mul_(1.0)
    torch.cuda.synchronize()

    copies = {}
    for mb in (16, 32, 64, 128, 256, 1024):
        n = mb * 2**20 // 4
        make = lambda n=n: (torch.randn(n, device="cuda"),)  # noqa: E731
        copy = lambda src: src.clone()  # noqa: E731  (allocates its output, as the kernels do)
        copies[f"{mb} MB"] = methods(copy, sets_for(make, 2 * n * 4), 2 * n * 4)
        print("copy", mb, "MB", copies[f"{mb} MB"]["gbps"], flush=True)
        torch.cuda.empty_cache()
    out["copy"] = copies

    kernels = {}
    ns6, b6 = load_namespace(solution_notebook("06_rmsnorm")), chapter_module("06_rmsnorm")
    ns5, b5 = load_namespace(solution_notebook("05_softmax")), chapter_module("05_softmax")
    for n in (4096, 16384):
        make = lambda n=n: (torch.randn(4096, n, device="cuda", dtype=torch.float16),  # noqa: E731
                            torch.randn(n, device="cuda", dtype=torch.float16))
        nbytes = (2 * 4096 + 1) * n * 2
        sets = sets_for(make, nbytes)
        for name, fn in (("reference", ns6["rmsnorm"]), ("one_row", b6.one_row_per_program)):
            kernels[f"rmsnorm 4096x{n} f16 {name}"] = methods(fn, sets, nbytes)
            print(f"rmsnorm {n} {name}", kernels[f"rmsnorm 4096x{n} f16 {name}"]["gbps"], flush=True)
        del sets
    for n in (1024, 4096, 16384):
        make = lambda n=n: (torch.randn(4096, n, device="cuda"),)  # noqa: E731
        nbytes = 2 * 4096 * n * 4
        sets = sets_for(make, nbytes)
        for name, fn in (("reference", ns5["softmax"]), ("one_row", b5.one_row)):
            kernels[f"softmax 4096x{n} f32 {name}"] = methods(fn, sets, nbytes)
            print(f"softmax {n} {name}", kernels[f"softmax 4096x{n} f32 {name}"]["gbps"], flush=True)
        del sets
        torch.cuda.empty_cache()
    out["kernels"] = kernels

    out["summary"] = summary(out)
    path = ROOT / "solutions" / "02_benchmarking" / "records" / "02_benchmarking_timing_method.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print("wrote", path)


if __name__ == "__main__":
    main()
