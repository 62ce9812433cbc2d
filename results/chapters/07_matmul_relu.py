"""Matmul + ReLU on the GPU: the autotuned reference `matmul_relu` against torch's relu(a @ b) (cuBLAS),
torch.compile and the same kernel with one straightforward config (128x128x32, row-major order), at
1024^3, 2048^3, 4096^3 and a ragged size; plus the TF32 demonstration of the notebook.

The straightforward kernel and the TF32 demo are defined in the notebook after its last solution cell,
so their definition cells are executed here from the solution notebook (never copied).

TFLOP/s come from ``triton_course.bench.steady_rounds``: the four implementations timed in turn, back to back
on the same rotating fresh inputs. ``one_call_at_a_time`` adds ``time_ms`` (do_bench, one call between
L2 flushes) for the reference and torch, and ``host_us_per_call`` the Python cost of a call, which
decides how small a matmul can be before the host, not the GPU, sets the pace.
"""

import statistics
import time

import torch

from grader.course import solution_notebook
from grader.notebook_code import exec_cells_starting_with
from triton_course.bench import steady_rounds, time_ms
from triton_course.matmul import matmul_flops, tflops

SIZES = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (3001, 2999, 3007)]
TARGETS = {(4096, 4096, 4096): 0.90, (1024, 1024, 1024): 0.80}


def host_us_per_call(fn, calls: int = 200) -> float:
    """Microseconds of Python per call, by the host clock over back-to-back calls (GPU work queues)."""
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return round(elapsed / calls * 1e6, 1)


def measure(ns):
    exec_cells_starting_with(solution_notebook("07_matmul_relu"), ns,
                             ("def straightforward", "@triton.jit\ndef fp32_dot_kernel"))
    ours, straightforward = ns["matmul_relu"], ns["straightforward"]
    kernel = ns["matmul_relu_kernel"]
    relu_mm = lambda a, b: torch.relu(a @ b)  # noqa: E731
    compiled = torch.compile(relu_mm)
    impls = {"triton_autotuned": ours, "triton_128x128x32_row_major": straightforward,
             "torch_relu_matmul": relu_mm, "torch_compile": compiled}
    rows = []
    for m, n, k in SIZES:
        def make():
            return (torch.randn(m, k, device="cuda", dtype=torch.float16),
                    torch.randn(k, n, device="cuda", dtype=torch.float16))
        times = steady_rounds(impls, make)
        best = str(kernel.best_config)
        a, b = make()
        per_call = {name: time_ms(lambda: impls[name](a, b)) for name in ("triton_autotuned", "torch_relu_matmul")}
        host = {name: host_us_per_call(lambda: impls[name](a, b)) for name in ("triton_autotuned", "torch_relu_matmul")}
        ref = torch.relu(a.double() @ b.double())
        err = float((ours(a, b).double() - ref).abs().max())
        del a, b, ref
        flops = matmul_flops(m, n, k)
        tf = {name: round(tflops(flops, statistics.median(t)), 1) for name, t in times.items()}
        row = {"m": m, "n": n, "k": k, "tflops": tf, "autotuned_config": best,
               "max_abs_error_vs_float64": round(err, 4),
               "ratio_autotuned_to_torch": round(tf["triton_autotuned"] / tf["torch_relu_matmul"], 3),
               "ratio_straightforward_to_torch": round(tf["triton_128x128x32_row_major"] / tf["torch_relu_matmul"], 3),
               "ratio_torch_compile_to_torch": round(tf["torch_compile"] / tf["torch_relu_matmul"], 3),
               "rounds_autotuned_faster_than_torch": sum(
                   o < t for o, t in zip(times["triton_autotuned"], times["torch_relu_matmul"])),
               "rounds": len(times["triton_autotuned"])}
        row["one_call_at_a_time_tflops"] = {name: round(tflops(flops, ms), 1) for name, ms in per_call.items()}
        row["host_us_per_call"] = host
        if (m, n, k) in TARGETS:
            row["target_ratio"] = TARGETS[(m, n, k)]
            row["passes"] = row["ratio_autotuned_to_torch"] >= TARGETS[(m, n, k)]
        rows.append(row)
        print(row, flush=True)
    tf32 = {name: float(f"{err:.3e}") for name, err in ns["fp32_dot_errors"](1024).items()}
    return {"unit": "TFLOP/s = 2*M*N*K / median time per call (float16 inputs and output)",
            "sizes": rows, "tf32_demo_max_error_over_sqrt_k_1024": tf32,
            "targets_hold": all(r.get("passes", True) for r in rows)}
