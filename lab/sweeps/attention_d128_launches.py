"""Chapter 09's attention at D = 128, the case furthest from SDPA, under launches the focused sweep never tried:
warp-specialised loops with 8 consumer warps or 3 stages, register caps (``maxnreg``), 64 x 128 blocks with
deeper pipelines, and scores exponentiated two at a time in float16.

    python lab/sweeps/attention_d128_launches.py [--set first|wide] [--out FILE]
        (on a GPU: about 2.5 minutes a set on an H200)
    python lab/sweeps/attention_d128_launches.py --dry-run
        (anywhere; without a GPU under Triton's interpreter: the launches that the interpreter can run, against
        float64 at small sizes)

Why these. At D = 128 a 128 x 128 block costs the tensor cores 4 * 128^3 multiply-adds and the special-function
units 128^2 exponentials: on an H200, about 2000 and 1000 cycles per SM. The kernel reaches SDPA only if the
exponentials hide under the matmuls. cuDNN (SDPA's backend here) runs 64 x 128 blocks in one warpgroup, several
blocks per SM, so that one block's softmax overlaps another's matmuls; FlashAttention-3 gives two consumer
warpgroups turns (ping-pong). The notebook's launches (solutions/09_attention/records/09_attention_focus.json) reach 0.80-0.90 of SDPA
at D = 128 without a mask. Tried here:

- ``ws 128x128 w8``: Triton's warp-specialised loop with two consumer warpgroups instead of one;
- ``ws ... s3``: a third stage of k and v in shared memory;
- ``... r<n>``: a register cap per thread (``maxnreg``), which lets more blocks share an SM, or spills;
- ``64x128 w4 s3/s4``: cuDNN's block shape, one warpgroup, with the pipeline depth the focused sweep skipped;
- ``half-exp``: the unmasked loop's exponentials as ``ex2.approx.f16x2`` (two float16 results per instruction,
  if the hardware does issue it as one), its argument rounded to float16 first. The absolute error of
  p = 2^x that rounding adds is at most about 2e-4 (largest near x = -1.44), the size of p's own rounding to
  float16 before p @ v, which the kernel already makes.

Each case (causal or not, N) is timed side by side in ``triton_course.bench.steady_rounds`` (medians of
interleaved rounds on fresh inputs), float16, Z = 4, H = 16: SDPA (cuDNN on Hopper), the notebook's own launch
(``HOPPER_CONFIGS``), and every candidate. Every function is checked against float64 first; a candidate that
fails to compile or is wrong is recorded as such and not timed.
"""

from __future__ import annotations

import argparse
import dataclasses
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
from triton_course.attention import (AttentionConfig, attention_reference, pinned_config,  # noqa: E402
                                     through_launch_table)
from triton_course.attention_fast import fast_namespace  # noqa: E402

GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"

#: The notebook's _attend_blocks with the unmasked loop's exponentials taken two at a time in float16.
HALF_EXP = '''
@triton.jit
def _exp2_half(x):
    """2^x for a float32 tile, computed in float16 pairs (ex2.approx.f16x2); a float16 tile."""
    return tl.inline_asm_elementwise("ex2.approx.f16x2 $0, $1;", "=r,r", [x.to(tl.float16)],
                                     dtype=tl.float16, is_pure=True, pack=2)


@triton.jit
def _attend_blocks(acc, m_i, l_i, q, k_src, v_src, stride_kn, stride_kd, stride_vn, stride_vd,
                   offs_m, lo, hi, N, qk_scale,
                   BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                   TMA: tl.constexpr, WARP_SPEC: tl.constexpr):
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
            p = tl.exp2(s - m_new[:, None])
            l_new = tl.sum(p, 1)
            p = p.to(v.dtype)
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
            p = _exp2_half(s * qk_scale - m_new[:, None])
            l_new = tl.sum(p.to(tl.float32), 1)
        alpha = tl.exp2(m_i - m_new)
        acc = tl.dot(p, v, acc * alpha[:, None])
        l_i = l_i * alpha + l_new
        m_i = m_new
    return acc, m_i, l_i
'''


@dataclasses.dataclass(frozen=True)
class Launch(AttentionConfig):
    """An AttentionConfig with a register cap per thread (Triton's ``maxnreg`` launch option)."""

    maxnreg: int | None = None

    @property
    def launch(self) -> dict:
        args = super().launch
        if self.maxnreg and GPU:
            args["maxnreg"] = self.maxnreg
        return args


def cfg(bm, bn, warps, stages, ws=False, maxnreg=None) -> Launch:
    return Launch(bm, bn, warps, stages, tma=True, warp_spec=ws, maxnreg=maxnreg)


