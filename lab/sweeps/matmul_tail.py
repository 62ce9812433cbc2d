"""Where chapter 07's Hopper path spends 3000^3: the two full waves, the last wave, and the copy of b.

    python lab/sweeps/matmul_tail.py [--out solutions/07_matmul_relu/records/07_matmul_relu_tail.json]
        (on a GPU: under a minute on an H200; prints the checks, the times and the summary)
    python lab/sweeps/matmul_tail.py --dry-run
        (anywhere, TRITON_INTERPRET=1 without a GPU: the variants that run there, at a small size, against
        float64; records nothing)
    python lab/sweeps/matmul_tail.py --summarize solutions/07_matmul_relu/records/07_matmul_relu_tail.json
        (recomputes a recorded file's summary from its rows)

At 3000^3 the notebook's 128 x 256 tiles number 288: two full waves of 132 programs and 24 tiles left over. The
launcher cuts those 24 along K into 5 pieces each, whose float32 sums the product kernel writes out; a second
kernel, ``add_pieces_kernel``, adds them up and stores those tiles. Before that, b is copied onto 128-byte rows.
This probe times, in one process on the same fresh inputs (``triton_course.bench.steady_rounds``, medians of 7
interleaved rounds), float16:

* ``torch`` (``torch.relu(a @ b)``), ``reference`` (the fast path's ``matmul_relu`` as launched), and ``copy of
  b`` (its ``realigned`` alone);
* the notebook's kernels alone on a b already on 128-byte rows: ``full waves only`` (the 264 tiles of the two
  full waves; incomplete output, timing only), ``split 5 (the plan)`` (the product, then add_pieces_kernel)
  and ``split 5, not reduced`` (the product alone, its pieces never added up: timing only);
* kernels defined here, the same tile loop: ``split 5, added by the last piece`` (the notebook's design until
  2026-11-28: each piece counted itself with an atomic add, and the program that counted a tile's last piece
  read all of its pieces back, added them and stored the tile: one program per tile), and ``narrow xP`` (the
  last wave's tiles each cut into P tiles BLOCK_N / P wide, each over all of K: no partial sums; its loop
  pipelined 3 or 6 stages deep);
* what misaligned rows of b cost: ``unaligned b, narrow xP`` (the descriptor on b as given, rows 6000 bytes
  apart), the same with the tensor maps re-encoded with another L2 promotion (Triton's host descriptors
  always ask for 128 bytes; the probe re-encodes them through ``cuTensorMapEncodeTiled``), and b read through
  pointers with 16-byte ``cp.async`` copies instead of descriptors, on b as given and on 128-byte rows.

What it found is in solutions/07_matmul_relu/records/07_matmul_relu_tail.json and its summary, which turns the parts into the bound of
this design at 3000^3: full waves, the cheapest last wave and the copy. cuBLAS's 192 x 192 tiles make 256 tiles,
under two waves, with no last wave to cut (Triton's blocks are powers of two). Every variant whose output is
complete is checked against float64 first, twice (buffers kept from one call to the next must be ready again).
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
from triton_course.matmul import matmul_flops, tflops, tolerance  # noqa: E402
from records import provenance  # noqa: E402

OUT = ROOT / "solutions" / "07_matmul_relu" / "records" / "07_matmul_relu_tail.json"
GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
DEVICE = "cuda" if GPU else "cpu"
from triton_course.matmul_fast import fast_namespace  # noqa: E402 -- the fast path's names
NS = fast_namespace(load_namespace(solution_notebook("07_matmul_relu")))
tile_at = NS["tile_at"]
tile_sums = NS["tile_sums"]


@triton.jit
def sums_of(a_desc, b_desc, b_ptr, stride_bk, off_m, off_n, K, N, k_steps, BLOCK_M: tl.constexpr,
            BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, STAGES: tl.constexpr, PTR_B: tl.constexpr):
    """The float32 sums of one BLOCK_M x BLOCK_N tile over all of K, pipelined STAGES deep: a through its
    descriptor, b through its descriptor or (PTR_B) through pointers: 16-byte loads (cp.async), which do not
    care whether b's rows start on 128-byte boundaries (the launcher checked that N, K and b's row stride
    are multiples of 8)."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    rk = tl.arange(0, BLOCK_K)
    b_ptrs = b_ptr + tl.multiple_of(rk * stride_bk, 8)[:, None] + off_n + tl.arange(0, BLOCK_N)[None, :]
    n_ok = tl.arange(0, BLOCK_N)[None, :] < tl.multiple_of(N - off_n, 8)
    for step in tl.range(0, k_steps, num_stages=STAGES):
        a = a_desc.load([off_m, step * BLOCK_K])
        if PTR_B:
            k_left = tl.multiple_of(K - step * BLOCK_K, 8)
            b = tl.load(b_ptrs + step * BLOCK_K * stride_bk, mask=(rk[:, None] < k_left) & n_ok, other=0.0)
        else:
            b = b_desc.load([step * BLOCK_K, off_n])
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def full_waves(a_desc, b_desc, c_desc, pid, full_tiles, tiles_m, tiles_n, k_steps, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, B_T: tl.constexpr,
               PROGRAMS: tl.constexpr):
    """The notebook's loop over whole tiles (without EXTRA_N and HALVES)."""
    for tile in tl.range(pid, full_tiles, PROGRAMS, flatten=True):
        tile_m, tile_n = tile_at(tile, tiles_m, tiles_n, GROUP_M)
        off_m, off_n = tile_m * BLOCK_M, tile_n * BLOCK_N
        acc, acc2 = tile_sums(a_desc, b_desc, b_desc, off_m, off_n, 0, k_steps, BLOCK_M, BLOCK_N, 0, BLOCK_K, B_T)
        c_desc.store([off_m, off_n], tl.maximum(acc, 0.0).to(c_desc.dtype))


