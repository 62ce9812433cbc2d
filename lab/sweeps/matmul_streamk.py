"""Stream-K for chapter 07's Hopper path: share the last wave's K-steps evenly among all programs.

    python lab/sweeps/matmul_streamk.py [--out solutions/07_matmul_relu/records/07_matmul_relu_streamk.json]
        (on a GPU: about two minutes on an H200; prints the checks, the times and the verdict)
    python lab/sweeps/matmul_streamk.py --dry-run
        (anywhere, TRITON_INTERPRET=1 without a GPU: every variant at small sizes against float64, twice;
        records nothing)

At 3000^3 the notebook's 128 x 256 tiles number 288: two full waves of 132 programs and 24 tiles left over. The
notebook cuts those 24 along K into 5 pieces each; when this probe was recorded (solutions/07_matmul_relu/records/07_matmul_relu_streamk.json),
the program that finished a tile's last piece added all 5 up (25 us for the last wave, 11 of them adding up);
since 2026-11-28 a second kernel does (solutions/07_matmul_relu/records/07_matmul_relu_tail.json). Stream-K (Osama et al.,
"Stream-K: Work-centric Parallel Decomposition for Dense Matrix-Matrix Multiplication on the GPU", PPoPP 2023)
instead lays the K-steps of the last ``sk`` tiles end to end and gives every program an equal run of them:

* program p computes the whole tiles p, p + P, ... below ``full_tiles`` (as the notebook does), then K-steps
  ``p*U//P ... (p+1)*U//P - 1`` of the ``U = sk * k_steps`` steps of the remaining tiles, tile by tile;
* a tile that one program covers alone is stored at once; a tile shared by several is finished by the last to
  arrive (an atomic count per tile): the others write their float32 sums to a slot of their own (two per
  program: the run's first piece and its last) and raise a flag; the last adds their slots to its own sums, in
  two halves to spare registers, and stores the tile. It waits only for a flag whose owner has already counted
  itself in, so it never waits on a program that has not started; under the interpreter, which runs programs
  one after another, it never waits at all.

The variants: ``sk tail`` (sk = the leftover tiles: every program gets about 8.5 of 47 steps at 3000^3, a tile
is shared by about 6), ``sk tail+1`` (the leftover tiles and one full wave: every program gets a whole tile
and a bit, a tile is shared by 2) and ``sk all`` (no whole-tile loop). Each runs as the reference does, with
b copied onto 128-byte rows first when the reference would copy it, and ``, kernel alone`` on a b already
copied. Timed beside ``torch`` (``torch.relu(a @ b)``), the ``reference`` (the fast path's ``matmul_relu``)
and the copy alone, in one process on the same fresh inputs (``triton_course.bench.steady_rounds``, medians of
7 interleaved rounds), at the sweep's shapes where the notebook's plan has a last wave. Every variant is first
checked against float64, twice (the counts and flags must be ready again for the next call).
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

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from grader.course import solution_notebook  # noqa: E402
from grader.notebook_code import load_namespace  # noqa: E402
from triton_course.matmul import make as make_operands  # noqa: E402
from triton_course.matmul import matmul_flops, tflops, tolerance  # noqa: E402
from records import provenance  # noqa: E402

OUT = ROOT / "solutions" / "07_matmul_relu" / "records" / "07_matmul_relu_streamk.json"
GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
DEVICE = "cuda" if GPU else "cpu"
from triton_course.matmul_fast import fast_namespace  # noqa: E402 -- the fast path's names
NS = fast_namespace(load_namespace(solution_notebook("07_matmul_relu")))
tile_at = NS["tile_at"]
tile_sums = NS["tile_sums"]


@triton.jit
def store_halves(c_desc, left, right, off_m, off_n, BLOCK_N: tl.constexpr):
    """ReLU, conversion and store of a tile's two column halves through c_desc (blocks of BLOCK_N / 2)."""
    c_desc.store([off_m, off_n], tl.maximum(left, 0.0).to(c_desc.dtype))
    c_desc.store([off_m, off_n + BLOCK_N // 2], tl.maximum(right, 0.0).to(c_desc.dtype))


@triton.jit
def halves(acc, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """(left, right): the two column halves of a BLOCK_M x BLOCK_N tile held in registers."""
    return acc.reshape(BLOCK_M, 2, BLOCK_N // 2).permute(0, 2, 1).split()


@triton.jit
def first_program(unit, units, PROGRAMS: tl.constexpr):
    """The program whose run of K-steps (p*units//PROGRAMS ... (p+1)*units//PROGRAMS - 1) holds step ``unit``."""
    return ((unit + 1) * PROGRAMS + units - 1) // units - 1


@triton.jit(do_not_specialize=["M", "N", "K", "full_tiles"])
def streamk_kernel(a_desc, b_desc, c_desc, partial_ptr, count_ptr, ready_ptr, M, N, K, full_tiles,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                   B_T: tl.constexpr, PROGRAMS: tl.constexpr):
    """relu(A @ B): whole tiles below ``full_tiles`` by program, then the K-steps of the other tiles shared out
    evenly (see the module's docstring). c_desc has blocks of BLOCK_M x BLOCK_N / 2; the host guarantees every
    program at least one K-step of the shared tiles."""
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(pid, full_tiles, PROGRAMS, flatten=True):
        tile_m, tile_n = tile_at(tile, tiles_m, tiles_n, GROUP_M)
        off_m, off_n = tile_m * BLOCK_M, tile_n * BLOCK_N
        acc, _ = tile_sums(a_desc, b_desc, b_desc, off_m, off_n, 0, k_steps, BLOCK_M, BLOCK_N, 0, BLOCK_K, B_T)
        left, right = halves(acc, BLOCK_M, BLOCK_N)
        store_halves(c_desc, left, right, off_m, off_n, BLOCK_N)

    tile_elems: tl.constexpr = BLOCK_M * BLOCK_N
    HALF: tl.constexpr = BLOCK_N // 2
    offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, HALF)[None, :]
    units = (tiles_m * tiles_n - full_tiles) * k_steps
    u = pid * units // PROGRAMS
    end = (pid + 1) * units // PROGRAMS
    while u < end:
        t = u // k_steps
        k0 = u - t * k_steps
        k1 = tl.minimum(k_steps, k0 + end - u)
        tile_m, tile_n = tile_at(full_tiles + t, tiles_m, tiles_n, GROUP_M)
        off_m, off_n = tile_m * BLOCK_M, tile_n * BLOCK_N
        acc, _ = tile_sums(a_desc, b_desc, b_desc, off_m, off_n, k0, k1, BLOCK_M, BLOCK_N, 0, BLOCK_K, B_T)
        left, right = halves(acc, BLOCK_M, BLOCK_N)
        if k1 - k0 == k_steps:
            store_halves(c_desc, left, right, off_m, off_n, BLOCK_N)
        else:
            first = first_program(t * k_steps, units, PROGRAMS)
            last = first_program(t * k_steps + k_steps - 1, units, PROGRAMS)
            arrived = tl.atomic_add(count_ptr + t, 1, sem="acq_rel", scope="gpu")
            if arrived < last - first:        # not the last: leave the sums in this program's slot
                slot = 2 * pid + (k0 == 0)
                tl.store(partial_ptr + slot * tile_elems + offs, left)
                tl.store(partial_ptr + slot * tile_elems + HALF + offs, right)
                tl.debug_barrier()            # every thread's part is written before the flag goes up
                tl.atomic_xchg(ready_ptr + slot, 1, sem="release", scope="gpu")
            else:                             # the last: add the others' slots, store the tile
                for q in range(first, last + 1):
                    if q != pid:
                        slot = 2 * q + (q == first)
                        while tl.atomic_cas(ready_ptr + slot, 1, 0, sem="acquire", scope="gpu") != 1:
                            pass
                        left += tl.load(partial_ptr + slot * tile_elems + offs, cache_modifier=".cg")
                        right += tl.load(partial_ptr + slot * tile_elems + HALF + offs, cache_modifier=".cg")
                tl.atomic_xchg(count_ptr + t, 0)   # ready for the next call
                store_halves(c_desc, left, right, off_m, off_n, BLOCK_N)
        u += k1 - k0


def shared_tiles(tiles: int, k_steps: int, programs: int, mode: str) -> int:
    """How many of the last tiles are shared out by K-step: ``tail`` (those past the last full wave), ``tail+1``
    (and one full wave more), ``all``; 0 when there is no partial wave, or too few steps for every program."""
    last = tiles % programs
    sk = {"tail": last, "tail+1": min(tiles, last + programs) if last else 0, "all": tiles}[mode]
    return sk if sk * k_steps >= programs else 0


def streamk_launch(a: torch.Tensor, b: torch.Tensor, mode: str, tile_name: str, *, copy_b: bool = True):
    """fn(a, b, bw) running streamk_kernel with the notebook's tile ``tile_name`` (on bw, b already on
    128-byte rows, unless ``copy_b``: then b is copied first when the notebook would copy it)."""
    tile = NS["choose_tile"](a, b, [tile_name])
    grid, meta, state = NS["tma_plan"](a, b, tile, split_tail=False)
    (M, K), N = a.shape, b.shape[1]
    bm, bn, bk, programs = meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"], meta["PROGRAMS"]
    tiles, k_steps = triton.cdiv(M, bm) * triton.cdiv(N, bn), triton.cdiv(K, bk)
    sk = shared_tiles(tiles, k_steps, programs, mode)
    partial = torch.empty(2 * programs * bm * bn, device=a.device, dtype=torch.float32)
    count = torch.zeros(max(1, sk), device=a.device, dtype=torch.int32)
    ready = torch.zeros(2 * programs, device=a.device, dtype=torch.int32)
    TensorDescriptor = NS["TensorDescriptor"]
    b_t = meta["B_T"]

    def run(a, b, bw):
        c = torch.empty((M, N), device=a.device, dtype=a.dtype)
        if copy_b:
            bw = (NS["realigned"](b.t()).t() if b_t else NS["realigned"](b)) if state["realign_b"] else b
        a_desc, b_desc = NS["tma_args"](a, bw, c, meta, state)[:2]
        c_desc = TensorDescriptor(c, [M, N], [N, 1], [bm, bn // 2])
        streamk_kernel[(programs,)](a_desc, b_desc, c_desc, partial, count, ready, M, N, K, tiles - sk,
                                    BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=meta["GROUP_M"], B_T=b_t,
                                    PROGRAMS=programs, num_warps=meta.get("num_warps", 4),
                                    num_stages=meta.get("num_stages", 2))
        return c
    run.shared = sk
    run.tiles = tiles
    return run


#: (name, m, n, k, transpose_b, dtype): the sweep's shapes where the notebook's plan leaves a partial last wave.
SHAPES = [("3000^3", 3000, 3000, 3000, False, torch.float16),
          ("3000^3 B^T", 3000, 3000, 3000, True, torch.float16),
          ("3000^3", 3000, 3000, 3000, False, torch.bfloat16),
          ("4000x3000x5000", 4000, 3000, 5000, False, torch.float16),
          ("4096^3", 4096, 4096, 4096, False, torch.float16),
          ("8192^3", 8192, 8192, 8192, False, torch.float16)]
CPU_SHAPES = [("72x40x136", 72, 40, 136, False, torch.float16), ("72x40x136 B^T", 72, 40, 136, True, torch.float16),
              ("100x80x304", 100, 80, 304, False, torch.float16)]
MODES = ("tail", "tail+1", "all")


#: The notebook's 128 x 256 tile that it stores in halves, as streamk_kernel always does.
TILE = "128x256x64 s4w8 h"


def variants(a, b) -> dict:
    fns = {"torch": lambda a, b, bw: torch.relu(a @ b),
           "reference": lambda a, b, bw: NS["matmul_relu"](a, b),
           "copy of b": lambda a, b, bw: NS["realigned"](b.t()).t() if NS["b_transposed"](b) else NS["realigned"](b)}
    for mode in MODES:
        run = streamk_launch(a, b, mode, TILE)
        if run.shared == 0 and mode != "tail":
            continue
        fns[f"sk {mode}"] = run
        fns[f"sk {mode}, kernel alone"] = streamk_launch(a, b, mode, TILE, copy_b=False)
    return fns


def inputs(m, n, k, transpose_b, dtype):
    a, b = make_operands(m, n, k, transpose_b=transpose_b, dtype=dtype, device=DEVICE)
    bw = NS["realigned"](b.t()).t() if transpose_b else NS["realigned"](b)
    return a, b, bw


def check(fns: dict, a, b, bw) -> dict:
    want = torch.relu(a.double() @ b.double())
    atol, rtol = tolerance(a.dtype)
    verdict = {}
    for name, fn in fns.items():
        if name == "copy of b":
            continue
        for _ in range(2):   # twice: the counts and flags must be ready again
            got = fn(a, b, bw).double()
        err = float((got - want).abs().max())
        verdict[name] = {"max_abs_error": round(err, 4),
                         "correct": bool(((got - want).abs() <= atol + rtol * want.abs()).all())}
    return verdict


def summary(shapes: list[dict]) -> dict:
    """Per shape, the reference and each stream-K variant as launched (the copy of b included) as a share of
    torch's speed, and where stream-K is more than 2% faster than the reference."""
    lines, faster = [], []
    for s in shapes:
        us = {name: row["us"] for name, row in s["rows"].items()}
        label = f"{s['name']} {s['dtype']}"
        launched = {name: us[name] for name in us if name.startswith("sk ") and not name.endswith("kernel alone")}
        best = min(launched, key=launched.get)
        lines.append(f"{label}: torch {us['torch']} us, reference {us['reference']} us "
                     f"({round(us['torch'] / us['reference'], 3)}); "
                     + ", ".join(f"{name} {t} us ({round(us['torch'] / t, 3)})" for name, t in launched.items())
                     + "; kernel alone: " + ", ".join(f"{name[:-len(', kernel alone')]} {t} us" for name, t
                                                       in us.items() if name.endswith("kernel alone")))
        if us[best] < 0.98 * us["reference"]:
            faster.append(f"{label}: {best} {round(us['reference'] / us[best], 3)}x the reference")
    return {"lines": lines, "stream_k_faster_than_reference": faster}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--summarize", type=Path, help="recompute a recorded file's summary from its rows")
    parser.add_argument("--only", help="comma-separated shape names (with the dtype: '3000^3 float16')")
    args = parser.parse_args()
    if args.summarize:
        record = json.loads(args.summarize.read_text())
        found = summary(record["shapes"])
        record.update(summary=found["lines"], stream_k_faster_than_reference=found["stream_k_faster_than_reference"])
        args.summarize.write_text(json.dumps(record, indent=1) + "\n")
        print("\n".join(found["lines"] + found["stream_k_faster_than_reference"]))
        return 0
    dry = not GPU or args.dry_run
    shapes = CPU_SHAPES if dry else SHAPES
    if args.only:
        wanted = {w.strip() for w in args.only.split(",")}
        shapes = [s for s in shapes if f"{s[0]} {str(s[5]).split('.')[-1]}" in wanted]
    results, ok = [], True
    for name, m, n, k, transpose_b, dtype in shapes:
        a, b, bw = inputs(m, n, k, transpose_b, dtype)
        fns = variants(a, b)
        checks = check(fns, a, b, bw)
        label = f"{name} {str(dtype).split('.')[-1]}"
        for v, c in checks.items():
            print(f"{label:<24} {v:<26} {'correct' if c['correct'] else 'WRONG'} (max error {c['max_abs_error']})")
        ok = ok and all(c["correct"] for c in checks.values())
        if dry:
            continue
        from triton_course.bench import steady_rounds
        times = steady_rounds(fns, lambda: inputs(m, n, k, transpose_b, dtype))
        flops = matmul_flops(m, n, k)
        rows = {v: {"us": round(statistics.median(t) * 1e3, 2), "tflops": round(tflops(flops, statistics.median(t)), 1)}
                for v, t in times.items()}
        for v, row in rows.items():
            row["ratio_to_torch"] = round(row["tflops"] / rows["torch"]["tflops"], 3) if v != "copy of b" else None
            print(f"{label:<24} {v:<26} {row['us']:>8.2f} us  {row['tflops']:>7.1f} TFLOP/s  {row['ratio_to_torch']}")
        shared = {v: fn.shared for v, fn in fns.items() if hasattr(fn, "shared")}
        results.append({"name": name, "m": m, "n": n, "k": k, "transpose_b": transpose_b,
                        "dtype": str(dtype).split(".")[-1], "tiles": next(fn.tiles for fn in fns.values()
                                                                          if hasattr(fn, "tiles")),
                        "shared_tiles": shared, "checks": checks, "rows": rows})
        record = {**provenance("07_matmul_relu: stream-K for the last wave", "python lab/sweeps/matmul_streamk.py"),
                  "method": "triton_course.bench.steady_rounds: medians of 7 interleaved rounds, fresh inputs",
                  "tile": TILE, "shapes": results}
        found = summary(results)
        record.update(summary=found["lines"], stream_k_faster_than_reference=found["stream_k_faster_than_reference"])
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    if not dry:
        print("wrote", args.out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
