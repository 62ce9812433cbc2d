"""Attention launch sweep: every kernel variant the chapter 09 reference chooses between, against SDPA.

    python lab/sweeps/attention_sweep.py            (on a GPU, about 5 minutes on an H200)
        writes solutions/09_attention/records/09_attention_sweep.json and prints, last, the winners as HOPPER_CONFIGS lines
    python lab/sweeps/attention_sweep.py --dry-run  (no GPU: every variant on tiny inputs in the
        interpreter, checked against float64; nothing timed, nothing written)
    python lab/sweeps/attention_sweep.py --focus    (on a GPU, about 3 minutes on an H200)
        writes solutions/09_attention/records/09_attention_focus.json: the second, focused sweep (FOCUS_VARIANTS, below): the
        candidates that the first sweep and the compiler's resource reports point to, D = 128 first,
        against SDPA (its default backend, cuDNN on the H200) and SDPA's flash backend alone, float16 at
        N = 1024 ... 16384, then bfloat16 for the new table and each case's float16 winner; prints the new
        HOPPER_CONFIGS table and every candidate's prediction beside its measurement. --focus --dry-run
        checks the focused candidates in the interpreter.

Each variant is chapter 09's fast path (``triton_course.attention_fast``, the solution notebook's own
``attention`` when these records were made: its kernel, its launcher) pinned to one launch configuration with
``triton_course.attention.pinned_config``: block sizes, warps, pipeline depth (num_stages),
pointer loads or tensor descriptors (TMA), the warp-specialised single loop (non-causal only), and, for causal
attention, a single loop that masks every key block instead of the notebook's split into unmasked off-diagonal
blocks and masked diagonal ones (a kernel defined here from the notebook's own jit helpers). Picking a winner
afterwards is a change of the fast path's ``HOPPER_CONFIGS`` table; the "ptr" winners are the exercise's launches
(``triton_course.attention.POINTER_CONFIGS``).

At every (dtype, D, causal, N) all variants and ``F.scaled_dot_product_attention`` are timed in turn on the same
inputs (``triton_course.bench.steady_rounds``, medians of 5 interleaved rounds), float16 at D = 64 and 128,
causal and not, N = 1024 ... 16384, Z = 4, H = 2048 // D (the chapter's benchmark); bfloat16 for the table's
configuration and SDPA. Before timing, every variant is compiled in parallel worker processes (a compiler
crash there costs one variant, not the run) and checked against float64 on one head.

Predictions (METHOD.md's two numbers) come from three ceilings measured first in the same process: the
tensor cores (torch.matmul, 8192^3 fp16), the special-function units (a Triton loop of exp2) and the FP32
units (a loop of fused multiply-adds). For each variant the key-block tiles it computes (whole diagonal tiles
included) give matmul FLOPs, exps and FP32 operations; the prediction is a range: the units taking turns
(no overlap) up to perfect overlap (the slowest unit alone). Wave quantisation and the pipeline's start-up
are not modelled.

SDPA's backend is read from the profiler's kernel names, and each backend PyTorch offers is also timed alone
(torch.nn.attention.sdpa_kernel) at N = 4096 and 16384.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

DRY = "--dry-run" in sys.argv
if DRY:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from triton_course.attention import (AttentionConfig, attention_reference, describe_entry,  # noqa: E402
                                     fast_launch_config, for_length, pinned_config, sdpa_backend_of,
                                     through_launch_table, tiles_visited)
from triton_course.attention_fast import fast_namespace  # noqa: E402

FOCUS = "--focus" in sys.argv
NS_N = (1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (64, 128)
ROUNDS = 5
OUT = ROOT / "solutions" / "09_attention" / "records" / "09_attention_sweep.json"


def C(bm, bn, w, s, tma=False, ws=False):  # noqa: N802 - a short constructor for the table below
    return AttentionConfig(bm, bn, w, s, tma, ws)


#: (name, configuration, kernel, head dims, causal modes). "split" is the notebook's kernel; "masked" masks
#: every key block in one loop (no off-diagonal/diagonal split). Register and shared-memory use of each was read
#: from triton 3.6's sm_90 compile here (no GPU): 128x64 with 4 warps spills at D = 128, and 128x128 with 3
#: stages at D = 128 needs 246 KB of shared memory once warp-specialised, so those are left out there.
VARIANTS = [
    ("ptr 128x64 w4 s3", C(128, 64, 4, 3), "split", (64,), (False, True)),
    ("ptr 128x128 w8 s2", C(128, 128, 8, 2), "split", (64, 128), (False, True)),
    ("ptr 128x128 w8 s3", C(128, 128, 8, 3), "split", (64, 128), (False, True)),
    ("ptr 128x64 w8 s3", C(128, 64, 8, 3), "split", (64, 128), (False, True)),
    ("ptr 64x64 w4 s3", C(64, 64, 4, 3), "split", (64, 128), (False, True)),
    ("tma 128x64 w4 s3", C(128, 64, 4, 3, True), "split", (64,), (False, True)),
    ("tma 128x64 w4 s4", C(128, 64, 4, 4, True), "split", (64,), (False, True)),
    ("tma 128x128 w4 s2", C(128, 128, 4, 2, True), "split", (64,), (False, True)),
    ("tma 128x128 w8 s2", C(128, 128, 8, 2, True), "split", (64, 128), (False, True)),
    ("tma 128x128 w8 s3", C(128, 128, 8, 3, True), "split", (64, 128), (False, True)),
    ("tma 128x64 w8 s3", C(128, 64, 8, 3, True), "split", (64, 128), (False, True)),
    ("tma 64x64 w4 s3", C(64, 64, 4, 3, True), "split", (64, 128), (False, True)),
    ("ws tma 128x128 w4 s2", C(128, 128, 4, 2, True, True), "split", (64, 128), (False,)),
    ("ws tma 128x64 w4 s3", C(128, 64, 4, 3, True, True), "split", (64, 128), (False,)),
    ("ws tma 128x128 w4 s3", C(128, 128, 4, 3, True, True), "split", (64,), (False,)),
    ("masked tma 128x128 w8 s2", C(128, 128, 8, 2, True), "masked", (64, 128), (True,)),
    ("masked tma 128x64 w4 s3", C(128, 64, 4, 3, True), "masked", (64,), (True,)),
    ("masked ptr 128x128 w8 s2", C(128, 128, 8, 2), "masked", (64, 128), (True,)),
]

#: The focused sweep (--focus), after the first one (solutions/09_attention/records/09_attention_sweep.json) and the resource reports of
#: triton 3.6's sm_90 compile of the notebook kernel (made here without a GPU; registers per thread, shared memory
#: per program, CTAs per SM from the H200's 64 K registers and 228 KB of shared memory):
#:
#:   D = 128            regs  smem    CTAs/SM  first sweep
#:   tma 64x64 w4 s3     138  113 KB  1        best non-causal (0.77 of SDPA): one warpgroup per SM
#:   tma 64x64 w4 s2     138   81 KB  2        two independent pipelines: one's softmax under the other's MMAs
#:   ptr 64x64 w4 s2     182   80 KB  2
#:   tma 64x32 w4 s3     115   65 KB  3
#:   tma 64x128 w4 s2    187  145 KB  1        fewer, wider key blocks (wgmma N = 128)
#:   ws tma 128x128 w4   168  192 KB  1        12 warps: a loading warpgroup, two consumers of 64 rows each
#:   128x128 w8 (first)  201+ 161+ KB 1        two warpgroups in lock-step on shared buffers: 0.55-0.80
#:
#: Warp specialisation failed in the first sweep with wrong results, not a compiler error: Triton 3.6 splits the
#: 128-row block between two consumer warpgroups and, for the second, adds 64 to start_m *and* takes rows 64..127
#: of tl.arange, so every row index built as start_m + tl.arange(0, BLOCK_M) is 64 too large there (seen in the
#: TTGIR); the pointer store then wrote rows 64..127 of each block to rows 128..191. The notebook now stores
#: through the tensor descriptor when TMA is on (store_tile), whose coordinates are split correctly. Two loops in
#: a row, each warp-specialised (the causal split), still stop the compiler (an assertion in
#: NVGPUWarpSpecialization), and a loop containing a runtime branch on the diagonal stops its pipeliner, so the
#: causal warp-specialised candidate ("ws-masked", defined below) runs one loop that masks every key block,
#: with row and key indices taken relative to start_m, so that no split row index is needed.
#:
#: Since the host-descriptor probe (lab/sweeps/attention_host_tma.py, solutions/09_attention/records/09_attention_host_tma.json), a
#: "tma" launch without warp specialisation reads and writes through descriptors made once per launch on the host
#: (AttentionConfig.launch_for), no longer by every program; the warp-specialised ones still make theirs in the
#: kernel. The probe's best host launches join the list (tma 128x128 w8 s3 at D = 128, tma 64x64 w4 s3 at D = 64),
#: and the table may take one launch for N <= SHORT_N and another beyond (_table_by_length). Later joined: tma 128x64
#: with 8 warps and 3 or 4 stages at D = 128 (two warpgroups on narrower key blocks with host descriptors; 132 and
#: 165 KB of shared memory, no spills in the sm_90 compile): 0.80-0.83 of SDPA (geometric mean), not winners.
FOCUS_VARIANTS = [
    ("tma 64x64 w4 s3", C(64, 64, 4, 3, True), "split", (64, 128), (False, True)),
    ("ptr 64x64 w4 s3", C(64, 64, 4, 3), "split", (64, 128), (False, True)),
    ("tma 128x128 w8 s3", C(128, 128, 8, 3, True), "split", (128,), (False, True)),
    ("tma 64x64 w4 s2", C(64, 64, 4, 2, True), "split", (128,), (False, True)),
    ("ptr 64x64 w4 s2", C(64, 64, 4, 2), "split", (128,), (False, True)),
    ("tma 64x32 w4 s3", C(64, 32, 4, 3, True), "split", (128,), (False, True)),
    ("tma 64x128 w4 s2", C(64, 128, 4, 2, True), "split", (128,), (False,)),
    ("tma 128x64 w8 s3", C(128, 64, 8, 3, True), "split", (128,), (False, True)),
    ("tma 128x64 w8 s4", C(128, 64, 8, 4, True), "split", (128,), (False, True)),
    ("ptr 128x64 w8 s3", C(128, 64, 8, 3), "split", (64,), (False, True)),
    ("ws tma 128x128 w4 s2", C(128, 128, 4, 2, True, True), "split", (64, 128), (False,)),
    ("ws tma 128x64 w4 s3", C(128, 64, 4, 3, True, True), "split", (64, 128), (False,)),
    ("ws-masked tma 128x128 w4 s2", C(128, 128, 4, 2, True, True), "ws-masked", (128,), (True,)),
    ("ws-masked tma 128x64 w4 s3", C(128, 64, 4, 3, True, True), "ws-masked", (64, 128), (True,)),
]

#: Predicted TFLOP/s at N = 16384, float16 (made before the run, from the ceilings of the first sweep: tensor
#: 650 TFLOP/s, exp2 4.17e12/s, FP32 3.24e13/s). Per score the tensor cores need 4D / 650e12 s and the other
#: units (1 + 1/BN) / 4.17e12 + (3.5 + D/BN) / 3.24e13 s. The first sweep's one-warpgroup kernel (tma 64x64 w4 s3,
#: D = 128) hid 62% of the other units' time behind its MMAs; with c independent pipelines per SM (CTAs, or
#: consumer warpgroups) the exposed part is taken as 38% / c. Causal: x (useful / visited tiles) and 3% for the
#: diagonal's masked loop. Warp-specialised: the same model with c = 2 consumers, less 5% for their barriers.
PREDICTED_TFLOPS = {
    (128, False): {"tma 64x64 w4 s3": 543, "ptr 64x64 w4 s3": 500, "tma 64x64 w4 s2": 590, "ptr 64x64 w4 s2": 570,
                   "tma 64x32 w4 s3": 575, "tma 64x128 w4 s2": 545, "ws tma 128x128 w4 s2": 565,
                   "ws tma 128x64 w4 s3": 555},
    (128, True): {"tma 64x64 w4 s3": 515, "ptr 64x64 w4 s3": 490, "tma 64x64 w4 s2": 560, "ptr 64x64 w4 s2": 545,
                  "tma 64x32 w4 s3": 550, "ws-masked tma 128x128 w4 s2": 480, "ws-masked tma 128x64 w4 s3": 470},
    (64, False): {"ptr 64x64 w4 s3": 420, "ptr 128x64 w8 s3": 445, "ws tma 128x128 w4 s2": 470,
                  "ws tma 128x64 w4 s3": 460},
    (64, True): {"ptr 64x64 w4 s3": 415, "ptr 128x64 w8 s3": 440, "ws-masked tma 128x64 w4 s3": 400},
}

ACTIVE = FOCUS_VARIANTS if FOCUS else VARIANTS


# ---------------------------------------------------------------------------------------------------
# The notebook, and the one kernel variant defined here
# ---------------------------------------------------------------------------------------------------

NB: dict = {}


def notebook() -> dict:
    if not NB:
        NB.update(fast_namespace())   # chapter 09's fast path (the solution notebook's code when the records were made)
        NB["attention"] = through_launch_table(NB["attention"])   # the table's launches, never the Gluon path
        # the masked single-loop kernel below calls the notebook's own jit helpers by these names
        globals().update({name: NB[name] for name in ("_attend_blocks", "tile_source", "load_tile", "store_tile")})
    return NB


@triton.jit
def masked_loop_kernel(Q, K, V, O,
                       stride_qz, stride_qh, stride_qn, stride_qd,
                       stride_kz, stride_kh, stride_kn, stride_kd,
                       stride_vz, stride_vh, stride_vn, stride_vd,
                       stride_oz, stride_oh, stride_on, stride_od,
                       H, N, qk_scale,
                       CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       TMA: tl.constexpr = False, WARP_SPEC: tl.constexpr = False):
    """The notebook's kernel with one loop over every key block up to the diagonal, each block masked."""
    pid_m = tl.program_id(0)
    if CAUSAL:
        pid_m = tl.num_programs(0) - 1 - pid_m
    start_m = pid_m * BLOCK_M
    off_hz = tl.program_id(1)
    off_z = (off_hz // H).to(tl.int64)
    off_h = (off_hz % H).to(tl.int64)
    q_base = Q + off_z * stride_qz + off_h * stride_qh
    k_base = K + off_z * stride_kz + off_h * stride_kh
    v_base = V + off_z * stride_vz + off_h * stride_vh
    o_base = O + off_z * stride_oz + off_h * stride_oh
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q_src = tile_source(q_base, None, off_z, off_h, N, stride_qn, BLOCK_M, HEAD_DIM, TMA)  # noqa: F821
    k_src = tile_source(k_base, None, off_z, off_h, N, stride_kn, BLOCK_N, HEAD_DIM, TMA)  # noqa: F821
    v_src = tile_source(v_base, None, off_z, off_h, N, stride_vn, BLOCK_N, HEAD_DIM, TMA)  # noqa: F821
    q = load_tile(q_src, start_m, N, stride_qn, stride_qd, BLOCK_M, HEAD_DIM, True, TMA)  # noqa: F821
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.full([BLOCK_M], 0.0, tl.float32)
    acc = tl.full([BLOCK_M, HEAD_DIM], 0.0, tl.float32)
    stop = tl.minimum(start_m + BLOCK_M, N) if CAUSAL else N
    acc, m_i, l_i = _attend_blocks(acc, m_i, l_i, q, k_src, v_src, stride_kn, stride_kd, stride_vn,  # noqa: F821
                                   stride_vd, offs_m, 0, stop, N, qk_scale, BLOCK_N, HEAD_DIM, True, CAUSAL,
                                   TMA, False)
    out = acc / l_i[:, None]
    tl.store(o_base + offs_m[:, None] * stride_on + offs_d[None, :] * stride_od, out.to(O.dtype.element_ty),
             mask=offs_m[:, None] < N)


def masked_attention(q, k, v, causal=False, sm_scale=None):
    """The notebook's launcher, launching masked_loop_kernel."""
    ns = notebook()
    Z, H, N, D = q.shape
    config = fast_launch_config(q, k, v, causal, ns["HOPPER_CONFIGS"])
    sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    out = torch.empty_like(q)
    masked_loop_kernel[(triton.cdiv(N, config.block_m), Z * H)](
        q, k, v, out, *q.stride(), *k.stride(), *v.stride(), *out.stride(), H, N, sm_scale * ns["LOG2E"],
        CAUSAL=bool(causal), HEAD_DIM=D, **config.launch, TMA=config.tma, WARP_SPEC=config.warp_spec)
    return out


@triton.jit
def ws_masked_kernel(Q, K, V, O,
                     stride_qz, stride_qh, stride_qn, stride_qd,
                     stride_kz, stride_kh, stride_kn, stride_kd,
                     stride_vz, stride_vh, stride_vn, stride_vd,
                     stride_oz, stride_oh, stride_on, stride_od,
                     H, N, qk_scale,
                     CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     TMA: tl.constexpr = False, WARP_SPEC: tl.constexpr = False):
    """Causal attention in one warp-specialisable loop over the key blocks up to the diagonal, each one masked.

    Row and key indices are relative to start_m (rows 0 .. BLOCK_M - 1 of the block, keys start_n - start_m + j),
    so that Triton 3.6's split of the block between two consumer warpgroups, which adds the second half's offset
    to start_m and to tl.arange both, never meets a row index made of the two."""
    pid_m = tl.num_programs(0) - 1 - tl.program_id(0)
    start_m = pid_m * BLOCK_M
    off_hz = tl.program_id(1)
    off_z = (off_hz // H).to(tl.int64)
    off_h = (off_hz % H).to(tl.int64)
    q_src = tile_source(Q + off_z * stride_qz + off_h * stride_qh, None, off_z, off_h,  # noqa: F821
                        N, stride_qn, BLOCK_M, HEAD_DIM, TMA)
    k_src = tile_source(K + off_z * stride_kz + off_h * stride_kh, None, off_z, off_h,  # noqa: F821
                        N, stride_kn, BLOCK_N, HEAD_DIM, TMA)
    v_src = tile_source(V + off_z * stride_vz + off_h * stride_vh, None, off_z, off_h,  # noqa: F821
                        N, stride_vn, BLOCK_N, HEAD_DIM, TMA)
    o_dst = tile_source(O + off_z * stride_oz + off_h * stride_oh, None, off_z, off_h,  # noqa: F821
                        N, stride_on, BLOCK_M, HEAD_DIM, TMA)
    q = load_tile(q_src, start_m, N, stride_qn, stride_qd, BLOCK_M, HEAD_DIM, True, TMA)  # noqa: F821
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.full([BLOCK_M], 0.0, tl.float32)
    acc = tl.full([BLOCK_M, HEAD_DIM], 0.0, tl.float32)
    rows = tl.arange(0, BLOCK_M)
    for start_n in tl.range(0, tl.minimum(start_m + BLOCK_M, N), BLOCK_N, warp_specialize=WARP_SPEC):
        k = load_tile(k_src, start_n, N, stride_kn, stride_kd, BLOCK_N, HEAD_DIM, True, TMA)  # noqa: F821
        s = tl.dot(q, tl.trans(k))
        keys = (start_n - start_m) + tl.arange(0, BLOCK_N)
        keep = (keys[None, :] <= rows[:, None]) & (keys[None, :] < N - start_m)
        s = tl.where(keep, s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        v = load_tile(v_src, start_n, N, stride_vn, stride_vd, BLOCK_N, HEAD_DIM, True, TMA)  # noqa: F821
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_new
    out = acc / l_i[:, None]
    store_tile(o_dst, start_m, out.to(O.dtype.element_ty), N, stride_on, stride_od, BLOCK_M, HEAD_DIM, TMA)  # noqa: F821


def ws_masked_attention(q, k, v, causal=True, sm_scale=None):
    """Causal attention by ws_masked_kernel, warp-specialised where TMA can run (fast_launch_config keeps warp
    specialisation for non-causal inputs only; this kernel takes it back for its one causal loop)."""
    from triton_course.attention import _use_tma_scratch, tma_layout_ok, tma_ready
    from triton_course.device import current

    if not causal:
        raise ValueError("ws_masked_attention is causal only")
    ns = notebook()
    Z, H, N, D = q.shape
    config = fast_launch_config(q, k, v, True, ns["HOPPER_CONFIGS"])   # the pinned block sizes
    tma = tma_layout_ok(q, k, v) if current().interpreted else tma_ready(q, k, v)
    if tma and not current().interpreted:
        _use_tma_scratch()
    launch = {**config.launch, "TMA": tma, "WARP_SPEC": tma and _PINNED_WS[-1]}
    sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    out = torch.empty_like(q)
    ws_masked_kernel[(triton.cdiv(N, config.block_m), Z * H)](
        q, k, v, out, *q.stride(), *k.stride(), *v.stride(), *out.stride(), H, N, sm_scale * ns["LOG2E"],
        CAUSAL=True, HEAD_DIM=D, **launch)
    return out


#: Whether the pinned ws-masked configuration asks for warp specialisation (fast_launch_config drops it for causal).
_PINNED_WS: list[bool] = [False]


def runner(index: int):
    """fn(q, k, v, causal) for variant ``index``: the notebook's attention (or the masked loop), pinned."""
    name, config, kind, _, _ = ACTIVE[index]
    attention = {"split": notebook()["attention"], "masked": masked_attention, "ws-masked": ws_masked_attention}[kind]

    def run(q, k, v, causal):
        _PINNED_WS.append(config.warp_spec)
        try:
            with pinned_config(config):
                return attention(q, k, v, causal)
        finally:
            _PINNED_WS.pop()
    run.__name__ = name
    return run


def cases(index: int):
    _, _, _, dims, causals = ACTIVE[index]
    return [(d, c) for d in dims for c in causals]


def inputs(z, h, n, d, dtype, device="cuda"):
    return tuple(torch.randn(z, h, n, d, device=device, dtype=dtype) for _ in range(3))


def check(index: int, dtype, device="cuda", n=1000, z=2) -> list[str]:
    """Problems of variant ``index`` against float64 on a ragged N (one head checked per call); [] if none."""
    problems = []
    fn = runner(index)
    for d, causal in cases(index):
        for n_ in ((n, 1024) if device == "cuda" else (n, 256)):   # 256: a multiple of every BLOCK_N (warp spec.)
            q, k, v = inputs(z, 2048 // d if device == "cuda" else 2, n_, d, dtype, device)
            got = fn(q, k, v, causal)[:1, :1].double()
            want = attention_reference(*(t[:1, :1].double() for t in (q, k, v)), causal)
            err = float((got - want).abs().max())
            if not err < 3e-2:
                problems.append(f"D={d} causal={causal} N={n_} {str(dtype)[6:]}: max error {err:.3g}")
    return problems


# ---------------------------------------------------------------------------------------------------
# Compiling in parallel workers (a compiler crash costs one variant)
# ---------------------------------------------------------------------------------------------------

def warm(index: int) -> int:
    """Worker: compile (and check) variant ``index`` at every case, fp16 and bf16; exit status 0 if right."""
    problems = []
    for dtype in (torch.float16, torch.bfloat16):
        problems += check(index, dtype)
    for d, causal in cases(index):   # the benchmark's own specialisation (N a multiple of 16, Z = 4)
        runner(index)(*inputs(4, 2048 // d, 256, d, torch.float16), causal)
    torch.cuda.synchronize()
    print(json.dumps({"variant": ACTIVE[index][0], "problems": problems}))
    return 1 if problems else 0


def warm_all(jobs: int) -> dict[str, str]:
    """Compile every variant in ``jobs`` parallel processes; {name: problem} for the ones that failed."""
    failed = {}

    def one(index):
        name = ACTIVE[index][0]
        try:
            done = subprocess.run([sys.executable, __file__, "--warm", str(index), *(["--focus"] if FOCUS else [])],
                                  capture_output=True, text=True, timeout=150 if FOCUS else 400)
        except subprocess.TimeoutExpired:
            return name, "compile timed out"
        if done.returncode == 0:
            return name, None
        lines = (done.stdout + done.stderr).strip().splitlines()
        return name, (" | ".join(lines[-3:]) or f"exit status {done.returncode}")[:400]

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for name, problem in pool.map(one, range(len(ACTIVE))):
            print(f"compiled {name}: {'ok' if problem is None else problem}", flush=True)
            if problem is not None:
                failed[name] = problem
    return failed


# ---------------------------------------------------------------------------------------------------
# Ceilings and predictions
# ---------------------------------------------------------------------------------------------------

@triton.jit
def _exp_loop(X, Y, ITERS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs)
    for _ in range(ITERS):
        x = tl.exp2(-x)          # stays in [0.5, 1]: one exp2 (and one negation folded into it) per step
    tl.store(Y + offs, x)


@triton.jit
def _fma_loop(X, Y, ITERS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs)
    for _ in range(ITERS):
        x = x * 0.999 + 0.001    # one fused multiply-add per step
    tl.store(Y + offs, x)


def ceilings() -> dict[str, float]:
    """Measured here: tensor-core TFLOP/s (fp16 matmul), exp2 per second and FP32 operations per second."""
    from triton.testing import do_bench

    a, b = (torch.randn(8192, 8192, device="cuda", dtype=torch.float16) for _ in range(2))
    mm_ms = do_bench(lambda: a @ b, warmup=100, rep=500, return_mode="median")
    del a, b
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    block, iters = 1024, 4096
    x = torch.rand(sms * 64 * block, device="cuda")
    y = torch.empty_like(x)
    grid = (x.numel() // block,)
    exp_ms = do_bench(lambda: _exp_loop[grid](x, y, ITERS=iters, BLOCK=block, num_warps=4), return_mode="median")
    fma_ms = do_bench(lambda: _fma_loop[grid](x, y, ITERS=iters, BLOCK=block, num_warps=4), return_mode="median")
    return {"tensor_tflops": 2 * 8192**3 / mm_ms / 1e9, "exp2_per_s": x.numel() * iters / exp_ms * 1e3,
            "fp32_ops_per_s": x.numel() * iters / fma_ms * 1e3}   # an FMA counted as one operation


#: FP32-unit operations per score besides the exp: scale-and-subtract (one FMA), max, add to the row sum,
#: conversion of p to 16 bits (half an instruction per score, packed) and the accumulator rescale (D / BLOCK_N
#: per score); a masked block adds an index compare (two when causal), an and, and a select.
ALU_PER_SCORE, MASK_PER_SCORE = 3.5, 4.0


def predict(config: AttentionConfig, kind: str, d: int, causal: bool, n: int, z: int, h: int,
            ceil: dict[str, float]) -> tuple[float, float]:
    """(TFLOP/s if the units took turns, TFLOP/s if they overlapped perfectly), on the FLOPs that must be done."""
    bm, bn = config.block_m, config.block_n
    tiles = tiles_visited(n, bm, bn, causal) * z * h
    if causal:
        masked = (tiles if kind in ("masked", "ws-masked") else (-(-n // bm)) * (bm // bn) * z * h)
    else:
        masked = 0 if n % bn == 0 else (-(-n // bm)) * z * h
    scores = tiles * bm * bn
    t_mma = scores * 4 * d / (ceil["tensor_tflops"] * 1e12)
    t_exp = scores * (1 + 1 / bn) / ceil["exp2_per_s"]
    t_alu = (scores * (ALU_PER_SCORE + d / bn) + masked * bm * bn * MASK_PER_SCORE) / ceil["fp32_ops_per_s"]
    useful = 4 * z * h * n * n * d / (2 if causal else 1)
    return useful / (t_mma + t_exp + t_alu) / 1e12, useful / max(t_mma, t_exp + t_alu) / 1e12


# ---------------------------------------------------------------------------------------------------
# SDPA
# ---------------------------------------------------------------------------------------------------

def sdpa_backend(alone_too: bool = True) -> dict:
    """The kernels the profiler saw for one SDPA call per (D, causal), and the backend they belong to; and (with
    ``alone_too``) each backend PyTorch offers, timed alone (sdpa_kernel) at N = 4096 and 16384, fp16."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.profiler import ProfilerActivity, profile
    from triton.testing import do_bench

    found = {}
    for d in HEAD_DIMS:
        for causal in (False, True):
            q, k, v = inputs(4, 2048 // d, 4096, d, torch.float16)
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                torch.cuda.synchronize()
            found[f"D={d}{', causal' if causal else ''}"] = sorted(
                {e.name for e in prof.events() if e.device_type.name == "CUDA"})
    backend = sdpa_backend_of([n for names in found.values() for n in names])
    alone = {}
    for name in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION") if alone_too else ():
        be = getattr(SDPBackend, name, None)
        if be is None:
            continue
        for d in HEAD_DIMS:
            for causal in (False, True):
                for n in (4096, 16384):
                    q, k, v = inputs(4, 2048 // d, n, d, torch.float16)
                    key = f"{name} D={d}{' causal' if causal else ''} N={n}"
                    try:
                        with sdpa_kernel([be]):
                            ms = do_bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                                          return_mode="median")
                        flops = 4 * 4 * (2048 // d) * n * n * d / (2 if causal else 1)
                        alone[key] = round(flops / ms / 1e9, 1)
                    except Exception as exc:  # noqa: BLE001 - a backend that refuses this shape
                        alone[key] = f"unavailable: {type(exc).__name__}"
    return {"backend": backend, "kernels": found, "tflops_by_backend_do_bench": alone}


# ---------------------------------------------------------------------------------------------------
# The sweep
# ---------------------------------------------------------------------------------------------------

def sweep(jobs: int) -> dict:
    from triton_course.bench import METHOD, steady_rounds

    ns = notebook()
    t0 = time.time()
    failed = warm_all(jobs) if jobs > 0 else {}
    print(f"compiled in {time.time() - t0:.0f} s; failed: {sorted(failed)}", flush=True)
    for i, (name, *_rest) in enumerate(VARIANTS):   # what the workers could not check is checked here
        if name not in failed:
            try:
                problems = check(i, torch.float16)
            except Exception as exc:  # noqa: BLE001
                problems = [f"{type(exc).__name__}: {str(exc)[:200]}"]
            if problems:
                failed[name] = "; ".join(problems)
    ceil = ceilings()
    print("ceilings", {k: f"{v:.4g}" for k, v in ceil.items()}, flush=True)
    sdpa = lambda q, k, v, causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
    rows = []
    for dtype in (torch.float16, torch.bfloat16):
        for d in HEAD_DIMS:
            for causal in (False, True):
                table = ns["HOPPER_CONFIGS"][(d, causal)]
                if dtype == torch.float16:
                    chosen = {VARIANTS[i][0]: i for i in range(len(VARIANTS))
                              if (d, causal) in cases(i) and VARIANTS[i][0] not in failed}
                else:
                    chosen = {}
                z, h = 4, 2048 // d
                for n in (NS_N if dtype == torch.float16 else (4096, 16384)):
                    fns = {name: (lambda q, k, v, _i=i: runner(_i)(q, k, v, causal)) for name, i in chosen.items()}
                    fns["notebook table"] = lambda q, k, v: ns["attention"](q, k, v, causal)
                    fns["SDPA"] = lambda q, k, v: sdpa(q, k, v, causal)
                    times = steady_rounds(fns, lambda: inputs(z, h, n, d, dtype), rounds=ROUNDS)
                    flops = 4 * z * h * n * n * d / (2 if causal else 1)
                    tflops = {name: round(flops / statistics.median(t) / 1e9, 1) for name, t in times.items()}
                    spread = {name: round((max(t) - min(t)) / statistics.median(t), 3) for name, t in times.items()}
                    predicted = {}
                    for name, i in chosen.items():
                        lo, hi = predict(VARIANTS[i][1], VARIANTS[i][2], d, causal, n, z, h, ceil)
                        predicted[name] = [round(lo, 1), round(hi, 1)]
                    lo, hi = predict(for_length(table, n), "split", d, causal, n, z, h, ceil)
                    predicted["notebook table"] = [round(lo, 1), round(hi, 1)]
                    row = {"dtype": str(dtype)[6:], "D": d, "causal": causal, "N": n, "Z": z, "H": h,
                           "table_config": for_length(table, n).describe(), "tflops": tflops, "round_spread": spread,
                           "predicted_tflops_serial_to_overlapped": predicted,
                           "ratio_to_sdpa": {name: round(v / tflops["SDPA"], 3) for name, v in tflops.items()}}
                    rows.append(row)
                    best = max((v, k) for k, v in tflops.items() if k != "SDPA")
                    print(f"{row['dtype']} D={d} causal={causal!s:5} N={n:5}: SDPA {tflops['SDPA']:6.1f}  "
                          f"table {tflops['notebook table']:6.1f} ({row['ratio_to_sdpa']['notebook table']:.2f}, "
                          f"predicted {predicted['notebook table'][0]:.0f}-{predicted['notebook table'][1]:.0f})  "
                          f"best {best[1]} {best[0]:.1f} ({best[0] / tflops['SDPA']:.2f})", flush=True)
    winners = {}
    for d in HEAD_DIMS:
        for causal in (False, True):
            sel = [r for r in rows if r["dtype"] == "float16" and r["D"] == d and r["causal"] == causal]
            names = [k for k in sel[0]["tflops"] if k != "SDPA"]
            score = {k: math.exp(statistics.fmean(math.log(r["ratio_to_sdpa"][k]) for r in sel)) for k in names}
            worst = {k: min(r["ratio_to_sdpa"][k] for r in sel) for k in names}
            best = max(names, key=lambda k: (worst[k] >= 0.9, score[k]))
            winners[f"D={d}{', causal' if causal else ''}"] = {
                "best": best, "geomean_ratio_to_sdpa": round(score[best], 3),
                "worst_ratio_to_sdpa": worst[best], "table_geomean": round(score["notebook table"], 3),
                "table_worst": worst["notebook table"],
                "config": asdict(VARIANTS[[v[0] for v in VARIANTS].index(best)][1]) if best in dict(
                    (v[0], 0) for v in VARIANTS) else None}
    return {"chapter": "09_attention launch sweep", "command": "python lab/sweeps/attention_sweep.py",
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
            "method": METHOD, "rounds": ROUNDS, "ceilings": ceil,
            "prediction_model": {"alu_ops_per_score": ALU_PER_SCORE, "mask_ops_per_score": MASK_PER_SCORE,
                                 "range": "units taking turns .. perfect overlap; wave quantisation not modelled"},
            "variants": {v[0]: {"config": asdict(v[1]), "kernel": v[2], "head_dims": list(v[3]),
                                "causal": list(v[4])} for v in VARIANTS},
            "not_usable": failed, "sdpa": sdpa_backend(), "rows": rows, "winners": winners,
            "seconds": round(time.time() - t0)}


def print_table(record: dict) -> None:
    print("\nWinners (float16; geometric mean of Triton/SDPA over N = 1024 ... 16384, worst N in brackets):")
    for key, w in record["winners"].items():
        print(f"  {key:14} best {w['best']:28} {w['geomean_ratio_to_sdpa']:.3f} ({w['worst_ratio_to_sdpa']:.3f}); "
              f"notebook table {w['table_geomean']:.3f} ({w['table_worst']:.3f})")
    print(f"SDPA backend: {record['sdpa']['backend']}")
    print("HOPPER_CONFIGS = {")
    for key, w in record["winners"].items():
        c = w["config"]
        if c is None:
            continue
        d = int(key.split(",")[0][2:])
        print(f"    ({d}, {'causal' in key}): AttentionConfig(block_m={c['block_m']}, block_n={c['block_n']}, "
              f"num_warps={c['num_warps']}, num_stages={c['num_stages']}, tma={c['tma']}, "
              f"warp_spec={c['warp_spec']}),")
    print("}")
    bf = [r for r in record["rows"] if r["dtype"] == "bfloat16"]
    for r in bf:
        print(f"  bf16 D={r['D']} causal={r['causal']} N={r['N']}: table/SDPA {r['ratio_to_sdpa']['notebook table']:.3f}")


# ---------------------------------------------------------------------------------------------------
# The focused sweep (--focus)
# ---------------------------------------------------------------------------------------------------

FOCUS_OUT = ROOT / "solutions" / "09_attention" / "records" / "09_attention_focus.json"
#: bfloat16 runs at these N only: the new table and each case's float16 winner, against SDPA.
BF16_NS = (1024, 4096, 16384)
#: Cases in the order they are timed: the open gap (D = 128) first.
FOCUS_CASES = ((128, False), (128, True), (64, False), (64, True))


def sdpa_flash(q, k, v, causal):
    """SDPA restricted to its FlashAttention-2 backend (for the record beside the default, cuDNN on Hopper)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _time_case(fns: dict, d: int, causal: bool, n: int, dtype) -> tuple[dict, dict]:
    """TFLOP/s (median of ROUNDS interleaved rounds) and round spread of each fn(q, k, v) at one case."""
    from triton_course.bench import steady_rounds

    z, h = 4, 2048 // d
    times = steady_rounds(fns, lambda: inputs(z, h, n, d, dtype), rounds=ROUNDS)
    flops = 4 * z * h * n * n * d / (2 if causal else 1)
    tflops = {name: round(flops / statistics.median(t) / 1e9, 1) for name, t in times.items()}
    spread = {name: round((max(t) - min(t)) / statistics.median(t), 3) for name, t in times.items()}
    return tflops, spread


#: The table may choose one launch up to this N and another beyond it: the costs paid once per program (the
#: pipeline's start, descriptors made in the kernel) weigh most where each program visits few key blocks.
SHORT_N = 2048
#: ... but only where that buys the short sequences at least this much (geometric mean over N <= SHORT_N): a
#: second launch is one more thing to explain, and differences of a percent or two are within run-to-run noise.
SPLIT_GAIN = 1.03


def _table_by_length(rows: list[dict], names: list[str]) -> list[dict]:
    """The table's launches for one case: [{"launch", "up_to_n"}], shortest first: the winner beyond SHORT_N (by
    _winner's rule), and another for N <= SHORT_N where one wins there by SPLIT_GAIN or more."""
    short_rows = [r for r in rows if r["N"] <= SHORT_N]
    long = _winner([r for r in rows if r["N"] > SHORT_N], names)[0]
    short, score, _ = _winner(short_rows, names)
    if short == long or score[short] < SPLIT_GAIN * score[long]:
        return [{"launch": long, "up_to_n": None}]
    return [{"launch": short, "up_to_n": SHORT_N}, {"launch": long, "up_to_n": None}]


def _winner(rows: list[dict], names: list[str]) -> tuple[str, dict, dict]:
    """The candidate whose worst ratio to SDPA reaches 0.9 (if any does) with the best geometric mean."""
    score = {k: math.exp(statistics.fmean(math.log(r["ratio_to_sdpa"][k]) for r in rows)) for k in names}
    worst = {k: min(r["ratio_to_sdpa"][k] for r in rows) for k in names}
    return max(names, key=lambda k: (worst[k] >= 0.9, score[k])), score, worst


def sweep_focus(jobs: int) -> dict:
    from triton_course.bench import METHOD

    ns = notebook()
    t0 = time.time()
    failed = warm_all(jobs) if jobs > 0 else {}
    for i, (name, *_rest) in enumerate(ACTIVE):   # what the workers could not check is checked here
        if name not in failed:
            try:
                problems = check(i, torch.float16)
            except Exception as exc:  # noqa: BLE001
                problems = [f"{type(exc).__name__}: {str(exc)[:200]}"]
            if problems:
                failed[name] = "; ".join(problems)
    print(f"compiled and checked in {time.time() - t0:.0f} s; not usable: {sorted(failed)}", flush=True)
    ceil = ceilings()
    print("ceilings", {k: f"{v:.4g}" for k, v in ceil.items()}, flush=True)
    sdpa = lambda q, k, v, causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
    rows, winners = [], {}
    for d, causal in FOCUS_CASES:
        chosen = {ACTIVE[i][0]: i for i in range(len(ACTIVE)) if (d, causal) in cases(i) and ACTIVE[i][0] not in failed}
        table = ns["HOPPER_CONFIGS"][(d, causal)]
        z, h = 4, 2048 // d
        case_rows = []
        for n in NS_N:
            fns = {name: (lambda q, k, v, _i=i: runner(_i)(q, k, v, causal)) for name, i in chosen.items()}
            fns["notebook table"] = lambda q, k, v: ns["attention"](q, k, v, causal)
            fns["SDPA"] = lambda q, k, v: sdpa(q, k, v, causal)
            fns["SDPA flash"] = lambda q, k, v: sdpa_flash(q, k, v, causal)
            tflops, spread = _time_case(fns, d, causal, n, torch.float16)
            predicted = {name: [round(x, 1) for x in predict(ACTIVE[i][1], ACTIVE[i][2], d, causal, n, z, h, ceil)]
                         for name, i in chosen.items()}
            row = {"dtype": "float16", "D": d, "causal": causal, "N": n, "Z": z, "H": h,
                   "table_config": for_length(table, n).describe(), "tflops": tflops, "round_spread": spread,
                   "predicted_tflops_serial_to_overlapped": predicted,
                   "ratio_to_sdpa": {name: round(v / tflops["SDPA"], 3) for name, v in tflops.items()}}
            rows.append(row)
            case_rows.append(row)
            best = max((v, k) for k, v in tflops.items() if k in chosen)
            print(f"float16 D={d} causal={causal!s:5} N={n:5}: SDPA {tflops['SDPA']:6.1f} (flash {tflops['SDPA flash']:6.1f})  "
                  f"table {tflops['notebook table']:6.1f} ({row['ratio_to_sdpa']['notebook table']:.2f})  "
                  f"best {best[1]} {best[0]:.1f} ({best[0] / tflops['SDPA']:.2f})", flush=True)
        names = list(chosen)
        best, score, worst = _winner(case_rows, names)
        at_16k = case_rows[-1]["tflops"]
        table_by_length = _table_by_length(case_rows, names)
        for entry in table_by_length:
            entry["config"] = asdict(ACTIVE[chosen[entry["launch"]]][1])
        winners[f"D={d}{', causal' if causal else ''}"] = {
            "best": best, "geomean_ratio_to_sdpa": round(score[best], 3), "worst_ratio_to_sdpa": worst[best],
            "table": table_by_length,
            "config": asdict(ACTIVE[chosen[best]][1]), "kernel": ACTIVE[chosen[best]][2],
            "table_before": describe_entry(table),
            "table_geomean": round(math.exp(statistics.fmean(math.log(r["ratio_to_sdpa"]["notebook table"])
                                                             for r in case_rows)), 3),
            "every_candidate": {k: {"geomean_ratio_to_sdpa": round(score[k], 3), "worst_ratio_to_sdpa": worst[k],
                                    "tflops_N_16384": at_16k[k],
                                    "predicted_tflops_N_16384": PREDICTED_TFLOPS.get((d, causal), {}).get(k)}
                                for k in names},
            "sdpa_flash_geomean_ratio_to_sdpa": round(math.exp(statistics.fmean(
                math.log(r["ratio_to_sdpa"]["SDPA flash"]) for r in case_rows)), 3)}
    for d, causal in FOCUS_CASES:   # bfloat16: the table as it stands and the float16 winner
        key = f"D={d}{', causal' if causal else ''}"
        win = winners[key]["table"][-1]["launch"]
        fns = {"notebook table": lambda q, k, v, _c=causal: ns["attention"](q, k, v, _c),
               f"float16 winner: {win}": (lambda q, k, v, _i=[v[0] for v in ACTIVE].index(win), _c=causal:
                                          runner(_i)(q, k, v, _c)),
               "SDPA": lambda q, k, v, _c=causal: sdpa(q, k, v, _c),
               "SDPA flash": lambda q, k, v, _c=causal: sdpa_flash(q, k, v, _c)}
        for n in BF16_NS:
            tflops, spread = _time_case(fns, d, causal, n, torch.bfloat16)
            row = {"dtype": "bfloat16", "D": d, "causal": causal, "N": n, "Z": 4, "H": 2048 // d,
                   "table_config": for_length(ns["HOPPER_CONFIGS"][(d, causal)], n).describe(), "tflops": tflops,
                   "round_spread": spread, "ratio_to_sdpa": {k: round(v / tflops["SDPA"], 3) for k, v in tflops.items()}}
            rows.append(row)
            print(f"bfloat16 D={d} causal={causal!s:5} N={n:5}: SDPA {tflops['SDPA']:6.1f}  "
                  + "  ".join(f"{k} {v:.1f} ({row['ratio_to_sdpa'][k]:.2f})" for k, v in tflops.items() if k != "SDPA"),
                  flush=True)
    return {"chapter": "09_attention focused launch sweep", "command": "python lab/sweeps/attention_sweep.py --focus",
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
            "method": METHOD, "rounds": ROUNDS, "ceilings": ceil,
            "prediction_model": {"alu_ops_per_score": ALU_PER_SCORE, "mask_ops_per_score": MASK_PER_SCORE,
                                 "range": "units taking turns .. perfect overlap; wave quantisation not modelled",
                                 "point_predictions_N_16384": {f"D={d}{', causal' if c else ''}": v
                                                               for (d, c), v in PREDICTED_TFLOPS.items()}},
            "variants": {v[0]: {"config": asdict(v[1]), "kernel": v[2], "head_dims": list(v[3]),
                                "causal": list(v[4])} for v in ACTIVE},
            "not_usable": failed, "sdpa": sdpa_backend(alone_too=False), "rows": rows, "winners": winners,
            "seconds": round(time.time() - t0)}


def print_focus(record: dict) -> None:
    print("\nfloat16 at N = 16384, TFLOP/s: measured (predicted before the run); geometric mean of Triton/SDPA over "
          "N = 1024 ... 16384 [worst N]")
    for key, w in record["winners"].items():
        print(f"  {key}  (SDPA flash alone: {w['sdpa_flash_geomean_ratio_to_sdpa']:.3f} of SDPA)")
        for name, c in sorted(w["every_candidate"].items(), key=lambda kv: -kv[1]["geomean_ratio_to_sdpa"]):
            pred = "-" if c["predicted_tflops_N_16384"] is None else f"{c['predicted_tflops_N_16384']:.0f}"
            print(f"    {name:30} {c['tflops_N_16384']:6.1f} ({pred:>4})  {c['geomean_ratio_to_sdpa']:.3f} "
                  f"[{c['worst_ratio_to_sdpa']:.3f}]{'  <- best' if name == w['best'] else ''}")
    print(f"not usable: {record['not_usable'] or 'none'}")
    print(f"SDPA backend: {record['sdpa']['backend']}")
    print("HOPPER_CONFIGS = {")
    for key, w in record["winners"].items():
        d = int(key.split(",")[0][2:])
        launches = []
        for entry in w.get("table") or [{"launch": w["best"], "up_to_n": None, "config": w["config"]}]:
            c = entry["config"]
            launches.append(f"AttentionConfig(block_m={c['block_m']}, block_n={c['block_n']}, "
                            f"num_warps={c['num_warps']}, num_stages={c['num_stages']}, tma={c['tma']}, "
                            f"warp_spec={c['warp_spec']}"
                            + (f", up_to_n={entry['up_to_n']}" if entry["up_to_n"] else "") + ")")
        kinds = {record["variants"][e["launch"]]["kernel"] for e in w.get("table") or [{"launch": w["best"]}]}
        note = "  # one masked loop: a kernel of the sweep, not the notebook's" if kinds != {"split"} else ""
        entry_text = launches[0] if len(launches) == 1 else "(" + ", ".join(launches) + ")"
        print(f"    ({d}, {'causal' in key}): {entry_text},{note}")
    print("}")
    for r in record["rows"]:
        if r["dtype"] == "bfloat16":
            print(f"  bf16 D={r['D']} causal={r['causal']!s:5} N={r['N']:5}: "
                  + ", ".join(f"{k} {v:.3f}" for k, v in r["ratio_to_sdpa"].items() if k != "SDPA"))


def dry_run() -> int:
    """Every variant on tiny inputs in the interpreter (TMA emulated), against float64."""
    notebook()
    bad = 0
    for i, (name, *_rest) in enumerate(ACTIVE):
        problems = check(i, torch.float32, device="cpu", n=150, z=1)
        print(f"{name:28} {'ok' if not problems else problems}")
        bad += bool(problems)
    first = ROOT / "solutions" / "09_attention" / "records" / "09_attention_sweep.json"   # the ceilings the first sweep measured on the H200
    ceil = (json.loads(first.read_text())["ceilings"] if first.exists() else
            {"tensor_tflops": 650.0, "exp2_per_s": 4.17e12, "fp32_ops_per_s": 3.24e13})
    for d in HEAD_DIMS:
        for causal in (False, True):
            cfg = for_length(notebook()["HOPPER_CONFIGS"][(d, causal)], 16384)
            lo, hi = predict(cfg, "split", d, causal, 16384, 4, 2048 // d, ceil)
            print(f"prediction with the H200's ceilings, D={d} causal={causal} N=16384, table ({cfg.describe()}): "
                  f"{lo:.0f}-{hi:.0f} TFLOP/s")
    if FOCUS:
        for (d, causal), preds in PREDICTED_TFLOPS.items():
            for name, point in preds.items():
                _, config, kind, _, _ = ACTIVE[[v[0] for v in ACTIVE].index(name)]
                lo, hi = predict(config, kind, d, causal, 16384, 4, 2048 // d, ceil)
                print(f"  D={d} causal={causal!s:5} {name:30} predicted {point} TFLOP/s (model range {lo:.0f}-{hi:.0f})")
    return 1 if bad else 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--warm", type=int, help=argparse.SUPPRESS)
    p.add_argument("--jobs", type=int, default=8, help="parallel compile workers (0: compile in this process)")
    p.add_argument("--focus", action="store_true", help="the focused second sweep (FOCUS_VARIANTS)")
    args = p.parse_args(argv)
    if args.dry_run:
        return dry_run()
    if args.warm is not None:
        return warm(args.warm)
    if not torch.cuda.is_available():
        print("attention_sweep.py needs a CUDA GPU (or --dry-run)", file=sys.stderr)
        return 2
    if args.focus:
        record = sweep_focus(args.jobs)
        FOCUS_OUT.write_text(json.dumps(record, indent=1) + "\n")
        print_focus(record)
        return 0
    record = sweep(args.jobs)
    OUT.write_text(json.dumps(record, indent=1) + "\n")
    print_table(record)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
