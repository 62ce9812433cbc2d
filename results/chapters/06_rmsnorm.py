"""RMSNorm on the GPU: the reference `rmsnorm` against F.rms_norm, the eager formula, torch.compile, a
straightforward one-row-per-program kernel and a kernel that moves twice the bytes, across row lengths.

At every width all implementations and a copy of the same tensor are timed in turn on the same inputs
(``triton_course.bench.steady_rounds``). The launch-shape sweep behind the reference's table is
``results/sweeps/launch_sweep.py``."""

import statistics

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from triton_course.bench import copy_bandwidth, gbps, steady_rounds

M = 4096
WIDTHS = (1024, 2048, 4096, 8192, 16384)
TARGET_FRACTION = 0.60  # the notebook's bandwidth check
ROUNDS = 15


@triton.jit
def _one_row_kernel(x_ptr, w_ptr, out_ptr, N, stride_x, stride_out, eps, BLOCK_N: tl.constexpr,
                    APPLY_WEIGHT: tl.constexpr):
    """The straightforward kernel: program r normalises row r (and, with APPLY_WEIGHT, scales it)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    ok = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=0.0).to(tl.float32)
    y = x / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    if APPLY_WEIGHT:
        y = y * tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, y.to(out_ptr.dtype.element_ty), mask=ok)


def one_row_per_program(x, weight, eps=1e-6, apply_weight=True):
    n = x.shape[-1]
    x2 = x.reshape(-1, n)
    out = torch.empty_like(x2)
    _one_row_kernel[(x2.shape[0],)](x2, weight, out, n, x2.stride(0), out.stride(0), eps,
                                    BLOCK_N=triton.next_power_of_2(n), APPLY_WEIGHT=apply_weight)
    return out.reshape(x.shape)


def twice_the_bytes(x, weight, eps=1e-6):
    """A typical mistake: the kernel writes x * rstd and PyTorch applies the weight, re-reading and
    re-writing the whole output (4 M N s bytes instead of 2 M N s)."""
    return one_row_per_program(x, weight, eps, apply_weight=False) * weight


def eager(x, weight, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def builtin(x, weight, eps=1e-6):
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def measure(ns):
    rmsnorm, traffic_bytes = ns["rmsnorm"], ns["traffic_bytes"]
    ceiling = copy_bandwidth()
    compiled = torch.compile(eager)
    impls = {"reference": rmsnorm, "F.rms_norm": builtin, "eager_formula": eager, "torch_compile": compiled,
             "one_row_per_program": one_row_per_program, "twice_the_bytes": twice_the_bytes}
    rows = []
    for n in WIDTHS:
        make = lambda: (torch.randn(M, n, device="cuda", dtype=torch.float16),  # noqa: E731
                        torch.randn(n, device="cuda", dtype=torch.float16))
        x, w = make()
        for name in ("one_row_per_program", "twice_the_bytes", "torch_compile"):
            torch.testing.assert_close(impls[name](x, w), rmsnorm(x, w), atol=4e-3, rtol=4e-3)
        del x, w
        times = steady_rounds({**impls, "same_size_copy": lambda x, w: x.clone()}, make, rounds=ROUNDS)
        row = {"m": M, "n": n, "dtype": "float16", "rounds": ROUNDS}
        for name, t in times.items():
            nbytes = 2 * M * n * 2 if name == "same_size_copy" else traffic_bytes(M, n, 2)
            row[f"{name}_gbps"] = round(gbps(nbytes, statistics.median(t)), 1)
        row["reference_fraction_of_copy"] = round(row["reference_gbps"] / ceiling, 3)
        row["reference_fraction_of_same_size_copy"] = round(row["reference_gbps"] / row["same_size_copy_gbps"], 3)
        row["same_size_copy_fraction_of_copy"] = round(row["same_size_copy_gbps"] / ceiling, 3)
        row["rounds_reference_faster_than_one_row"] = sum(
            r < o for r, o in zip(times["reference"], times["one_row_per_program"]))
        row["reference_beats_builtin"] = row["reference_gbps"] > row["F.rms_norm_gbps"]
        row["reference_beats_one_row_per_program"] = row["reference_gbps"] > row["one_row_per_program_gbps"]
        rows.append(row)
        print({k: v for k, v in row.items() if k.endswith("_gbps")}, flush=True)
    main = next(r for r in rows if r["n"] == 4096)
    check = {"m": M, "n": 4096, "dtype": "float16", "target_fraction": TARGET_FRACTION}
    for name in ("reference", "one_row_per_program", "twice_the_bytes"):
        fraction = main[f"{name}_gbps"] / ceiling
        check[name] = {"gbps": main[f"{name}_gbps"], "fraction_of_copy": round(fraction, 3),
                       "passes": fraction >= TARGET_FRACTION}
    return {
        "sizes": rows,
        "bandwidth_check": check,
        "reference_at_least_90pct_of_copy_on_4096x4096": main["reference_gbps"] >= 0.9 * ceiling,
        "reference_at_least_90pct_of_same_size_copy_on_4096x4096": main["reference_fraction_of_same_size_copy"] >= 0.9,
        "reference_beats_builtin_and_one_row_at_every_size": all(
            r["reference_beats_builtin"] and r["reference_beats_one_row_per_program"] for r in rows),
        "bytes": "(2 M + 1) N s: x read once, y written once, the weight read once",
        "same_size_copy": "x.clone() of the M x N float16 input, timed with the kernels in the same rounds; "
                          "copy_gbps above is the 1 GiB copy of triton_course.bench.copy_bandwidth",
    }
