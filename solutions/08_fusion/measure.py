"""Fusion analysis on the GPU: the reference fused add + RMSNorm (`add_rmsnorm`, returning (y, h)) against the
two-kernel eager chain and torch.compile, in float16, bfloat16 and float32, each beside a copy of as many bytes
timed in the same rounds; predicted against measured speed-ups at the notebook's shapes; each eager kernel on its
own traffic, with the CUDA kernel names the profiler saw; a small launch sweep at the graded shape (the launch
rule's constants come from ``lab/sweeps/norms_gaps.py``); the calibration of the graded
target through the grader's own timed protocol; and the counter-example (GEMM + row softmax fused), whose
kernel lives here, not in the notebook (it would hand chapter 09's online softmax over).

    python tests/gpu/measure.py 08_fusion          (on a GPU; about 4 minutes on an H200)
    python solutions/08_fusion/measure.py --dry-run   (on the CPU: this file's kernels against the reference)
"""

import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import triton_course  # noqa: E402,F401  -- on a CPU, turns the interpreter on before triton is imported

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from triton_course.bench import copy_bandwidth, gbps, steady_rounds  # noqa: E402
from triton_course.roofline import matmul_tflops  # noqa: E402

SHAPES = [(4096, 4096), (8192, 4096), (16384, 4096), (8192, 1024)]   # the notebook's experiment
TARGET_FRACTION = 0.85   # the notebook's bandwidth check: 85% of a copy of as many bytes, same rounds
ROUNDS = 9


# -- the chain's variants ------------------------------------------------------------------------------

