"""How close to the copy bandwidth can one launch that reads X bytes and writes X bytes get, by size?

    python lab/sweeps/copy_limit.py     (on a GPU; writes solutions/06_rmsnorm/records/06_rmsnorm_copy_limit.json)

Chapter 06 measures its RMSNorm on a 4096 x 4096 fp16 input: 32 MiB read, 32 MiB written, about 16 us
of traffic at full bandwidth. At that size a kernel's fixed costs (filling the GPU with programs, the
first loads' latency, the last wave's tail, the gap between two launches) are a tenth of its time.
This sweep times, on [M, 4096] fp16 inputs of 32 MiB to 1 GiB of traffic, every way of copying we
have (torch's clone, Triton tile copies with and without cache hints, a persistent Triton copy) next
to the chapter's reference RMSNorm, all with ``triton_course.bench.steady_rounds`` in one process. The
"copy bandwidth" of the chapters is the 1 GiB clone; ``fraction_of_copy`` is each figure over it.
If no copy reaches a fraction at a size, no kernel that has to move those bytes can either.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "lab" / "sweeps"))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from grader.course import solution_notebook  # noqa: E402
from grader.notebook_code import load_namespace  # noqa: E402
from triton_course.bench import METHOD, gbps, steady_rounds  # noqa: E402
from records import provenance  # noqa: E402

WIDTH = 4096
ROWS = (2048, 4096, 8192, 16384, 65536)     # 32 MiB ... 1 GiB of traffic (read + write) in fp16


@triton.jit
def copy_tiles(src, dst, n, BLOCK: tl.constexpr, STREAM: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < n
    if STREAM:
        v = tl.load(src + offs, mask=inside, eviction_policy="evict_first")
        tl.store(dst + offs, v, mask=inside, cache_modifier=".cs")
    else:
        tl.store(dst + offs, tl.load(src + offs, mask=inside), mask=inside)


@triton.jit
def copy_persistent(src, dst, n, BLOCK: tl.constexpr):
    for start in tl.range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        inside = offs < n
        tl.store(dst + offs, tl.load(src + offs, mask=inside), mask=inside)


def tile_copy(block: int, warps: int, stream: bool):
    def run(x, _w):
        out = torch.empty_like(x)
        copy_tiles[(triton.cdiv(x.numel(), block),)](x, out, x.numel(), BLOCK=block, STREAM=stream,
                                                    num_warps=warps)
        return out
    return run


def persistent_copy(block: int, warps: int, per_sm: int):
    sms = torch.cuda.get_device_properties(0).multi_processor_count

    def run(x, _w):
        out = torch.empty_like(x)
        copy_persistent[(sms * per_sm,)](x, out, x.numel(), BLOCK=block, num_warps=warps)
        return out
    return run


def main() -> None:
    rmsnorm = load_namespace(solution_notebook("06_rmsnorm"))["rmsnorm"]
    fns = {"torch clone": lambda x, _w: x.clone(),
           "rmsnorm reference (chapter 06)": lambda x, w: rmsnorm(x, w)}
    for block in (2048, 4096, 8192):
        for warps in (4, 8):
            for stream in (False, True):
                fns[f"triton tile copy B{block}/w{warps}{' cache hints' if stream else ''}"] = \
                    tile_copy(block, warps, stream)
    for per_sm in (2, 4, 8):
        fns[f"triton persistent copy B4096/w8 x{per_sm} per SM"] = persistent_copy(4096, 8, per_sm)
    out: dict[str, object] = {
        **provenance("06_rmsnorm_copy_limit", "python lab/sweeps/copy_limit.py"),
        "method": METHOD, "rounds": 7, "width": WIDTH, "sizes": {},
    }
    for rows in ROWS:
        nbytes = 2 * rows * WIDTH * 2
        times = steady_rounds(fns, lambda: (torch.randn(rows, WIDTH, device="cuda", dtype=torch.float16),
                                            torch.randn(WIDTH, device="cuda", dtype=torch.float16)), rounds=7)
        out["sizes"][f"{rows}x{WIDTH}"] = {"traffic_mib": nbytes // 2**20,
                                           "gbps": {k: round(gbps(nbytes, statistics.median(v)), 1)
                                                    for k, v in times.items()}}
        print(rows, out["sizes"][f"{rows}x{WIDTH}"], flush=True)
    copy_gbps = out["sizes"][f"{ROWS[-1]}x{WIDTH}"]["gbps"]["torch clone"]
    out["copy_gbps"] = copy_gbps
    out["summary"] = []
    for shape, row in out["sizes"].items():
        copies = {k: v for k, v in row["gbps"].items() if "copy" in k or k == "torch clone"}
        best = max(copies, key=copies.get)
        row["fraction_of_copy"] = {k: round(v / copy_gbps, 3) for k, v in row["gbps"].items()}
        row["best_copy"] = best
        ref = row["gbps"]["rmsnorm reference (chapter 06)"]
        out["summary"].append(
            f"{shape} fp16 ({row['traffic_mib']} MiB of traffic): best copy {best} {copies[best]:.0f} GB/s = "
            f"{copies[best] / copy_gbps:.1%} of the 1 GiB clone; RMSNorm reference {ref:.0f} GB/s = "
            f"{ref / copy_gbps:.1%}, {ref / copies[best]:.1%} of that best copy")
    print("\n".join(out["summary"]))
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "solutions" / "06_rmsnorm" / "records" / "06_rmsnorm_copy_limit.json"
    path.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
