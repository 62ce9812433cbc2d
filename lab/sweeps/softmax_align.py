"""Softmax rows whose length is not a multiple of 16: what ALIGN does to chapter 05's reference.

    python lab/sweeps/softmax_align.py      (on a GPU, about 3 minutes on an H200;
                                                 writes solutions/05_softmax/records/05_softmax_align_sweep.json)

Triton specialises an integer argument that is divisible by 16 and proves 16-byte loads from it. A row of
1000 float16 values (2000 bytes) is divisible by 8, so every row starts on a 16-byte boundary, but Triton
cannot see that, and without help the kernel loads such rows one element per instruction: 86-88% of a
same-size copy (lab/records/peers.json before ALIGN). The solution notebook's ``softmax_kernel`` takes ``ALIGN``:
its launcher checks that the row length and both row strides are multiples of ALIGN elements, and the kernel
rounds them down to multiples of ALIGN (no value changes) so that the compiler can prove it. (``tl.multiple_of``
on the scalar arguments alone changes nothing: the PTX keeps its 2-byte loads.)

At each shape (rows of 1000 in three dtypes, rows of 3000 and 5120, 4096^2 fp16) it times, with
``triton_course.bench.steady_rounds``: the reference as the notebook launches it; the same launch with ALIGN=1
(the kernel as it was); the kernel with ALIGN at every launch shape (rows per program R, warps W, with and
without cache hints) that gives each thread 2 to 64 values; torch.softmax, torch.compile, Liger-Kernel's
LigerSoftmax when installed; and a same-size copy. Round 1: every launch, 3 rounds; round 2: the 4 fastest with
the reference, the ALIGN=1 launch, the peers and the copy, 9 rounds.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "lab" / "sweeps"))
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import triton  # noqa: E402

from grader.course import solution_notebook  # noqa: E402
from grader.notebook_code import load_namespace  # noqa: E402
from launch_sweep import _version, liger_softmax  # noqa: E402
from records import provenance  # noqa: E402
from triton_course.bench import METHOD, copy_bandwidth, gbps, steady_rounds  # noqa: E402

OUT = ROOT / "solutions" / "05_softmax" / "records" / "05_softmax_align_sweep.json"
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
SHAPES = [(32768, 1000, F16), (32768, 1000, BF16), (16384, 1000, F16), (32768, 1000, F32), (4096, 1000, F32),
          (32768, 3000, F16), (8192, 5120, BF16), (8192, 5120, F16), (4096, 4096, F16)]
FIRST, FINAL, FINALISTS = 3, 9, 4


def align_of(x: torch.Tensor, out: torch.Tensor) -> int:
    """ALIGN as the reference's launcher computes it: the largest power of two, up to 16 bytes of elements,
    dividing the row length and both row strides."""
    align = 16 // x.element_size()
    while align > 1 and any(v % align for v in (x.shape[1], x.stride(0), out.stride(0))):
        align //= 2
    return align


def launch(kernel, rows: int, warps: int, stream: bool, aligned: bool):
    """fn(x) -> softmax(x) by the notebook's kernel with this launch, ALIGN as the launcher computes it or 1."""
    def run(x):
        out = torch.empty_like(x)
        kernel[(triton.cdiv(x.shape[0], rows),)](
            x, out, x.shape[0], x.shape[1], x.stride(0), out.stride(0), BLOCK_N=triton.next_power_of_2(x.shape[1]),
            ROWS=rows, STREAM=stream, ALIGN=align_of(x, out) if aligned else 1, num_warps=warps)
        return out
    return run


def aligned_launches(kernel, n: int) -> dict:
    block = triton.next_power_of_2(n)
    shapes = {}
    for rows in (1, 2, 4):
        for warps in (1, 2, 4, 8, 16):
            per_thread = rows * block // (32 * warps)
            if not 2 <= per_thread <= 64 or rows * block > 32768:
                continue
            for stream in (False, True):
                shapes[f"aligned rows{rows}/w{warps}{' hints' if stream else ''}"] = launch(kernel, rows, warps,
                                                                                           stream, True)
    return shapes


