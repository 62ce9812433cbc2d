"""Chapter 09's attention with the running output rescaled only when a row's maximum grows a lot, against the
notebook as it is.

    python lab/sweeps/attention_lazy_rescale.py [--out solutions/09_attention/records/09_attention_lazy_rescale.json]
        (on a GPU: about 3 minutes on an H200)
    python lab/sweeps/attention_lazy_rescale.py --dry-run
        (anywhere; without a GPU under Triton's interpreter: both kernels against float64 at small sizes)

The notebook's loop multiplies the whole [BLOCK_M, HEAD_DIM] float32 accumulator by exp2(m_old - m_new) at every
key block: at D = 128 and 128 x 128 blocks as many multiplies as the block has scores, and a read of the
accumulator that the previous block's p @ v is still writing, so that matmul must finish before the next block's
softmax can go on. FlashAttention-4 (Dao et al., 2025) rescales only when some row's maximum has grown by more
than a threshold (here 8 in log2 units: the unnormalised probabilities then stay below 2^8 = 256, exact enough
in float16 and bfloat16, and the row sum in float32 cannot overflow); otherwise it keeps the stale maximum, which
changes no result because softmax does not depend on the shift. Here the same kernel (chapter 09's fast path,
triton_course.attention_fast, the solution notebook's code when this record was made, loaded twice) gets, in its second copy, an ``_attend_blocks`` whose rescale sits behind
``if tl.max(m_new - m_i) > 8`` (every loop, the warp-specialised one included), and whose p @ v accumulates into
an accumulator nothing else touches.

At each case (D, causal) and N, side by side in ``triton_course.bench.steady_rounds`` (medians of interleaved
rounds on fresh inputs), float16, Z = 4 and H = 2048 / D: SDPA (cuDNN on Hopper), and the notebook's attention as
it is and with the lazy rescale, each with the notebook's own launch for that case (``HOPPER_CONFIGS``). Every
function is checked against float64 first, on normal inputs and on keys that grow along the sequence, so that the
maximum jumps in later blocks and the rescale branch runs.
"""

from __future__ import annotations

import argparse
import json
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

from grader.notebook_code import exec_cell  # noqa: E402
from triton_course.attention import (INTERPRETER_CONFIG, attention_reference, pinned_config,  # noqa: E402
                                     through_launch_table)
from triton_course.attention_fast import fast_namespace  # noqa: E402

OUT = ROOT / "solutions" / "09_attention" / "records" / "09_attention_lazy_rescale.json"
GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"

LAZY = '''
@triton.jit
def _attend_blocks(acc, m_i, l_i, q, k_src, v_src, stride_kn, stride_kd, stride_vn, stride_vd,
                   offs_m, lo, hi, N, qk_scale,
                   BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                   TMA: tl.constexpr, WARP_SPEC: tl.constexpr):
    """The notebook's loop, with acc, l_i and m_i rescaled only when a row's maximum grew by more than 8 (log2)."""
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPEC):
        k = load_tile(k_src, start_n, N, stride_kn, stride_kd, BLOCK_N, HEAD_DIM, MASKED, TMA)
        v = load_tile(v_src, start_n, N, stride_vn, stride_vd, BLOCK_N, HEAD_DIM, MASKED, TMA)
        s = tl.dot(q, tl.trans(k))
        if MASKED:
            offs_n = start_n + tl.arange(0, BLOCK_N)
            keep = offs_n[None, :] < N
            if CAUSAL:
                keep = keep & (offs_n[None, :] <= offs_m[:, None])
            s = tl.where(keep, s * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        if tl.max(m_new - m_i) > 8.0:   # first block (m_i = -inf) or a jump: shift to the new maximum
            alpha = tl.exp2(m_i - m_new)
            acc = acc * alpha[:, None]
            l_i = l_i * alpha
            m_i = m_new
        if MASKED:
            p = tl.exp2(s - m_i[:, None])
        else:
            p = tl.exp2(s * qk_scale - m_i[:, None])
        acc = tl.dot(p.to(v.dtype), v, acc)
        l_i = l_i + tl.sum(p, 1)
    return acc, m_i, l_i
'''

#: (D, causal) cases, each at the notebook's own Hopper launch for it
CASES = [(64, False), (64, True), (128, False), (128, True)]
NS_N = (1024, 4096, 16384)


def namespaces() -> tuple[dict, dict]:
    """The fast path's code as it is, and a second copy whose _attend_blocks is LAZY."""
    as_is = fast_namespace()
    lazy = fast_namespace()
    assert "_attend_blocks" in lazy
    exec_cell(LAZY, "<attention_lazy_rescale>", lazy)
    for ns in (as_is, lazy):   # the Triton kernel as the table launches it, never the Gluon path
        ns["attention"] = through_launch_table(ns["attention"])
    return as_is, lazy


