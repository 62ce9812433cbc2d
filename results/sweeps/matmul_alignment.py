"""Why 3000^3 is slower than 4096^3 for the reference matmul_relu: the sizes, or where its rows start?

    python results/sweeps/matmul_alignment.py        (on a GPU; about 2 minutes on an H200)

Times the solution notebook's own ``matmul_relu`` (its launcher and Hopper path, unchanged) against torch's
``relu(a @ b)`` (cuBLAS) in one process, with ``triton_course.bench.steady_rounds`` (medians of interleaved
rounds on fresh inputs), float16:

* square sizes around 3000 that differ in how their rows sit in memory: 3000 (rows of 6000 bytes, which start
  at every 16-byte offset modulo 128), 3008 and 2944 (rows a multiple of 128 bytes), 3072;
* 3000^3 again with the *same* logical shape but every row starting on a 128-byte boundary: views
  ``[:, :3000]`` of tensors 3008 (or 3072) elements wide, so only the row stride changes;
* 4000 x 3000 x 5000 contiguous and with its rows padded the same way.

If the padded-stride 3000^3 runs at the speed of 3008^3, the gap is the rows' alignment, not the tile count.
Writes ``results/07_matmul_relu_alignment.json`` and prints a table.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from grader.course import solution_notebook  # noqa: E402
from grader.notebook_code import load_namespace  # noqa: E402
from triton_course.bench import steady_rounds  # noqa: E402
from triton_course.matmul import matmul_flops, tflops  # noqa: E402

OUT = ROOT / "results" / "07_matmul_relu_alignment.json"

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
    def wide(cols: int) -> int:
        return cols if pad is None else -(-cols // pad) * pad

    a = torch.randn(m, wide(k), device="cuda", dtype=torch.float16)[:, :k]
    b = torch.randn(k, wide(n), device="cuda", dtype=torch.float16)[:, :n]
    return a, b


def main() -> int:
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 1
    ns = load_namespace(solution_notebook("07_matmul_relu"))
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
    record = {"chapter": "07_matmul_relu", "command": "python results/sweeps/matmul_alignment.py",
              "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "triton": __import__("triton").__version__,
              "method": "triton_course.bench.steady_rounds: medians of 7 interleaved rounds, fresh inputs",
              "unit": "TFLOP/s = 2*M*N*K / median time per call", "rows": rows}
    OUT.write_text(json.dumps(record, indent=1) + "\n")
    print("wrote", OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
