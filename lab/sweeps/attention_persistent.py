"""Chapter 09's attention at D = 128 run by persistent programs, and by two programs per SM, against the notebook
as it is.

    python lab/sweeps/attention_persistent.py [--out solutions/09_attention/records/09_attention_persistent.json]
        (on a GPU: about 4 minutes on an H200)
    python lab/sweeps/attention_persistent.py --dry-run
        (anywhere; without a GPU under Triton's interpreter: every variant against float64 at small sizes)

The question. At D = 128 the notebook's launch reaches 79% of SDPA at N = 1024 and 85-87% at N = 2048-8192. A
128 x 128 program at N = 1024 folds only 8 key blocks, about 14 us of tensor-core work on one SM; before its first
block it waits for q and two key/value blocks to arrive from memory, and after its last it divides and stores.
With 224 KB of shared memory per program (q, and three stages of k and v) one program fills an SM, so nothing
hides that start and end. Two ways to hide them:

- persistent programs: one per SM, each looping over query tiles (``tl.range(..., flatten=True)`` lets Triton's
  pipeliner fetch the next tile's first key blocks while the current tile finishes, as its persistent matmul
  tutorial does for the next tile's first k blocks);
- two programs per SM: 128 x 64 blocks and two stages fit twice in shared memory (96 KB each), and ``maxnreg``
  caps the registers so that two 8-warp programs fit the register file.

Every variant folds key blocks with the notebook's own ``_attend_blocks`` and reads through its ``load_tile``
(the solution notebook's code, loaded as is); only the loop over query tiles is new here. Each is checked against
float64 first. At each case and N, side by side in ``triton_course.bench.steady_rounds`` (medians of interleaved
rounds on fresh inputs), float16, Z = 4, H = 16: SDPA (cuDNN on Hopper), the notebook's launch, and the variants.
Registers, spills and shared memory of every compiled variant are recorded.

Recorded on an H200 (solutions/09_attention/records/09_attention_persistent.json): nothing here beats the notebook's launch.
- Two 128 x 64 programs per SM (128 registers, no spills, 96 KB each): 5-8% slower without a mask, 2-20% with.
- Persistent programs: 128 x 64 blocks with three stages come closest (0.92-1.01 of the notebook's launch),
  128 x 128 blocks with two stages are 9-23% slower, and three stages no longer fit (262,168 bytes of shared
  memory against the H200's 232,448: 32 KB, one 128 x 128 tile, more than the notebook's program takes). 64 x 64
  blocks take 131 KB in the loop, so one program per SM, and are 22-41% slower. ``flatten=True`` compiled only
  with 2-D descriptors, and timed the same as the plain loop; with the notebook's 4-D descriptors Triton 3.6's
  TMA lowering fails.
- The start and end of a short program are not what SDPA gains on, then: a persistent loop that hides them,
  or a second program that fills them, loses more to its smaller or less pipelined blocks than it hides.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "lab" / "sweeps"))

import records  # noqa: E402

records.interpret_if_dry_run()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402

from grader.notebook_code import exec_cell  # noqa: E402
from triton_course.attention import (INTERPRETER_CONFIG, AttentionConfig, attention_reference,  # noqa: E402
                                     pinned_config, through_launch_table)
from triton_course.attention_fast import fast_namespace  # noqa: E402

OUT = ROOT / "solutions" / "09_attention" / "records" / "09_attention_persistent.json"
GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"

PERSISTENT = '''
@triton.jit
def attention_persistent_kernel(q_desc, k_desc, v_desc, o_desc, H, N, qk_scale, tiles,
                                CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                                BLOCK_N: tl.constexpr, FLATTEN: tl.constexpr):
    """Each program loops over query tiles tile = pid, pid + programs, ...; tiles are numbered so that, with a
    causal mask, the last query blocks of every head (the most key blocks) come first."""
    m_tiles = (N + BLOCK_M - 1) // BLOCK_M
    heads = tiles // m_tiles
    for tile in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=FLATTEN):
        if CAUSAL:
            pid_m = m_tiles - 1 - tile // heads
            off_hz = tile % heads
        else:
            pid_m = tile % m_tiles
            off_hz = tile // m_tiles
        start_m = pid_m * BLOCK_M
        off_z = off_hz // H
        off_h = off_hz % H
        q_src = (q_desc, off_z, off_h)
        k_src = (k_desc, off_z, off_h)
        v_src = (v_desc, off_z, off_h)
        offs_m = start_m + tl.arange(0, BLOCK_M)
        q = load_tile(q_src, start_m, N, 0, 1, BLOCK_M, HEAD_DIM, True, True)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.full([BLOCK_M], 0.0, tl.float32)
        acc = tl.full([BLOCK_M, HEAD_DIM], 0.0, tl.float32)
        if CAUSAL:
            acc, m_i, l_i = _attend_blocks(acc, m_i, l_i, q, k_src, v_src, 0, 1, 0, 1, offs_m, 0, start_m, N,
                                           qk_scale, BLOCK_N, HEAD_DIM, False, True, True, False)
            acc, m_i, l_i = _attend_blocks(acc, m_i, l_i, q, k_src, v_src, 0, 1, 0, 1, offs_m, start_m,
                                           tl.minimum(start_m + BLOCK_M, N), N, qk_scale, BLOCK_N, HEAD_DIM,
                                           True, True, True, False)
        else:   # N a multiple of BLOCK_N (the caller checks): one loop without masks, which FLATTEN can fuse
            acc, m_i, l_i = _attend_blocks(acc, m_i, l_i, q, k_src, v_src, 0, 1, 0, 1, offs_m, 0, N, N,
                                           qk_scale, BLOCK_N, HEAD_DIM, False, False, True, False)
        out = acc / l_i[:, None]
        store_tile((o_desc, off_z, off_h), start_m, out.to(q.dtype), N, 0, 1, BLOCK_M, HEAD_DIM, True)


@triton.jit
def attention_persistent_2d_kernel(q_desc, k_desc, v_desc, o_desc, N, qk_scale, tiles, HEAD_DIM: tl.constexpr,
                                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, FLATTEN: tl.constexpr):
    """Without a mask, N a multiple of BLOCK_M and BLOCK_N: the [Z*H*N, D] rows through 2-D descriptors (head hz
    starts at row hz * N), so no tile crosses a head and no load needs a reshape."""
    m_tiles = N // BLOCK_M
    for tile in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=FLATTEN):
        row0 = (tile // m_tiles) * N
        start_m = row0 + (tile % m_tiles) * BLOCK_M
        offs_m = start_m + tl.arange(0, BLOCK_M)
        q = load_tile((q_desc,), start_m, N, 0, 1, BLOCK_M, HEAD_DIM, True, True)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.full([BLOCK_M], 0.0, tl.float32)
        acc = tl.full([BLOCK_M, HEAD_DIM], 0.0, tl.float32)
        acc, m_i, l_i = _attend_blocks(acc, m_i, l_i, q, (k_desc,), (v_desc,), 0, 1, 0, 1, offs_m, row0, row0 + N,
                                       N, qk_scale, BLOCK_N, HEAD_DIM, False, False, True, False)
        out = acc / l_i[:, None]
        store_tile((o_desc,), start_m, out.to(q.dtype), N, 0, 1, BLOCK_M, HEAD_DIM, True)
'''


def descriptors(q, k, v, out, block_m, block_n):
    from triton.tools.tensor_descriptor import TensorDescriptor

    return [TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, rows, t.shape[-1]])
            for t, rows in ((q, block_m), (k, block_n), (v, block_n), (out, block_m))]


COMPILED: dict[str, dict] = {}


def persistent(ns, causal, block_m, block_n, warps, stages, per_sm=1, flatten=False, maxnreg=None, name=""):
    """A callable running attention_persistent_kernel with this launch on per_sm programs per SM."""
    kernel = ns["attention_persistent_kernel"]

    def run(q, k, v):
        Z, H, N, D = q.shape
        if not causal and N % block_n:
            raise ValueError("non-causal persistent variant needs N % BLOCK_N == 0")
        out = torch.empty_like(q)
        tiles = triton.cdiv(N, block_m) * Z * H
        programs = min(tiles, per_sm * (torch.cuda.get_device_properties(0).multi_processor_count if GPU else 4))
        extra = {"maxnreg": maxnreg} if maxnreg else {}
        compiled = kernel[(programs,)](*descriptors(q, k, v, out, block_m, block_n), H, N,
                                       1.0 / math.sqrt(D) * 1.4426950408889634, tiles, CAUSAL=causal,
                                       HEAD_DIM=D, BLOCK_M=block_m, BLOCK_N=block_n, FLATTEN=flatten,
                                       num_warps=warps, num_stages=stages, **extra)
        remember(name, compiled)
        return out
    return run


def persistent_2d(ns, block_m, block_n, warps, stages, flatten, name=""):
    """A callable running attention_persistent_2d_kernel (no mask) with this launch, one program per SM."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    kernel = ns["attention_persistent_2d_kernel"]

    def run(q, k, v):
        Z, H, N, D = q.shape
        if N % block_m or N % block_n or not all(t.is_contiguous() for t in (q, k, v)):
            raise ValueError("the 2-D persistent variant needs contiguous inputs and N a multiple of both blocks")
        out = torch.empty_like(q)
        tiles = N // block_m * Z * H
        programs = min(tiles, torch.cuda.get_device_properties(0).multi_processor_count if GPU else 4)
        descs = [TensorDescriptor(t.view(Z * H * N, D), [Z * H * N, D], [D, 1], [rows, D])
                 for t, rows in ((q, block_m), (k, block_n), (v, block_n), (out, block_m))]
        compiled = kernel[(programs,)](*descs, N, 1.0 / math.sqrt(D) * 1.4426950408889634, tiles, HEAD_DIM=D,
                                       BLOCK_M=block_m, BLOCK_N=block_n, FLATTEN=flatten, num_warps=warps,
                                       num_stages=stages)
        remember(name, compiled)
        return out
    return run