#: name: (launch, kernel ("notebook" or "half-exp"), causal cases it can run). The first set, recorded in
#: solutions/09_attention/records/09_attention_d128_launches.json.
FIRST = {
    "tma 128x128 w8 s3": (cfg(128, 128, 8, 3), "notebook", (False, True)),
    "ws 128x128 w4 s2": (cfg(128, 128, 4, 2, ws=True), "notebook", (False,)),
    "ws 128x128 w8 s2": (cfg(128, 128, 8, 2, ws=True), "notebook", (False,)),
    "ws 128x128 w4 s3": (cfg(128, 128, 4, 3, ws=True), "notebook", (False,)),
    "ws 128x128 w4 s2 r168": (cfg(128, 128, 4, 2, ws=True, maxnreg=168), "notebook", (False,)),
    "ws 128x128 w4 s2 r232": (cfg(128, 128, 4, 2, ws=True, maxnreg=232), "notebook", (False,)),
    "tma 128x128 w8 s2 r128": (cfg(128, 128, 8, 2, maxnreg=128), "notebook", (False, True)),
    "tma 64x128 w4 s3": (cfg(64, 128, 4, 3), "notebook", (False, True)),
    "tma 64x128 w4 s3 r168": (cfg(64, 128, 4, 3, maxnreg=168), "notebook", (False, True)),
    "tma 64x64 w4 s4": (cfg(64, 64, 4, 4), "notebook", (False, True)),
    "half-exp tma 128x128 w8 s3": (cfg(128, 128, 8, 3), "half-exp", (False, True)),
    "half-exp ws 128x128 w4 s2": (cfg(128, 128, 4, 2, ws=True), "half-exp", (False,)),
    "half-exp tma 64x64 w4 s3": (cfg(64, 64, 4, 3), "half-exp", (False, True)),
}
#: The second set (--set wide, solutions/09_attention/records/09_attention_d128_wide.json), after the first: 256-row query blocks over
#: four warpgroups (each k and v block then serves twice the rows, halving what the SMs read from L2 per score),
#: register caps near the warp-specialised launch's limit (384 threads: at most 170 registers each), and the
#: notebook's own launches again at another place in the round, to show how far two timings of one launch differ.
WIDE = {
    "tma 128x128 w8 s3": (cfg(128, 128, 8, 3), "notebook", (False,)),
    "ws 128x128 w4 s2": (cfg(128, 128, 4, 2, ws=True), "notebook", (False,)),
    "ws 128x128 w4 s2 r168": (cfg(128, 128, 4, 2, ws=True, maxnreg=168), "notebook", (False,)),
    "ws 128x128 w4 s2 r152": (cfg(128, 128, 4, 2, ws=True, maxnreg=152), "notebook", (False,)),
    "tma 256x64 w16 s2": (cfg(256, 64, 16, 2), "notebook", (False, True)),
    "tma 256x64 w16 s3": (cfg(256, 64, 16, 3), "notebook", (False, True)),
    "tma 256x128 w16 s2": (cfg(256, 128, 16, 2), "notebook", (False, True)),
    "tma 256x64 w8 s2": (cfg(256, 64, 8, 2), "notebook", (False, True)),
    "tma 64x64 w4 s3": (cfg(64, 64, 4, 3), "notebook", (False, True)),
}
SETS = {"first": (FIRST, "09_attention_d128_launches.json"), "wide": (WIDE, "09_attention_d128_wide.json")}
NS_N = (1024, 2048, 4096, 8192, 16384)
Z, H, D = 4, 16, 128


def namespaces() -> dict[str, dict]:
    """The fast path's code (triton_course.attention_fast, the solution notebook's when these records were made) as
    it is, and (on a GPU) a second copy whose _attend_blocks is HALF_EXP."""
    spaces = {"notebook": fast_namespace()}
    if GPU:   # inline PTX does not run in the interpreter
        spaces["half-exp"] = fast_namespace()
        exec_cell(HALF_EXP, "<attention_half_exp>", spaces["half-exp"])
    for ns in spaces.values():   # the Triton kernel as the table launches it, never the Gluon path
        ns["attention"] = through_launch_table(ns["attention"])
    return spaces


def runner(ns: dict, launch: AttentionConfig | None, causal: bool):
    """attention(q, k, v) from namespace ``ns``, at ``launch`` (None: the notebook's own table)."""
    def run(q, k, v):
        if launch is None:
            return ns["attention"](q, k, v, causal)
        with pinned_config(launch):
            return ns["attention"](q, k, v, causal)
    return run


def inputs(n, d=D, dtype=torch.float16, device="cuda", z=Z, h=H):
    return tuple(torch.randn(z, h, n, d, device=device, dtype=dtype) for _ in range(3))


