"""Why 3000^3 is slower than 4096^3 for the reference matmul_relu: the sizes, or where its rows start?

    python lab/sweeps/matmul_alignment.py        (on a GPU; about 2 minutes on an H200)

Times chapter 07's fast path (``triton_course.matmul_fast``, its launcher and Hopper path) against torch's
``relu(a @ b)`` (cuBLAS) in one process, with ``triton_course.bench.steady_rounds`` (medians of interleaved
rounds on fresh inputs), float16:

* square sizes around 3000 that differ in how their rows sit in memory: 3000 (rows of 6000 bytes, which start
  at every 16-byte offset modulo 128), 3008 and 2944 (rows a multiple of 128 bytes), 3072;
* 3000^3 again with the *same* logical shape but every row starting on a 128-byte boundary: views
  ``[:, :3000]`` of tensors 3008 (or 3072) elements wide, so only the row stride changes;
* 4000 x 3000 x 5000 contiguous and with its rows padded the same way.

If the padded-stride 3000^3 runs at the speed of 3008^3, the gap is the rows' alignment, not the tile count.
Writes ``solutions/07_matmul_relu/records/07_matmul_relu_alignment.json`` and prints a table.

    python lab/sweeps/matmul_alignment.py --parts     (about 3 minutes; writes
                                                           solutions/07_matmul_relu/records/07_matmul_relu_alignment_parts.json)

Which rows cost it: at 3000^3 and 4000 x 3000 x 5000, the Hopper path's kernel launched directly (no K-split
of the last wave, so that c may be a view) with the rows of a only, of b only, of c only, or of all three on
128-byte boundaries; every tile of ``GPU_TMA_TILES`` on the unpadded operands (as the launcher runs them); the
exercise's pointer kernel, tuned, with its ALIGNED hints; torch's ``relu(a @ b)``.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "lab" / "sweeps"))

from grader.course import solution_notebook  # noqa: E402
from grader.notebook_code import load_namespace  # noqa: E402
from triton_course.bench import steady_rounds  # noqa: E402
from triton_course.matmul import matmul_flops, tflops  # noqa: E402
from records import provenance  # noqa: E402

OUT = ROOT / "solutions" / "07_matmul_relu" / "records" / "07_matmul_relu_alignment.json"
PARTS_OUT = ROOT / "solutions" / "07_matmul_relu" / "records" / "07_matmul_relu_alignment_parts.json"
PAD = 64   # elements: rows of 3000 or 5000 float16 rounded up to a multiple of 128 bytes

#: (name, m, n, k, row alignment in elements or None): an aligned case is a view [:, :cols] of a tensor whose
#: rows are cols rounded up to a multiple of the alignment.
CASES = [
    ("3000^3", 3000, 3000, 3000, None),
    ("3000^3, rows padded to 3008", 3000, 3000, 3000, 64),
    ("3000^3, rows padded to 3072", 3000, 3000, 3000, 1024),
    ("3008^3", 3008, 3008, 3008, None),
    ("2944^3", 2944, 2944, 2944, None),
    ("3072^3", 3072, 3072, 3072, None),
    ("4000x3000x5000", 4000, 3000, 5000, None),
    ("4000x3000x5000, rows padded", 4000, 3000, 5000, 64),
]


def inputs(m: int, n: int, k: int, pad: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh a [m, k] and b [k, n] in float16 on the GPU; with ``pad``, each is a view of a tensor whose rows
    are rounded up to a multiple of ``pad`` elements."""
    return padded(m, k, pad), padded(k, n, pad)