@triton.jit
def _add_kernel(x_ptr, r_ptr, h_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = i < n
    h = tl.load(x_ptr + i, mask=ok).to(tl.float32) + tl.load(r_ptr + i, mask=ok).to(tl.float32)
    tl.store(h_ptr + i, h.to(h_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _norm_kernel(h_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    ok = cols < n_cols
    h = tl.load(h_ptr + row * n_cols + cols, mask=ok, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    y = h * tl.math.rsqrt(tl.sum(h * h, axis=0) / n_cols + eps) * w
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _fused_one_row_kernel(x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, n_cols, eps, BLOCK_N: tl.constexpr):
    """The straightforward fused kernel: program r does row r, default warps."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    ok = cols < n_cols
    h = tl.load(x_ptr + row * n_cols + cols, mask=ok, other=0.0).to(tl.float32) + \
        tl.load(r_ptr + row * n_cols + cols, mask=ok, other=0.0).to(tl.float32)
    tl.store(h_ptr + row * n_cols + cols, h.to(h_ptr.dtype.element_ty), mask=ok)
    w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    y = h * tl.math.rsqrt(tl.sum(h * h, axis=0) / n_cols + eps) * w
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=ok)


def one_row_per_program(x, residual, weight, eps=1e-6):
    x, residual = x.contiguous(), residual.contiguous()
    n = x.shape[-1]
    y, h = torch.empty_like(x), torch.empty_like(x)
    _fused_one_row_kernel[(x.numel() // n,)](x, residual, weight, y, h, n, eps, BLOCK_N=triton.next_power_of_2(n))
    return y, h


def two_triton_kernels(x, residual, weight, eps=1e-6):
    """The chain unfused, but both kernels Triton (so the grader accepts the work): 5/4 of the fused bytes."""
    x, residual = x.contiguous(), residual.contiguous()
    n = x.shape[-1]
    y, h = torch.empty_like(x), torch.empty_like(x)
    _add_kernel[(triton.cdiv(x.numel(), 4096),)](x, residual, h, x.numel(), BLOCK=4096)
    _norm_kernel[(x.numel() // n,)](h, weight, y, n, eps, BLOCK_N=triton.next_power_of_2(n))
    return y, h


# -- the counter-example: softmax(A @ B) in one kernel (moved here from the notebook) --------------------

@triton.jit
def _logits_tile(a_ptr, b_ptr, rows, cols, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr):
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rows[:, None] * K + (k0 + ks)[None, :])
        b = tl.load(b_ptr + (k0 + ks)[:, None] * N + cols[None, :])
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def _matmul_softmax_kernel(a_ptr, b_ptr, out_ptr, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                           BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_max = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    row_sum = tl.zeros([BLOCK_M], dtype=tl.float32)
    for n0 in range(0, N, BLOCK_N):        # pass 1: running max and sum of exp over the row
        logits = _logits_tile(a_ptr, b_ptr, rows, n0 + tl.arange(0, BLOCK_N), N, K, BLOCK_M, BLOCK_N, BLOCK_K)
        new_max = tl.maximum(row_max, tl.max(logits, axis=1))
        row_sum = row_sum * tl.exp(row_max - new_max) + tl.sum(tl.exp(logits - new_max[:, None]), axis=1)
        row_max = new_max
    for n0 in range(0, N, BLOCK_N):        # pass 2: recompute each tile, normalise, store
        cols = n0 + tl.arange(0, BLOCK_N)
        logits = _logits_tile(a_ptr, b_ptr, rows, cols, N, K, BLOCK_M, BLOCK_N, BLOCK_K)
        probs = tl.exp(logits - row_max[:, None]) / row_sum[:, None]
        tl.store(out_ptr + rows[:, None] * N + cols[None, :], probs.to(out_ptr.dtype.element_ty))


def matmul_softmax_fused(a, b, BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=3):
    """softmax(a @ b, dim=1) in one kernel; shapes must be multiples of the blocks (no masks here)."""
    (M, K), N = a.shape, b.shape[1]
    assert a.is_contiguous() and b.is_contiguous() and M % BLOCK_M == 0 and N % BLOCK_N == 0 and K % BLOCK_K == 0
    out = torch.empty(M, N, device=a.device, dtype=a.dtype)
    _matmul_softmax_kernel[(M // BLOCK_M,)](a, b, out, N, K, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                                            num_warps=num_warps, num_stages=num_stages)
    return out


def matmul_softmax_unfused(a, b):
    """Two library kernels: cuBLAS writes a @ b, then softmax reads it back."""
    return torch.softmax(a @ b, dim=1)


# -- measurements ----------------------------------------------------------------------------------------

def _kernel_names(fn, args):
    try:
        from torch.profiler import ProfilerActivity, profile
        fn(*args)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn(*args)
            torch.cuda.synchronize()
        return [e.name for e in prof.events() if str(e.device_type).endswith("CUDA")]
    except Exception as exc:  # the profiler is a nicety here
        return [f"profiler failed: {exc}"]


def _bytes(ns, m, n, size, fused):
    return ns["norm_bytes"](m, n, size, norm="rmsnorm", residual=True, fused=fused)


def _rows(ns, shape, dtype, impls, ceiling):
    """All implementations and a copy of as many bytes as the fused kernel, timed in turn in the same rounds."""
    n = shape[-1]
    m = 1
    for s in shape[:-1]:
        m *= s
    size = torch.finfo(dtype).bits // 8
    fb, ub = _bytes(ns, m, n, size, True), _bytes(ns, m, n, size, False)
    numel = fb // 2 // size

    def make():
        return (torch.randn(shape, device="cuda", dtype=dtype), torch.randn(shape, device="cuda", dtype=dtype),
                torch.randn(n, device="cuda", dtype=dtype), torch.randn(numel, device="cuda", dtype=dtype))

    fns = {name: (lambda f: lambda x, r, w, c: f(x, r, w))(f) for name, f in impls.items()}
    fns["same_size_copy"] = lambda x, r, w, c: c.clone()
    times = {k: statistics.median(v) for k, v in steady_rounds(fns, make, rounds=ROUNDS).items()}
    row = {"shape": list(shape), "dtype": str(dtype).replace("torch.", ""), "fused_bytes": fb, "eager_bytes": ub}
    for name, ms in times.items():
        row[f"{name}_gbps"] = round(gbps(2 * numel * size if name == "same_size_copy" else fb, ms), 1)
    row["eager_gbps_on_own_bytes"] = round(gbps(ub, times["eager"]), 1)
    row["fused_fraction_of_copy"] = round(row["fused_gbps"] / ceiling, 3)
    row["fused_fraction_of_same_size_copy"] = round(row["fused_gbps"] / row["same_size_copy_gbps"], 3)
    row["speedup_measured"] = round(times["eager"] / times["fused"], 3)
    row["speedup_predicted"] = round(ub / fb, 3)
    if "torch_compile" in times:
        row["fused_over_compile"] = round(times["torch_compile"] / times["fused"], 3)
    print(row, flush=True)
    return row


def _judge_calibration(ns, shape=(4, 2048, 4096), device="cuda"):
    """The graded check's protocol on the reference, the straightforward fused kernel and two Triton kernels."""
    from grader.judge import InProcessTransport, JudgeSession, StudentFunction
    from grader.judge_timing import best_verified_fraction_of_copy

    n = shape[-1]
    m = 1
    for s in shape[:-1]:
        m *= s
    nbytes = (4 * m * n + n) * 2
    out = {"shape": list(shape), "dtype": "float16", "target_fraction": TARGET_FRACTION, "against": "same_size_copy",
           "protocol": "grader.judge_timing.best_verified_fraction_of_copy (what the hidden test runs)"}
    ceiling = copy_bandwidth() if device == "cuda" else 1.0
    for name, fn in {"reference": ns["add_rmsnorm"], "one_row_per_program": one_row_per_program,
                     "two_kernels": two_triton_kernels}.items():
        with tempfile.TemporaryDirectory(prefix="calibrate-") as tmp:
            session = JudgeSession(InProcessTransport({"add_rmsnorm": fn}, Path(tmp)))
            session.build_namespace([], ["add_rmsnorm"])
            session.transport.device = device
            h = dict(device=device, dtype=torch.float16)
            templates = [torch.randn(shape, **h), torch.randn(shape, **h), torch.randn(n, **h)]
            ours, copy = best_verified_fraction_of_copy(StudentFunction(session, "add_rmsnorm"), templates, nbytes,
                                                        ns["reference"], ns["fused_tolerances"], what=name,
                                                        fraction=TARGET_FRACTION)
            out[name] = {"gbps": round(ours, 1), "same_size_copy_gbps": round(copy, 1),
                         "fraction_of_same_size_copy": round(ours / copy, 3), "fraction_of_copy": round(ours / ceiling, 3),
                         "passes": ours >= TARGET_FRACTION * copy,
                         "rounds": [{k: r.get(k) for k in ("calls", "graph", "reported_ms", "judged_ms", "copy_ms",
                                                           "gbps", "same_size_copy_gbps")}
                                    for r in session.timing_rounds]}
        print(name, {k: v for k, v in out[name].items() if k != "rounds"}, flush=True)
        if device == "cuda":
            torch.cuda.empty_cache()
    return out


def _counter_example(predicted_speedup, tflops, ceiling):
    """softmax(A @ B) fused into one kernel against cuBLAS + torch.softmax; the fused kernel gets its best of a
    few tile shapes, so that it is not a straw man."""
    M, N, K = 8192, 4096, 1024
    a = torch.randn(M, K, device="cuda", dtype=torch.float16) / 8
    b = torch.randn(K, N, device="cuda", dtype=torch.float16) / 8
    want = torch.softmax(a.double() @ b.double(), dim=1)
    make_ab = lambda: (torch.randn(M, K, device="cuda", dtype=torch.float16) / 8,  # noqa: E731
                       torch.randn(K, N, device="cuda", dtype=torch.float16) / 8)
    shapes, configs = {}, []
    for bm, bn, bk, nw, st in ((64, 128, 64, 4, 3), (128, 128, 64, 8, 3), (64, 64, 64, 4, 3), (32, 128, 64, 4, 3),
                               (64, 128, 32, 4, 2)):
        kw = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=nw, num_stages=st)
        try:
            err = float((matmul_softmax_fused(a, b, **kw).double() - want).abs().max())
            shapes[len(configs)] = lambda a, b, kw=kw: matmul_softmax_fused(a, b, **kw)
            configs.append(dict(kw, max_abs_error=err))
        except Exception as exc:
            configs.append(dict(kw, failed=f"{type(exc).__name__}: {str(exc)[:200]}"))
    times = steady_rounds({**{str(i): fn for i, fn in shapes.items()}, "unfused": matmul_softmax_unfused,
                           "gemm_alone": lambda a, b: a @ b}, make_ab)
    for i in shapes:
        configs[i]["ms"] = round(statistics.median(times[str(i)]), 4)
    ok = [c for c in configs if "ms" in c]
    unfused_ms = statistics.median(times["unfused"])
    flops = 2 * M * N * K
    ub, fbytes = (M * K + K * N + 3 * M * N) * 2, (M * K + K * N + M * N) * 2
    counter = {"what": "softmax(A @ B, dim=1), A 8192x1024, B 1024x4096 float16: one Triton kernel (each program "
                       "owns BLOCK_M rows, two passes over the columns, GEMM recomputed) against torch.softmax(a @ b)",
               "fused_configs": configs, "unfused_ms": round(unfused_ms, 4),
               "gemm_alone_ms": round(statistics.median(times["gemm_alone"]), 4),
               "fused_bytes_fraction": round(fbytes / ub, 3),
               "predicted_speedup_roofline": round(predicted_speedup(flops, ub, 2 * flops, fbytes, tflops, ceiling), 3)}
    if ok:
        best = min(ok, key=lambda c: c["ms"])
        counter.update({"fused_ms": best["ms"], "fused_best_config": {k: best[k] for k in (
                            "BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")},
                        "fused_speed_relative_to_unfused": round(unfused_ms / best["ms"], 3),
                        "fused_programs": M // best["BLOCK_M"],
                        "fused_useful_tflops": round(flops / best["ms"] / 1e9, 1),
                        "max_abs_error": best["max_abs_error"]})
    print(counter, flush=True)
    return counter


def measure(ns):
    fused, eager = ns["add_rmsnorm"], ns["eager_add_rmsnorm"]
    ceiling = copy_bandwidth()
    tflops = matmul_tflops()
    print(f"copy {ceiling:.0f} GB/s, matmul {tflops:.0f} TFLOP/s", flush=True)
    compiled = torch.compile(eager)   # recompiles once, then dynamic shapes: one compile for all the rows
    impls = {"fused": fused, "eager": eager, "torch_compile": compiled, "one_row_per_program": one_row_per_program}

    x, r = (torch.randn(37, 4096, device="cuda", dtype=torch.float16) for _ in range(2))
    w = torch.randn(4096, device="cuda", dtype=torch.float16)
    for name, f in impls.items():   # every variant agrees with the reference before it is timed
        for got, want in zip(f(x, r, w), fused(x, r, w)):
            torch.testing.assert_close(got, want, atol=4e-3, rtol=4e-3)

    shapes = [((m, n), torch.float16) for m, n in SHAPES] + [((4, 2048, 4096), torch.float16),
                                                             ((4, 2048, 4096), torch.bfloat16),
                                                             ((4, 2048, 4096), torch.float32)]
    rows = [_rows(ns, shape, dtype, impls, ceiling) for shape, dtype in shapes]

    fp32_roof = ns["device_roof"]("fp32")
    predicted = []
    for m, n in SHAPES:
        row = next(r for r in rows if r["shape"] == [m, n] and r["dtype"] == "float16")
        fl = 5 * m * n
        predicted.append({"shape": [m, n], "dtype": "float16",
                          "predicted_speedup": round(ns["predicted_speedup"](fl, _bytes(ns, m, n, 2, False), fl,
                                                                             _bytes(ns, m, n, 2, True),
                                                                             fp32_roof.peak_tflops,
                                                                             fp32_roof.bandwidth_gbps), 3),
                          "measured_speedup": row["speedup_measured"],
                          "fused_fraction_of_same_size_copy": row["fused_fraction_of_same_size_copy"]})

    # the eager chain, one kernel at a time, on its own traffic
    mn, n = 8192 * 4096, 4096
    make = lambda: (torch.randn(8192, n, device="cuda", dtype=torch.float16),  # noqa: E731
                    torch.randn(8192, n, device="cuda", dtype=torch.float16),
                    torch.randn(n, device="cuda", dtype=torch.float16))
    op_times = steady_rounds({"add": lambda x, r, w: x + r,
                              "rms_norm (with weight)": lambda x, r, w: F.rms_norm(x, (n,), w, 1e-6)}, make)
    own = {"add": 3 * mn * 2, "rms_norm (with weight)": (2 * mn + n) * 2}
    eager_ops = {k: {"us": round(statistics.median(v) * 1e3, 1), "gbps": round(gbps(own[k], statistics.median(v)), 1)}
                 for k, v in op_times.items()}
    eager_kernels = _kernel_names(eager, make())
    print(eager_ops, eager_kernels, flush=True)

    # launch configurations of the reference kernel at the graded shape
    kernel = ns["add_rmsnorm_kernel"]
    fb = _bytes(ns, 8192, 4096, 2, True)
    sweep = {}
    for rows_per_program in (1, 2, 4):
        for warps in (4, 8, 16):
            def run(x, r, w, rp=rows_per_program, nw=warps):
                y, h = torch.empty_like(x), torch.empty_like(x)
                kernel[(triton.cdiv(8192, rp),)](x, r, w, y, h, 8192, 4096, 1e-6, BLOCK_N=4096, ROWS=rp, num_warps=nw)
                return y, h
            sweep[f"rows{rows_per_program}/w{warps}"] = run
    sweep_times = steady_rounds(sweep, make, rounds=5)
    tuning = [{"config": k, "gbps": round(gbps(fb, statistics.median(v)), 1)} for k, v in sweep_times.items()]
    print(tuning, flush=True)

    calibration = _judge_calibration(ns)
    counter = _counter_example(ns["predicted_speedup"], tflops, ceiling)

    bench = next(r for r in rows if r["shape"] == [4, 2048, 4096] and r["dtype"] == "float16")
    bf16 = next(r for r in rows if r["shape"] == [4, 2048, 4096] and r["dtype"] == "bfloat16")
    summary = [
        f"add + RMSNorm 4x2048x4096 fp16: fused {bench['fused_gbps']:,.0f} GB/s ({bench['fused_fraction_of_copy']:.1%} "
        f"of the 1 GiB copy, {bench['fused_fraction_of_same_size_copy']:.1%} of a copy of as many bytes), "
        f"torch.compile {bench['torch_compile_gbps']:,.0f}, eager {bench['eager_gbps']:,.0f} (on the fused bytes)",
        f"speed-up over eager: measured {bench['speedup_measured']}x, predicted from bytes {bench['speedup_predicted']}x",
        f"bf16: fused {bf16['fused_gbps']:,.0f} GB/s ({bf16['fused_fraction_of_same_size_copy']:.1%} of a same-size copy)",
        "target (85% of a same-size copy, the grader's protocol): " + ", ".join(
            f"{k} {calibration[k]['fraction_of_same_size_copy']:.1%} {'passes' if calibration[k]['passes'] else 'fails'}"
            for k in ("reference", "one_row_per_program", "two_kernels")),
    ]
    if "fused_ms" in counter:
        summary.append(f"counter-example softmax(A @ B) fused: {counter['fused_ms']} ms vs unfused "
                       f"{counter['unfused_ms']} ms ({counter['fused_speed_relative_to_unfused']}x the speed)")
    return {
        "chain": "add_rmsnorm",
        "summary": summary,
        "roof": {"copy_gbps": round(ceiling, 1), "matmul_fp16_tflops": round(tflops, 1),
                 "fp32_tflops": round(fp32_roof.peak_tflops, 1),
                 "ridge_fp32_flop_per_byte": round(fp32_roof.ridge, 2)},
        "eager_chain": "h = x + residual; y = F.rms_norm(h, (N,), weight, eps): traffic (5*M*N + N) elements; fused "
                       "(4*M*N + N), both y and h written. GB/s of every version are on the fused bytes unless named "
                       "otherwise; same_size_copy moves as many bytes as the fused kernel.",
        "sizes": rows,
        "predicted_vs_measured": predicted,
        "eager_ops_at_8192x4096_fp16": eager_ops,
        "eager_cuda_kernels": eager_kernels,
        "launch_config_sweep_8192x4096_fp16": tuning,
        "calibration": calibration,
        "counter_example": counter,
        "bandwidth_check": {"shape": [4, 2048, 4096], "dtype": "float16", "achieved_gbps": bench["fused_gbps"],
                            "fraction_of_copy": bench["fused_fraction_of_copy"],
                            "fraction_of_same_size_copy": bench["fused_fraction_of_same_size_copy"],
                            "compile_gbps": bench["torch_compile_gbps"],
                            "target_fraction_graded": TARGET_FRACTION, "against": "same_size_copy",
                            "claim": ">= 0.9 of copy and >= torch.compile",
                            "passes_claim": bench["fused_fraction_of_copy"] >= 0.9
                            and bench["fused_gbps"] >= bench["torch_compile_gbps"]},
    }


def _dry_run() -> int:
    """On the CPU (interpreter): this file's kernels give the reference's values, and the grader's protocol runs."""
    import os

    from grader.course import solution_notebook
    from grader.notebook_code import load_namespace

    ns = load_namespace(solution_notebook("08_fusion"))
    x, r, w = torch.randn(5, 300), torch.randn(5, 300), torch.randn(300)
    for fn in (one_row_per_program, two_triton_kernels):
        for got, want in zip(fn(x, r, w), ns["add_rmsnorm"](x, r, w)):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    a, b = torch.randn(64, 32) / 8, torch.randn(32, 128) / 8
    torch.testing.assert_close(matmul_softmax_fused(a, b, BLOCK_M=64, BLOCK_N=128, BLOCK_K=32),
                               matmul_softmax_unfused(a, b), atol=1e-5, rtol=1e-4)
    print("dry run: one_row_per_program, two_triton_kernels and the counter-example agree with their references")
    os.environ["COURSE_JUDGE_TIME_ON_CPU"] = "1"   # the grader's protocol under the interpreter: numbers meaningless
    _judge_calibration(ns, shape=(2, 8, 256), device="cpu")
    print("dry run: the grader's timed protocol ran on the three kernels")
    return 0


if __name__ == "__main__":
    sys.exit(_dry_run() if "--dry-run" in sys.argv else print(__doc__) or 0)
