"""Matmul + ReLU on the GPU: the course's fast path (``triton_course.matmul_fast.FastMatmulRelu`` around the
solution's kernel: tensor descriptors, persistent programs and a Gluon kernel on Hopper, the kernel autotuned
elsewhere) and the model answer (the solution notebook's own ``matmul_relu``: its kernel launched by
``launch_config``) against torch's relu(a @ b) (cuBLAS, then a ReLU kernel), torch.compile in its default mode, and
the same kernel with one straightforward config (128x128x32, row-major order, no hints), at 1024^3, 2048^3, 3000^3,
4096^3 and a ragged size, in float16; the speed check's calibration at 4096^3 (the model answer and the
straightforward config pass 75% of torch, a kernel without pipelining and with 64x64 tiles does not); bfloat16 at
4096^3; and the TF32 demonstration of the notebook's appendix.

    python tests/gpu/measure.py 07_matmul_relu        (on a GPU; about 3 minutes on an H200)

The record keeps the names it had when the fast path was the solution's launcher: ``triton_autotuned``,
``reference`` and ``reference_config`` are the fast path's, ``model_answer`` the notebook's ``matmul_relu``. The
straightforward and slow kernels are the notebook's ``matmul_relu_kernel`` launched with fixed meta-parameters
(``triton_course.matmul.launch``); the TF32 demo's cell is executed from the solution notebook (never copied).
TFLOP/s come from ``triton_course.bench.steady_rounds``: the implementations timed in turn, back to back on the
same rotating fresh inputs. ``one_call_at_a_time`` adds ``time_ms`` (do_bench, one call between L2 flushes) for
the fast path, the model answer and torch, and ``host_us_per_call`` the Python cost of a call.
"""

import statistics
import time

import torch

from grader.course import solution_notebook
from grader.notebook_code import exec_cells_starting_with
from triton_course.bench import steady_rounds, time_ms
from triton_course.matmul import launch, launch_config, make, matmul_flops, tflops