def as_is_with_maxnreg(ns, causal, config: AttentionConfig, maxnreg, name):
    """The notebook's attention_kernel at a pinned launch, with registers capped at maxnreg."""
    kernel = ns["attention_kernel"]

    def run(q, k, v):
        Z, H, N, D = q.shape
        out = torch.empty_like(q)
        grid = (triton.cdiv(N, config.block_m), Z * H)
        compiled = kernel[grid](q, k, v, out, *q.stride(), *k.stride(), *v.stride(), *out.stride(), H, N,
                                1.0 / math.sqrt(D) * 1.4426950408889634, CAUSAL=causal, HEAD_DIM=D,
                                maxnreg=maxnreg, **config.launch_for(q, k, v, out))
        remember(name, compiled)
        return out
    return run


def remember(name, compiled):
    if GPU and name and name not in COMPILED and compiled is not None:
        COMPILED[name] = {"registers": compiled.n_regs, "spills": compiled.n_spills,
                          "shared_bytes": compiled.metadata.shared, "warps": compiled.metadata.num_warps}


def variants(ns, causal, dry):
    """name -> callable, for D = 128 at this causal setting."""
    if dry:
        out = {"pers 32x16": persistent(ns, causal, 32, 16, 4, 1),
               "pers flat 32x16": persistent(ns, causal, 32, 16, 4, 1, flatten=True)}
        if not causal:
            out["pers2d flat 32x16"] = persistent_2d(ns, 32, 16, 4, 1, True)
        return out
    out = {"as is": lambda q, k, v: ns["attention"](q, k, v, causal)}
    two = AttentionConfig(128, 64, 8, 2, tma=True)
    out["2/SM tma 128x64 w8 s2 r128"] = as_is_with_maxnreg(ns, causal, two, 128, "2/SM tma 128x64 w8 s2 r128")
    for bm, bn, w, s, per_sm, flat in ((128, 128, 8, 3, 1, False), (128, 128, 8, 3, 1, True),
                                       (128, 128, 8, 2, 1, True), (128, 64, 8, 3, 1, True),
                                       (64, 64, 4, 3, 2, False), (64, 64, 4, 3, 2, True)):
        if causal and flat:
            continue   # two key loops per tile: nothing for FLATTEN to fuse
        name = f"pers{' flat' if flat else ''} {bm}x{bn} w{w} s{s}" + (f" x{per_sm}/SM" if per_sm > 1 else "")
        out[name] = persistent(ns, causal, bm, bn, w, s, per_sm, flat, name=name)
    if not causal:
        for bm, bn, w, st, flat in ((128, 128, 8, 2, False), (128, 128, 8, 2, True), (128, 64, 8, 3, True),
                                    (128, 64, 8, 2, True)):
            name = f"pers2d{' flat' if flat else ''} {bm}x{bn} w{w} s{st}"
            out[name] = persistent_2d(ns, bm, bn, w, st, flat, name)
    name = f"pers{'' if causal else ' flat'} 128x64 w8 s2 r128 x2/SM"
    out[name] = persistent(ns, causal, 128, 64, 8, 2, 2, not causal, 128, name)
    return out


