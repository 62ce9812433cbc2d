"""Chapter 11's backward kernels (the solution notebook's ``dkdv_kernel`` and ``dq_kernel``, unchanged) under the
launches ``triton_course.attention_backward.backward_config`` could choose: block shapes, warps and pipeline stages.

    python lab/sweeps/attention_backward_launches.py [--out FILE]
        (on a GPU: about 4 minutes on an H200; writes solutions/11_attention_backward/records/
         11_attention_backward_launches.json by default)
    python lab/sweeps/attention_backward_launches.py --dry-run
        (anywhere: two launches of each kernel through Triton's interpreter at a tiny size, against float64)

Why. The chapter's first GPU record (an H100) put forward + backward at 0.54-0.62 of SDPA at D = 64, under the
issue's 60%, with a launch that was an estimate (Triton's tutorial 06's block shape with 8 warps and 2 stages; the tutorial's are 4 and 5). The two
kernels are independent, so each is timed alone (``triton_course.bench.time_ms``: do_bench's median, L2 flushed) on
the same inputs, float16, Z = 4, H = 1024 // D, N = 4,096, at every launch of a grid; a launch whose outputs differ
from the notebook's own launch by more than float16's tolerance, or that does not compile (shared memory), is
recorded as such and never chosen. Then, per head dimension, the one warps/stages pair that both kernels share
(``BackwardConfig`` has one) is chosen by the smaller sum of the two kernels' best times, and forward + backward is
timed against SDPA's in ``steady_rounds`` with the notebook's launch and the chosen one side by side, causal or
not, at N = 4,096 and 16,384.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
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
import triton  # noqa: E402

from grader.course import solution_notebook  # noqa: E402
from grader.notebook_code import load_namespace  # noqa: E402
from triton_course.attention_backward import BackwardConfig, backward_config, sdpa_grads, training_flops  # noqa: E402

CHAPTER = "11_attention_backward"
WHAT = f"{CHAPTER}: the backward kernels at every launch of a grid"
GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
#: (held block, streamed step) of either kernel: dK/dV holds keys and streams queries, dQ the other way round.
SHAPES = ((128, 16), (128, 32), (128, 64), (64, 32), (64, 64))
WARPS, STAGES = (4, 8), (1, 2, 3, 4)
HEAD_DIMS, SIZES = (64, 128), (4096, 16384)


def _inputs(ns: dict, z: int, h: int, n: int, d: int, dtype, device: str, causal: bool) -> dict:
    """q, k, v, dO and what the backward kernels read besides them (lse from the notebook's forward, delta)."""
    q, k, v, do = (torch.randn(z, h, n, d, device=device, dtype=dtype) for _ in range(4))
    o, lse = ns["flash_forward"](q, k, v, causal)
    delta = (o.float() * do.float()).sum(-1)
    return {"q": q, "k": k, "v": v, "do": do, "lse": lse, "delta": delta.contiguous(), "causal": causal}


def _launcher(ns: dict, kernel: str, t: dict, held: int, step: int, warps: int, stages: int):
    """A call of one of the notebook's two backward kernels at one launch; returns its output tensors."""
    q = t["q"]
    z, h, n, d = q.shape
    sm = 1 / math.sqrt(d)
    launch = dict(num_warps=warps, num_stages=stages)
    if kernel == "dkdv":
        dk, dv = torch.empty_like(q), torch.empty_like(q)

        def call():
            ns["dkdv_kernel"][(triton.cdiv(n, held), z * h)](
                q, t["k"], t["v"], t["do"], t["lse"], t["delta"], dk, dv, n, sm, CAUSAL=t["causal"], HEAD_DIM=d,
                BLOCK_N=held, BLOCK_M=step, **launch)
            return dk, dv
    else:
        dq = torch.empty_like(q)

        def call():
            ns["dq_kernel"][(triton.cdiv(n, held), z * h)](
                q, t["k"], t["v"], t["do"], t["lse"], t["delta"], dq, n, sm, CAUSAL=t["causal"], HEAD_DIM=d,
                BLOCK_M=held, BLOCK_N=step, **launch)
            return (dq,)
    return call


def _worst(got, want) -> float:
    """Largest |got - want| over max(1, |want|): a relative error floored at absolute."""
    return max(float(((g.float() - w.float()).abs() / w.float().abs().clamp_min(1)).max()) for g, w in zip(got, want))


def sweep_kernels(ns: dict, d: int, causal: bool, dry: bool) -> list[dict]:
    """Every launch of both kernels at one head dimension: ms (or why not), and the error against the notebook's."""
    z, h, n = (1, 1, 48) if dry else (4, 1024 // d, 4096)
    dtype, device = (torch.float32, "cpu") if dry else (torch.float16, "cuda")
    t = _inputs(ns, z, h, n, d, dtype, device, causal)
    own = backward_config(t["q"], causal)
    rows = []
    for kernel in ("dkdv", "dq"):
        held, step = (own.block_kv, own.block_q_step) if kernel == "dkdv" else (own.block_q, own.block_kv_step)
        reference = [x.clone() for x in _launcher(ns, kernel, t, held, step, own.num_warps, own.num_stages)()]
        grid = [(16, 16, 4, 1), (32, 16, 4, 1)] if dry else [
            (hd, st, w, s) for (hd, st), w, s in itertools.product(SHAPES, WARPS, STAGES)]
        for held, step, warps, stages in grid:
            row = {"kernel": kernel, "D": d, "causal": causal, "N": n, "held": held, "step": step, "warps": warps,
                   "stages": stages}
            try:
                call = _launcher(ns, kernel, t, held, step, warps, stages)
                row["error"] = round(_worst(call(), reference), 5)
                if row["error"] > 2e-2:
                    row["wrong"] = True
                elif GPU:
                    from triton_course.bench import time_ms
                    row["ms"] = round(time_ms(call), 4)
            except Exception as e:   # out of shared memory or registers: a finding, not the end of the sweep
                row["failed"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def choose(rows: list[dict]) -> BackwardConfig | None:
    """The launch with the smallest dK/dV + dQ time over one shared warps/stages pair (None: nothing timed)."""
    best = None
    for warps, stages in itertools.product(WARPS, STAGES):
        picks = {}
        for kernel in ("dkdv", "dq"):
            timed = [r for r in rows if r["kernel"] == kernel and r["warps"] == warps and r["stages"] == stages
                     and "ms" in r]
            if timed:
                picks[kernel] = min(timed, key=lambda r: r["ms"])
        if len(picks) == 2:
            total = picks["dkdv"]["ms"] + picks["dq"]["ms"]
            if best is None or total < best[0]:
                best = (total, BackwardConfig(picks["dkdv"]["held"], picks["dkdv"]["step"], picks["dq"]["held"],
                                              picks["dq"]["step"], warps, stages))
    return best[1] if best else None


def against_sdpa(ns: dict, d: int, chosen: BackwardConfig) -> list[dict]:
    """Forward + backward with the notebook's launch and the chosen one, beside SDPA's, per causal and N."""
    from triton_course.bench import steady_rounds

    grads = ns["attention_grads"]
    own_config = ns["backward_config"]

    def with_config(config):
        def run(q, k, v, do, causal):
            ns["backward_config"] = (lambda *a, **k: config) if config else own_config
            try:
                return grads(q, k, v, do, causal)
            finally:
                ns["backward_config"] = own_config
        return run

    rows = []
    for causal, n in itertools.product((False, True), SIZES):
        z, h = 4, 1024 // d
        make = lambda: tuple(torch.randn(z, h, n, d, device="cuda", dtype=torch.float16)  # noqa: E731
                             for _ in range(4))
        fns = {"notebook": with_config(None), "chosen": with_config(chosen)}
        times = steady_rounds({"notebook": lambda q, k, v, do: fns["notebook"](q, k, v, do, causal),
                               "chosen": lambda q, k, v, do: fns["chosen"](q, k, v, do, causal),
                               "sdpa": lambda q, k, v, do: sdpa_grads(q, k, v, do, causal)}, make, rounds=5)
        ms = {key: statistics.median(v) for key, v in times.items()}
        f = training_flops(z, h, n, d, causal)
        rows.append({"D": d, "causal": causal, "N": n, **{f"{key}_ms": round(v, 4) for key, v in ms.items()},
                     **{f"{key}_tflops": round(f / v / 1e9, 1) for key, v in ms.items()},
                     "notebook_ratio_to_sdpa": round(ms["sdpa"] / ms["notebook"], 3),
                     "chosen_ratio_to_sdpa": round(ms["sdpa"] / ms["chosen"], 3)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "solutions" / CHAPTER / "records" /
                   f"{CHAPTER}_launches.json")
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args()
    if not GPU and not args.dry_run:
        print("attention_backward_launches.py times kernels: it needs a CUDA GPU (or --dry-run)", file=sys.stderr)
        return 2
    ns = load_namespace(solution_notebook(CHAPTER))
    if args.dry_run:
        rows = sweep_kernels(ns, 16, True, dry=True)
        bad = [r for r in rows if r.get("failed") or r.get("wrong")]
        print(f"dry run: {len(rows)} launches, {len(bad)} wrong or failed")
        return 1 if bad else 0
    record = {**records.provenance(WHAT, f"python lab/sweeps/attention_backward_launches.py --out "
                                            f"{records.shown_path(args.out)}"),
              "method": "each kernel alone: triton_course.bench.time_ms (do_bench median, L2 flushed), float16, "
                        "Z = 4, H = 1024 // D, N = 4096; forward + backward: steady_rounds, medians of 5 rounds",
              "kernels": [], "chosen": {}, "against_sdpa": []}
    for d in HEAD_DIMS:
        rows = sweep_kernels(ns, d, False, dry=False)
        record["kernels"] += rows
        chosen = choose(rows)
        record["chosen"][f"D={d}"] = dataclasses.asdict(chosen) if chosen else None
        if chosen:
            record["against_sdpa"] += against_sdpa(ns, d, chosen)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=1) + "\n")   # after each D: a cut-off run keeps what it did
    record["summary"] = "chosen launch, forward + backward / SDPA's: " + ", ".join(
        f"D={r['D']}{' causal' if r['causal'] else ''} N={r['N']} {r['notebook_ratio_to_sdpa']:.2f} -> "
        f"{r['chosen_ratio_to_sdpa']:.2f}" for r in record["against_sdpa"])
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(record["summary"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