SIZES = [(1024, 1024, 1024), (2048, 2048, 2048), (3000, 3000, 3000), (4096, 4096, 4096), (3001, 2999, 3007)]
#: The fast path's share of torch (issue 15): it must not fall below these.
TARGETS = {(4096, 4096, 4096): 0.95, (3000, 3000, 3000): 0.95, (1024, 1024, 1024): 0.95}
#: The model answer's share of torch at three sizes, calibrated on its first H200 run
#: (solutions/07_matmul_relu/records/07_matmul_relu.json, 2026-12-05): 1.21 at 1024^3, 0.68 at 3000^3 (a third
#: wave of 24 tiles leaves most SMs idle: the fast path's persistent kernel is what fixes that) and 1.03 at 4096^3.
#: Each target leaves 13-25% of its figure for noise and for other H200s.
MODEL_TARGETS = {(4096, 4096, 4096): 0.9, (3000, 3000, 3000): 0.55, (1024, 1024, 1024): 0.9}
SPEED_TARGET = 0.75   # the hidden speed test's fraction of torch at 4096^3 float16


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
    from triton_course.matmul_fast import FastMatmulRelu

    exec_cells_starting_with(solution_notebook("07_matmul_relu"), ns, ("def fp32_errors",))
    model, kernel = ns["matmul_relu"], ns["matmul_relu_kernel"]
    fast = FastMatmulRelu(kernel)

    def straightforward(a, b):
        return launch(kernel, a, b, BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, GROUP_M=1)

    def slow(a, b):   # no software pipelining, 64x64 tiles, row-major order
        return launch(kernel, a, b, BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=1, num_stages=1, num_warps=4)

    relu_mm = lambda a, b: torch.relu(a @ b)  # noqa: E731
    compiled = torch.compile(relu_mm)
    impls = {"triton_autotuned": fast, "model_answer": model, "triton_128x128x32_row_major": straightforward,
             "torch_relu_matmul": relu_mm, "torch_compile": compiled}
    timed_alone = ("triton_autotuned", "model_answer", "torch_relu_matmul")
    rows = []
    for m, n, k in SIZES:
        times = steady_rounds(impls, lambda: make(m, n, k, device="cuda"))
        a, b = make(m, n, k, device="cuda")
        per_call = {name: time_ms(lambda: impls[name](a, b)) for name in timed_alone}
        host = {name: host_us_per_call(lambda: impls[name](a, b)) for name in timed_alone}
        ref = torch.relu(a.double() @ b.double())
        err = {name: float((impls[name](a, b).double() - ref).abs().max())
               for name in ("triton_autotuned", "model_answer")}
        config = fast.kernel_of(m, n, k)
        del a, b, ref
        flops = matmul_flops(m, n, k)
        tf = {name: round(tflops(flops, statistics.median(t)), 1) for name, t in times.items()}
        torch_tf = tf["torch_relu_matmul"]
        row = {"m": m, "n": n, "k": k, "tflops": tf, "reference_config": config,
               "model_answer_config": launch_config(m, n, k, torch.float16),
               "max_abs_error_vs_float64": round(err["triton_autotuned"], 4),
               "model_answer_max_abs_error_vs_float64": round(err["model_answer"], 4),
               "ratio_autotuned_to_torch": round(tf["triton_autotuned"] / torch_tf, 3),
               "ratio_model_answer_to_torch": round(tf["model_answer"] / torch_tf, 3),
               "ratio_straightforward_to_torch": round(tf["triton_128x128x32_row_major"] / torch_tf, 3),
               "ratio_torch_compile_to_torch": round(tf["torch_compile"] / torch_tf, 3),
               "rounds_autotuned_faster_than_torch": sum(
                   o < t for o, t in zip(times["triton_autotuned"], times["torch_relu_matmul"])),
               "rounds": len(times["triton_autotuned"])}
        row["one_call_at_a_time_tflops"] = {name: round(tflops(flops, ms), 1) for name, ms in per_call.items()}
        row["host_us_per_call"] = host
        if (m, n, k) in TARGETS:
            row["target_ratio"] = TARGETS[(m, n, k)]
            row["passes"] = row["ratio_autotuned_to_torch"] >= TARGETS[(m, n, k)]
        if (m, n, k) in MODEL_TARGETS:
            row["model_answer_target_ratio"] = MODEL_TARGETS[(m, n, k)]
            row["model_answer_passes"] = row["ratio_model_answer_to_torch"] >= MODEL_TARGETS[(m, n, k)]
        rows.append(row)
        print(row, flush=True)

    n = 4096
    speed = steady_rounds({"reference": fast, "model_answer": model, "straightforward": straightforward,
                           "slow": slow, "torch": relu_mm}, lambda: make(n, n, n, device="cuda"))
    torch_ms = statistics.median(speed["torch"])
    speed_check = {name: {"tflops": round(tflops(matmul_flops(n, n, n), statistics.median(t)), 1),
                          "ratio_to_torch": round(torch_ms / statistics.median(t), 3),
                          "passes": torch_ms / statistics.median(t) >= SPEED_TARGET}
                   for name, t in speed.items() if name != "torch"}
    speed_check["torch_tflops"] = round(tflops(matmul_flops(n, n, n), torch_ms), 1)
    speed_check["target"] = SPEED_TARGET
    speed_check["slow_kernel"] = "64x64x32 tiles, num_stages=1 (no pipelining), GROUP_M=1"

    bf16 = steady_rounds({"reference": fast, "model_answer": model, "torch": relu_mm},
                         lambda: make(n, n, n, dtype=torch.bfloat16, device="cuda"))
    bf16_tf = {name: round(tflops(matmul_flops(n, n, n), statistics.median(t)), 1) for name, t in bf16.items()}

    tf32 = {name: float(f"{err:.3e}") for name, err in ns["fp32_errors"](1024).items()}
    return {"unit": "TFLOP/s = 2*M*N*K / median time per call (float16 inputs and output)",
            "sizes": rows, "speed_check_4096": speed_check,
            "bfloat16_4096": {"tflops": bf16_tf,
                              "ratio_reference_to_torch": round(bf16_tf["reference"] / bf16_tf["torch"], 3),
                              "ratio_model_answer_to_torch": round(bf16_tf["model_answer"] / bf16_tf["torch"], 3)},
            "tf32_demo_max_error_over_sqrt_k_1024": tf32,
            "targets_hold": all(r.get("passes", True) and r.get("model_answer_passes", True) for r in rows)}