def inputs(z, h, n, d, dtype=torch.float16, device="cuda"):
    return [torch.randn(z, h, n, d, device=device, dtype=dtype) for _ in range(3)]


def check(fns, causal, dry):
    bad = []
    shapes = [(2, 3, 96)] if dry else [(2, 4, 1024), (1, 2, 4096)]
    for z, h, n in shapes:
        q, k, v = inputs(z, h, n, 16 if dry else 128, torch.float32 if dry else torch.float16,
                         "cpu" if dry else "cuda")
        want = attention_reference(q.double(), k.double(), v.double(), causal)
        for name, fn in fns.items():
            try:
                if dry:
                    with pinned_config(INTERPRETER_CONFIG):
                        got = fn(q, k, v)
                else:
                    got = fn(q, k, v)
                err, note = float((got.double() - want).abs().max()), ""
            except Exception as e:   # a compile failure of one variant is a finding, not the end of the run
                err, note = None, f"{type(e).__name__}: {str(e)[:300]}"
            ok = err is not None and err <= (1e-4 if dry else 2e-2)
            print(f"causal={causal!s:<5} N={n:<5} {name:<36} {'correct' if ok else 'WRONG'} (max error "
                  f"{'-' if err is None else f'{err:.2e}'}) {note}", flush=True)
            if not ok:
                bad.append([name, causal, n, err, note])
    return bad