def check(fn, causal: bool, dry: bool) -> tuple[float, str]:
    """Largest error against float64 over a few shapes (N not a multiple of the blocks among them)."""
    worst, note = 0.0, ""
    shapes = [(1, 2, 64, 16)] if dry else [(2, 4, 1024, D), (1, 2, 1000, D), (1, 2, 4096, D)]
    for z, h, n, d in shapes:
        q, k, v = inputs(n, d, torch.float32 if dry else torch.float16, "cpu" if dry else "cuda", z, h)
        want = attention_reference(q.double(), k.double(), v.double(), causal)
        try:
            worst = max(worst, float((fn(q, k, v).double() - want).abs().max()))
        except Exception as e:   # a candidate that does not compile is a finding, not the end of the run
            return float("nan"), f"{type(e).__name__}: {str(e)[:300]}"
    return worst, note


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--set", choices=SETS, default="first", help="which candidates (FIRST or WIDE)")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args()
    candidates, default_out = SETS[args.set]
    args.out = args.out or ROOT / "solutions" / "09_attention" / "records" / default_out
    dry = args.dry_run or not GPU
    spaces = namespaces()
    rows, problems = [], {}
    for causal in (False, True):
        fns = {"notebook table": runner(spaces["notebook"], None, causal)}
        for name, (launch, kernel, cases) in candidates.items():
            if causal in cases and kernel in spaces:
                fns[name] = runner(spaces[kernel], launch, causal)
        if args.set == "wide":   # the same launch last in the round as well as first
            fns["notebook table, again"] = runner(spaces["notebook"], None, causal)
        usable = {}
        for name, fn in fns.items():
            err, note = check(fn, causal, dry)
            ok = err <= (1e-4 if dry else 2e-2)
            print(f"causal={causal!s:<5} {name:<28} {'correct' if ok else 'NOT USED'} (max error {err:.2e}) {note}",
                  flush=True)
            if ok:
                usable[name] = fn
            else:
                problems[f"{name}, causal={causal}"] = note or f"max error {err:.2e}"
        if dry:
            continue
        from triton_course.bench import steady_rounds
        usable["SDPA"] = lambda q, k, v, _c=causal: F.scaled_dot_product_attention(q, k, v, is_causal=_c)
        for n in NS_N:
            times = steady_rounds(usable, lambda: inputs(n), rounds=5)
            flops = 4 * Z * H * n * n * D / (2 if causal else 1)
            tf = {k: round(flops / statistics.median(t) / 1e9, 1) for k, t in times.items()}
            row = {"D": D, "causal": causal, "N": n, "Z": Z, "H": H, "tflops": tf,
                   "ratio_to_sdpa": {k: round(v / tf["SDPA"], 3) for k, v in tf.items()},
                   "round_spread": {k: round((max(t) - min(t)) / statistics.median(t), 3) for k, t in times.items()}}
            rows.append(row)
            best = max((v, k) for k, v in tf.items() if k != "SDPA")
            print(f"causal={causal!s:<5} N={n:5}: SDPA {tf['SDPA']:6.1f}  notebook {tf['notebook table']:6.1f} "
                  f"({row['ratio_to_sdpa']['notebook table']:.3f})  best {best[1]} {best[0]:6.1f} "
                  f"({best[0] / tf['SDPA']:.3f})", flush=True)
    if dry:   # the interpreter runs every launch but those launch_config refuses (causal, BLOCK_N not dividing BLOCK_M)
        return 1 if any("BLOCK_N to divide BLOCK_M" not in note for note in problems.values()) else 0
    summary = []
    for causal in (False, True):
        mine = [r for r in rows if r["causal"] == causal]
        names = [k for k in mine[0]["tflops"] if k != "SDPA"]
        for name in names:
            ratios = [r["ratio_to_sdpa"][name] for r in mine]
            summary.append(f"{'causal' if causal else 'not causal'}, {name}: / SDPA "
                           + ", ".join(f"N={r['N']} {x}" for r, x in zip(mine, ratios))
                           + f" (worst {min(ratios)})")
    command = "python lab/sweeps/attention_d128_launches.py" + (f" --set {args.set}" if args.set != "first" else "")
    record = {**records.provenance("09_attention: D=128 launches the focused sweep did not try", command),
              "method": "triton_course.bench.steady_rounds: medians of 5 interleaved rounds, fresh inputs; float16, "
                        f"Z = {Z}, H = {H}, D = {D}; TFLOP/s = 4 Z H N^2 D (halved when causal) / median time",
              "sdpa_backend": "cuDNN attention on Hopper (solutions/09_attention/records/09_attention_focus.json names its kernels)",
              "candidates": {k: {"launch": dataclasses.asdict(v[0]), "kernel": v[1], "causal": list(v[2])}
                             for k, v in candidates.items()},
              "not_usable": problems, "summary": summary, "rows": rows}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print("\n".join(summary))
    print("wrote", records.shown_path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
