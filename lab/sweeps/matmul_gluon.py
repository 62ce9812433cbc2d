"""Chapter 07 at 3000^3 with tiles of 192 x 128, written in Gluon: a probe of what triton.language cannot express.

    python lab/sweeps/matmul_gluon.py [--out solutions/07_matmul_relu/records/07_matmul_relu_gluon.json]
        (on an H200, Triton 3.6 or later: checks every launch against float64, then times them beside torch)
    python lab/sweeps/matmul_gluon.py --dry-run
        (anywhere with Triton 3.6 or later: compiles every launch for sm_90, prints registers, spills and shared
        memory)

Why 192 rows: at 3000^3 the notebook's 128 x 256 tiles number 24 x 12 = 288, two full waves of 132 programs and 24
tiles left over (solutions/07_matmul_relu/records/07_matmul_relu_tail.json); 192 x 128 tiles number 16 x 24 = 384, under three waves with the
last one 91% full (cuBLAS's 192 x 192 make 256). triton.language's blocks are powers of two, and so are Gluon's
tensors and shared buffers (a [64, 192] buffer is refused), but a program can be three warpgroups of 64 rows each.

The kernel is persistent (one program per SM, tiles in the notebook's grouped order) and warp-specialised as
CUTLASS and FlashAttention-3 lay out Hopper kernels: one loader warp fills a ring of STAGES slots (A's 64-row
blocks, one per warpgroup, and b's block) by TMA; PARTS warpgroups of 64 rows (3: 192 x 128 tiles; 2 with
BLOCK_N = 256: the notebook's 128 x 256) take every slot's product with an asynchronous wgmma, hand the slot back
once the next product is issued (an 'empty' mbarrier of count PARTS), and store their rows through shared memory
by TMA while the loader already fills the ring for the next tile.

``--focus`` (3000^3 float16) adds: which operand's copy onto 128-byte rows pays (a, b, both), GROUP_M, two more
layouts of the kernel (c stored from registers, leaving room for a fifth stage; steps of 128 along K; TMA boxes
64 bytes wide, with a 64-byte swizzle, so that fewer misaligned row pieces cross a 128-byte line), the kernel
alone on operands copied beforehand and beside a copy on a second stream, and ``matmul_relu_copying_kernel``: the
copy of b inside the launch (a copier warp per program; the loader reads a slab of b from the copy once the slab
is counted complete, from b as given before), which waits for nothing.
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

GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"

from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma,  # noqa: E402
                                                               warpgroup_mma, warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonDescriptor  # noqa: E402

TMA_LOAD = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
TMA_STORE = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
CTA_BARRIER = getattr(gl, "thread_barrier", None) or gl.barrier   # Triton 3.6; renamed later
OUT = ROOT / "solutions" / "07_matmul_relu" / "records" / "07_matmul_relu_gluon.json"


@gluon.jit
def tile_of(tile, tiles_m, tiles_n, GROUP_M: gl.constexpr):
    """(tile row, tile column) of tile number ``tile`` in grouped order (the notebook's tile_at)."""
    per_group = GROUP_M * tiles_n
    first_row = (tile // per_group) * GROUP_M
    rows_here = gl.minimum(tiles_m - first_row, GROUP_M)
    within = tile % per_group
    return first_row + within % rows_here, within // rows_here


@gluon.jit
def load_tiles(a0_ring, a1_ring, a2_ring, b_ring, full, empty, a_desc, b_desc, M, N, K, first, programs,
               PARTS: gl.constexpr, GROUP_M):
    """The loader warp: for each of this program's tiles, each step of K: wait until every warpgroup handed the
    slot back (a ring's first pass waits on parity 1: free from the start), then A's PARTS blocks of 64 rows and
    b's block into it, all counted on the slot's 'full' barrier."""
    STAGES: gl.constexpr = b_ring.shape[0]
    ROWS: gl.constexpr = a0_ring.shape[1]
    BLOCK_K: gl.constexpr = a0_ring.shape[2]
    BLOCK_N: gl.constexpr = b_ring.shape[2]
    A_BOX: gl.constexpr = a_desc.block_type.shape[1]   # narrower than a block where the swizzle is narrower
    B_BOX: gl.constexpr = b_desc.block_type.shape[1]
    tiles_m = gl.cdiv(M, PARTS * ROWS)
    tiles_n = gl.cdiv(N, BLOCK_N)
    k_steps = gl.cdiv(K, BLOCK_K)
    nbytes: gl.constexpr = (PARTS * (BLOCK_K // A_BOX) * a_desc.block_type.nbytes
                            + (BLOCK_N // B_BOX) * b_desc.block_type.nbytes)
    count = 0
    for tile in range(first, tiles_m * tiles_n, programs):
        tm, tn = tile_of(tile, tiles_m, tiles_n, GROUP_M)
        for ks in range(k_steps):
            slot = count % STAGES
            mbarrier.wait(empty.index(slot), ((count // STAGES) & 1) ^ 1)
            bar = full.index(slot)
            mbarrier.expect(bar, nbytes)
            if A_BOX == BLOCK_K:
                TMA_LOAD(a_desc, [tm * PARTS * ROWS, ks * BLOCK_K], bar, a0_ring.index(slot))
                TMA_LOAD(a_desc, [tm * PARTS * ROWS + ROWS, ks * BLOCK_K], bar, a1_ring.index(slot))
                if PARTS == 3:
                    TMA_LOAD(a_desc, [tm * PARTS * ROWS + 2 * ROWS, ks * BLOCK_K], bar, a2_ring.index(slot))
            else:
                for j in gl.static_range(BLOCK_K // A_BOX):
                    col = ks * BLOCK_K + j * A_BOX
                    TMA_LOAD(a_desc, [tm * PARTS * ROWS, col], bar, a0_ring.index(slot).slice(j * A_BOX, A_BOX, 1))
                    TMA_LOAD(a_desc, [tm * PARTS * ROWS + ROWS, col], bar,
                             a1_ring.index(slot).slice(j * A_BOX, A_BOX, 1))
                    if PARTS == 3:
                        TMA_LOAD(a_desc, [tm * PARTS * ROWS + 2 * ROWS, col], bar,
                                 a2_ring.index(slot).slice(j * A_BOX, A_BOX, 1))
            if B_BOX == BLOCK_N:
                TMA_LOAD(b_desc, [ks * BLOCK_K, tn * BLOCK_N], bar, b_ring.index(slot))
            else:
                for j in gl.static_range(BLOCK_N // B_BOX):
                    TMA_LOAD(b_desc, [ks * BLOCK_K, tn * BLOCK_N + j * B_BOX], bar,
                             b_ring.index(slot).slice(j * B_BOX, B_BOX, 1))
            count += 1


@gluon.jit
def load_for_2(a0_ring, a1_ring, a2_ring, b_ring, full, empty, c0_smem, c1_smem, c2_smem, a_desc, b_desc, c_desc, c_ptr,
               stride_cm, M, N, K, first, programs, parts, GROUP_M, bs_desc, flags_ptr, x_ring, x_bars):
    load_tiles(a0_ring, a1_ring, a2_ring, b_ring, full, empty, a_desc, b_desc, M, N, K, first, programs, 2, GROUP_M)


@gluon.jit
def load_for_3(a0_ring, a1_ring, a2_ring, b_ring, full, empty, c0_smem, c1_smem, c2_smem, a_desc, b_desc, c_desc, c_ptr,
               stride_cm, M, N, K, first, programs, parts, GROUP_M, bs_desc, flags_ptr, x_ring, x_bars):
    load_tiles(a0_ring, a1_ring, a2_ring, b_ring, full, empty, a_desc, b_desc, M, N, K, first, programs, 3, GROUP_M)


@gluon.jit
def part_rows(a_ring, b_ring, full, empty, c_smem, c_desc, c_ptr, stride_cm, M, N, K, first, programs, part, PARTS,
              GROUP_M):
    """One warpgroup: rows part * 64 ... of each of this program's tiles. Each step's wgmma is asynchronous;
    once the next one is issued, the one before is waited for and its slot handed back. Then ReLU, one
    conversion, and the rows out through shared memory by TMA (waited for only when the buffer is needed again)."""
    STAGES: gl.constexpr = b_ring.shape[0]
    ROWS: gl.constexpr = a_ring.shape[1]
    BLOCK_K: gl.constexpr = a_ring.shape[2]
    BLOCK_N: gl.constexpr = b_ring.shape[2]
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                          instr_shape=[16, BLOCK_N, 16])
    tiles_m = gl.cdiv(M, PARTS * ROWS)
    tiles_n = gl.cdiv(N, BLOCK_N)
    k_steps = gl.cdiv(K, BLOCK_K)
    count = 0
    for tile in range(first, tiles_m * tiles_n, programs):
        tm, tn = tile_of(tile, tiles_m, tiles_n, GROUP_M)
        acc = gl.zeros([ROWS, BLOCK_N], gl.float32, acc_layout)
        for ks in range(k_steps):
            slot = count % STAGES
            mbarrier.wait(full.index(slot), (count // STAGES) & 1)
            acc = warpgroup_mma(a_ring.index(slot), b_ring.index(slot), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))   # the step before is done: its slot is free
            if ks > 0:
                mbarrier.arrive(empty.index((count - 1) % STAGES), count=1)
            count += 1
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(empty.index((count - 1) % STAGES), count=1)
        out = gl.maximum(acc, 0.0).to(c_smem.dtype)
        if c_smem.shape[0] == 1:   # no staging buffer: stored from registers
            r = tm * PARTS * ROWS + part * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, acc_layout))
            cc = tn * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, acc_layout))
            gl.store(c_ptr + gl.expand_dims(r, 1) * stride_cm + gl.expand_dims(cc, 0), out,
                     mask=(gl.expand_dims(r, 1) < M) & (gl.expand_dims(cc, 0) < N))
        else:
            tma.store_wait(pendings=0)   # the last tile's rows have left c_smem
            c_smem.store(out)
            fence_async_shared()
            TMA_STORE(c_desc, [tm * PARTS * ROWS + part * ROWS, tn * BLOCK_N], c_smem)
    tma.store_wait(pendings=0)


@gluon.jit
def rows_0(a0_ring, a1_ring, a2_ring, b_ring, full, empty, c0_smem, c1_smem, c2_smem, a_desc, b_desc, c_desc, c_ptr,
           stride_cm, M, N, K, first, programs, PARTS, GROUP_M, bs_desc, flags_ptr, x_ring, x_bars):
    part_rows(a0_ring, b_ring, full, empty, c0_smem, c_desc, c_ptr, stride_cm, M, N, K, first, programs, 0, PARTS,
              GROUP_M)


@gluon.jit
def rows_1(a0_ring, a1_ring, a2_ring, b_ring, full, empty, c0_smem, c1_smem, c2_smem, a_desc, b_desc, c_desc, c_ptr,
           stride_cm, M, N, K, first, programs, PARTS, GROUP_M, bs_desc, flags_ptr, x_ring, x_bars):
    part_rows(a1_ring, b_ring, full, empty, c1_smem, c_desc, c_ptr, stride_cm, M, N, K, first, programs, 1, PARTS,
              GROUP_M)


@gluon.jit
def rows_2(a0_ring, a1_ring, a2_ring, b_ring, full, empty, c0_smem, c1_smem, c2_smem, a_desc, b_desc, c_desc, c_ptr,
           stride_cm, M, N, K, first, programs, PARTS, GROUP_M, bs_desc, flags_ptr, x_ring, x_bars):
    part_rows(a2_ring, b_ring, full, empty, c2_smem, c_desc, c_ptr, stride_cm, M, N, K, first, programs, 2, PARTS,
              GROUP_M)


@gluon.jit
def matmul_relu_gluon_kernel(a_desc, b_desc, c_desc, c_ptr, stride_cm, M, N, K, PARTS: gl.constexpr,
                             STAGES: gl.constexpr, GROUP_M: gl.constexpr, REGS: gl.constexpr, STAGE_C: gl.constexpr,
                             BLOCK_K: gl.constexpr, num_warps: gl.constexpr):
    """relu(A @ B) in tiles of (PARTS * 64) x BLOCK_N, persistent, PARTS warpgroups of 64 rows and a loader warp.
    a_desc: boxes of 64 rows of a [M, K], BLOCK_K wide or narrower (a block is then several boxes side by side);
    b_desc: boxes of BLOCK_K rows of b [K, N], BLOCK_N wide or narrower; c_desc: 64 x BLOCK_N."""
    dtype: gl.constexpr = a_desc.dtype
    ROWS: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = c_desc.block_type.shape[1]
    a0_ring = gl.allocate_shared_memory(dtype, [STAGES, ROWS, BLOCK_K], a_desc.layout)
    a1_ring = gl.allocate_shared_memory(dtype, [STAGES, ROWS, BLOCK_K], a_desc.layout)
    b_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_K, BLOCK_N], b_desc.layout)
    C_ROWS: gl.constexpr = ROWS if STAGE_C else 1   # 1: c is stored from registers
    c0_smem = gl.allocate_shared_memory(dtype, [C_ROWS, BLOCK_N], c_desc.layout)
    c1_smem = gl.allocate_shared_memory(dtype, [C_ROWS, BLOCK_N], c_desc.layout)
    if PARTS == 3:
        a2_ring = gl.allocate_shared_memory(dtype, [STAGES, ROWS, BLOCK_K], a_desc.layout)
        c2_smem = gl.allocate_shared_memory(dtype, [C_ROWS, BLOCK_N], c_desc.layout)
    else:
        a2_ring = a1_ring
        c2_smem = c1_smem
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(full.index(i), count=1)
        mbarrier.init(empty.index(i), count=PARTS)   # one arrive from each warpgroup
    fence_async_shared()
    # the partitions' arguments are matmul_relu_copying_kernel's; the last four (its copy's) unused here
    args = (a0_ring, a1_ring, a2_ring, b_ring, full, empty, c0_smem, c1_smem, c2_smem, a_desc, b_desc, c_desc, c_ptr,
            stride_cm, M, N, K, gl.program_id(0), gl.num_programs(0), PARTS, GROUP_M, b_desc, c_ptr, b_ring, full)
    if PARTS == 3:
        gl.warp_specialize([(rows_0, args), (rows_1, args), (rows_2, args), (load_for_3, args)], [4, 4, 1],
                           [REGS, REGS, 24])
    else:
        gl.warp_specialize([(rows_0, args), (rows_1, args), (load_for_2, args)], [4, 1], [REGS, 24])


# ---------------------------------------------------------------------------------------------------------------
# The same kernel with the copy of b inside: a copier warp per program copies its share of b's boxes onto 128-byte
# rows (TMA in, TMA out) and counts each slab of BLOCK_K rows done; the loader reads a slab from the copy once the
# slab's count is full, and from b as given until then. Nothing waits for the copy.
# ---------------------------------------------------------------------------------------------------------------
@gluon.jit
def asm_fence_and_wait(x, WAIT: gl.constexpr):
    """WAIT >= 0: cp.async.bulk.wait_group WAIT (this thread's bulk copies to global memory done, not just read out
    of shared memory: what tma.store_wait's .read form leaves out); then fence.proxy.async.global, which orders
    the copy engine's accesses to global memory with this thread's ordinary ones."""
    if WAIT >= 0:
        return gl.inline_asm_elementwise(f"cp.async.bulk.wait_group {WAIT}; fence.proxy.async.global; mov.b32 $0, $1;",
                                         "=r,r", [x], dtype=gl.int32, is_pure=False, pack=1)
    else:
        return gl.inline_asm_elementwise("fence.proxy.async.global; mov.b32 $0, $1;", "=r,r", [x], dtype=gl.int32,
                                         is_pure=False, pack=1)


@gluon.jit
def publish(flags_ptr, box, boxes_per_slab, slabs):
    """Count box ``box`` (copied and written) in its slab's count, and in the count of all boxes."""
    gl.atomic_add(flags_ptr + box // boxes_per_slab, 1, sem="release", scope="gpu")
    gl.atomic_add(flags_ptr + slabs, 1, sem="release", scope="gpu")


@gluon.jit
def copy_share_of_b(a0_ring, a1_ring, a2_ring, b_ring, full, empty, c0_smem, c1_smem, c2_smem, a_desc, b_desc,
                    c_desc, c_ptr, stride_cm, M, N, K, first, programs, PARTS, GROUP_M, bs_desc, flags_ptr, x_ring,
                    x_bars):
    """The copier warp: boxes first, first + programs, ... of b (slab-major: all of a slab's column boxes, then
    the next slab), each read from b as given into a slot of x_ring and written from it to the copy. Box i's load
    is issued before box i - 1 is written; a box is counted once its write is done (wait_group without .read)."""
    XS: gl.constexpr = x_ring.shape[0]
    BK: gl.constexpr = x_ring.shape[1]
    BN: gl.constexpr = x_ring.shape[2]
    per_slab = gl.cdiv(N, BN)
    slabs = gl.cdiv(K, BK)
    total = slabs * per_slab
    mine = gl.cdiv(gl.maximum(total - first, 0), programs)
    if mine > 0:
        mbarrier.expect(x_bars.index(0), bs_desc.block_type.nbytes)
        TMA_LOAD(bs_desc, [(first // per_slab) * BK, (first % per_slab) * BN], x_bars.index(0), x_ring.index(0))
    for i in range(mine):
        box = first + i * programs
        if i + 1 < mine:
            nxt = box + programs
            slot = (i + 1) % XS
            tma.store_wait(pendings=XS - 2)   # the write that last read this slot has read it
            mbarrier.expect(x_bars.index(slot), bs_desc.block_type.nbytes)
            TMA_LOAD(bs_desc, [(nxt // per_slab) * BK, (nxt % per_slab) * BN], x_bars.index(slot), x_ring.index(slot))
        mbarrier.wait(x_bars.index(i % XS), (i // XS) & 1)
        TMA_STORE(b_desc, [(box // per_slab) * BK, (box % per_slab) * BN], x_ring.index(i % XS))
        if i >= 1:
            asm_fence_and_wait(i, 1)   # box i - 1 written
            CTA_BARRIER()
            publish(flags_ptr, box - programs, per_slab, slabs)
    if mine > 0:
        asm_fence_and_wait(mine, 0)
        CTA_BARRIER()
        publish(flags_ptr, first + (mine - 1) * programs, per_slab, slabs)


@gluon.jit
def load_adaptive(a0_ring, a1_ring, a2_ring, b_ring, full, empty, c0_smem, c1_smem, c2_smem, a_desc, b_desc, c_desc,
                  c_ptr, stride_cm, M, N, K, first, programs, parts, GROUP_M, bs_desc, flags_ptr, x_ring, x_bars):
    """load_tiles for three warpgroups, with b's block from the copy where its slab is counted complete (an acquire,
    then a proxy fence), from b as given where not yet; once every box is counted, no more counts are read."""
    PARTS: gl.constexpr = 3
    STAGES: gl.constexpr = b_ring.shape[0]
    ROWS: gl.constexpr = a0_ring.shape[1]
    BLOCK_K: gl.constexpr = a0_ring.shape[2]
    BLOCK_N: gl.constexpr = b_ring.shape[2]
    tiles_m = gl.cdiv(M, PARTS * ROWS)
    tiles_n = gl.cdiv(N, BLOCK_N)
    k_steps = gl.cdiv(K, BLOCK_K)
    per_slab = gl.cdiv(N, BLOCK_N)
    nbytes: gl.constexpr = PARTS * a_desc.block_type.nbytes + b_desc.block_type.nbytes
    count = 0
    for tile in range(first, tiles_m * tiles_n, programs):
        tm, tn = tile_of(tile, tiles_m, tiles_n, GROUP_M)
        done = gl.atomic_add(flags_ptr + k_steps, 0, sem="acquire", scope="gpu")
        all_ready = (done == k_steps * per_slab).to(gl.int32)
        for ks in range(k_steps):
            slot = count % STAGES
            mbarrier.wait(empty.index(slot), ((count // STAGES) & 1) ^ 1)
            bar = full.index(slot)
            mbarrier.expect(bar, nbytes)
            TMA_LOAD(a_desc, [tm * PARTS * ROWS, ks * BLOCK_K], bar, a0_ring.index(slot))
            TMA_LOAD(a_desc, [tm * PARTS * ROWS + ROWS, ks * BLOCK_K], bar, a1_ring.index(slot))
            TMA_LOAD(a_desc, [tm * PARTS * ROWS + 2 * ROWS, ks * BLOCK_K], bar, a2_ring.index(slot))
            ready = all_ready
            if all_ready == 0:
                ready = (gl.atomic_add(flags_ptr + ks, 0, sem="acquire", scope="gpu") == per_slab).to(gl.int32)
            if ready != 0:
                asm_fence_and_wait(ks, -1)
                TMA_LOAD(b_desc, [ks * BLOCK_K, tn * BLOCK_N], bar, b_ring.index(slot))
            else:
                TMA_LOAD(bs_desc, [ks * BLOCK_K, tn * BLOCK_N], bar, b_ring.index(slot))
            count += 1


@gluon.jit
def matmul_relu_copying_kernel(a_desc, b_desc, bs_desc, c_desc, c_ptr, stride_cm, flags_ptr, M, N, K,
                               STAGES: gl.constexpr, XS: gl.constexpr, GROUP_M: gl.constexpr, REGS: gl.constexpr,
                               num_warps: gl.constexpr):
    """matmul_relu_gluon_kernel at 192 x BLOCK_N with b_desc describing b's copy on 128-byte rows, bs_desc b as
    given, and the copy made inside (copy_share_of_b, XS slots of one box each). ``flags_ptr``: int32 counts, one
    per slab of BLOCK_K rows, one of all boxes, one of programs done; zero before a launch, zero after it (the last
    program to finish sets them back)."""
    dtype: gl.constexpr = a_desc.dtype
    ROWS: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[1]
    a0_ring = gl.allocate_shared_memory(dtype, [STAGES, ROWS, BLOCK_K], a_desc.layout)
    a1_ring = gl.allocate_shared_memory(dtype, [STAGES, ROWS, BLOCK_K], a_desc.layout)
    a2_ring = gl.allocate_shared_memory(dtype, [STAGES, ROWS, BLOCK_K], a_desc.layout)
    b_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_K, BLOCK_N], b_desc.layout)
    x_ring = gl.allocate_shared_memory(dtype, [XS, BLOCK_K, BLOCK_N], b_desc.layout)
    c0_smem = gl.allocate_shared_memory(dtype, [ROWS, BLOCK_N], c_desc.layout)
    c1_smem = gl.allocate_shared_memory(dtype, [ROWS, BLOCK_N], c_desc.layout)
    c2_smem = gl.allocate_shared_memory(dtype, [ROWS, BLOCK_N], c_desc.layout)
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    x_bars = gl.allocate_shared_memory(gl.int64, [XS, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(full.index(i), count=1)
        mbarrier.init(empty.index(i), count=3)
    for i in gl.static_range(XS):
        mbarrier.init(x_bars.index(i), count=1)
    fence_async_shared()
    args = (a0_ring, a1_ring, a2_ring, b_ring, full, empty, c0_smem, c1_smem, c2_smem, a_desc, b_desc, c_desc, c_ptr,
            stride_cm, M, N, K, gl.program_id(0), gl.num_programs(0), 3, GROUP_M, bs_desc, flags_ptr, x_ring, x_bars)
    gl.warp_specialize([(rows_0, args), (rows_1, args), (rows_2, args), (load_adaptive, args),
                        (copy_share_of_b, args)], [4, 4, 1, 1], [REGS, REGS, 24, 24])
    slabs = gl.cdiv(K, BLOCK_K)
    if gl.atomic_add(flags_ptr + slabs + 1, 1, sem="acq_rel", scope="gpu") == gl.num_programs(0) - 1:
        for s in range(slabs + 2):   # every program is done: the counts go back to zero for the next launch
            gl.atomic_xchg(flags_ptr + s, 0, sem="relaxed", scope="gpu")


def copying_launch(a, b, stages: int = 3, xs: int = 3, group_m: int = 16, flags=None):
    """relu(a @ b) by matmul_relu_copying_kernel (192 x 128 tiles): b's copy on 128-byte rows made inside."""
    (M, K), N = a.shape, b.shape[1]
    c = torch.empty(M, N, device=a.device, dtype=a.dtype)
    per_row = 64
    dst = torch.empty((K, triton.cdiv(N, per_row) * per_row), device=a.device, dtype=a.dtype)[:, :N]
    gdt = gl.float16 if a.dtype == torch.float16 else gl.bfloat16

    def desc(t, block):
        return GluonDescriptor.from_tensor(t, block, gl.NVMMASharedLayout.get_default_for(block, gdt))
    if flags is None:
        flags = torch.zeros(triton.cdiv(K, 64) + 2, device=a.device, dtype=torch.int32)
    programs = torch.cuda.get_device_properties(a.device).multi_processor_count
    tiles = triton.cdiv(M, 192) * triton.cdiv(N, 128)
    matmul_relu_copying_kernel[(min(programs, tiles),)](
        desc(a, [64, 64]), desc(dst, [64, 128]), desc(b, [64, 128]), desc(c, [64, 128]), c, c.stride(0), flags,
        M, N, K, STAGES=stages, XS=xs, GROUP_M=group_m, REGS=160, num_warps=4)
    return c


#: name -> (PARTS, BLOCK_N, STAGES, REGS, BLOCK_K, STAGE_C, BOX): tiles of PARTS * 64 rows; STAGE_C: c leaves
#: through shared memory by TMA (else stored from registers, which leaves room for a fifth stage); BOX: the width
#: in elements of a's and b's TMA boxes (64: 128 bytes, 128-byte swizzle; 32: 64 bytes, 64-byte swizzle, a 128-byte
#: row piece that starts off a 128-byte boundary is then two requests of which fewer cross a line)
LAUNCHES = {"192x128 s4": (3, 128, 4, 160, 64, True, 64), "128x256 s3": (2, 256, 3, 232, 64, True, 64)}
EXTRA_LAUNCHES = {"192x128 s5, c from registers": (3, 128, 5, 160, 64, False, 64),
                  "192x128x128 s2": (3, 128, 2, 160, 128, True, 64),
                  "192x128 s4, 64-byte swizzle": (3, 128, 4, 160, 64, True, 32)}
GROUP_M = {"192x128 s4": 8, "128x256 s3": 8, "192x128 s5, c from registers": 8, "192x128x128 s2": 8,
           "192x128 s4, 64-byte swizzle": 8}


def descriptors(a, b, c, block_n: int, block_k: int = 64, box: int = 64):
    gdt = gl.float16 if a.dtype == torch.float16 else gl.bfloat16

    def desc(t, block):
        return GluonDescriptor.from_tensor(t, block, gl.NVMMASharedLayout.get_default_for(block, gdt))
    return desc(a, [64, min(block_k, box)]), desc(b, [block_k, min(block_n, box)]), desc(c, [64, block_n])


def launch(a, b, name: str, c=None, programs: int | None = None, group_m: int | None = None):
    parts, block_n, stages, regs, block_k, stage_c, box = {**LAUNCHES, **EXTRA_LAUNCHES}[name]
    (M, K), N = a.shape, b.shape[1]
    c = torch.empty(M, N, device=a.device, dtype=a.dtype) if c is None else c
    programs = programs or torch.cuda.get_device_properties(a.device).multi_processor_count
    tiles = triton.cdiv(M, 64 * parts) * triton.cdiv(N, block_n)
    matmul_relu_gluon_kernel[(min(programs, tiles),)](*descriptors(a, b, c, block_n, block_k, box), c, c.stride(0),
                                                      M, N, K, PARTS=parts, STAGES=stages,
                                                      GROUP_M=group_m or GROUP_M[name], REGS=regs, STAGE_C=stage_c,
                                                      BLOCK_K=block_k, num_warps=4)
    return c


def compile_report(name: str) -> dict:
    """One launch of matmul_relu_gluon_kernel compiled for sm_90 here: registers, spill stack, shared memory."""
    from records import gluon_sm90_usage

    parts, block_n, stages, regs, block_k, stage_c, box = {**LAUNCHES, **EXTRA_LAUNCHES}[name]
    base = torch.empty(512, 512, dtype=torch.float16)
    meta = dict(PARTS=parts, STAGES=stages, GROUP_M=8, REGS=regs, STAGE_C=stage_c, BLOCK_K=block_k, num_warps=4)
    args = [*descriptors(base, base, base, block_n, block_k, box), "*fp16", "i32", "i32", "i32", "i32"]
    return {"launch": name, **gluon_sm90_usage(matmul_relu_gluon_kernel, args, meta)}


def summary(cases: list[dict]) -> list[str]:
    """Per case: torch, the reference and the fastest Gluon launch (with its copies) as shares of torch's speed;
    with --focus, the kernel alone on operands already on 128-byte rows, and beside a copy on a second stream."""
    lines = []
    for case in cases:
        us = {name: row["us"] for name, row in case["rows"].items()}
        gluon = {n: t for n, t in us.items() if n.startswith("gluon")}
        best = min(gluon, key=gluon.get)
        lines.append(f"{case['case']}: torch {us['torch']} us, reference {us['reference']} us "
                     f"({round(us['torch'] / us['reference'], 3)}); fastest Gluon launch: {best} {us[best]} us "
                     f"({round(us['torch'] / us[best], 3)})")
        alone = {n.split(" alone, ")[1]: t for n, t in us.items() if " alone, " in n}
        if alone:
            def share(which):
                t = alone[which + " on 128-byte rows"]
                return f"{t} us ({round(us['torch'] / t, 3)})"
            beside = alone["ab on 128-byte rows, beside a copy of a on a second stream"] - alone["ab on 128-byte rows"]
            lines.append(f"{case['case']}: the 192 x 128 kernel alone, operands on 128-byte rows: a and b "
                         f"{share('ab')}, b only {share('b')}, a only {share('a')}; a copy "
                         f"{us['timing only: copy of b']} us alone adds {round(beside, 2)} us beside the kernel on a "
                         f"second stream")
    return lines


def compile_copying_report(xs: int = 3) -> dict:
    """compile_report for matmul_relu_copying_kernel (192 x 128, three stages, ``xs`` copy slots)."""
    from records import gluon_sm90_usage

    base = torch.empty(512, 512, dtype=torch.float16)
    descs = [GluonDescriptor.from_tensor(base, blk, gl.NVMMASharedLayout.get_default_for(blk, gl.float16))
             for blk in ([64, 64], [64, 128], [64, 128], [64, 128])]
    meta = dict(STAGES=3, XS=xs, GROUP_M=16, REGS=160, num_warps=4)
    args = [*descs, "*fp16", "i32", "*i32", "i32", "i32", "i32"]
    return {"launch": f"192x128 s3, b copied inside, {xs} copy slots",
            **gluon_sm90_usage(matmul_relu_copying_kernel, args, meta)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--focus", action="store_true", help="3000^3 float16 only: which operand to copy, GROUP_M, the "
                   "kernel alone on operands copied beforehand")
    args = p.parse_args()
    reports = [compile_report(name) for name in LAUNCHES] + [compile_copying_report()] + (
        [compile_report(name) for name in EXTRA_LAUNCHES] if args.focus else [])
    for r in reports:
        print(r)
    if args.dry_run or not GPU:
        return 0
    from grader.course import solution_notebook
    from grader.notebook_code import load_namespace
    from records import check_products, provenance, timed_rows, write_with_summary
    from triton_course.matmul import matmul_flops

    from triton_course.matmul_fast import fast_namespace   # the fast path's names
    ns = fast_namespace(load_namespace(solution_notebook("07_matmul_relu")))
    command = "python lab/sweeps/matmul_gluon.py" + (" --focus" if args.focus else "")
    title = "07_matmul_relu: Gluon tiles of 192 x 128" + (", 3000^3 on rows aligned or not" if args.focus else "")
    record = {**provenance(title, command),
              "method": "triton_course.bench.steady_rounds: medians of 7 interleaved rounds, fresh inputs",
              "compile": reports, "cases": []}
    ok = True
    cases = [("3000^3", (3000, 3000, 3000), torch.float16),
                                    ("3000^3 bf16", (3000, 3000, 3000), torch.bfloat16),
                                    ("4096^3", (4096, 4096, 4096), torch.float16),
                                    ("4000x3000x5000", (4000, 3000, 5000), torch.float16)]
    if args.focus:
        cases = cases[:1]
    for label, (m, n, k), dtype in cases:
        def make():
            return torch.randn(m, k, device="cuda", dtype=dtype), torch.randn(k, n, device="cuda", dtype=dtype)
        fns = {"torch": lambda a, b: torch.relu(a @ b), "reference": lambda a, b: ns["matmul_relu"](a, b)}
        for name in LAUNCHES:
            fns[f"gluon {name}, b copied onto 128-byte rows"] = (
                lambda a, b, name=name: launch(a, ns["realigned"](b), name))
            fns[f"gluon {name}, b as given"] = lambda a, b, name=name: launch(a, b, name)
        if args.focus:
            g = "192x128 s4"
            fns = {k: v for k, v in fns.items() if k in ("torch", "reference") or g in k}
            fns[f"gluon {g}, a copied"] = lambda a, b: launch(ns["realigned"](a), b, g)
            fns[f"gluon {g}, a and b copied"] = lambda a, b: launch(ns["realigned"](a), ns["realigned"](b), g)
            for gm in (16, 32):
                fns[f"gluon {g}, b copied, GROUP_M {gm}"] = lambda a, b, gm=gm: launch(a, ns["realigned"](b), g,
                                                                                      group_m=gm)
            for name in EXTRA_LAUNCHES:
                for gm in (8, 16):
                    fns[f"gluon {name}, b copied, GROUP_M {gm}"] = (
                        lambda a, b, name=name, gm=gm: launch(a, ns["realigned"](b), name, group_m=gm))
            sw = "192x128 s4, 64-byte swizzle"
            for gm in (8, 16):
                fns[f"gluon {sw}, b as given, GROUP_M {gm}"] = lambda a, b, gm=gm: launch(a, b, sw, group_m=gm)
            for xs, gm in ((3, 16), (3, 8), (2, 16)):
                flags = torch.zeros(triton.cdiv(k, 64) + 2, device="cuda", dtype=torch.int32)
                fns[f"gluon 192x128 s3, b copied inside, {xs} copy slots, GROUP_M {gm}"] = (
                    lambda a, b, xs=xs, gm=gm, flags=flags: copying_launch(a, b, xs=xs, group_m=gm, flags=flags))
            fns["timing only: copy of b"] = lambda a, b: ns["realigned"](b)
            kept = {}

            def kernel_alone(a, b, which, name=g):
                key = (a.data_ptr(), b.data_ptr(), which)
                if key not in kept:
                    kept[key] = (ns["realigned"](a) if "a" in which else a, ns["realigned"](b) if "b" in which else b)
                return launch(*kept[key], name)
            for name in EXTRA_LAUNCHES:
                fns[f"timing only: kernel {name} by itself, b on 128-byte rows"] = (
                    lambda a, b, name=name: kernel_alone(a, b, "b", name))
            fns[f"timing only: kernel {sw} by itself, ab on 128-byte rows"] = (
                lambda a, b: kernel_alone(a, b, "ab", sw))
            for which in ("b", "a", "ab"):
                fns[f"timing only: gluon {g} alone, {which} on 128-byte rows"] = (
                    lambda a, b, which=which: kernel_alone(a, b, which))
            side = torch.cuda.Stream()

            def beside_a_copy(a, b):
                """The kernel alone (a and b on 128-byte rows already), and a copy of a that nothing reads, on a
                second stream, launched after it: does a copy hide under the product on the same SMs (the
                kernel's program leaves registers and threads for the copy's)?"""
                here = torch.cuda.current_stream()
                side.wait_stream(here)
                c = kernel_alone(a, b, "ab")
                with torch.cuda.stream(side):
                    ns["realigned"](a)
                here.wait_stream(side)
                return c
            fns[f"timing only: gluon {g} alone, ab on 128-byte rows, beside a copy of a on a second stream"] = (
                beside_a_copy)
        a, b = make()
        checks, good = check_products(fns, a, b, label, calls=lambda name: 3 if "copied inside" in name else 1)
        ok &= good   # (the copying kernel's counts must be back at zero after every call)
        rows = timed_rows({name: fn for name, fn in fns.items() if checks[name]["correct"]}, make,
                          matmul_flops(m, n, k), label)
        record["cases"].append({"case": label, "shape": [m, n, k], "dtype": str(dtype).split(".")[-1],
                                "checks": checks, "rows": rows})
    write_with_summary(record, summary(record["cases"]), args.out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
