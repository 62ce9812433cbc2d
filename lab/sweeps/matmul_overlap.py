"""Chapter 07's 3000^3: can the copy of b onto 128-byte rows hide behind the last wave's pieces?

    python lab/sweeps/matmul_overlap.py [--out solutions/07_matmul_relu/records/07_matmul_relu_overlap.json]
        (on a GPU: about a minute on an H200; prints the checks, the times and the summary)
    python lab/sweeps/matmul_overlap.py --dry-run
        (anywhere, TRITON_INTERPRET=1 without a GPU: the variants that run there at a small size, against
        float64; records nothing)

The notebook's launcher at 3000^3 (solutions/07_matmul_relu/records/07_matmul_relu_tail.json) first copies b onto 128-byte rows (12 us;
rows 6000 bytes apart cost the product about 22 us through the copy engine), then runs 288 tiles of 128 x 256: two
full waves of 132 programs, then 24 tiles cut into pieces along K, added up by a second kernel. The copy is
memory-bound and the pieces compute-bound, and the pieces need not wait for the copy: they can read b as given.
This probe times, in one process on the same fresh inputs, float16 and bfloat16, b row-major and b = w.t():

* ``overlap C copiers``: one launch; programs 0 ... C - 1 copy a share of b each (tiles of rows x bytes) and
  count themselves done (an atomic add, release); the other programs meanwhile compute the pieces from b as
  given; then every program waits for the count (acquire, and a proxy fence, so that the copy engine sees the
  copied rows) and computes its tiles of the full waves from the copy; add_pieces_kernel adds the pieces up.
  The last program past the wait sets the count back to zero for the next call. Copiers take the lowest program
  numbers, so that they are never the ones left without an SM (the grid is one program per SM).
* ``copy in the pieces' loop``: every program computes its piece while copying its share of b, one chunk of
  CR rows x 1024 bytes per step of K (loaded a step before it is stored), the rest after the loop; then every
  program counts itself done and waits for all, adds up a share of the pieces, and computes its full-wave tiles:
  one launch. ``two launches``: the same without the wait, the launch boundary in its place.
* ``pieces beside copy_rows on a second stream``: the pieces alone (no copy), and the notebook's copy kernel on
  a second stream, launched after them; then the full waves.
* ``timing only``: the parts of the last two (the launch with the copy in the loop, the same without the copy,
  the full waves with the adding, the copy alone).

Under the interpreter programs run one after another, so a program that waits for a later one never returns:
there the probe runs one copier, and the copy-in-the-loop kernel as two launches.
"""

from __future__ import annotations

import argparse
import os
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
from triton_course.matmul import matmul_flops, tolerance  # noqa: E402
from records import provenance, timed_rows, write_with_summary  # noqa: E402

OUT = ROOT / "solutions" / "07_matmul_relu" / "records" / "07_matmul_relu_overlap.json"
GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
DEVICE = "cuda" if GPU else "cpu"
from triton_course.matmul_fast import fast_namespace  # noqa: E402 -- the fast path's names
NS = fast_namespace(load_namespace(solution_notebook("07_matmul_relu")))
tile_at = NS["tile_at"]
tile_sums = NS["tile_sums"]


@triton.jit
def proxy_fence(x, FENCE: tl.constexpr):
    """fence.proxy.async.global: this thread's ordinary loads and stores of global memory, and the copy
    engine's (TMA), see one another in order. Not under the interpreter (FENCE False), which has no copy engine."""
    if FENCE:
        tl.inline_asm_elementwise("fence.proxy.async.global; mov.b32 $0, $1;", "=r,r", [x], dtype=tl.int32,
                                  is_pure=False, pack=1)


