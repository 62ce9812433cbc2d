"""Launch-shape sweep for chapter 05 (softmax, 4096 float32 rows): rows per program x num_warps,
against the one-row-per-program kernel and a same-size copy.

    python results/sweeps/softmax_launch.py     (on a GPU; writes results/05_softmax_launch_sweep.json)
"""
import json, os, statistics
import torch, triton, triton.language as tl
from triton.testing import do_bench

@triton.jit
def sm_kernel(x_ptr, out_ptr, n_rows, n_cols, xs, os_, BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    row_ok = rows < n_rows
    col_ok = cols < n_cols
    safe = tl.minimum(rows, n_rows - 1).to(tl.int64)
    x = tl.load(x_ptr + safe[:, None] * xs + cols[None, :], mask=col_ok[None, :], other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=1)
    e = tl.exp(x - m[:, None])
    y = e / tl.sum(e, axis=1)[:, None]
    tl.store(out_ptr + safe[:, None] * os_ + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])

@triton.jit
def one_row(x_ptr, out_ptr, n_cols, xs, os_, BLOCK_N: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    ok = cols < n_cols
    x = tl.load(x_ptr + r * xs + cols, mask=ok, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + r * os_ + cols, (e / tl.sum(e, axis=0)).to(out_ptr.dtype.element_ty), mask=ok)

def bench(fn):
    return statistics.median([do_bench(fn, warmup=10, rep=40, return_mode="median") for _ in range(3)])

M = 4096
res = {}
summary = []
for N in (512, 1024, 2048, 4096, 8192, 16384):
    x = torch.randn(M, N, device="cuda"); out = torch.empty_like(x); d = torch.empty_like(x)
    nbytes = 2 * M * N * 4
    res[f"{N}/copy"] = nbytes / bench(lambda: d.copy_(x)) / 1e6
    BN = triton.next_power_of_2(N)
    res[f"{N}/one_row"] = nbytes / bench(lambda: one_row[(M,)](x, out, N, N, N, BLOCK_N=BN)) / 1e6
    ref = torch.softmax(x, -1)
    for rows in (1, 2, 4, 8):
        if rows * BN > 32768 or rows * BN < 256: continue
        for nw in (2, 4, 8, 16, 32):
            per_thread = rows * BN // (nw * 32)
            if per_thread < 4 or per_thread > 128: continue
            f = lambda: sm_kernel[(triton.cdiv(M, rows),)](x, out, M, N, N, N, BLOCK_N=BN, ROWS=rows, num_warps=nw)
            try:
                f(); torch.cuda.synchronize()
                assert (out - ref).abs().max() < 1e-5
                res[f"{N}/rows{rows}/w{nw}"] = nbytes / bench(f) / 1e6
            except Exception as e:
                res[f"{N}/rows{rows}/w{nw}"] = str(e)[:80]
    best = sorted(((v, k) for k, v in res.items() if k.startswith(f"{N}/rows") and isinstance(v, float)), reverse=True)[:5]
    summary.append(f"N={N}: same-size copy {res[f'{N}/copy']:.0f} GB/s; best " + ", ".join(f"{k.split('/', 1)[1]} {v:.0f}" for v, k in best[:3]))
    print(N, "copy", round(res[f"{N}/copy"]), "one_row", round(res[f"{N}/one_row"]), "best", [(round(v), k) for v, k in best], flush=True)
import datetime as dt
record = {"chapter": "05_softmax_launch_sweep", "command": "python results/sweeps/softmax_launch.py",
          "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
          "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
          "unit": "GB/s from the bytes that must move; median of 3 do_bench medians",
          "summary": summary, "gbps": res}
json.dump(record, open(os.path.join(os.environ.get("OUT", os.path.dirname(os.path.abspath(__file__)) + "/.."), "05_softmax_launch_sweep.json"), "w"), indent=1)
