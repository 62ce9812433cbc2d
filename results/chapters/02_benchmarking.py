"""Benchmarking on the GPU: the chapter's `benchmark` against do_bench and an unsynchronised host clock,
launch overhead and the L2, mean against median, and the GELU case study (eager formula, F.gelu,
torch.compile) across sizes with kernel counts read from torch.profiler."""

import statistics
import traceback
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from utils.bench import copy_bandwidth, gbps, time_ms


def _kernels(fn, x):
    fn(x)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn(x)
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def measure(ns):
    out = {"method": "per figure, as named: utils.bench.time_ms (triton.testing.do_bench median), the chapter's "
                     "own benchmark, host clocks"}
    errors = {}
    benchmark, gelu_eager, eager_gelu_traffic = ns["benchmark"], ns["gelu_eager"], ns["eager_gelu_traffic"]

    def _section_0():  # synchronisation: a 4096^3 fp32 matmul
        nonlocal out
        a = torch.randn(4096, 4096, device="cuda")
        product = lambda: a @ a  # noqa: E731
        product()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(10):
            product()
        unsynced = (time.perf_counter() - t0) * 1e3 / 10
        torch.cuda.synchronize()
        out["sync_matmul_4096_fp32_ms"] = {"host_clock_no_sync": round(unsynced, 4),
                                           "benchmark_events": round(benchmark(product, 3, 20), 4),
                                           "do_bench_median": round(time_ms(product), 4)}
        del a


    try:
        _section_0()
    except Exception as exc:  # keep the other sections' figures
        errors['synchronisation: a 4096^3 fp32 matmul'] = repr(exc)[:500]
        traceback.print_exc()

    def _section_1():  # first call of torch.compile: warm-up matters
        nonlocal out
        torch._dynamo.reset()  # a fresh compilation (a lambda defined here would not be importable by Dynamo)
        fresh = torch.compile(gelu_eager)
        x = torch.randn(2**20, device="cuda")
        out["torch_compile_first_call_ms"] = round(benchmark(lambda: fresh(x), warmup=0, trials=1), 1)
        out["torch_compile_later_call_ms"] = round(benchmark(lambda: fresh(x), warmup=3, trials=20), 4)


    try:
        _section_1()
    except Exception as exc:  # keep the other sections' figures
        errors['first call of torch.compile: warm-up matters'] = repr(exc)[:500]
        traceback.print_exc()

    def _section_2():  # mean against median: per-call events of a small op
        nonlocal out
        v = torch.randn(2**16, device="cuda")
        per_call = []
        for _ in range(500):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            v.mul(2)
            e.record()
            e.synchronize()
            per_call.append(s.elapsed_time(e))
        out["mean_vs_median_us_small_mul"] = {"mean": round(statistics.mean(per_call) * 1e3, 2),
                                              "median": round(statistics.median(per_call) * 1e3, 2),
                                              "max": round(max(per_call) * 1e3, 2), "calls": len(per_call)}


    try:
        _section_2()
    except Exception as exc:  # keep the other sections' figures
        errors['mean against median: per-call events of a small op'] = repr(exc)[:500]
        traceback.print_exc()

    def _section_3():  # launch overhead and the L2
        nonlocal out
        rows = []
        for k in (10, 16, 20, 22, 24, 26, 28):
            n = 2**k
            v = torch.randn(n, device="cuda")
            hot = benchmark(lambda: v * 2, warmup=10, trials=100)
            flushed = time_ms(lambda: v * 2)
            rows.append({"n": n, "loop_no_flush_us": round(hot * 1e3, 2), "loop_no_flush_gbps": round(gbps(8 * n, hot), 1),
                         "do_bench_us": round(flushed * 1e3, 2), "do_bench_gbps": round(gbps(8 * n, flushed), 1)})
            del v
        out["scale_by_2_l2_and_launch"] = rows


    try:
        _section_3()
    except Exception as exc:  # keep the other sections' figures
        errors['launch overhead and the L2'] = repr(exc)[:500]
        traceback.print_exc()

    def _section_4():  # GELU case study
        nonlocal out
        gelu_builtin = lambda t: F.gelu(t, approximate="tanh")  # noqa: E731
        torch._dynamo.reset()
        compiled = torch.compile(gelu_eager)
        impls = {"eager_formula": gelu_eager, "F.gelu": gelu_builtin, "torch.compile": compiled}
        sweep = []
        for k in range(12, 29, 2):
            n = 2**k
            x = torch.randn(n, device="cuda")
            row = {"n": n}
            for name, fn in impls.items():
                ms = time_ms(lambda: fn(x))
                row[f"{name}_us"] = round(ms * 1e3, 2)
                row[f"{name}_gbps"] = round(gbps(2 * n * 4, ms), 1)
            row["eager_gbps_of_its_own_traffic"] = round(gbps(eager_gelu_traffic(n, 4)[1], row["eager_formula_us"] / 1e3), 1)
            sweep.append(row)
            del x
        out["gelu_sweep"] = sweep
        x = torch.randn(2**24, device="cuda")
        kernels = {name: _kernels(fn, x) for name, fn in impls.items()}
        out["gelu_kernels_at_2^24"] = {name: {"count": len(k), "names": [s[:120] for s in k]} for name, k in kernels.items()}
        out["eager_gelu_traffic_model"] = {"kernels": eager_gelu_traffic(2**24)[0],
                                           "bytes_per_element_fp32": eager_gelu_traffic(1)[1],
                                           "fused_bytes_per_element_fp32": 8}
        out["copy_gbps_same_process"] = round(copy_bandwidth(), 1)


    try:
        _section_4()
    except Exception as exc:  # keep the other sections' figures
        errors['GELU case study'] = repr(exc)[:500]
        traceback.print_exc()

    if errors:
        out["errors"] = errors
    return out
