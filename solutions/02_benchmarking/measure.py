"""Benchmarking on the GPU: the chapter's `benchmark` against do_bench and an unsynchronised host clock,
launch overhead and the L2, mean against median, the memory ladder (a copy against its working set), the
profiler's tables of the eager and the fused GELU, and the GELU case study (eager formula, F.gelu,
torch.compile with one kernel per size and with its default dynamic shapes) across sizes."""

import statistics
import traceback
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from triton_course.bench import copy_bandwidth, gbps, measure_gbps, time_ms
from triton_course.ladder import working_set_sweep


def measure(ns):
    out = {"method": "per figure, as named: triton_course.bench.time_ms (triton.testing.do_bench median), the chapter's "
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

    def _section_4():  # GELU case study, as the notebook's cell: do_bench, one call at a time
        nonlocal out
        gelu_builtin = lambda t: F.gelu(t, approximate="tanh")  # noqa: E731
        torch._dynamo.reset()
        static = torch.compile(gelu_eager, dynamic=False)   # one kernel per size (8 sizes: Dynamo's limit)
        impls = {"eager_formula": gelu_eager, "F.gelu": gelu_builtin, "torch.compile": static}
        sweep = []
        for k in range(14, 29, 2):
            n = 2**k
            x = torch.randn(n, device="cuda")
            row = {"n": n}
            for name, fn in impls.items():
                fn(x)
                ms = time_ms(lambda: fn(x))
                row[f"{name}_us"] = round(ms * 1e3, 2)
                row[f"{name}_gbps"] = round(gbps(2 * n * 4, ms), 1)
            row["eager_gbps_of_its_own_traffic"] = round(gbps(eager_gelu_traffic(n, 4)[1], row["eager_formula_us"] / 1e3), 1)
            sweep.append(row)
            del x
        out["gelu_sweep"] = sweep
        out["gelu_sweep_compile"] = "torch.compile(gelu_eager, dynamic=False): one kernel per size"
        out["eager_gelu_traffic_model"] = {"kernels": eager_gelu_traffic(2**24)[0],
                                           "bytes_per_element_fp32": eager_gelu_traffic(1)[1],
                                           "fused_bytes_per_element_fp32": 8}
        out["copy_gbps_same_process"] = round(copy_bandwidth(), 1)


    try:
        _section_4()
    except Exception as exc:  # keep the other sections' figures
        errors['GELU case study'] = repr(exc)[:500]
        traceback.print_exc()

    def _section_5():  # torch.compile's shapes: one kernel per size against the default (dynamic after a second size)
        nonlocal out
        rows = []
        for k in (26, 28):
            n = 2**k
            make = lambda: (torch.randn(n, device="cuda"),)  # noqa: E731
            x = torch.randn(n, device="cuda")
            torch._dynamo.reset()
            static = torch.compile(gelu_eager, dynamic=False)
            static(x)
            torch._dynamo.reset()
            default = torch.compile(gelu_eager)
            for m in (2**14, 2**16):   # as in a sweep: the second size recompiles for dynamic shapes
                default(torch.randn(m, device="cuda"))
            default(x)
            rows.append({"n": n,
                         "one_kernel_per_size_do_bench_gbps": round(gbps(8 * n, time_ms(lambda: static(x))), 1),
                         "default_dynamic_do_bench_gbps": round(gbps(8 * n, time_ms(lambda: default(x))), 1),
                         "default_dynamic_back_to_back_gbps": round(measure_gbps(default, make, 8 * n), 1),
                         "one_kernel_per_size_back_to_back_gbps": round(measure_gbps(static, make, 8 * n), 1),
                         "F.gelu_back_to_back_gbps": round(measure_gbps(lambda t: F.gelu(t, approximate="tanh"), make, 8 * n), 1)})
            del x
        out["torch_compile_shapes"] = {
            "note": "GELU of n float32 elements in GB/s of 8n bytes; 'default' compiled once for sizes 2^14, 2^16 "
                    "(recompiled for dynamic shapes at the second) and then run at n; 'one kernel per size' is "
                    "torch.compile(dynamic=False) compiled at n; do_bench: one call at a time, L2 flushed; back to "
                    "back: triton_course.bench.steady_ms, as chapter 04 measures",
            "rows": rows}


    try:
        _section_5()
    except Exception as exc:  # keep the other sections' figures
        errors["torch.compile's shapes"] = repr(exc)[:500]
        traceback.print_exc()

    def _section_6():  # the profiler's tables and kernel names: eager against fused
        nonlocal out
        x = torch.randn(2**24, device="cuda")
        torch._dynamo.reset()
        impls = {"gelu_eager": gelu_eager, "torch.compile(gelu_eager)": torch.compile(gelu_eager),
                 "F.gelu": lambda t: F.gelu(t, approximate="tanh")}
        tables, kernels = {}, {}
        for name, fn in impls.items():
            fn(x)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                fn(x)
                torch.cuda.synchronize()
            names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            kernels[name] = {"count": len(names), "names": [k[:120] for k in names]}
            if name != "F.gelu":
                tables[name] = prof.key_averages().table(sort_by="cuda_time_total", row_limit=10, max_name_column_width=60)
        out["gelu_kernels_at_2^24"] = kernels
        out["profiler_tables"] = tables


    try:
        _section_6()
    except Exception as exc:  # keep the other sections' figures
        errors["profiler tables"] = repr(exc)[:500]
        traceback.print_exc()

    def _section_7():  # the memory ladder: a copy against its working set
        nonlocal out
        import triton
        props = triton.runtime.driver.active.utils.get_device_properties(torch.cuda.current_device())
        sets = [2**k for k in range(20, 32)]
        rows = [{"set_bytes": b, "gbps": round(g, 1)} for b, g in zip(sets, working_set_sweep(sets, on_gpu=True))]
        sm_khz, mem_khz, bus_bits = props.get("sm_clock_rate"), props.get("mem_clock_rate"), props.get("mem_bus_width")
        sms = props.get("multiprocessor_count")
        out["working_set_sweep"] = {
            "method": "triton_course.ladder.working_set_sweep: a Triton kernel copies src to dst about 2 GB per launch "
                      "(loads with .cg, skipping L1), median of 5 launches; GB/s counts bytes read + written",
            "l2_bytes": torch.cuda.get_device_properties(0).L2_cache_size, "rows": rows,
            "device_properties": {k: props.get(k) for k in ("multiprocessor_count", "sm_clock_rate", "mem_clock_rate",
                                                             "mem_bus_width", "max_shared_mem")},
            "shared_memory_tbps_from_banks": None if not (sm_khz and sms) else round(sms * 128 * sm_khz * 1e3 / 1e12, 1),
            "memory_tbps_from_clock_and_bus": None if not (mem_khz and bus_bits) else round(2 * mem_khz * 1e3 * bus_bits / 8 / 1e12, 2),
        }


    try:
        _section_7()
    except Exception as exc:  # keep the other sections' figures
        errors["memory ladder"] = repr(exc)[:500]
        traceback.print_exc()

    if errors:
        out["errors"] = errors
    out["summary"] = _summary(out)
    return out


def _summary(out):
    """Lines for tests/gpu/records/README.md (the profiler's tables are too wide for it; they stay in the JSON)."""
    lines = []

    def add(make):
        try:
            lines.append(make())
        except (KeyError, IndexError, TypeError, ValueError):
            pass

    add(lambda: "4096^3 fp32 product, ms: host clock without sync {host_clock_no_sync}, the chapter's benchmark "
                "(events) {benchmark_events}, do_bench median {do_bench_median}".format(**out["sync_matmul_4096_fp32_ms"]))
    add(lambda: "small multiplication timed one by one, us: median {median}, mean {mean}, max {max} of {calls}".format(
        **out["mean_vs_median_us_small_mul"]))
    add(lambda: f"torch.compile first call {out['torch_compile_first_call_ms']} ms, later calls {out['torch_compile_later_call_ms']} ms")
    def gelu_line():
        big = out["gelu_sweep"][-1]
        return (f"GELU at n={big['n']}, do_bench GB/s of 8n bytes: F.gelu {big['F.gelu_gbps']}, eager formula "
                f"{big['eager_formula_gbps']} ({big['eager_gbps_of_its_own_traffic']} of its own traffic), "
                f"torch.compile {big['torch.compile_gbps']} ({out.get('gelu_sweep_compile', 'one compile for all sizes')})")
    add(gelu_line)
    for row in out.get("torch_compile_shapes", {}).get("rows", []):
        add(lambda: f"torch.compile shapes, n={row['n']}: " + ", ".join(f"{k}={v}" for k, v in row.items() if k != "n"))
    add(lambda: "working-set sweep (copy), GB/s by MiB: " + ", ".join(
        f"{r['set_bytes'] / 2**20:g}: {r['gbps']:.0f}" for r in out["working_set_sweep"]["rows"]))
    add(lambda: "kernels at n=2^24: " + ", ".join(f"{k} {v['count']}" for k, v in out["gelu_kernels_at_2^24"].items()))
    return lines