def main() -> int:
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 1
    ns = load_namespace(solution_notebook("05_softmax"))

    def eager(x):
        e = torch.exp(x - x.max(dim=1, keepdim=True).values)
        return e / e.sum(dim=1, keepdim=True)

    peers = {"torch.softmax": lambda x: torch.softmax(x, dim=-1), "torch.compile": torch.compile(eager, dynamic=False)}
    if (liger := liger_softmax()) is not None:
        peers["Liger"] = liger
    rows_out = []
    for m, n, dtype in SHAPES:
        element = torch.empty(0, dtype=dtype).element_size()
        nbytes = 2 * m * n * element
        make = lambda: (torch.randn(m, n, device="cuda", dtype=dtype),)  # noqa: E731
        x = make()[0]
        want = torch.softmax(x.double(), dim=-1)
        usable, failed = {}, {}
        _, rows_, warps_, stream_ = ns["softmax_config"](m, n, element)
        before = {"reference, ALIGN=1": launch(ns["softmax_kernel"], rows_, warps_, stream_, False)}
        for name, fn in {**aligned_launches(ns["softmax_kernel"], n), **peers, **before,
                         "reference": ns["softmax"]}.items():
            try:
                err = float((fn(x).double() - want).abs().max())
                torch.cuda.synchronize()
                if err < (1e-5 if element == 4 else 1e-2):
                    usable[name] = fn
                else:
                    failed[name] = f"wrong: {err:.3g}"
            except Exception as exc:  # noqa: BLE001 - out of registers for this launch
                failed[name] = f"failed: {type(exc).__name__}"
        del x, want
        launches = {k: v for k, v in usable.items() if k.startswith("aligned")}
        first = {k: round(gbps(nbytes, statistics.median(t)), 1)
                 for k, t in steady_rounds(launches, make, rounds=FIRST).items()}
        top = sorted(first, key=first.get, reverse=True)[:FINALISTS]
        final_fns = {k: launches[k] for k in top}
        final_fns.update({k: v for k, v in usable.items() if not k.startswith("aligned")})
        final_fns["same-size copy"] = lambda x: x.clone()
        final = steady_rounds(final_fns, make, rounds=FINAL)
        medians = {k: round(gbps(nbytes, statistics.median(t)), 1) for k, t in final.items()}
        best_aligned = max(top, key=medians.get)
        peer_names = [k for k in peers if k in medians]
        best_peer = max(peer_names, key=medians.get)
        row = {"rows": m, "width": n, "dtype": str(dtype)[6:], "traffic_bytes": nbytes,
               "round1_gbps": first, "round2_median_gbps": medians, "not_usable": failed,
               "reference_launch": f"rows{rows_}/w{warps_}{' hints' if stream_ else ''}",
               "best_aligned_launch": best_aligned, "best_peer": best_peer,
               "align_one_of_copy": round(medians["reference, ALIGN=1"] / medians["same-size copy"], 3),
               "aligned_of_copy": round(medians[best_aligned] / medians["same-size copy"], 3),
               "reference_of_copy": round(medians["reference"] / medians["same-size copy"], 3),
               "aligned_of_best_peer": round(medians[best_aligned] / medians[best_peer], 3),
               "reference_of_best_peer": round(medians["reference"] / medians[best_peer], 3)}
        rows_out.append(row)
        print(f"{m}x{n} {row['dtype']}: reference {medians['reference']:.0f} ({row['reference_of_copy']:.3f} of copy), "
              f"ALIGN=1 {medians['reference, ALIGN=1']:.0f} ({row['align_one_of_copy']:.3f}), "
              f"{best_aligned} {medians[best_aligned]:.0f} ({row['aligned_of_copy']:.3f}); best peer {best_peer} "
              f"{medians[best_peer]:.0f}; copy {medians['same-size copy']:.0f}", flush=True)
        torch.cuda.empty_cache()
    record = {**provenance("05_softmax: 16-byte loads for rows that are not a multiple of 16 long",
                           "python lab/sweeps/softmax_align.py"),
              "liger_kernel": _version("liger-kernel"), "copy_gbps": round(copy_bandwidth(), 1), "method": METHOD,
              "rounds": {"round1": FIRST, "round2": FINAL}, "rows": rows_out}
    OUT.write_text(json.dumps(record, indent=1) + "\n")
    print("wrote", OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
