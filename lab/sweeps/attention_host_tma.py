"""Probe: chapter 09's attention with tensor descriptors made on the host (filled once per launch, passed to
every program as a kernel argument) instead of by every program (tl.make_tensor_descriptor), beside the
notebook's kernel pinned to the same launches, its launch table and SDPA; D = 128, float16, Z = 4, H = 16,
N = 1024 ... 16384, on the H200.

    python lab/sweeps/attention_host_tma.py [--out FILE]    (about 3 minutes; solutions/09_attention/records/09_attention_host_tma.json)

Why: the focused sweep (solutions/09_attention/records/09_attention_focus.json) saw the notebook's TMA launches lose to pointer loads at
N = 1024 (0.66 against 0.74 of SDPA) and win at N = 16384 (0.85 against 0.77): a cost per program, not per key
block, which four descriptors built by every program would be.

Variants: "host ..." read q, k, v through 2-D descriptors over [Z*H*N, D] (contiguous heads, N a multiple of
the blocks) and store through one descriptor made in the kernel; "4d host ..." use 4-D descriptors [Z, H, N, D]
for all four tensors (any strides with D contiguous, rows past N of a head zero-filled and not written, so they
could serve every layout the notebook's TMA path serves); "nb ..." are the notebook's own attention pinned to one
launch (in-kernel descriptors when "tma" in the recorded run, made at 0196db5; the notebook has since moved to host
descriptors and loads v beside k, so a new run's "nb tma" rows time that kernel instead); "ws" variants
warp-specialise the one loop (causal: masking every key block). Each variant is compiled, checked against float64
(first and last head, float16 and bfloat16) and run once in a worker process; one that does not finish in 120 s is
left out ("failed"). Triton 3.6's sm_90 compile of the warp-specialised ones takes about a second on a CPU, so their
time-outs are runs that never finish.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "lab" / "sweeps"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402
from records import provenance  # noqa: E402

LOG2E = 1.4426950408889634
NS_N = (1024, 2048, 4096, 8192, 16384)


@triton.jit
def _fold(acc, m_i, l_i, q, k, v, qk_scale, keep, MASKED: tl.constexpr):
    s = tl.dot(q, tl.trans(k))
    if MASKED:
        s = tl.where(keep, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
    p = tl.exp2(s * qk_scale - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    return acc, m_new, l_i


@triton.jit
def _blocks(acc, m_i, l_i, q, desc_k, desc_v, row0, start_m, lo, hi, qk_scale,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, WARP_SPEC: tl.constexpr):
    rows = tl.arange(0, BLOCK_M)
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPEC):
        k = desc_k.load([row0 + start_n, 0])
        v = desc_v.load([row0 + start_n, 0])
        lim = rows - (start_n - start_m)
        keep = tl.arange(0, BLOCK_N)[None, :] <= lim[:, None]
        acc, m_i, l_i = _fold(acc, m_i, l_i, q, k, v, qk_scale, keep, MASKED)
    return acc, m_i, l_i


@triton.jit
def host_desc_kernel(desc_q, desc_k, desc_v, O, N, qk_scale,
                     CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     SPLIT: tl.constexpr, WARP_SPEC: tl.constexpr):
    """q, k, v through host-made 2-D descriptors over [Z*H*N, D] (contiguous heads, N a multiple of the blocks);
    the output through one descriptor of this head made here (Triton 3.6's warp specialisation splits its block
    between the two consumers; a host descriptor's block it does not). Causal: SPLIT runs unmasked off-diagonal
    blocks then masked diagonal ones (two loops); otherwise one loop masks every block (one compare and one select
    per score)."""
    pid_m = tl.program_id(0)
    if CAUSAL:
        pid_m = tl.num_programs(0) - 1 - pid_m
    start_m = pid_m * BLOCK_M
    row0 = tl.program_id(1) * N
    q = desc_q.load([row0 + start_m, 0])
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.full([BLOCK_M], 0.0, tl.float32)
    acc = tl.full([BLOCK_M, HEAD_DIM], 0.0, tl.float32)
    if CAUSAL:
        if SPLIT:
            acc, m_i, l_i = _blocks(acc, m_i, l_i, q, desc_k, desc_v, row0, start_m, 0, start_m, qk_scale,
                                    BLOCK_M, BLOCK_N, False, False)
            acc, m_i, l_i = _blocks(acc, m_i, l_i, q, desc_k, desc_v, row0, start_m, start_m, start_m + BLOCK_M,
                                    qk_scale, BLOCK_M, BLOCK_N, True, False)
        else:
            acc, m_i, l_i = _blocks(acc, m_i, l_i, q, desc_k, desc_v, row0, start_m, 0, start_m + BLOCK_M,
                                    qk_scale, BLOCK_M, BLOCK_N, True, WARP_SPEC)
    else:
        acc, m_i, l_i = _blocks(acc, m_i, l_i, q, desc_k, desc_v, row0, start_m, 0, N, qk_scale,
                                BLOCK_M, BLOCK_N, False, WARP_SPEC)
    out = acc / l_i[:, None]
    o_desc = tl.make_tensor_descriptor(O + row0.to(tl.int64) * HEAD_DIM, shape=[N, HEAD_DIM],
                                       strides=[HEAD_DIM, 1], block_shape=[BLOCK_M, HEAD_DIM])
    o_desc.store([start_m, 0], out.to(O.dtype.element_ty))


@triton.jit
def _blocks4(acc, m_i, l_i, q, desc_k, desc_v, off_z, off_h, start_m, lo, hi, qk_scale, HEAD_DIM: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr):
    rows = tl.arange(0, BLOCK_M)
    for start_n in tl.range(lo, hi, BLOCK_N):
        k = desc_k.load([off_z, off_h, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        v = desc_v.load([off_z, off_h, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        lim = rows - (start_n - start_m)
        keep = tl.arange(0, BLOCK_N)[None, :] <= lim[:, None]
        acc, m_i, l_i = _fold(acc, m_i, l_i, q, k, v, qk_scale, keep, MASKED)
    return acc, m_i, l_i


@triton.jit
def _start4(desc_q, H, CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    """This program's first query row and head (z, h) (causal: the longest query blocks first), its query tile
    from a 4-D descriptor, and the empty running state (m_i, l_i, acc)."""
    pid_m = tl.program_id(0)
    if CAUSAL:
        pid_m = tl.num_programs(0) - 1 - pid_m
    start_m = pid_m * BLOCK_M
    off_z = tl.program_id(1) // H
    off_h = tl.program_id(1) % H
    q = desc_q.load([off_z, off_h, start_m, 0]).reshape(BLOCK_M, HEAD_DIM)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.full([BLOCK_M], 0.0, tl.float32)
    acc = tl.full([BLOCK_M, HEAD_DIM], 0.0, tl.float32)
    return start_m, off_z, off_h, q, m_i, l_i, acc


@triton.jit
def host_desc4_kernel(desc_q, desc_k, desc_v, desc_o, H, N, qk_scale,
                      CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Host-made 4-D descriptors [Z, H, N, D] for q, k, v and the output (any strides with D contiguous; rows
    past N read as zeros and are not written, per head); N a multiple of BLOCK_N here. Causal: unmasked
    off-diagonal blocks, then masked diagonal ones."""
    start_m, off_z, off_h, q, m_i, l_i, acc = _start4(desc_q, H, CAUSAL, HEAD_DIM, BLOCK_M)
    if CAUSAL:
        acc, m_i, l_i = _blocks4(acc, m_i, l_i, q, desc_k, desc_v, off_z, off_h, start_m, 0, start_m, qk_scale,
                                 HEAD_DIM, BLOCK_M, BLOCK_N, False)
        acc, m_i, l_i = _blocks4(acc, m_i, l_i, q, desc_k, desc_v, off_z, off_h, start_m, start_m,
                                 start_m + BLOCK_M, qk_scale, HEAD_DIM, BLOCK_M, BLOCK_N, True)
    else:
        acc, m_i, l_i = _blocks4(acc, m_i, l_i, q, desc_k, desc_v, off_z, off_h, start_m, 0, N, qk_scale,
                                 HEAD_DIM, BLOCK_M, BLOCK_N, False)
    out = acc / l_i[:, None]
    desc_o.store([off_z, off_h, start_m, 0], out.to(desc_o.dtype).reshape(1, 1, BLOCK_M, HEAD_DIM))


@triton.jit
def host_desc4_ws_kernel(desc_q, desc_k, desc_v, O, stride_oz, stride_oh, H, N, qk_scale,
                         HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Non-causal, one warp-specialised loop: q, k, v through host-made 4-D descriptors, the output through a
    descriptor of this head made here (whose block Triton 3.6 splits between the two consumers)."""
    start_m, off_z, off_h, q, m_i, l_i, acc = _start4(desc_q, H, False, HEAD_DIM, BLOCK_M)
    for start_n in tl.range(0, N, BLOCK_N, warp_specialize=True):
        k = desc_k.load([off_z, off_h, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        v = desc_v.load([off_z, off_h, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        acc, m_i, l_i = _fold(acc, m_i, l_i, q, k, v, qk_scale, None, False)
    out = acc / l_i[:, None]
    o_base = O + off_z.to(tl.int64) * stride_oz + off_h.to(tl.int64) * stride_oh
    o_desc = tl.make_tensor_descriptor(o_base, shape=[N, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_M, HEAD_DIM])
    o_desc.store([start_m, 0], out.to(O.dtype.element_ty))


def host_desc4_attention(q, k, v, causal, bm, bn, warps, stages, ws=False):
    Z, H, N, D = q.shape
    assert N % bn == 0
    dq, dk, dv = (TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, b, D])
                  for t, b in ((q, bm), (k, bn), (v, bn)))
    out = torch.empty_like(q)
    if ws:
        assert not causal
        triton.set_allocator(_scratch)
        host_desc4_ws_kernel[(triton.cdiv(N, bm), Z * H)](dq, dk, dv, out, out.stride(0), out.stride(1), H, N,
                                                          LOG2E / math.sqrt(D), HEAD_DIM=D, BLOCK_M=bm, BLOCK_N=bn,
                                                          num_warps=warps, num_stages=stages)
        return out
    do = TensorDescriptor(out, list(out.shape), list(out.stride()), [1, 1, bm, D])
    host_desc4_kernel[(triton.cdiv(N, bm), Z * H)](dq, dk, dv, do, H, N, LOG2E / math.sqrt(D), CAUSAL=causal,
                                                   HEAD_DIM=D, BLOCK_M=bm, BLOCK_N=bn, num_warps=warps,
                                                   num_stages=stages)
    return out


def pinned_notebook(ns, bm, bn, warps, stages, tma):
    """The notebook's own attention pinned to one launch (its descriptors, when tma, as the notebook makes them)."""
    from triton_course.attention import AttentionConfig, pinned_config

    def run(q, k, v, causal):
        with pinned_config(AttentionConfig(bm, bn, warps, stages, tma)):
            return ns["attention"](q, k, v, causal)
    return run


def _scratch(size, alignment, stream):  # noqa: ARG001
    return torch.empty(size, dtype=torch.int8, device="cuda")


def host_desc_attention(q, k, v, causal, bm, bn, warps, stages, split=False, ws=False):
    Z, H, N, D = q.shape
    assert q.is_contiguous() and k.is_contiguous() and v.is_contiguous() and N % bm == 0 and N % bn == 0
    triton.set_allocator(_scratch)
    rows = Z * H * N
    dq = TensorDescriptor(q, [rows, D], [D, 1], [bm, D])
    dk = TensorDescriptor(k, [rows, D], [D, 1], [bn, D])
    dv = TensorDescriptor(v, [rows, D], [D, 1], [bn, D])
    out = torch.empty_like(q)
    host_desc_kernel[(N // bm, Z * H)](dq, dk, dv, out, N, LOG2E / math.sqrt(D), CAUSAL=causal, HEAD_DIM=D,
                                       BLOCK_M=bm, BLOCK_N=bn, SPLIT=split, WARP_SPEC=ws,
                                       num_warps=warps, num_stages=stages)
    return out


#: name: (kwargs for host_desc_attention, causal modes); "4d" variants run host_desc4_attention, "nb" ones the
#: notebook's kernel pinned (in-kernel descriptors when "tma" in the recorded run; see the module docstring)
VARIANTS = {
    "4d host ws 128x128 w4 s2": (dict(bm=128, bn=128, warps=4, stages=2, ws=True), (False,)),
    "host ws 128x128 w4 s2": (dict(bm=128, bn=128, warps=4, stages=2, ws=True), (False, True)),
    "host ws 128x64 w4 s2": (dict(bm=128, bn=64, warps=4, stages=2, ws=True), (False, True)),
    "4d host 64x64 w4 s3": (dict(bm=64, bn=64, warps=4, stages=3), (False, True)),
    "4d host 128x128 w8 s3": (dict(bm=128, bn=128, warps=8, stages=3), (False, True)),
    "4d host 128x128 w8 s2": (dict(bm=128, bn=128, warps=8, stages=2), (False, True)),
    "4d host 128x64 w4 s3": (dict(bm=128, bn=64, warps=4, stages=3), (False, True)),
    "nb tma 128x128 w8 s3": (dict(bm=128, bn=128, warps=8, stages=3, tma=True), (False, True)),
    "nb tma 64x64 w4 s3": (dict(bm=64, bn=64, warps=4, stages=3, tma=True), (False, True)),
    "nb ptr 128x128 w8 s3": (dict(bm=128, bn=128, warps=8, stages=3, tma=False), (False, True)),
    "host 64x64 w4 s3": (dict(bm=64, bn=64, warps=4, stages=3), (False,)),
    "host split 64x64 w4 s3": (dict(bm=64, bn=64, warps=4, stages=3, split=True), (True,)),
    "host 128x128 w8 s3": (dict(bm=128, bn=128, warps=8, stages=3), (False,)),
    "host split 128x128 w8 s3": (dict(bm=128, bn=128, warps=8, stages=3, split=True), (True,)),
}


def inputs(z, h, n, d, dtype=torch.float16):
    return tuple(torch.randn(z, h, n, d, device="cuda", dtype=dtype) for _ in range(3))


def reference(q, k, v, causal):
    from triton_course.attention import attention_reference
    return attention_reference(q.double(), k.double(), v.double(), causal)


_NS: dict = {}


def fn_of(name: str):
    """(q, k, v, causal) -> output for variant ``name``."""
    kw = VARIANTS[name][0]
    if name.startswith("4d"):
        return lambda q, k, v, causal: host_desc4_attention(q, k, v, causal, **kw)
    if name.startswith("nb"):
        if not _NS:   # chapter 09's fast path (the solution notebook's code when the record was made)
            from triton_course.attention_fast import fast_namespace
            _NS.update(fast_namespace())
        return pinned_notebook(_NS, kw["bm"], kw["bn"], kw["warps"], kw["stages"], kw["tma"])
    return lambda q, k, v, causal: host_desc_attention(q, k, v, causal, **kw)


def check(name: str) -> list[str]:
    fn, causals = fn_of(name), VARIANTS[name][1]
    problems = []
    for causal in causals:
        for dtype in (torch.float16, torch.bfloat16):
            for n in (1024, 256):
                q, k, v = inputs(2, 16, n, 128, dtype)
                got = fn(q, k, v, causal)
                for z, h in ((0, 0), (1, 15)):   # the first and the last head
                    want = reference(q[z:z + 1, h:h + 1], k[z:z + 1, h:h + 1], v[z:z + 1, h:h + 1], causal)
                    err = float((got[z:z + 1, h:h + 1].double() - want).abs().max())
                    if not err < 3e-2:
                        problems.append(f"causal={causal} N={n} {str(dtype)[6:]} head ({z},{h}): max error {err:.3g}")
    return problems


def warm(name: str) -> int:
    problems = check(name)
    for causal in VARIANTS[name][1]:
        fn_of(name)(*inputs(4, 16, 1024, 128), causal)
    torch.cuda.synchronize()
    print(json.dumps({"variant": name, "problems": problems}))
    return 1 if problems else 0


def warm_all() -> dict[str, str]:
    failed = {}

    def one(name):
        try:
            done = subprocess.run([sys.executable, __file__, "--warm", name], capture_output=True, text=True,
                                  timeout=120)
        except subprocess.TimeoutExpired:
            return name, "compile, check and first run did not finish in 120 s"
        if done.returncode == 0:
            return name, None
        lines = (done.stdout + done.stderr).strip().splitlines()
        return name, (" | ".join(lines[-3:]) or f"exit status {done.returncode}")[:600]

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        for name, problem in pool.map(one, VARIANTS):
            print(f"compiled {name}: {'ok' if problem is None else problem}", flush=True)
            if problem:
                failed[name] = problem
    return failed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "solutions" / "09_attention" / "records" / "09_attention_host_tma.json"))
    parser.add_argument("--warm")
    args = parser.parse_args()
    if args.warm:
        sys.exit(warm(args.warm))
    from triton_course.attention_fast import fast_namespace
    from triton_course.bench import METHOD, steady_rounds

    t0 = time.time()
    failed = warm_all()
    from triton_course.attention import through_launch_table

    ns = fast_namespace()
    ns["attention"] = through_launch_table(ns["attention"])   # the table's launches, never the Gluon path
    rows = []
    z, h, d = 4, 16, 128
    for causal in (False, True):
        for n in NS_N:
            fns = {name: (lambda q, k, v, f=fn_of(name): f(q, k, v, causal))
                   for name, (kw, causals) in VARIANTS.items() if causal in causals and name not in failed}
            fns["notebook table"] = lambda q, k, v: ns["attention"](q, k, v, causal)
            fns["SDPA"] = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            times = steady_rounds(fns, lambda: inputs(z, h, n, d), rounds=5)
            flops = 4 * z * h * n * n * d / (2 if causal else 1)
            tflops = {k_: round(flops / statistics.median(t) / 1e9, 1) for k_, t in times.items()}
            ratio = {k_: round(v_ / tflops["SDPA"], 3) for k_, v_ in tflops.items()}
            rows.append({"D": d, "causal": causal, "N": n, "Z": z, "H": h, "tflops": tflops, "ratio_to_sdpa": ratio})
            print(f"causal={causal!s:5} N={n:5}: " + ", ".join(f"{k_} {v_:.2f}" for k_, v_ in ratio.items()), flush=True)
    summary = {}
    for causal in (False, True):
        sel = [r for r in rows if r["causal"] == causal]
        for name in sel[0]["ratio_to_sdpa"]:
            vals = [r["ratio_to_sdpa"][name] for r in sel]
            summary[f"{'causal' if causal else 'non-causal'}: {name}"] = {
                "geomean": round(math.exp(statistics.fmean(math.log(x) for x in vals)), 3), "worst": min(vals)}
    result = {**provenance("09_attention host-descriptor probe", "python lab/sweeps/attention_host_tma.py"),
              "method": METHOD, "rounds": 5, "failed": failed, "rows": rows, "summary": summary,
              "seconds": round(time.time() - t0)}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