def padded(rows: int, cols: int, pad: int | None, make=torch.randn) -> torch.Tensor:
    """A fresh float16 [rows, cols] on the GPU (from ``make``); with ``pad``, a view of a tensor whose rows are
    rounded up to a multiple of ``pad`` elements."""
    wide = cols if pad is None else -(-cols // pad) * pad
    return make(rows, wide, device="cuda", dtype=torch.float16)[:, :cols]


def direct_launch(ns: dict, tile: str, pad_c: bool):
    """fn(a, b) -> relu(a @ b) by the Hopper path's kernel with ``tile``, without the K-split of the last wave,
    into a c whose rows are padded when ``pad_c``."""
    TensorDescriptor = ns["TensorDescriptor"]

    def run(a, b):
        M, N = a.shape[0], b.shape[1]
        grid, meta, state = ns["tma_plan"](a, b, ns["GPU_TMA_TILES"][tile], split_tail=False)
        c = padded(M, N, PAD if pad_c else None, make=torch.empty)
        args = ns["tma_args"](a, b, c, meta, state)
        if pad_c:   # tma_args describes c as contiguous: its descriptors again, with its real row stride
            bm, bn, extra = meta["BLOCK_M"], meta["BLOCK_N"], meta["EXTRA_N"]
            cols = bn // 2 if meta["HALVES"] else bn
            args[3] = TensorDescriptor(c, [M, N], [c.stride(0), 1], [bm, cols])
            args[4] = TensorDescriptor(c, [M, N], [c.stride(0), 1], [bm, extra]) if extra else args[3]
        ns["matmul_relu_tma_kernel"][grid](*args, **meta)
        return c
    return run


def pointer_tuned(ns: dict):
    """fn(a, b) -> relu(a @ b) by the exercise's kernel, autotuned over CONFIGS, with its ALIGNED hints."""
    def run(a, b):
        (M, K), N = a.shape, b.shape[1]
        c = torch.empty((M, N), device=a.device, dtype=a.dtype)
        ns["matmul_relu_tuned"][lambda meta: (-(-M // meta["BLOCK_M"]) * -(-N // meta["BLOCK_N"]),)](
            a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), N, 1, ALIGNED=True)
        return c
    return run


def parts() -> int:
    from triton_course.matmul_fast import fast_namespace   # the fast path's names
    ns = fast_namespace(load_namespace(solution_notebook("07_matmul_relu")))
    relu_mm = lambda a, b: torch.relu(a @ b)  # noqa: E731
    default_tile = ns["HOPPER_CHOICE"]["a size not a multiple of 16"][0]
    rows = []
    for m, n, k in ((3000, 3000, 3000), (4000, 3000, 5000)):
        groups = {}   # (name -> (fn, pad a, pad b))
        groups["torch"] = (relu_mm, False, False)
        groups["reference (as launched)"] = (ns["matmul_relu"], False, False)
        groups["pointer kernel, tuned, ALIGNED"] = (pointer_tuned(ns), False, False)
        for pa, pb, pc in ((False, False, False), (True, False, False), (False, True, False), (False, False, True),
                           (True, True, True)):
            label = "+".join(x for x, p in (("a", pa), ("b", pb), ("c", pc)) if p) or "none"
            groups[f"{default_tile}, no K-split, rows padded: {label}"] = (direct_launch(ns, default_tile, pc), pa, pb)
        for tile in ns["GPU_TMA_TILES"]:
            groups[f"{tile}, no K-split, unpadded"] = (direct_launch(ns, tile, False), False, False)
        flops = matmul_flops(m, n, k)
        for pa, pb in sorted({(pa, pb) for _, pa, pb in groups.values()}):
            fns = {name: fn for name, (fn, a_pad, b_pad) in groups.items() if (a_pad, b_pad) == (pa, pb)}
            if "torch" not in fns:
                fns["torch"] = relu_mm
            make = lambda: (padded(m, k, PAD if pa else None), padded(k, n, PAD if pb else None))  # noqa: E731
            a, b = make()
            want = relu_mm(a, b).float()
            errors = {name: round(float((fn(a, b).float() - want).abs().max()), 4) for name, fn in fns.items()}
            del a, b, want
            times = steady_rounds(fns, make)
            torch_tf = tflops(flops, statistics.median(times["torch"]))
            for name, t in times.items():
                error = errors[name]
                if name == "torch" and (pa or pb):
                    name = f"torch, rows padded: {'+'.join(x for x, p in (('a', pa), ('b', pb)) if p)}"
                tf = tflops(flops, statistics.median(t))
                row = {"shape": f"{m}x{n}x{k}", "case": name, "tflops": round(tf, 1),
                       "ratio_to_torch_same_inputs": round(tf / torch_tf, 3),
                       "max_abs_difference_from_torch": error}
                rows.append(row)
                print(f"{row['shape']:<16} {name:<60} {row['tflops']:>7.1f} TFLOP/s  "
                      f"{row['ratio_to_torch_same_inputs']:.3f} of torch", flush=True)
            torch.cuda.empty_cache()
    record = {**provenance("07_matmul_relu", "python lab/sweeps/matmul_alignment.py --parts"),
              "method": "triton_course.bench.steady_rounds: medians of 7 interleaved rounds, fresh inputs; "
                        "cases with the same padded operands are timed in the same rounds as torch",
              "unit": "TFLOP/s = 2*M*N*K / median time per call", "rows": rows}
    PARTS_OUT.write_text(json.dumps(record, indent=1) + "\n")
    print("wrote", PARTS_OUT)
    return 0


def main() -> int:
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 1
    if "--parts" in sys.argv[1:]:
        return parts()
    from triton_course.matmul_fast import fast_namespace   # the fast path's names
    ns = fast_namespace(load_namespace(solution_notebook("07_matmul_relu")))
    ours = ns["matmul_relu"]
    relu_mm = lambda a, b: torch.relu(a @ b)  # noqa: E731
    rows = []
    for name, m, n, k, pad in CASES:
        a, b = inputs(m, n, k, pad)
        err = float((ours(a, b).float() - relu_mm(a, b).float()).abs().max())
        strides = {"a": list(a.stride()), "b": list(b.stride())}
        del a, b
        times = steady_rounds({"reference": ours, "torch": relu_mm}, lambda: inputs(m, n, k, pad))
        flops = matmul_flops(m, n, k)
        tf = {impl: round(tflops(flops, statistics.median(t)), 1) for impl, t in times.items()}
        row = {"case": name, "m": m, "n": n, "k": k, "strides": strides, "tflops": tf,
               "ratio_reference_to_torch": round(tf["reference"] / tf["torch"], 3),
               "max_abs_difference_from_torch": round(err, 4)}
        rows.append(row)
        print(f"{name:<32} reference {tf['reference']:>6.1f}  torch {tf['torch']:>6.1f}  "
              f"ratio {row['ratio_reference_to_torch']:.3f}", flush=True)
    record = {**provenance("07_matmul_relu", "python lab/sweeps/matmul_alignment.py"),
              "method": "triton_course.bench.steady_rounds: medians of 7 interleaved rounds, fresh inputs",
              "unit": "TFLOP/s = 2*M*N*K / median time per call", "rows": rows}
    OUT.write_text(json.dumps(record, indent=1) + "\n")
    print("wrote", OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