def summarize(rows: list[dict]) -> list[str]:
    """One line per case and variant: its speed over the notebook's launch, then over SDPA, at each N."""
    lines = []
    for causal in (False, True):
        mine = [r for r in rows if r["causal"] == causal]
        for name in [k for k in mine[0]["tflops"] if k not in ("SDPA", "as is")] if mine else []:
            lines.append(f"D=128, {'causal' if causal else 'not causal'}, {name}: / as is "
                         + ", ".join(f"N={r['N']} {r['tflops'][name] / r['tflops']['as is']:.3f}" for r in mine)
                         + "; / SDPA " + ", ".join(str(r["ratio_to_sdpa"][name]) for r in mine))
        if mine:
            lines.append(f"D=128, {'causal' if causal else 'not causal'}, as is: / SDPA "
                         + ", ".join(f"N={r['N']} {r['ratio_to_sdpa']['as is']}" for r in mine))
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--ns", default="1024,2048,4096,8192,16384")
    args = p.parse_args()
    ns = fast_namespace()   # chapter 09's fast path (the solution notebook's code when the record was made)
    ns["attention"] = through_launch_table(ns["attention"])   # the table's launches, never the Gluon path
    exec_cell(PERSISTENT, "<attention_persistent>", ns)
    dry = args.dry_run or not GPU
    rows, bad = [], []
    for causal in (False, True):
        fns = variants(ns, causal, dry)
        wrong = check(fns, causal, dry)
        bad += wrong
        if dry:
            continue
        fns = {k: f for k, f in fns.items() if k not in {w[0] for w in wrong}}
        from triton_course.bench import steady_rounds
        fns["SDPA"] = lambda q, k, v, _c=causal: F.scaled_dot_product_attention(q, k, v, is_causal=_c)
        for n in (int(x) for x in args.ns.split(",")):
            z, h, d = 4, 16, 128
            times = steady_rounds(fns, lambda: inputs(z, h, n, d), rounds=5)
            flops = 4 * z * h * n * n * d / (2 if causal else 1)
            tf = {k2: round(flops / statistics.median(t) / 1e9, 1) for k2, t in times.items()}
            row = {"D": d, "causal": causal, "N": n, "Z": z, "H": h, "tflops": tf,
                   "ratio_to_sdpa": {k2: round(v2 / tf["SDPA"], 3) for k2, v2 in tf.items()}}
            rows.append(row)
            best = max((k2 for k2 in tf if k2 != "SDPA"), key=tf.get)
            print(f"causal={causal!s:<5} N={n:5}: SDPA {tf['SDPA']:6.1f}  as is {tf['as is']:6.1f} "
                  f"({row['ratio_to_sdpa']['as is']:.3f})  best {best} {tf[best]:6.1f} "
                  f"({row['ratio_to_sdpa'][best]:.3f})", flush=True)
    if dry:
        return 1 if bad else 0
    summary = summarize(rows)
    record = {**records.provenance("09_attention: persistent programs and two programs per SM at D = 128",
                                   "python lab/sweeps/attention_persistent.py"),
              "method": "triton_course.bench.steady_rounds: medians of 5 interleaved rounds, fresh inputs; "
                        "float16, Z = 4, H = 16, D = 128",
              "compiled": COMPILED, "summary": summary,
              "did_not_compile": {name: note for name, _c, _n, err, note in bad if err is None},
              "wrong": [b for b in bad if b[3] is not None], "rows": rows}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print("\n".join(summary))
    print("wrote", args.out)
    return 1 if record["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