def inputs(z, h, n, d, dtype=torch.float16, device="cuda", growing=False):
    """q, k, v of [z, h, n, d]; ``growing``: keys scaled from 1x to 12x along the sequence, so later key blocks
    raise every row's maximum by more than the threshold and the rescale branch runs mid-loop."""
    q, k, v = (torch.randn(z, h, n, d, device=device, dtype=dtype) for _ in range(3))
    if growing:
        k = (k.float() * torch.linspace(1, 12, n, device=device)[:, None]).to(dtype)
    return q, k, v


def check(fns: dict, d: int, causal: bool, dry: bool) -> list:
    bad = []
    for growing in (False, True):
        shapes = [(2, 3, 100)] if dry else [(2, 4, 1000), (1, 2, 4096)]
        for z, h, n in shapes:
            q, k, v = inputs(z, h, n, 16 if dry else d, torch.float32 if dry else torch.float16,
                             "cpu" if dry else "cuda", growing)
            want = attention_reference(q.double(), k.double(), v.double(), causal)
            for name, fn in fns.items():
                try:
                    err = float((fn(q, k, v).double() - want).abs().max())
                except Exception as e:   # a compile failure of one variant is a finding, not the end of the run
                    err, note = float("nan"), f"{type(e).__name__}: {str(e)[:300]}"
                else:
                    note = ""
                ok = err <= (1e-4 if dry else 2e-2)
                print(f"D={d:<3} causal={causal!s:<5} N={n:<5} {'growing' if growing else 'normal ':<7} {name:<8}"
                      f" {'correct' if ok else 'WRONG'} (max error {err:.2e}) {note}", flush=True)
                if not ok:
                    bad.append([name, d, causal, n, growing, err, note])
    return bad


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args()
    as_is, lazy = namespaces()
    dry = args.dry_run or not GPU
    rows, bad = [], []
    for d, causal in CASES:
        def call(ns, _c=causal):
            if dry:
                def run(q, k, v):
                    with pinned_config(INTERPRETER_CONFIG):
                        return ns["attention"](q, k, v, _c)
                return run
            return lambda q, k, v: ns["attention"](q, k, v, _c)
        fns = {"as is": call(as_is), "lazy": call(lazy)}
        wrong = check(fns, d, causal, dry)
        bad += wrong
        if dry or any(w[0] == "lazy" for w in wrong):
            continue
        from triton_course.bench import steady_rounds
        fns["SDPA"] = lambda q, k, v, _c=causal: F.scaled_dot_product_attention(q, k, v, is_causal=_c)
        for n in NS_N:
            z, h = 4, 2048 // d
            times = steady_rounds(fns, lambda: inputs(z, h, n, d), rounds=5)
            flops = 4 * z * h * n * n * d / (2 if causal else 1)
            tf = {k2: round(flops / statistics.median(t) / 1e9, 1) for k2, t in times.items()}
            row = {"D": d, "causal": causal, "N": n, "tflops": tf,
                   "ratio_to_sdpa": {k2: round(v2 / tf["SDPA"], 3) for k2, v2 in tf.items()},
                   "lazy_over_as_is": round(tf["lazy"] / tf["as is"], 3)}
            rows.append(row)
            print(f"  N={n:5}: as is {tf['as is']:6.1f}  lazy {tf['lazy']:6.1f}  SDPA {tf['SDPA']:6.1f}"
                  f"  ({row['lazy_over_as_is']:.3f}x)", flush=True)
    if dry:
        return 1 if bad else 0
    summary = []
    for d, causal in CASES:
        mine = [r for r in rows if (r["D"], r["causal"]) == (d, causal)]
        if mine:
            summary.append(f"D={d}, {'causal' if causal else 'not causal'}: lazy / as is "
                           + ", ".join(f"N={r['N']} {r['lazy_over_as_is']}" for r in mine)
                           + "; lazy / SDPA " + ", ".join(str(r["ratio_to_sdpa"]["lazy"]) for r in mine)
                           + "; as is / SDPA " + ", ".join(str(r["ratio_to_sdpa"]["as is"]) for r in mine))
    record = {**records.provenance("09_attention: the running output rescaled only when a row's maximum jumps",
                                   "python lab/sweeps/attention_lazy_rescale.py"),
              "method": "triton_course.bench.steady_rounds: medians of 5 interleaved rounds, fresh inputs; float16, "
                        "Z = 4, H = 2048 / D; each case at the notebook's own launch (HOPPER_CONFIGS)",
              "summary": summary, "wrong": bad, "rows": rows}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print("\n".join(summary))
    print("wrote", args.out)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