@triton.jit(do_not_specialize=["M", "N", "K", "full_tiles"])
def narrow_tail_kernel(a_desc, b_desc, bn_desc, c_desc, cn_desc, b_ptr, stride_bk, M, N, K, full_tiles,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                       B_T: tl.constexpr, PROGRAMS: tl.constexpr, PARTS: tl.constexpr, STAGES: tl.constexpr,
                       TAIL_STAGES: tl.constexpr, PTR_B: tl.constexpr):
    """Whole tiles below ``full_tiles``; each tile from there on in PARTS narrower tiles side by side (BLOCK_N /
    PARTS columns each, bn_desc and cn_desc), each over all of K: more programs busy in the last wave, and no
    partial sums to add up. Pipelines STAGES deep for whole tiles, TAIL_STAGES for narrow ones; PTR_B: b
    through pointers (see sums_of)."""
    NARROW: tl.constexpr = BLOCK_N // PARTS
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(pid, full_tiles, PROGRAMS, flatten=True):
        tile_m, tile_n = tile_at(tile, tiles_m, tiles_n, GROUP_M)
        off_m, off_n = tile_m * BLOCK_M, tile_n * BLOCK_N
        acc = sums_of(a_desc, b_desc, b_ptr, stride_bk, off_m, off_n, K, N, k_steps, BLOCK_M, BLOCK_N, BLOCK_K,
                      STAGES, PTR_B)
        c_desc.store([off_m, off_n], tl.maximum(acc, 0.0).to(c_desc.dtype))
    for unit in range(pid, (tiles_m * tiles_n - full_tiles) * PARTS, PROGRAMS):
        tile_m, tile_n = tile_at(full_tiles + unit // PARTS, tiles_m, tiles_n, GROUP_M)
        off_m, off_n = tile_m * BLOCK_M, tile_n * BLOCK_N + (unit % PARTS) * NARROW
        if off_n < N:
            acc = sums_of(a_desc, bn_desc, b_ptr, stride_bk, off_m, off_n, K, N, k_steps, BLOCK_M, NARROW, BLOCK_K,
                          TAIL_STAGES, PTR_B)
            cn_desc.store([off_m, off_n], tl.maximum(acc, 0.0).to(cn_desc.dtype))


@triton.jit(do_not_specialize=["M", "N", "K", "full_tiles", "split"])
def last_piece_adds_kernel(a_desc, b_desc, c_desc, c_ptr, partial_ptr, count_ptr, M, N, K, full_tiles, split,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                           GROUP_M: tl.constexpr, B_T: tl.constexpr, PROGRAMS: tl.constexpr, SUB_N: tl.constexpr):
    """The notebook's kernel as it was until 2026-11-28 (without EXTRA_N and HALVES, c contiguous): the last
    wave cut along K, each piece written and counted with an atomic add; the program that counts a tile's last
    piece reads every piece back (from L2: .cg), adds them up, applies ReLU, stores the tile and sets the count
    back to 0 for the next call."""
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    full_waves(a_desc, b_desc, c_desc, pid, full_tiles, tiles_m, tiles_n, k_steps, BLOCK_M, BLOCK_N, BLOCK_K,
               GROUP_M, B_T, PROGRAMS)
    tile_elems: tl.constexpr = BLOCK_M * BLOCK_N
    rows = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N
    for unit in range(pid, (tiles_m * tiles_n - full_tiles) * split, PROGRAMS):
        t = unit // split
        piece = unit % split
        tile_m, tile_n = tile_at(full_tiles + t, tiles_m, tiles_n, GROUP_M)
        off_m, off_n = tile_m * BLOCK_M, tile_n * BLOCK_N
        acc, acc2 = tile_sums(a_desc, b_desc, b_desc, off_m, off_n, piece * k_steps // split,
                              (piece + 1) * k_steps // split, BLOCK_M, BLOCK_N, 0, BLOCK_K, B_T)
        tl.store(partial_ptr + unit * tile_elems + rows + tl.arange(0, BLOCK_N)[None, :], acc)
        tl.debug_barrier()   # every thread's part of the piece is written before the count goes up
        if tl.atomic_add(count_ptr + t, 1, sem="acq_rel", scope="gpu") == split - 1:
            row_offs = tl.multiple_of((off_m + tl.arange(0, BLOCK_M)) * N, 8)
            row_ok = tl.arange(0, BLOCK_M) < M - off_m
            for j in tl.static_range(BLOCK_N // SUB_N):
                total = tl.zeros((BLOCK_M, SUB_N), dtype=tl.float32)
                for q in range(split):
                    total += tl.load(partial_ptr + (t * split + q) * tile_elems + rows + j * SUB_N
                                     + tl.arange(0, SUB_N)[None, :], cache_modifier=".cg")
                col0 = off_n + j * SUB_N
                tl.store(c_ptr + row_offs[:, None] + col0 + tl.arange(0, SUB_N)[None, :],
                         tl.maximum(total, 0.0).to(c_ptr.dtype.element_ty),
                         mask=row_ok[:, None] & (tl.arange(0, SUB_N)[None, :] < tl.multiple_of(N - col0, 8)))
            tl.atomic_xchg(count_ptr + t, 0)


def tile_name() -> str:
    return NS["HOPPER_CHOICE"]["a size not a multiple of 16"][0]


def plan(a, b, full_only: bool = False, add_pieces: bool = True):
    """fn(a, b, bw) running the notebook's kernels alone on bw (b on 128-byte rows) as the launcher plans them
    (``fn.split``: the pieces of each tile of the last wave, 1 when it is not cut); ``full_only``: the full
    waves alone; not ``add_pieces``: the product kernel alone, its pieces never added up."""
    grid, meta, state = NS["tma_plan"](a, b, NS["choose_tile"](a, b, [tile_name()]))
    state = dict(state, realign_b=False)   # bw is on 128-byte rows already
    M, N = a.shape[0], b.shape[1]
    if full_only:
        meta = dict(meta, SPLIT_TAIL=False)
        grid = (min(meta["PROGRAMS"], state["full_tiles"]),)

    def run(a, b, bw):
        c = torch.empty((M, N), device=a.device, dtype=a.dtype)
        if add_pieces:
            return NS["tma_launch"](a, bw, c, grid, meta, state)
        NS["matmul_relu_tma_kernel"][grid](*NS["tma_args"](a, bw, c, meta, state), **meta)
        return c
    run.split = state["split"] if meta["SPLIT_TAIL"] else 1
    return run


def descriptors(a, bw, c, bm: int, bn: int, bk: int):
    """Descriptors of a (bm x bk blocks), of row-major bw (bk x bn) and of c (bm x bn)."""
    TensorDescriptor = NS["TensorDescriptor"]
    (M, K), N = a.shape, bw.shape[1]
    return (TensorDescriptor(a, [M, K], [a.stride(0), 1], [bm, bk]),
            TensorDescriptor(bw, [K, N], [bw.stride(0), 1], [bk, bn]),
            TensorDescriptor(c, [M, N], [N, 1], [bm, bn]))


def probe_launch(a, b, kind: str, parts: int = 1, split: int = 1, tail_stages: int | None = None,
                 ptr_b: bool = False, aligned_b: bool = True):
    """fn(a, b, bw) with one of this probe's kernels: ``narrow`` (the last wave's tiles in ``parts`` narrower
    tiles) or ``last piece`` (cut in ``split`` pieces along K, added up by the program that finishes a tile's
    last piece)."""
    grid, meta, state = NS["tma_plan"](a, b, NS["choose_tile"](a, b, [tile_name()]), split_tail=False)
    (M, K), N = a.shape, b.shape[1]
    bm, bn, bk, programs = meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"], meta["PROGRAMS"]
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    full = tiles - tiles % programs
    stages = meta.get("num_stages", 2)
    common = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=meta["GROUP_M"], B_T=False, PROGRAMS=programs,
                  num_warps=meta.get("num_warps", 4), num_stages=stages)
    units = (tiles - full) * (parts if kind == "narrow" else split)
    grid = (min(programs, max(full, units)),)
    partial = torch.empty(max(1, units * bm * bn), device=a.device, dtype=torch.float32)
    count = torch.zeros(max(1, tiles - full), device=a.device, dtype=torch.int32)

    def run(a, b, bw):
        c = torch.empty((M, N), device=a.device, dtype=a.dtype)
        bw = bw if aligned_b else b
        a_desc, b_desc, c_desc = descriptors(a, bw, c, bm, bn, bk)
        if kind == "narrow":
            _, bn_desc, cn_desc = descriptors(a, bw, c, bm, bn // parts, bk)
            narrow_tail_kernel[grid](a_desc, b_desc, bn_desc, c_desc, cn_desc, bw, bw.stride(0), M, N, K, full,
                                     PARTS=parts, STAGES=stages, TAIL_STAGES=tail_stages or stages, PTR_B=ptr_b,
                                     **common)
        else:
            last_piece_adds_kernel[grid](a_desc, b_desc, c_desc, c, partial, count, M, N, K, full, split,
                                         SUB_N=min(64, bn), **common)
        return c
    return run


#: CUtensorMapL2promotion: how much the L2 fetches around each request of the copy engine. Triton's host descriptors
#: always ask for 128 bytes (triton/backends/nvidia/driver.c); ``with_promotion`` re-encodes them for this probe.
PROMOTIONS = {"none": 0, "64B": 1, "128B": 2, "256B": 3}
_PROMOTION = ["128B"]
_TENSORMAP_OFFSET = []


def promoted_fill(original):
    """Triton's fill_tma_descriptor, followed by a re-encoding of the same tensor map (cuTensorMapEncodeTiled,
    through ctypes, with the arguments driver.c derives) with the L2 promotion in ``_PROMOTION[0]``."""
    import ctypes
    libcuda = ctypes.CDLL("libcuda.so.1")
    encode = libcuda.cuTensorMapEncodeTiled
    u32, u64 = ctypes.c_uint32, ctypes.c_uint64

    def encoded(addr, swizzle, elem_size, elem_type, block, shape, strides, padding, promotion):
        rank = len(shape)
        buf = (ctypes.c_uint8 * 128)()
        dims = (u64 * rank)(*reversed([int(v) for v in shape]))
        byte_strides = (u64 * max(1, rank - 1))(*reversed([elem_size * int(v) for v in strides[:-1]]))
        box = (u32 * rank)(*reversed([int(v) for v in block]))
        ones = (u32 * rank)(*([1] * rank))
        res = encode(buf, elem_type, rank, ctypes.c_void_p(addr), dims, byte_strides, box, ones, 0, swizzle,
                     promotion, 1 if padding == 1 else 0)
        assert res == 0, f"cuTensorMapEncodeTiled: {res}"
        return bytes(buf)

    def fill(addr, swizzle, elem_size, elem_type, block, shape, strides, padding):
        obj = original(addr, swizzle, elem_size, elem_type, block, shape, strides, padding)
        if _PROMOTION[0] == "128B":
            return obj
        if not _TENSORMAP_OFFSET:   # where the 128-byte map sits in Triton's object: found by its content
            mine = encoded(addr, swizzle, elem_size, elem_type, block, shape, strides, padding, 2)
            raw = ctypes.string_at(id(obj), 512)
            assert raw.count(mine) == 1, "Triton's tensor map not found"
            _TENSORMAP_OFFSET.append(raw.index(mine))
        ours = encoded(addr, swizzle, elem_size, elem_type, block, shape, strides, padding,
                       PROMOTIONS[_PROMOTION[0]])
        ctypes.memmove(id(obj) + _TENSORMAP_OFFSET[0], ours, 128)
        return obj
    return fill


def with_promotion(fn, promotion: str):
    """fn, with every host descriptor it launches encoded with this L2 promotion."""
    def run(*args):
        _PROMOTION[0] = promotion
        try:
            return fn(*args)
        finally:
            _PROMOTION[0] = "128B"
    return run


def variants(a, b) -> dict:
    fns = {"torch": lambda a, b, bw: torch.relu(a @ b),
           "reference": lambda a, b, bw: NS["matmul_relu"](a, b),
           "copy of b": lambda a, b, bw: NS["realigned"](b)}
    fns["full waves only"] = plan(a, b, full_only=True)
    planned = plan(a, b)
    fns[f"split {planned.split} (the plan)"] = planned
    fns[f"split {planned.split}, not reduced"] = plan(a, b, add_pieces=False)
    fns[f"split {planned.split}, added by the last piece"] = probe_launch(a, b, "last piece", split=planned.split)
    parts = 4 if GPU else 2   # the interpreter's 32-column tiles: 16 columns at least
    for tail_stages in (3, 6) if GPU else (2,):
        fns[f"narrow x{parts}, tail {tail_stages} stages"] = probe_launch(a, b, "narrow", parts=parts,
                                                                         tail_stages=tail_stages)
    fns[f"b by pointers, unaligned b, narrow x{parts}"] = probe_launch(a, b, "narrow", parts=parts, ptr_b=True,
                                                                       aligned_b=False)
    fns[f"b by pointers, unaligned b, narrow x{parts}, tail 6 stages"] = probe_launch(
        a, b, "narrow", parts=parts, ptr_b=True, aligned_b=False, tail_stages=6 if GPU else 2)
    fns[f"b by pointers, 128-byte rows, narrow x{parts}"] = probe_launch(a, b, "narrow", parts=parts, ptr_b=True)
    if GPU:
        utils = triton.runtime.driver.active.utils
        if not getattr(utils.fill_tma_descriptor, "promoted", False):
            utils.fill_tma_descriptor = promoted_fill(utils.fill_tma_descriptor)
            utils.fill_tma_descriptor.promoted = True
        unaligned = probe_launch(a, b, "narrow", parts=parts, aligned_b=False)
        fns[f"unaligned b, narrow x{parts}"] = unaligned
        for promotion in ("none", "256B"):
            fns[f"unaligned b, narrow x{parts}, L2 promotion {promotion}"] = with_promotion(unaligned, promotion)
        fns[f"narrow x{parts}, L2 promotion 256B"] = with_promotion(fns[f"narrow x{parts}, tail 3 stages"], "256B")
    return fns


def make(m: int, n: int, k: int, dtype=torch.float16):
    a = torch.randn(m, k, device=DEVICE, dtype=dtype)
    b = torch.randn(k, n, device=DEVICE, dtype=dtype)
    return a, b, NS["realigned"](b)


def check(fns: dict, a, b, bw) -> dict:
    want = torch.relu(a.double() @ b.double())
    atol, rtol = tolerance(a.dtype)
    verdict = {}
    for name, fn in fns.items():
        if name in ("full waves only", "copy of b") or "not reduced" in name:
            continue
        for _ in range(2):   # twice: the buffers the last wave zeroes must be zero again
            got = fn(a, b, bw).double()
        err = float((got - want).abs().max())
        ok = bool(((got - want).abs() <= atol + rtol * want.abs()).all())
        verdict[name] = {"max_abs_error": round(err, 4), "correct": bool(ok)}
    return verdict


TITLE = "07_matmul_relu: where 3000^3 spends its time"


def summary(rows: dict) -> dict:
    """The findings, computed from the timed rows (microseconds per call): the reference's parts, the cheapest
    last wave, what misaligned rows of b cost, and the bound that these put on the reference's share of torch."""
    us = {name: row["us"] for name, row in rows.items()}
    planned = next(name for name in us if name.endswith("(the plan)"))
    not_reduced = next(name for name in us if name.endswith("not reduced"))
    last_piece = next((name for name in us if name.endswith("added by the last piece")), None)
    narrow = next(name for name in us if name.startswith("narrow x") and name.endswith("tail 3 stages"))
    parts = narrow.split(",")[0]
    cheapest_last_wave = us[not_reduced] - us["full waves only"]
    bound_us = us["full waves only"] + cheapest_last_wave + us["copy of b"]
    lines = [
        f"torch relu(a @ b) {us['torch']} us; the reference as launched {us['reference']} us "
        f"({rows['reference']['ratio_to_torch']} of torch's speed)",
        f"the reference's parts: the copy of b {us['copy of b']} us; the kernels alone ({planned}: the product, "
        f"then add_pieces_kernel) {us[planned]} us, of which the two full waves {us['full waves only']} us and the "
        f"last wave {round(us[planned] - us['full waves only'], 2)} us ({round(us[planned] - us[not_reduced], 2)} "
        f"us of it adding the pieces up)",
        *([f"the pieces added up instead by the program that counts a tile's last one (the design before): kernel "
           f"alone {us[last_piece]} us, {round(us[last_piece] - us[not_reduced], 2)} us of it adding them up"]
          if last_piece else []),
        f"the last wave cut into narrower tiles over all of K ({narrow}): kernel alone {us[narrow]} us",
        f"misaligned rows of b, kernel alone ({parts}): descriptors {us[f'unaligned b, {parts}']} us against "
        f"{us[narrow]} on 128-byte rows; L2 promotion none {us[f'unaligned b, {parts}, L2 promotion none']}, 256B "
        f"{us[f'unaligned b, {parts}, L2 promotion 256B']} (Triton's: 128B); b through pointers "
        f"{us[f'b by pointers, unaligned b, {parts}']} against {us[f'b by pointers, 128-byte rows, {parts}']}",
        f"bound of this design: full waves + the cheapest last wave measured (pieces not added up) + the copy = "
        f"{round(bound_us, 2)} us, {round(us['torch'] / bound_us, 3)} of torch's speed at best",
    ]
    return {"lines": lines, "bound_us": round(bound_us, 2), "bound_ratio_to_torch": round(us["torch"] / bound_us, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--summarize", type=Path, help="recompute the summary of a recorded file from its rows")
    args = parser.parse_args()
    if args.summarize:
        record = json.loads(args.summarize.read_text())
        found = summary(record["rows"])
        record.update(chapter=TITLE, summary=found["lines"], bound_us=found["bound_us"],
                      bound_ratio_to_torch=found["bound_ratio_to_torch"])
        args.summarize.write_text(json.dumps(record, indent=1) + "\n")
        print("\n".join(found["lines"]))
        return 0
    shape = (3000, 3000, 3000) if GPU and not args.dry_run else (72, 40, 136)
    a, b, bw = make(*shape)
    fns = variants(a, b)
    checks = check(fns, a, b, bw)
    for name, v in checks.items():
        print(f"{name:<28} {'correct' if v['correct'] else 'WRONG'} (max error {v['max_abs_error']})")
    if not GPU or args.dry_run:
        return 0 if all(v["correct"] for v in checks.values()) else 1
    from triton_course.bench import steady_rounds
    times = steady_rounds(fns, lambda: make(*shape))
    flops = matmul_flops(*shape)
    rows = {name: {"us": round(statistics.median(t) * 1e3, 2), "tflops": round(tflops(flops, statistics.median(t)), 1)}
            for name, t in times.items()}
    torch_tf = rows["torch"]["tflops"]
    for name, row in rows.items():
        row["ratio_to_torch"] = round(row["tflops"] / torch_tf, 3)
        print(f"{name:<28} {row['us']:>8.2f} us  {row['tflops']:>7.1f} TFLOP/s  {row['ratio_to_torch']:.3f} of torch")
    found = summary(rows)
    print("\n".join(found["lines"]))
    record = {**provenance(TITLE, "python lab/sweeps/matmul_tail.py"),
              "method": "triton_course.bench.steady_rounds: medians of 7 interleaved rounds, fresh inputs",
              "shape": list(shape), "dtype": "float16", "tile": tile_name(), "summary": found["lines"],
              "bound_us": found["bound_us"], "bound_ratio_to_torch": found["bound_ratio_to_torch"], "checks": checks,
              "rows": rows}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
