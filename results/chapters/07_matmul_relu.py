"""Matmul + ReLU on the GPU: the autotuned reference `matmul_relu` against torch's relu(a @ b) (cuBLAS),
torch.compile and the same kernel with one straightforward config (128x128x32, row-major order), at
1024^3, 2048^3, 4096^3 and a ragged size; plus the TF32 demonstration of the notebook.

The straightforward kernel and the TF32 demo are defined in the notebook after its last solution cell,
so their definition cells are executed here from the solution notebook (never copied).
"""

import statistics

import torch

from grader.course import solution_notebook
from grader.notebook_code import exec_cells_starting_with
from utils.bench import time_ms
from utils.matmul import matmul_flops, tflops

SIZES = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (3001, 2999, 3007)]
TARGETS = {(4096, 4096, 4096): 0.90, (1024, 1024, 1024): 0.80}


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
        times = {name: [] for name in impls}
        graph = {}  # launch overhead left out: the same calls replayed from a CUDA graph
        best = None
        for _ in range(3):  # fresh input sets; every implementation timed on the same inputs, in turn
            a = torch.randn(m, k, device="cuda", dtype=torch.float16)
            b = torch.randn(k, n, device="cuda", dtype=torch.float16)
            for name, fn in impls.items():
                fn(a, b)
                if name == "triton_autotuned":
                    best = str(kernel.best_config)
                times[name].append(time_ms(lambda: fn(a, b)))
            if not graph:
                import triton.testing
                for name in ("triton_autotuned", "torch_relu_matmul"):
                    fn = impls[name]
                    graph[name] = triton.testing.do_bench_cudagraph(lambda: fn(a, b))
            ref = torch.relu(a.double() @ b.double())
            err = float((ours(a, b).double() - ref).abs().max())
            del a, b, ref
        flops = matmul_flops(m, n, k)
        tf = {name: round(tflops(flops, statistics.median(t)), 1) for name, t in times.items()}
        row = {"m": m, "n": n, "k": k, "tflops": tf, "autotuned_config": best,
               "max_abs_error_vs_float64": round(err, 4),
               "ratio_autotuned_to_torch": round(tf["triton_autotuned"] / tf["torch_relu_matmul"], 3),
               "ratio_straightforward_to_torch": round(tf["triton_128x128x32_row_major"] / tf["torch_relu_matmul"], 3),
               "ratio_torch_compile_to_torch": round(tf["torch_compile"] / tf["torch_relu_matmul"], 3)}
        row["tflops_cuda_graph"] = {name: round(tflops(flops, ms), 1) for name, ms in graph.items()}
        row["ratio_autotuned_to_torch_cuda_graph"] = round(
            row["tflops_cuda_graph"]["triton_autotuned"] / row["tflops_cuda_graph"]["torch_relu_matmul"], 3)
        if (m, n, k) in TARGETS:
            row["target_ratio"] = TARGETS[(m, n, k)]
            row["passes"] = row["ratio_autotuned_to_torch"] >= TARGETS[(m, n, k)]
        rows.append(row)
        print(row, flush=True)
    tf32 = {name: float(f"{err:.3e}") for name, err in ns["fp32_dot_errors"](1024).items()}
    return {"unit": "TFLOP/s = 2*M*N*K / median time (float16 inputs and output)",
            "sizes": rows, "tf32_demo_max_error_over_sqrt_k_1024": tf32,
            "targets_hold": all(r.get("passes", True) for r in rows)}