@triton.jit
def copy_chunk(src_ptr, dst_ptr, j, r0, r1, C, stride_src, stride_dst, x, STORE: tl.constexpr, CR: tl.constexpr,
               CW: tl.constexpr, ALIGN: tl.constexpr):
    """Chunk j of rows r0 ... r1 - 1 (CR rows x CW columns, row blocks outer): STORE False loads it and returns
    it (masked: nothing past the share, nothing if j is past the last chunk); STORE True stores x there."""
    C = C // ALIGN * ALIGN
    stride_src = stride_src // ALIGN * ALIGN
    stride_dst = stride_dst // ALIGN * ALIGN
    per_row_block = tl.cdiv(C, CW)
    r = (r0 + (j // per_row_block) * CR + tl.arange(0, CR)).to(tl.int64)[:, None]
    c = (j % per_row_block) * CW + tl.arange(0, CW)[None, :]
    ok = (r < r1) & (c < C)
    if STORE:
        tl.store(dst_ptr + r * stride_dst + c, x, mask=ok)
        return x
    else:
        return tl.load(src_ptr + r * stride_src + c, mask=ok)


@triton.jit
def copy_share(src_ptr, dst_ptr, R, C, stride_src, stride_dst, first, step, BLOCK_R: tl.constexpr,
               BLOCK_C: tl.constexpr, ALIGN: tl.constexpr):
    """dst[r, c] = src[r, c] for tiles first, first + step, ... of BLOCK_R x BLOCK_C over all of src's rows (the
    notebook's copy_rows_kernel, in a loop): copy_chunk's chunks of rows 0 ... R - 1."""
    for t in range(first, tl.cdiv(R, BLOCK_R) * tl.cdiv(C // ALIGN * ALIGN, BLOCK_C), step):
        x = copy_chunk(src_ptr, dst_ptr, t, 0, R, C, stride_src, stride_dst, 0, False, BLOCK_R, BLOCK_C, ALIGN)
        copy_chunk(src_ptr, dst_ptr, t, 0, R, C, stride_src, stride_dst, x, True, BLOCK_R, BLOCK_C, ALIGN)


@triton.jit
def count_done(count_ptr, pid, FENCE: tl.constexpr):
    """This program's stores are done (every thread's, then a proxy fence): one more in the count (release)."""
    proxy_fence(pid, FENCE)
    tl.debug_barrier()
    tl.atomic_add(count_ptr, 1, sem="release", scope="gpu")


@triton.jit
def wait_for_count(count_ptr, target, pid, PROGRAMS: tl.constexpr, FENCE: tl.constexpr):
    """Wait until the count reaches ``target`` (acquire; a proxy fence, so that the copy engine sees what the
    counted programs stored); the last of the PROGRAMS programs past the wait sets the count (and the tally of
    programs past it, count_ptr + 1) back to zero for the next call."""
    while tl.atomic_add(count_ptr, 0, sem="acquire", scope="gpu") < target:
        pass
    proxy_fence(pid, FENCE)
    if tl.atomic_add(count_ptr + 1, 1, sem="acq_rel", scope="gpu") == PROGRAMS - 1:
        tl.atomic_xchg(count_ptr, 0)
        tl.atomic_xchg(count_ptr + 1, 0)


@triton.jit
def full_wave_tiles(a_desc, b_desc, c_desc, pid, full_tiles, tiles_m, tiles_n, k_steps, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, B_T: tl.constexpr,
                    PROGRAMS: tl.constexpr, HALVES: tl.constexpr):
    """Tiles pid, pid + PROGRAMS, ... below full_tiles over all of K, from b_desc (the notebook's loop over whole
    tiles, without EXTRA_N): ReLU, one conversion, the tile stored whole or (HALVES) in two halves."""
    for tile in tl.range(pid, full_tiles, PROGRAMS, flatten=True):
        tile_m, tile_n = tile_at(tile, tiles_m, tiles_n, GROUP_M)
        off_m, off_n = tile_m * BLOCK_M, tile_n * BLOCK_N
        acc, acc2 = tile_sums(a_desc, b_desc, b_desc, off_m, off_n, 0, k_steps, BLOCK_M, BLOCK_N, 0, BLOCK_K, B_T)
        out = tl.maximum(acc, 0.0).to(c_desc.dtype)
        if HALVES:
            left, right = out.reshape(BLOCK_M, 2, BLOCK_N // 2).permute(0, 2, 1).split()
            c_desc.store([off_m, off_n], left)
            c_desc.store([off_m, off_n + BLOCK_N // 2], right)
        else:
            c_desc.store([off_m, off_n], out)


@triton.jit(do_not_specialize=["M", "N", "K", "full_tiles", "split", "R", "C", "stride_src", "stride_dst"])
def copy_beside_tail_kernel(a_desc, b_desc, bs_desc, c_desc, partial_ptr, src_ptr, dst_ptr, R, C, stride_src,
                            stride_dst, count_ptr, M, N, K, full_tiles, split, BLOCK_M: tl.constexpr,
                            BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, B_T: tl.constexpr,
                            PROGRAMS: tl.constexpr, COPIERS: tl.constexpr, COPY_R: tl.constexpr,
                            COPY_C: tl.constexpr, ALIGN: tl.constexpr, FENCE: tl.constexpr, HALVES: tl.constexpr):
    """relu(A @ B) with b's copy onto 128-byte rows inside: b_desc describes the copy (dst), bs_desc b as given
    (src). Programs below COPIERS copy; the others compute the pieces of the tiles from ``full_tiles`` on (cut
    in ``split`` along K) from bs_desc; then all wait for the copy and compute the full waves from b_desc."""
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    if pid < COPIERS:
        copy_share(src_ptr, dst_ptr, R, C, stride_src, stride_dst, pid, COPIERS, COPY_R, COPY_C, ALIGN)
        count_done(count_ptr, pid, FENCE)
    else:
        tile_elems: tl.constexpr = BLOCK_M * BLOCK_N
        rows = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N
        for unit in range(pid - COPIERS, (tiles_m * tiles_n - full_tiles) * split, PROGRAMS - COPIERS):
            piece = unit % split
            tile_m, tile_n = tile_at(full_tiles + unit // split, tiles_m, tiles_n, GROUP_M)
            acc, acc2 = tile_sums(a_desc, bs_desc, bs_desc, tile_m * BLOCK_M, tile_n * BLOCK_N,
                                  piece * k_steps // split, (piece + 1) * k_steps // split, BLOCK_M, BLOCK_N,
                                  0, BLOCK_K, B_T)
            tl.store(partial_ptr + unit * tile_elems + rows + tl.arange(0, BLOCK_N)[None, :], acc)
    wait_for_count(count_ptr, COPIERS, pid, PROGRAMS, FENCE)
    full_wave_tiles(a_desc, b_desc, c_desc, pid, full_tiles, tiles_m, tiles_n, k_steps, BLOCK_M, BLOCK_N, BLOCK_K,
                    GROUP_M, B_T, PROGRAMS, HALVES)


@triton.jit
def add_share(partial_ptr, c_ptr, M, N, stride_cm, full_tiles, first, step, tail, SPLIT: tl.constexpr,
              BLOCK_M: tl.constexpr, TILE_N: tl.constexpr, GROUP_M: tl.constexpr, ROWS: tl.constexpr,
              SUB_N: tl.constexpr):
    """relu(the sum of the pieces) for row blocks first, first + step, ... of the tail's tiles (ROWS rows each:
    the notebook's add_pieces_kernel, one row block per loop turn)."""
    tile_elems: tl.constexpr = BLOCK_M * TILE_N
    blocks: tl.constexpr = BLOCK_M // ROWS
    for u in range(first, tail * blocks, step):
        t = u // blocks
        tile_m, tile_n = tile_at(full_tiles + t, tl.cdiv(M, BLOCK_M), tl.cdiv(N, TILE_N), GROUP_M)
        r = (u % blocks) * ROWS + tl.arange(0, ROWS)
        rows = r[:, None] * TILE_N
        row_offs = tl.multiple_of((tile_m * BLOCK_M + r).to(tl.int64) * stride_cm, 8)
        row_ok = r < M - tile_m * BLOCK_M
        for j in tl.static_range(TILE_N // SUB_N):
            total = tl.zeros((ROWS, SUB_N), dtype=tl.float32)
            for q in tl.static_range(SPLIT):
                total += tl.load(partial_ptr + (t * SPLIT + q) * tile_elems + rows + j * SUB_N
                                 + tl.arange(0, SUB_N)[None, :])
            col0 = tile_n * TILE_N + j * SUB_N
            cols_left = tl.multiple_of(stride_cm - col0, 8)
            tl.store(c_ptr + row_offs[:, None] + col0 + tl.arange(0, SUB_N)[None, :],
                     tl.maximum(total, 0.0).to(c_ptr.dtype.element_ty),
                     mask=row_ok[:, None] & (tl.arange(0, SUB_N)[None, :] < cols_left))


@triton.jit(do_not_specialize=["M", "N", "K", "full_tiles", "R", "C", "stride_src", "stride_dst", "stride_cm"])
def overlap_kernel(a_desc, b_desc, bs_desc, c_desc, c_ptr, stride_cm, partial_ptr, src_ptr, dst_ptr, R, C,
                   stride_src, stride_dst, count_ptr, M, N, K, full_tiles, SPLIT: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, B_T: tl.constexpr,
                   PROGRAMS: tl.constexpr, PHASE: tl.constexpr, CR: tl.constexpr, CW: tl.constexpr,
                   ALIGN: tl.constexpr, FENCE: tl.constexpr, HALVES: tl.constexpr, ROWS: tl.constexpr,
                   SUB_N: tl.constexpr):
    """relu(A @ B) in one launch (PHASE 0) or two (1, then 2). Phase 1: program p computes piece p of the
    tail's tiles (from ``full_tiles`` on, ``split`` pieces along K each) from b as given (bs_desc), and, CR > 0,
    copies a share of b onto 128-byte rows (src -> dst, rows p * R // PROGRAMS on), one CR x CW chunk per step
    of its K loop, loaded a step before it is stored, the rest after the loop. Then (PHASE 0) it counts itself
    done and waits for every program's count. Phase 2: each program adds up a share of the pieces into c, then
    computes its tiles of the full waves from the copy (b_desc)."""
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    tail = tiles_m * tiles_n - full_tiles
    if PHASE != 2:
        r0 = pid * R // PROGRAMS
        r1 = (pid + 1) * R // PROGRAMS
        chunks = tl.cdiv(r1 - r0, CR if CR > 0 else 1) * tl.cdiv(C, CW)
        j = 0
        if pid < tail * SPLIT:
            piece = pid % SPLIT
            tile_m, tile_n = tile_at(full_tiles + pid // SPLIT, tiles_m, tiles_n, GROUP_M)
            off_m, off_n = tile_m * BLOCK_M, tile_n * BLOCK_N
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            if CR > 0:
                x = copy_chunk(src_ptr, dst_ptr, 0, r0, r1, C, stride_src, stride_dst, 0, False, CR, CW, ALIGN)
            for step in range(piece * k_steps // SPLIT, (piece + 1) * k_steps // SPLIT):
                a = a_desc.load([off_m, step * BLOCK_K])
                if B_T:
                    b = bs_desc.load([off_n, step * BLOCK_K]).T
                else:
                    b = bs_desc.load([step * BLOCK_K, off_n])
                acc = tl.dot(a, b, acc)
                if CR > 0:
                    copy_chunk(src_ptr, dst_ptr, j, r0, r1, C, stride_src, stride_dst, x, True, CR, CW, ALIGN)
                    j += 1
                    x = copy_chunk(src_ptr, dst_ptr, j, r0, r1, C, stride_src, stride_dst, x, False, CR, CW, ALIGN)
            rows = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N
            tl.store(partial_ptr + pid * (BLOCK_M * BLOCK_N) + rows + tl.arange(0, BLOCK_N)[None, :], acc)
        if CR > 0:
            for jj in range(j, chunks):
                x = copy_chunk(src_ptr, dst_ptr, jj, r0, r1, C, stride_src, stride_dst, 0, False, CR, CW, ALIGN)
                copy_chunk(src_ptr, dst_ptr, jj, r0, r1, C, stride_src, stride_dst, x, True, CR, CW, ALIGN)
    if PHASE == 0:
        count_done(count_ptr, pid, FENCE)
        wait_for_count(count_ptr, PROGRAMS, pid, PROGRAMS, FENCE)
    if PHASE != 1:
        add_share(partial_ptr, c_ptr, M, N, stride_cm, full_tiles, pid, PROGRAMS, tail, SPLIT, BLOCK_M, BLOCK_N,
                  GROUP_M, ROWS, SUB_N)
        full_wave_tiles(a_desc, b_desc, c_desc, pid, full_tiles, tiles_m, tiles_n, k_steps, BLOCK_M, BLOCK_N, BLOCK_K,
                        GROUP_M, B_T, PROGRAMS, HALVES)


def tile_name() -> str:
    return NS["HOPPER_CHOICE"]["a size not a multiple of 16"][0]


def tail_plan(a, b) -> dict:
    """What both launchers need: the notebook's tile and plan without its own cut (tma_plan's meta-parameters),
    the sizes, the tiles of the full waves and of the last wave, and an int32 count (two words) at zero."""
    tile = NS["choose_tile"](a, b, [tile_name()])
    _, meta, _ = NS["tma_plan"](a, b, tile, split_tail=False)
    (M, K), N = a.shape, b.shape[1]
    tiles = triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])
    tail = tiles % meta["PROGRAMS"]
    return dict(meta=meta, M=M, N=N, K=K, tail=tail, full=tiles - tail, k_steps=triton.cdiv(K, meta["BLOCK_K"]),
                count=torch.zeros(2, device=a.device, dtype=torch.int32))


def operands(a, b, plan: dict):
    """(src, dst, align, c, descriptors of a, of the copy dst, of b as given, of c) for one call: src is b's rows
    as stored, dst a new matrix of the same rows starting on 128-byte boundaries, align the elements every row
    start and width are a multiple of (at most 16 bytes)."""
    TensorDescriptor = NS["TensorDescriptor"]
    meta, M, N, K = plan["meta"], plan["M"], plan["N"], plan["K"]
    bm, bn, bk = meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"]
    src = b.t() if meta["B_T"] else b
    dst = NS["padded_rows"](*src.shape, like=src)
    align = 16 // a.element_size()
    while align > 1 and not (src.shape[1] % align == 0 and src.stride(0) % align == 0):
        align //= 2
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    box_b = [bn, bk] if meta["B_T"] else [bk, bn]
    return (src, dst, align, c, TensorDescriptor(a, [M, K], [a.stride(0), 1], [bm, bk]),
            TensorDescriptor(dst, list(dst.shape), [dst.stride(0), 1], box_b),
            TensorDescriptor(src, list(src.shape), [src.stride(0), 1], box_b),
            TensorDescriptor(c, [M, N], [c.stride(0), 1], [bm, bn // 2 if meta["HALVES"] else bn]))


def overlap_launch(a, b, copiers: int, copy_tile: tuple[int, int], split: int | None = None):
    """fn(a, b) by copy_beside_tail_kernel then add_pieces_kernel: ``copiers`` programs copy (tiles of
    copy_tile = (rows, bytes per row)), the rest cut the leftover tiles into ``split`` pieces (by default as many
    as they have programs per tile, at most the notebook's MAX_SPLIT)."""
    plan = tail_plan(a, b)
    meta, M, N, K, tail, full, count = (plan[k] for k in ("meta", "M", "N", "K", "tail", "full", "count"))
    bm, bn, bk, programs = meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"], meta["PROGRAMS"]
    if split is None:
        split = max(1, min((programs - copiers) // max(tail, 1), plan["k_steps"] // 2, NS["MAX_SPLIT"]))
    partial = torch.empty(max(1, tail * split * bm * bn), device=a.device, dtype=torch.float32)
    size = a.element_size()
    common = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=meta["GROUP_M"], B_T=meta["B_T"], PROGRAMS=programs,
                  COPIERS=copiers, COPY_R=copy_tile[0], COPY_C=copy_tile[1] // size, FENCE=GPU,
                  HALVES=meta["HALVES"], num_warps=meta.get("num_warps", 4), num_stages=meta.get("num_stages", 3))

    def run(a, b):
        src, dst, align, c, a_desc, b_desc, bs_desc, c_desc = operands(a, b, plan)
        copy_beside_tail_kernel[(programs,)](a_desc, b_desc, bs_desc, c_desc, partial, src, dst, src.shape[0],
                                             src.shape[1], src.stride(0), dst.stride(0), count, M, N, K, full, split,
                                             ALIGN=align, **common)
        if tail:
            NS["add_pieces_kernel"][(tail, bm // NS["ADD_ROWS"])](
                partial, c, M, N, c.stride(0), full, SPLIT=split, BLOCK_M=bm, TILE_N=bn, GROUP_M=meta["GROUP_M"],
                ROWS=NS["ADD_ROWS"], SUB_N=min(64, bn))
        return c
    run.split = split
    return run


def interleaved_launch(a, b, cr: int, streams: bool = False, one_launch: bool = True, phase: int | None = None):
    """fn(a, b) by overlap_kernel. ``cr`` > 0: the copy inside the pieces' loop (CR rows x 1024 bytes a step),
    in one launch (a barrier in between) or, not ``one_launch``, in two. ``streams``: the kernel's phase 1
    without its copy, beside the notebook's copy_rows_kernel on a second stream (free to share the SMs),
    then phase 2 once both are done."""
    plan = tail_plan(a, b)
    meta, M, N, K, tail, full, count = (plan[k] for k in ("meta", "M", "N", "K", "tail", "full", "count"))
    bm, bn, bk, programs = meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"], meta["PROGRAMS"]
    split = max(1, min(programs // max(tail, 1), plan["k_steps"] // 2, NS["MAX_SPLIT"]))
    partial = torch.empty(max(1, tail * split * bm * bn), device=a.device, dtype=torch.float32)
    side = torch.cuda.Stream() if streams else None
    common = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=meta["GROUP_M"], B_T=meta["B_T"], PROGRAMS=programs,
                  CR=0 if streams else cr, CW=1024 // a.element_size() if GPU else 32, FENCE=GPU,
                  HALVES=meta["HALVES"], ROWS=NS["ADD_ROWS"], SUB_N=min(64, bn), SPLIT=split,
                  num_warps=meta.get("num_warps", 4), num_stages=meta.get("num_stages", 3))

    def run(a, b):
        src, dst, align, c, a_desc, b_desc, bs_desc, c_desc = operands(a, b, plan)
        args = (a_desc, b_desc, bs_desc, c_desc, c, c.stride(0), partial, src, dst, src.shape[0], src.shape[1],
                src.stride(0), dst.stride(0), count, M, N, K, full)
        if phase is not None:   # timing one phase alone
            overlap_kernel[(programs,)](*args, PHASE=phase, ALIGN=align, **common)
        elif streams:
            here = torch.cuda.current_stream()
            overlap_kernel[(programs,)](*args, PHASE=1, ALIGN=align, **common)
            side.wait_stream(here)
            with torch.cuda.stream(side):
                NS["copy_rows"](src, dst)
            here.wait_stream(side)
            overlap_kernel[(programs,)](*args, PHASE=2, ALIGN=align, **common)
        elif one_launch:
            overlap_kernel[(programs,)](*args, PHASE=0, ALIGN=align, **common)
        else:
            overlap_kernel[(programs,)](*args, PHASE=1, ALIGN=align, **common)
            overlap_kernel[(programs,)](*args, PHASE=2, ALIGN=align, **common)
        return c
    run.split = split
    return run


COPY_TILES = [(32, 512)] if GPU else [(4, 64)]
INTERLEAVED_ROWS = [8, 16] if GPU else [2]
COPIERS = [66] if GPU else [1]   # the interpreter runs programs one after another: one copier


def variants(a, b) -> dict:
    fns = {"torch": lambda a, b: torch.relu(a @ b), "reference": lambda a, b: NS["matmul_relu"](a, b)}
    for copiers in COPIERS:
        for copy_tile in COPY_TILES:
            fn = overlap_launch(a, b, copiers, copy_tile)
            fns[f"overlap {copiers} copiers, {copy_tile[0]}x{copy_tile[1]}B, split {fn.split}"] = fn
    for cr in INTERLEAVED_ROWS:
        fn = interleaved_launch(a, b, cr, one_launch=GPU)
        fns[f"copy in the pieces' loop, {cr} rows a step, split {fn.split}"] = fn
    if GPU:
        fn = interleaved_launch(a, b, 0, streams=True)
        fns[f"pieces beside copy_rows on a second stream, split {fn.split}"] = fn
        fns["two launches, copy in the pieces' loop, 16 rows"] = interleaved_launch(a, b, 16, one_launch=False)
        fns["timing only: phase 1, copy in the loop, 16 rows"] = interleaved_launch(a, b, 16, phase=1)
        fns["timing only: phase 1, no copy"] = interleaved_launch(a, b, 0, phase=1)
        fns["timing only: phase 2"] = interleaved_launch(a, b, 0, phase=2)
        fns["timing only: copy_rows"] = lambda a, b: NS["realigned"](b.t() if NS["b_transposed"](b) else b)
    return fns


def make(m: int, n: int, k: int, dtype=torch.float16, b_t: bool = False):
    a = torch.randn(m, k, device=DEVICE, dtype=dtype)
    b = torch.randn(n, k, device=DEVICE, dtype=dtype).t() if b_t else torch.randn(k, n, device=DEVICE, dtype=dtype)
    return a, b


def check(fns: dict, a, b) -> dict:
    want = torch.relu(a.double() @ b.double())
    atol, rtol = tolerance(a.dtype)
    verdict = {}
    for name, fn in fns.items():
        if name.startswith("timing only"):
            continue
        for _ in range(3):   # the count must be back at zero for every next call
            torch.full((a.shape[0] * b.shape[1],), float("nan"), device=a.device, dtype=a.dtype)  # poison the
            got = fn(a, b).double()                                  # block that the output is likely to reuse
        err = float((got - want).abs().max())
        ok = bool(((got - want).abs() <= atol + rtol * want.abs()).all())
        verdict[name] = {"max_abs_error": round(err, 4), "correct": ok}
    return verdict


TITLE = "07_matmul_relu: the copy of b beside the last wave, 3000^3"


def summary(cases: list[dict]) -> list[str]:
    """Per case: torch, the reference, this probe's fastest product and its share of torch's speed; and the
    parts of the copy-in-the-loop launch: how much of the copy hid under the pieces."""
    lines = []
    for case in cases:
        us = {name: row["us"] for name, row in case["rows"].items()}
        products = {n: t for n, t in us.items() if n not in ("torch", "reference") and not n.startswith("timing only")}
        best = min(products, key=products.get)
        lines.append(f"{case['case']}: torch {us['torch']} us, reference {us['reference']} us "
                     f"({round(us['torch'] / us['reference'], 3)}); fastest here: {best} {us[best]} us "
                     f"({round(us['torch'] / us[best], 3)})")
        alone, woven = us["timing only: phase 1, no copy"], us["timing only: phase 1, copy in the loop, 16 rows"]
        copy = us["timing only: copy_rows"]
        lines.append(f"{case['case']}: the pieces alone {alone} us, with the copy woven into their loop {woven} us: "
                     f"the copy adds {round(woven - alone, 2)} us of its {copy} us alone")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    small = not GPU or args.dry_run
    cases = [("3000^3", (3000, 3000, 3000), torch.float16, False),
             ("3000^3 B^T", (3000, 3000, 3000), torch.float16, True),
             ("3000^3 bf16", (3000, 3000, 3000), torch.bfloat16, False)]
    if small:
        cases = [("small", (224, 200, 232), torch.float16, False), ("small B^T", (224, 200, 232), torch.float16, True)]
    record = {} if small else {**provenance(TITLE, "python lab/sweeps/matmul_overlap.py"),
                               "method": "triton_course.bench.steady_rounds: medians of 7 interleaved rounds, "
                                         "fresh inputs", "cases": []}
    ok = True
    for label, shape, dtype, b_t in cases:
        a, b = make(*shape, dtype=dtype, b_t=b_t)
        fns = variants(a, b)
        checks = check(fns, a, b)
        for name, v in checks.items():
            print(f"{label} {name:<44} {'correct' if v['correct'] else 'WRONG'} (max error {v['max_abs_error']})")
            ok &= v["correct"]
        if small:
            continue
        rows = timed_rows(fns, lambda: make(*shape, dtype=dtype, b_t=b_t), matmul_flops(*shape), label)
        record["cases"].append({"case": label, "shape": list(shape), "dtype": str(dtype).split(".")[-1],
                                "transpose_b": b_t, "checks": checks, "rows": rows})
    if small:
        return 0 if ok else 1
    write_with_summary(record, summary(record["cases"]), args.out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
