"""Launch-shape sweep for chapter 06 (RMSNorm, 4096 float16 rows): rows per program x num_warps,
one tile per program and persistent, against a same-size copy. Informs LAUNCH_TABLE in the solution.

    python results/sweeps/rmsnorm_launch.py     (on a GPU; writes results/06_rmsnorm_launch_sweep.json)
"""
import json, os, statistics
import torch, triton, triton.language as tl
from triton.testing import do_bench

@triton.jit
def rows_kernel(x_ptr, w_ptr, out_ptr, M, N, stride_x, stride_out, eps, BLOCK_N: tl.constexpr, ROWS: tl.constexpr,
                HINTS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    ok = (rows < M)[:, None] & (cols < N)[None, :]
    r64 = rows.to(tl.int64)
    if HINTS:
        x = tl.load(x_ptr + r64[:, None] * stride_x + cols[None, :], mask=ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
    else:
        x = tl.load(x_ptr + r64[:, None] * stride_x + cols[None, :], mask=ok, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / N + eps)
    w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    y = x * rstd[:, None] * w[None, :]
    tl.store(out_ptr + r64[:, None] * stride_out + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=ok)

@triton.jit
def persist_kernel(x_ptr, w_ptr, out_ptr, M, N, stride_x, stride_out, eps, BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    for first in tl.range(tl.program_id(0) * ROWS, M, tl.num_programs(0) * ROWS):
        rows = first + tl.arange(0, ROWS)
        ok = (rows < M)[:, None] & (cols < N)[None, :]
        r64 = rows.to(tl.int64)
        x = tl.load(x_ptr + r64[:, None] * stride_x + cols[None, :], mask=ok, other=0.0).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / N + eps)
        y = x * rstd[:, None] * w[None, :]
        tl.store(out_ptr + r64[:, None] * stride_out + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=ok)

def gb(M, N): return (2 * M * N + N) * 2

def bench(fn):
    return statistics.median([do_bench(fn, warmup=10, rep=40, return_mode="median") for _ in range(3)])

M = 4096
res = {}
summary = []
sms = torch.cuda.get_device_properties(0).multi_processor_count
big = torch.empty(2**28, device="cuda"); big2 = torch.empty_like(big)
res["copy_big"] = 2*big.numel()*4/bench(lambda: big2.copy_(big))/1e6
del big, big2
for N in (1024, 2048, 4096, 8192, 16384):
    x = torch.randn(M, N, device="cuda", dtype=torch.float16); w = torch.randn(N, device="cuda", dtype=torch.float16)
    out = torch.empty_like(x)
    d = torch.empty_like(x)
    res[f"{N}/copy"] = gb(M, N)/bench(lambda: d.copy_(x))/1e6
    ref = torch.nn.functional.rms_norm(x.float(), (N,), w.float(), 1e-6).half()
    BN = triton.next_power_of_2(N)
    for rows in (1, 2, 4, 8):
        if rows * BN > 32768: continue
        for nw in (2, 4, 8, 16):
            if nw * 32 * 4 > rows * BN * 2: continue   # fewer than 4 elements per thread: skip
            for hints in (0,):
                f = lambda: rows_kernel[(triton.cdiv(M, rows),)](x, w, out, M, N, N, N, 1e-6, BLOCK_N=BN, ROWS=rows, HINTS=hints, num_warps=nw)
                try:
                    f(); torch.cuda.synchronize()
                    assert (out.float() - ref.float()).abs().max() < 2e-2
                    res[f"{N}/rows{rows}/w{nw}/h{hints}"] = gb(M, N)/bench(f)/1e6
                except Exception as e:
                    res[f"{N}/rows{rows}/w{nw}/h{hints}"] = str(e)[:80]
        for nw in (4, 8):
            for per_sm in (2, 4):
                grid = min(triton.cdiv(M, rows), sms * per_sm)
                f = lambda: persist_kernel[(grid,)](x, w, out, M, N, N, N, 1e-6, BLOCK_N=BN, ROWS=rows, num_warps=nw)
                try:
                    f(); torch.cuda.synchronize()
                    res[f"{N}/persist_rows{rows}/w{nw}/sm{per_sm}"] = gb(M, N)/bench(f)/1e6
                except Exception as e:
                    res[f"{N}/persist_rows{rows}/w{nw}/sm{per_sm}"] = str(e)[:80]
    best = sorted(((v, k) for k, v in res.items() if k.startswith(f"{N}/") and isinstance(v, float) and "copy" not in k), reverse=True)[:6]
    summary.append(f"N={N}: same-size copy {res[f'{N}/copy']:.0f} GB/s; best " + ", ".join(f"{k.split('/', 1)[1]} {v:.0f}" for v, k in best[:3]))
    print(N, "copy", round(res[f"{N}/copy"]), "best", [(round(v), k) for v, k in best], flush=True)
import datetime as dt
record = {"chapter": "06_rmsnorm_launch_sweep", "command": "python results/sweeps/rmsnorm_launch.py",
          "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
          "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
          "unit": "GB/s from the bytes that must move; median of 3 do_bench medians",
          "summary": summary, "gbps": res}
json.dump(record, open(os.path.join(os.environ.get("OUT", os.path.dirname(os.path.abspath(__file__)) + "/.."), "06_rmsnorm_launch_sweep.json"), "w"), indent=1)
print("copy_big", res["copy_big"])
