"""Launch shapes of chapter 06's RMSNorm and chapter 08's fused add + RMSNorm against their peers: the sweep that
sets the constants of the reference's launch rule (issue 15, point 3).

    python lab/sweeps/norms_gaps.py
        (on one H200: about 3 minutes; writes solutions/06_rmsnorm/records/06_rmsnorm_gaps_sweep.json after every shape, prints a table
        and the rule's constants at the end; no new shape starts after --budget-s seconds, 170 by default)
    python lab/sweeps/norms_gaps.py --only add_rmsnorm --budget-s 420 --out solutions/08_fusion/records/08_fusion_gaps_sweep.json
        (the fused kernel's shapes alone, which the full run leaves out for time: chapter 08's constants)
    python lab/sweeps/norms_gaps.py --dry-run
        (anywhere; without a GPU under Triton's interpreter: builds every variant of every shape, checks a sample
        of them at a few rows, runs the rule's search on made-up rates, prints the plan; records nothing)

The shapes are those where peers.py (lab/records/peers.json) found the reference behind the best of torch,
torch.compile and Liger-Kernel, or under 90% of a same-size copy, and their neighbours: widths 64, 256, 1000,
4096, 5120 and 8192, 4096 to 262144 rows, float32, float16 and bfloat16. At each, side by side in
``triton_course.bench.steady_rounds`` (medians of interleaved rounds on rotating fresh inputs):

* ``rowsR/wW[ hints]``: the notebook's own kernel (``rmsnorm_kernel`` of 06, ``add_rmsnorm_kernel`` of 08) with R
  rows per program, W warps, with and without cache hints (STREAM), always told the rows' alignment (ALIGN);
* ``... w-late``: the same launch of a copy of that kernel that loads the weight after the reduction instead of
  with the rows (fewer registers held across the reduction, the weight's latency after it), at the launches the
  rule gives with at least 4 warps;
* ``reference``: the notebook's launcher as students call it (its launch rule); ``reference, no ALIGN``: the
  same launch without the alignment promise (at widths that are not multiples of 16 elements);
* ``previous reference``: the kernel and launch rule measured in lab/records/peers.json (before this sweep);
* peers from lab/sweeps/peers.py: torch eager, ``torch.compile`` (``dynamic=False``) and Liger-Kernel 0.8.5
  when installed (``pip install --no-deps liger-kernel==0.8.5``); and a copy of the same bytes.

Round 1 times every variant, the peers and the copy for 3 rounds at each shape. Then the launch rule is fitted:
the notebooks compute (ROWS, num_warps, STREAM) from TILE_BYTES (SHORT_TILE_BYTES for rows narrower than one
warp's 16-byte loads, 512 bytes), BYTES_PER_THREAD, MIN_WARPS and STREAM_ROW_BYTES (and load the weight early
or late); every combination of those constants is scored on round 1 by its worst ratio to the best peer over
the shapes (then by the mean ratio), separately for the two kernels. Round 2 times, for 7 rounds, the 5 fastest
launches, the notebook's rule, the fitted rule, the ablations, the previous reference, the peers and the copy.
The table printed at the end says, per shape, the reference's launch and GB/s, the best launch, the best peer
and the same-size copy; then the constants to put in the notebooks (``--apply`` writes them into the solution
notebooks' cells; then ``python -m grader release``). Every variant is compiled first, in parallel worker
processes (Triton's and Inductor's caches), so the timed process loads kernels rather than compiling them.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import datetime as dt
import importlib.util
import io
import itertools
import json
import multiprocessing
import os
import random
import re
import statistics
import sys
import time
import types
from pathlib import Path

# Inductor compiles in the worker processes, one at a time each (not a pool of its own per worker); the same
# setting in the timed process keeps its cache keys equal to theirs.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import triton_course  # noqa: E402  -- picks the backend (the interpreter without a GPU) before triton is imported

import nbformat  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from grader.course import solution_notebook  # noqa: E402
from grader.notebook_code import exec_cell  # noqa: E402

sys.path.insert(0, str(ROOT / "lab" / "sweeps"))
import graph_timing  # noqa: E402
from records import shown_path  # noqa: E402

OUT = ROOT / "solutions" / "06_rmsnorm" / "records" / "06_rmsnorm_gaps_sweep.json"
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
#: (kernel, rows, width, dtype). The flagged shapes of lab/records/peers.json are all here.
SHAPES = [
    ("rmsnorm", 262144, 64, F16), ("rmsnorm", 262144, 64, F32), ("rmsnorm", 65536, 256, BF16),
    ("rmsnorm", 32768, 1000, F16), ("rmsnorm", 32768, 1000, BF16), ("rmsnorm", 32768, 1000, F32),
    ("rmsnorm", 4096, 4096, F16), ("rmsnorm", 8192, 5120, F16), ("rmsnorm", 8192, 5120, BF16),
    ("rmsnorm", 8192, 5120, F32), ("rmsnorm", 4096, 8192, F16),
    ("rmsnorm", 524288, 32, F16), ("rmsnorm", 524288, 32, F32),
    ("add_rmsnorm", 262144, 64, F16), ("add_rmsnorm", 32768, 1000, F16), ("add_rmsnorm", 32768, 1000, BF16),
    ("add_rmsnorm", 4096, 4096, F16), ("add_rmsnorm", 8192, 4096, F16), ("add_rmsnorm", 8192, 5120, F16),
    ("add_rmsnorm", 8192, 5120, BF16),
]
CHAPTER = {"rmsnorm": "06_rmsnorm", "add_rmsnorm": "08_fusion"}
SOLUTION_CELL = {"rmsnorm": "rmsnorm", "add_rmsnorm": "fused"}
LAUNCHER = {"rmsnorm": "rmsnorm", "add_rmsnorm": "add_rmsnorm"}
KERNEL = {"rmsnorm": "rmsnorm_kernel", "add_rmsnorm": "add_rmsnorm_kernel"}
FIRST_ROUNDS, FINAL_ROUNDS, FINALISTS = 3, 7, 5
ROWS_CHOICES, WARPS_CHOICES = (1, 2, 4, 8, 16, 32, 64, 128), (1, 2, 4, 8, 16)
#: Fewest values a thread of a timed launch handles. ``--short-rows`` lowers it to half a value (Liger-Kernel's
#: launch on rows of 64: one row a program, 4 warps) and lets the rule stack short rows into tiles of 128 to 512
#: bytes as well (TILE_BYTES below).
MIN_VALUES_PER_THREAD = 4
SHORT_ROWS_VALUES_PER_THREAD, SHORT_ROWS_TILE_BYTES = 0.5, (128, 256, 512)
#: The rule's constants searched (names as in the notebooks), and the value each notebook may not change.
RULE_GRID = {"TILE_BYTES": (1024, 2048, 4096, 8192), "SHORT_TILE_BYTES": (1024, 2048, 4096, 8192),
             "BYTES_PER_THREAD": (16, 32, 64, 128, 256),
             "MIN_WARPS": (1, 2, 4), "STREAM_ROW_BYTES": (0, 1024, 2048, 4096, 1 << 30)}
BODIES = ("early", "late")   # the notebook's kernel (weight loaded with the rows) or the w-late copy
#: The shapes the dry run rehearses the report on.
REHEARSAL = ["rmsnorm 262144x64 float16", "rmsnorm 32768x1000 float16", "add_rmsnorm 32768x1000 float16"]
#: The w-late copy is timed at the launches of this smaller grid only (Triton's default warps at least; hints on
#: rows of up to 2 KB, or never).
LATE_GRID = {"MIN_WARPS": (4,), "STREAM_ROW_BYTES": (0, 2048)}
BIG = 64 * 2**20             # traffic from which a memory-bound kernel must reach 90% of a same-size copy
EPS = 1e-6


# ---------------------------------------------------------------------------------------------------------------
# Kernels defined here: the weight loaded after the reduction, and the previous references (as peers.json ran them)
# ---------------------------------------------------------------------------------------------------------------

@triton.jit
def rmsnorm_weight_late(x_ptr, w_ptr, out_ptr, M, N, stride_x, stride_out, eps,
                        BLOCK_N: tl.constexpr, ROWS: tl.constexpr, STREAM: tl.constexpr = False,
                        ALIGN: tl.constexpr = 1):
    """Chapter 06's kernel with the weight loaded after the sum of squares."""
    N = N // ALIGN * ALIGN
    stride_x = stride_x // ALIGN * ALIGN
    stride_out = stride_out // ALIGN * ALIGN
    rows = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < N
    ok = (rows < M)[:, None] & col_ok[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=ok, other=0.0,
                eviction_policy="evict_first" if STREAM else "").to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / N + eps)
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows[:, None] * stride_out + cols[None, :], (x * rstd[:, None] * w[None, :]).to(
        out_ptr.dtype.element_ty), mask=ok, cache_modifier=".cs" if STREAM else "")


@triton.jit
def add_rmsnorm_weight_late(x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, n_rows, n_cols, eps,
                            BLOCK_N: tl.constexpr, ROWS: tl.constexpr, STREAM: tl.constexpr = False,
                            ALIGN: tl.constexpr = 1):
    """Chapter 08's kernel with the weight loaded after the sum of squares."""
    n_cols = n_cols // ALIGN * ALIGN
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    inside = (rows < n_rows)[:, None] & col_ok[None, :]
    offsets = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
    x = tl.load(x_ptr + offsets, mask=inside, other=0.0, eviction_policy="evict_first" if STREAM else "").to(tl.float32)
    r = tl.load(r_ptr + offsets, mask=inside, other=0.0, eviction_policy="evict_first" if STREAM else "").to(tl.float32)
    h = x + r
    tl.store(h_ptr + offsets, h.to(h_ptr.dtype.element_ty), mask=inside, cache_modifier=".cs" if STREAM else "")
    inv_rms = tl.math.rsqrt(tl.sum(h * h, axis=1) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    tl.store(y_ptr + offsets, (h * inv_rms[:, None] * w[None, :]).to(y_ptr.dtype.element_ty), mask=inside,
             cache_modifier=".cs" if STREAM else "")


@triton.jit
def previous_rmsnorm_kernel(x_ptr, w_ptr, out_ptr, M, N, stride_x, stride_out, eps,
                            BLOCK_N: tl.constexpr, ROWS: tl.constexpr, STREAM: tl.constexpr = False):
    """Chapter 06's reference kernel as lab/records/peers.json measured it."""
    rows = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < N
    ok = (rows < M)[:, None] & col_ok[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=ok, other=0.0,
                eviction_policy="evict_first" if STREAM else "").to(tl.float32)
    mean_sq = tl.sum(x * x, axis=1) / N
    rstd = 1.0 / tl.sqrt(mean_sq + eps)
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    y = x * rstd[:, None] * w[None, :]
    tl.store(out_ptr + rows[:, None] * stride_out + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=ok,
             cache_modifier=".cs" if STREAM else "")


@triton.jit
def previous_add_rmsnorm_kernel(x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, n_rows, n_cols, eps,
                                BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    """Chapter 08's reference kernel as lab/records/peers.json measured it."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    inside = (rows < n_rows)[:, None] & col_ok[None, :]
    offsets = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
    x = tl.load(x_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
    h = x + r
    tl.store(h_ptr + offsets, h.to(h_ptr.dtype.element_ty), mask=inside)
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    inv_rms = tl.math.rsqrt(tl.sum(h * h, axis=1) / n_cols + eps)
    tl.store(y_ptr + offsets, (h * inv_rms[:, None] * w[None, :]).to(y_ptr.dtype.element_ty), mask=inside)


#: The previous launch rules: 06's LAUNCH_TABLE by BLOCK_N (rows, warps, hints) and 08's formula.
PREVIOUS_06_TABLE = {1024: (2, 4, True), 2048: (1, 4, True), 4096: (1, 8, False), 8192: (1, 16, False),
                     16384: (1, 16, False)}


def previous_launch(kind: str, m: int, n: int) -> tuple[int, int, int, bool]:
    """(BLOCK_N, ROWS, num_warps, STREAM) of the reference measured in lab/records/peers.json."""
    block = triton.next_power_of_2(n)
    if kind == "rmsnorm":
        if block in PREVIOUS_06_TABLE:
            rows, warps, stream = PREVIOUS_06_TABLE[block]
        elif block < 1024:
            rows, warps, stream = 2048 // block, 4, True
        else:
            rows, warps, stream = 1, 16, False
        return block, max(1, min(rows, triton.next_power_of_2(m))), warps, stream
    rows = max(1, min(16, 2048 // block))
    return block, rows, 4 if block * rows <= 2048 else (8 if block <= 8192 else 16), False


# ---------------------------------------------------------------------------------------------------------------
# The notebooks' code, and the peers
# ---------------------------------------------------------------------------------------------------------------

def notebook_code(kind: str) -> dict:
    """The solution notebook's imports cell and its kernel's solution cell, run in a fresh module namespace (the
    experiment and plot cells are not needed here)."""
    chapter = CHAPTER[kind]
    nb = nbformat.read(solution_notebook(chapter), as_version=4)
    module = types.ModuleType(f"norms_gaps_{chapter}")
    sys.modules[module.__name__] = module
    ns = module.__dict__
    ns["device"] = triton_course.setup(quiet=True)
    code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    imports = next(i for i, c in code if "def expect_float" in c.source)
    for i, cell in code:
        if i == imports or cell.metadata.get("nbgrader", {}).get("grade_id") == SOLUTION_CELL[kind]:
            with contextlib.redirect_stdout(io.StringIO()):
                exec_cell(cell.source, f"<{chapter} cell {i}>", ns)
    missing = [name for name in (LAUNCHER[kind], KERNEL[kind], "launch_config", "row_alignment", *RULE_GRID)
               if name not in ns]
    if missing:
        raise SystemExit(f"{chapter}'s solution notebook lacks {missing}: this sweep fits the launch rule's "
                         "constants of those names")
    return ns


def peers_module():
    spec = importlib.util.spec_from_file_location("norms_gaps_peers", ROOT / "lab" / "sweeps" / "peers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def shape_key(kind: str, m: int, n: int, dtype: torch.dtype) -> str:
    return f"{kind} {m}x{n} {dtype_name(dtype)}"


# ---------------------------------------------------------------------------------------------------------------
# The launch rule (the notebook's own launch_config, with its constants set) and the variants of a shape
# ---------------------------------------------------------------------------------------------------------------

def rule_launch(kind: str, ns: dict, m: int, n: int, element: int, constants: dict) -> tuple[int, int, bool]:
    """(ROWS, num_warps, STREAM) that the notebook's launch_config gives with these constants."""
    saved = {k: ns[k] for k in constants}
    ns.update(constants)
    try:
        if kind == "rmsnorm":
            _, rows, warps, _, stream = ns["launch_config"](m, n, element)
        else:
            _, rows, warps, stream = ns["launch_config"](m, n, element)
    finally:
        ns.update(saved)
    return rows, warps, bool(stream)


def notebook_constants(ns: dict) -> dict:
    return {k: ns[k] for k in RULE_GRID}


def rule_settings() -> list[dict]:
    """Every combination of the rule's constants searched with the notebook's kernel body (weight loaded early);
    with the weight loaded late, the combinations of LATE_GRID (fewer: it is the second question)."""
    names = list(RULE_GRID)
    early = [dict(zip(names, values), body="early") for values in itertools.product(*RULE_GRID.values())]
    late_grid = {**RULE_GRID, **LATE_GRID}
    late = [dict(zip(names, values), body="late") for values in itertools.product(*late_grid.values())]
    return early + late


def variant_name(rows: int, warps: int, stream: bool, body: str = "early", align: bool = True) -> str:
    return (f"rows{rows}/w{warps}{' hints' if stream else ''}{' w-late' if body == 'late' else ''}"
            f"{' no-align' if not align else ''}")


def variants(kind: str, ns: dict, m: int, n: int, element: int) -> dict[str, tuple]:
    """{name: (body, rows, warps, stream, align)}: every plausible launch of the notebook's kernel (1 to 32 rows
    per program up to 16384 values a tile, 1 to 16 warps giving each thread 4 to 128 values, hints on and off),
    the w-late copy at every launch the rule can choose, and the ablations of the notebook's own launch."""
    block = triton.next_power_of_2(n)
    align = ns["row_alignment"](n, element, n, n)
    out = {}
    for rows in ROWS_CHOICES:
        if rows > 1 and (rows * block > 16384 or rows > triton.next_power_of_2(m)):
            continue
        for warps in WARPS_CHOICES:
            if not MIN_VALUES_PER_THREAD <= rows * block / (32 * warps) <= 128:
                continue
            for stream in (False, True):
                out[variant_name(rows, warps, stream)] = ("early", rows, warps, stream, align)
    for setting in rule_settings():
        rows, warps, stream = rule_launch(kind, ns, m, n, element, {k: setting[k] for k in RULE_GRID})
        out.setdefault(variant_name(rows, warps, stream, setting["body"]), (setting["body"], rows, warps, stream,
                                                                           align))
    rows, warps, stream = rule_launch(kind, ns, m, n, element, notebook_constants(ns))
    if align > 1:
        out[variant_name(rows, warps, stream, align=False)] = ("early", rows, warps, stream, 1)
    return out


def kernel_for(kind: str, body: str, ns: dict):
    if body == "previous":
        return previous_rmsnorm_kernel if kind == "rmsnorm" else previous_add_rmsnorm_kernel
    if body == "late":
        return rmsnorm_weight_late if kind == "rmsnorm" else add_rmsnorm_weight_late
    return ns[KERNEL[kind]]


def launcher(kind: str, kernel, block: int, rows: int, warps: int, meta: dict):
    """fn(*inputs): one launch with this shape, allocating its outputs (as the notebook's launchers do)."""
    if kind == "rmsnorm":
        def run(x, w):
            out = torch.empty_like(x)
            kernel[(triton.cdiv(x.shape[0], rows),)](x, w, out, x.shape[0], x.shape[1], x.stride(0), out.stride(0),
                                                     EPS, BLOCK_N=block, ROWS=rows, num_warps=warps, **meta)
            return out
    else:
        def run(x, r, w):
            y, h = torch.empty_like(x), torch.empty_like(x)
            kernel[(triton.cdiv(x.shape[0], rows),)](x, r, w, y, h, x.shape[0], x.shape[1], EPS, BLOCK_N=block,
                                                     ROWS=rows, num_warps=warps, **meta)
            return y, h
    return run


def variant_fn(kind: str, ns: dict, n: int, spec: tuple):
    body, rows, warps, stream, align = spec
    return launcher(kind, kernel_for(kind, body, ns), triton.next_power_of_2(n), rows, warps,
                    {"STREAM": stream, "ALIGN": align})


def previous_fn(kind: str, m: int, n: int):
    block, rows, warps, stream = previous_launch(kind, m, n)
    meta = {"STREAM": stream} if kind == "rmsnorm" else {}
    return launcher(kind, kernel_for(kind, "previous", {}), block, rows, warps, meta), \
        variant_name(rows, warps, stream) + " (previous kernel)"


# ---------------------------------------------------------------------------------------------------------------
# Compilation first, in worker processes (Triton's cache for every variant, Inductor's and Liger's for the peers)
# ---------------------------------------------------------------------------------------------------------------

_NS: dict = {}


def _worker_init() -> None:
    for kind in CHAPTER:
        _NS[kind] = notebook_code(kind)


def _warm(job: tuple) -> str:
    try:
        if job[0] == "peers":
            _, kind, m, n, dtype = job
            dtype = getattr(torch, dtype)
            peers = peers_module()
            make = peers.inputs(kind, m, n, dtype)
            for fn in peers.peers(kind, n, dtype, peers._liger()).values():
                fn(*make())
            torch.cuda.synchronize()
            return "ok"
        _, kind, body, dtype, m, n, block, rows, warps, meta = job
        dtype = getattr(torch, dtype)
        kernel = kernel_for(kind, body, _NS[kind])
        if kind == "rmsnorm":
            kernel.warmup(dtype, dtype, dtype, m, n, n, n, EPS, grid=(1,), BLOCK_N=block, ROWS=rows,
                          num_warps=warps, **meta)
        else:
            kernel.warmup(dtype, dtype, dtype, dtype, dtype, m, n, EPS, grid=(1,), BLOCK_N=block, ROWS=rows,
                          num_warps=warps, **meta)
        return "ok"
    except Exception as exc:  # noqa: BLE001 - the timed process compiles it again and reports what fails
        return f"{type(exc).__name__}: {str(exc)[:160]}"


def compile_jobs(namespaces: dict, shapes: list) -> list[tuple]:
    jobs: dict[tuple, tuple] = {}
    for kind, m, n, dtype in shapes:   # the peers first: each is several seconds of Inductor
        jobs[("peers", kind, m, n, dtype)] = ("peers", kind, m, n, dtype_name(dtype))
    for kind, m, n, dtype in shapes:
        ns, element = namespaces[kind], torch.empty(0, dtype=dtype).element_size()
        block = triton.next_power_of_2(n)
        spec_class = tuple("16" if v % 16 == 0 else "1" if v == 1 else "x" for v in (m, n))
        for body, rows, warps, stream, align in variants(kind, ns, m, n, element).values():
            meta = {"STREAM": stream, "ALIGN": align}
            key = (kind, body, dtype, spec_class, block, rows, warps, tuple(meta.items()))
            jobs.setdefault(key, ("triton", kind, body, dtype_name(dtype), m, n, block, rows, warps, meta))
        block, rows, warps, stream = previous_launch(kind, m, n)
        meta = {"STREAM": stream} if kind == "rmsnorm" else {}
        jobs.setdefault((kind, "previous", dtype, spec_class, block, rows, warps, tuple(meta.items())),
                        ("triton", kind, "previous", dtype_name(dtype), m, n, block, rows, warps, meta))
    return list(jobs.values())


def precompile(jobs: list[tuple]) -> dict:
    start = time.perf_counter()
    workers = max(1, min(15, (os.cpu_count() or 2) - 1))
    ctx = multiprocessing.get_context("spawn")
    try:
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx, initializer=_worker_init) as pool:
            results = list(pool.map(_warm, jobs, chunksize=1))
    except Exception as exc:  # noqa: BLE001 - the sweep still runs, compiling as it goes
        return {"jobs": len(jobs), "workers": workers, "failed": f"{type(exc).__name__}: {exc}",
                "seconds": round(time.perf_counter() - start, 1)}
    failed = [f"{j[:4]}...: {r}" for j, r in zip(jobs, results) if r != "ok"]
    return {"jobs": len(jobs), "workers": workers, "seconds": round(time.perf_counter() - start, 1),
            "not_compiled": failed[:20]}


# ---------------------------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------------------------

class Shape:
    """One shape's inputs, functions and results across the two rounds."""

    def __init__(self, kind: str, m: int, n: int, dtype: torch.dtype, ns: dict, peers, lt, simulate: bool = False,
                 timing: str = "steady"):
        """``timing``: "steady" (steady_rounds) or "graphs" (graph_timing.graph_rounds)."""
        self.kind, self.m, self.n, self.dtype, self.ns, self.simulate = kind, m, n, dtype, ns, simulate
        self.timing = timing
        self.key = shape_key(kind, m, n, dtype)
        self.element = torch.empty(0, dtype=dtype).element_size()
        self.nbytes = peers.traffic(kind, m, n, self.element)
        self.copy_bytes = (4 if kind == "add_rmsnorm" else 2) * m * n * self.element
        self.make = peers.inputs(kind, m, n, dtype)
        self.specs = variants(kind, ns, m, n, self.element)
        self.align = ns["row_alignment"](n, self.element, n, n)
        self.peer_fns = peers.peers(kind, n, dtype, lt) if not simulate else {"torch eager": (
            (lambda x, w: F.rms_norm(x, (n,), w, EPS)) if kind == "rmsnorm" else
            (lambda x, r, w: (F.rms_norm(x + r, (n,), w, EPS),)))}
        if simulate:   # the dry run's rehearsal of the report: 5 rows on this device, made-up times
            cpu_dtype = F16 if dtype is BF16 and not torch.cuda.is_available() else dtype
            self.make = lambda: _inputs(kind, 5, n, cpu_dtype, "cuda" if torch.cuda.is_available() else "cpu")
        prev, self.previous_name = previous_fn(kind, m, n)
        self.fns = {name: variant_fn(kind, ns, n, spec) for name, spec in self.specs.items()}
        self.fns.update({"reference": ns[LAUNCHER[kind]], "previous reference": prev, **self.peer_fns})
        self.fns["same-size copy"] = ((lambda x, r, w: torch.stack((x, r))) if kind == "add_rmsnorm"
                                      else (lambda x, *rest: x.clone()))
        self.peers, self.not_usable, self.round1, self.round2, self.quartiles = peers, {}, {}, {}, {}

    def rate(self, name: str, ms: float) -> float:
        return round(self.nbytes / (ms * 1e-3) / 1e9 if name != "same-size copy"
                     else self.copy_bytes / (ms * 1e-3) / 1e9, 1)

    def check(self) -> None:
        fns = {k: v for k, v in self.fns.items() if k != "same-size copy"}
        for name, problem in check_all(fns, self.kind, self.make(), self.peers).items():
            if problem is not None:
                self.not_usable[name] = problem
                del self.fns[name]

    def time(self, names: list[str], rounds: int) -> dict[str, list[float]]:
        from triton_course.bench import steady_rounds

        if self.simulate:
            rng = random.Random(len(names) * rounds)
            return {k: [self.nbytes / 1e6 / (3000 + 1000 * rng.random()) for _ in range(rounds)]
                    for k in names if k in self.fns}
        chosen = {k: self.fns[k] for k in names if k in self.fns}
        if self.timing == "graphs":
            return graph_timing.graph_rounds(chosen, self.make, rounds=rounds)
        return steady_rounds(chosen, self.make, rounds=rounds)

    def launch_of(self, constants: dict, body: str) -> str:
        rows, warps, stream = rule_launch(self.kind, self.ns, self.m, self.n, self.element, constants)
        return variant_name(rows, warps, stream, body)

    def best_peer(self, rates: dict) -> str | None:
        names = [k for k in self.peer_fns if k in rates]
        return max(names, key=rates.get) if names else None


def check_all(fns: dict, kind: str, args: tuple, peers) -> dict[str, str | None]:
    """{name: None, or what is wrong}: every function's outputs against float64 on the same inputs (the tolerance
    of peers.py: float32 1e-4, float16 2e-2, bfloat16 6e-2, relative to 1 + |expected|)."""
    want = peers.expected(kind, args)
    tol = 1e-4 if args[0].dtype == F32 else (2e-2 if args[0].dtype == F16 else 6e-2)
    out = {}
    for name, fn in fns.items():
        try:
            got = peers.outputs(fn(*args))
            err = max(float(((g.double() - w).abs() / (1 + w.abs())).max()) for g, w in zip(got, want))
            out[name] = None if err < tol else f"wrong: max error {err:.3g}"
        except Exception as exc:  # noqa: BLE001 - out of registers, or a launch this GPU refuses
            out[name] = f"failed: {type(exc).__name__}: {str(exc)[:160]}"
    return out


def fit_rule(shapes: list[Shape]) -> dict:
    """The rule's constants that meet issue 15's targets at the most shapes (round 1: within 2% of the best peer,
    and at 64 MiB or more of traffic at least 90% of a same-size copy), then have the best worst ratio to the best
    peer, then the best mean ratio (ratios to 0.1%, so that settings apart by noise tie), then change the fewest
    of the notebook's constants (no change for nothing); with the ten best settings and where the notebook's stand."""
    mine = notebook_constants(shapes[0].ns)
    scored = []
    for setting in rule_settings():
        constants = {k: setting[k] for k in RULE_GRID}
        ratios, met = {}, 0
        for s in shapes:
            peer = s.best_peer(s.round1)
            launch = s.launch_of(constants, setting["body"])
            if peer is None or launch not in s.round1:
                ratios = None
                break
            ratios[s.key] = s.round1[launch] / s.round1[peer]
            copy = s.round1.get("same-size copy")
            met += ratios[s.key] >= 0.98 and (s.nbytes < BIG or not copy or s.round1[launch] >= 0.9 * copy)
        if ratios:
            scored.append({"constants": constants, "body": setting["body"], "shapes_meeting_targets": met,
                           "worst_ratio_to_best_peer": round(min(ratios.values()), 4),
                           "mean_ratio_to_best_peer": round(statistics.fmean(ratios.values()), 4),
                           "shapes_within_2pct": sum(r >= 0.98 for r in ratios.values()), "shapes": len(ratios),
                           "worst_shape": min(ratios, key=ratios.get),
                           "is_notebook_now": constants == mine and setting["body"] == "early",
                           "constants_as_in_notebook": sum(constants[k] == mine[k] for k in constants)
                           + (setting["body"] == "early")})
    if not scored:
        return {"note": "no setting could be scored (a shape without peers, or a launch not timed)"}
    scored.sort(key=lambda r: (r["shapes_meeting_targets"], round(r["worst_ratio_to_best_peer"], 3),
                               round(r["mean_ratio_to_best_peer"], 3), r["constants_as_in_notebook"]), reverse=True)
    current = next((r for r in scored if r["is_notebook_now"]), None)
    return {"best": scored[0], "top10": scored[:10], "notebook_now": current, "settings_scored": len(scored)}


def run_sweep(args, simulate: bool = False) -> int:
    """The sweep (see the module's docstring); ``simulate``: the dry run's rehearsal of everything but the GPU
    (5 rows per shape, made-up times, no compilation in workers, no PTX)."""
    from triton_course.bench import METHOD, copy_bandwidth

    if not simulate and not torch.cuda.is_available():
        print("norms_gaps.py needs a CUDA GPU (or --dry-run)", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    namespaces = {kind: notebook_code(kind) for kind in CHAPTER}
    peers = peers_module()
    lt = peers._liger()
    if lt is None:
        print("Liger-Kernel is not installed: its column is left out (pip install --no-deps liger-kernel==0.8.5)",
              flush=True)
    shapes_todo = [s for s in SHAPES if (not args.only or any(o in shape_key(*s) for o in args.only))
                   and (not getattr(args, "kind", None) or s[0] == args.kind)]
    record = {"chapter": "06_rmsnorm and 08_fusion: launch shapes against torch, torch.compile and Liger-Kernel",
              "command": "python lab/sweeps/norms_gaps.py" + "".join(f" --only '{o}'" for o in args.only)
                         + (f" --kind {args.kind}" if getattr(args, "kind", None) else "")
                         + (" --short-rows" if getattr(args, "short_rows", False) else "")
                         + (" --timing graphs" if getattr(args, "timing", "steady") == "graphs" else "")
                         + (f" --budget-s {args.budget_s:g}" if args.budget_s != 170 else "")
                         + (f" --out {shown_path(args.out)}" if Path(args.out).resolve() != OUT.resolve() else ""),
              "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "device": torch.cuda.get_device_name(0) if not simulate else "none (simulated)",
              "torch": torch.__version__, "triton": triton.__version__,
              "liger_kernel": _version("liger-kernel"),
              "method": graph_timing.METHOD if getattr(args, "timing", "steady") == "graphs" else METHOD,
              "rounds": {"round1": FIRST_ROUNDS, "round2": FINAL_ROUNDS},
              "rule_grid": {**RULE_GRID, "body": BODIES, "w-late only with": LATE_GRID},
              "notebook_constants": {k: notebook_constants(ns) for k, ns in namespaces.items()}, "shapes": []}
    if not args.no_precompile and not simulate:
        record["precompile"] = precompile(compile_jobs(namespaces, shapes_todo))
        print(f"precompiled: {record['precompile']}", flush=True)
    record["copy_gbps"] = round(copy_bandwidth(), 1) if not simulate else None

    def save() -> None:
        record["seconds"] = round(time.perf_counter() - t0, 1)
        args.out.write_text(json.dumps(record, indent=1) + "\n")

    # round 1: every variant, the peers and the copy, at every shape
    done: list[Shape] = []
    skipped = []
    for kind, m, n, dtype in shapes_todo:
        if time.perf_counter() - t0 > args.budget_s:
            skipped.append(shape_key(kind, m, n, dtype))
            continue
        t_shape = time.perf_counter()
        s = Shape(kind, m, n, dtype, namespaces[kind], peers, lt, simulate, getattr(args, "timing", "steady"))
        s.check()
        times = s.time(list(s.fns), FIRST_ROUNDS)
        s.round1 = {k: s.rate(k, statistics.median(v)) for k, v in times.items()}
        done.append(s)
        best = max((k for k in s.round1 if k in s.specs), key=s.round1.get)
        peer = s.best_peer(s.round1)
        print(f"round 1 {s.key:<28} reference {s.round1.get('reference', float('nan')):7.0f}  best {best} "
              f"{s.round1[best]:.0f}  best peer {peer} {s.round1.get(peer, float('nan')):.0f}  copy "
              f"{s.round1.get('same-size copy', float('nan')):.0f}  [{len(s.fns)} timed, "
              f"{time.perf_counter() - t_shape:.1f} s]", flush=True)
        torch.cuda.empty_cache()
    record["skipped_for_time"] = skipped
    fits = {kind: fit_rule([s for s in done if s.kind == kind]) for kind in CHAPTER
            if any(s.kind == kind for s in done)}
    record["fitted_rule"] = fits

    # round 2: the finalists, both rules, the ablations, the previous reference, the peers and the copy
    for s in done:
        if time.perf_counter() - t0 > args.budget_s + 40:
            record["shapes"].append(shape_record(s, fits))
            continue
        launches = sorted((k for k in s.round1 if k in s.specs), key=s.round1.get, reverse=True)[:FINALISTS]
        mine = s.launch_of(notebook_constants(s.ns), "early")
        fitted = fits.get(s.kind, {}).get("best")
        extra = [mine, variant_name(*rule_launch(s.kind, s.ns, s.m, s.n, s.element, notebook_constants(s.ns)),
                                    body="late")]
        if s.align > 1:
            extra.append(variant_name(*rule_launch(s.kind, s.ns, s.m, s.n, s.element, notebook_constants(s.ns)),
                                      align=False))
        if fitted:
            extra.append(s.launch_of(fitted["constants"], fitted["body"]))
        names = list(dict.fromkeys(launches + extra + ["reference", "previous reference", *s.peer_fns,
                                                       "same-size copy"]))
        times = s.time(names, FINAL_ROUNDS)
        s.round2 = {k: s.rate(k, statistics.median(v)) for k, v in times.items()}
        s.quartiles = {k: [s.rate(k, q) for q in statistics.quantiles(v, n=4)[::-1]] for k, v in times.items()}
        record["shapes"].append(shape_record(s, fits))
        save()
        torch.cuda.empty_cache()
    record["ptx"] = ptx_evidence(namespaces) if not simulate else {}
    record["summary"] = summary_lines(record)
    save()
    print_table(record)
    print(f"{record['seconds']} s in all; written to {args.out}")
    return 0


def shape_record(s: Shape, fits: dict) -> dict:
    final = s.round2 or s.round1
    peer = s.best_peer(final)
    mine = s.launch_of(notebook_constants(s.ns), "early")
    fitted = fits.get(s.kind, {}).get("best")
    launches = [k for k in final if k in s.specs]
    best = max(launches, key=final.get) if launches else None
    row = {"kernel": s.kind, "rows": s.m, "width": s.n, "dtype": dtype_name(s.dtype), "traffic_bytes": s.nbytes,
           "align": s.align, "notebook_launch": mine, "previous_launch": s.previous_name,
           "fitted_launch": s.launch_of(fitted["constants"], fitted["body"]) if fitted else None,
           "best_launch": best, "best_peer": peer, "round1_gbps": s.round1, "round2_median_gbps": s.round2,
           "round2_quartiles_gbps": s.quartiles, "not_usable": s.not_usable}
    if "reference" in final and peer:
        row["reference_ratio_to_best_peer"] = round(final["reference"] / final[peer], 3)
    if "reference" in final and "same-size copy" in final:
        row["reference_fraction_of_same_size_copy"] = round(final["reference"] / final["same-size copy"], 3)
    row["flags"] = [f for f, bad in (
        ("more than 2% behind the best peer", row.get("reference_ratio_to_best_peer", 1) < 0.98),
        ("under 90% of a same-size copy at >= 64 MiB",
         s.nbytes >= BIG and row.get("reference_fraction_of_same_size_copy", 1) < 0.9)) if bad]
    return row


def ptx_evidence(namespaces: dict) -> dict:
    """Global loads and stores in the PTX of the reference's kernel for rows of 1000 float16, with and without
    ALIGN: what the alignment promise changes."""
    out = {}
    for kind in CHAPTER:
        ns, m, n = namespaces[kind], 32768, 1000
        rows, warps, stream = rule_launch(kind, ns, m, n, 2, notebook_constants(ns))
        for align in (ns["row_alignment"](n, 2, n, n), 1):
            kernel = ns[KERNEL[kind]]
            args = (F16,) * (3 if kind == "rmsnorm" else 5) + ((m, n, n, n) if kind == "rmsnorm" else (m, n)) + (EPS,)
            try:
                compiled = kernel.warmup(*args, grid=(1,), BLOCK_N=triton.next_power_of_2(n), ROWS=rows,
                                         num_warps=warps, STREAM=stream, ALIGN=align)
                ops = re.findall(r"\b((?:ld|st)\.global(?:\.[\w:]+)*)", compiled.asm["ptx"])
                out[f"{kind} 32768x1000 float16 ALIGN={align}"] = {op: ops.count(op) for op in sorted(set(ops))}
            except Exception as exc:  # noqa: BLE001
                out[f"{kind} 32768x1000 float16 ALIGN={align}"] = f"{type(exc).__name__}: {str(exc)[:120]}"
    return out


def summary_lines(record: dict) -> list[str]:
    lines = []
    for row in record["shapes"]:
        final = row["round2_median_gbps"] or row["round1_gbps"]
        peer = row["best_peer"]
        lines.append(f"{row['kernel']} {row['rows']}x{row['width']} {row['dtype']}: reference "
                     f"({row['notebook_launch']}) {final.get('reference', float('nan')):.0f} GB/s, "
                     f"{row.get('reference_ratio_to_best_peer', 'n/a')} of the best peer "
                     f"({peer} {final.get(peer, float('nan')):.0f}), "
                     f"{row.get('reference_fraction_of_same_size_copy', 'n/a')} of a same-size copy; best launch "
                     f"{row['best_launch']} {final.get(row['best_launch'], float('nan')):.0f}; previous reference "
                     f"{final.get('previous reference', float('nan')):.0f}"
                     + (f"; FLAG: {'; '.join(row['flags'])}" if row["flags"] else ""))
    for kind, fit in record.get("fitted_rule", {}).items():
        if "best" in fit:
            b = fit["best"]
            lines.append(f"{kind}: fitted rule {b['constants']}, weight {b['body']}: worst "
                         f"{b['worst_ratio_to_best_peer']} of the best peer (round 1, {b['worst_shape']}), "
                         f"{b['shapes_within_2pct']}/{b['shapes']} shapes within 2%")
    return lines


def print_table(record: dict) -> None:
    nan = float("nan")
    print(f"\n{'shape (GB/s)':<30}{'reference':>22}{'':>6}{'fitted rule':>24}{'':>6}{'best launch':>30}{'':>6}"
          f"{'best peer':>22}{'':>6}{'copy':>6}{'ref/peer':>9}{'ref/copy':>9}{'fit/peer':>9}")
    for row in record["shapes"]:
        final = row["round2_median_gbps"] or row["round1_gbps"]
        peer, fitted = row["best_peer"], row["fitted_launch"]
        print(f"{row['kernel'] + ' ' + str(row['rows']) + 'x' + str(row['width']) + ' ' + row['dtype']:<30}"
              f"{row['notebook_launch']:>22}{final.get('reference', nan):>6.0f}{str(fitted):>24}"
              f"{final.get(fitted, nan):>6.0f}{str(row['best_launch']):>30}{final.get(row['best_launch'], nan):>6.0f}"
              f"{str(peer)[:21]:>22}{final.get(peer, nan):>6.0f}{final.get('same-size copy', nan):>6.0f}"
              f"{row.get('reference_ratio_to_best_peer', nan):>9.3f}"
              f"{row.get('reference_fraction_of_same_size_copy', nan):>9.3f}"
              f"{final.get(fitted, nan) / final.get(peer, nan) if peer in final else nan:>9.3f}"
              + ("  FLAG" if row["flags"] else ""))
    for kind, fit in record.get("fitted_rule", {}).items():
        if "best" not in fit:
            print(f"{kind}: {fit.get('note')}")
            continue
        b, now = fit["best"], fit.get("notebook_now")
        print(f"\n{kind} ({CHAPTER[kind]}): the rule's constants, fitted on round 1 (worst ratio to the best peer, "
              "then the mean):")
        for r in fit["top10"][:5]:
            print(f"  {r['constants']} weight {r['body']}: {r['shapes_meeting_targets']}/{r['shapes']} shapes meet "
                  f"the targets; worst {r['worst_ratio_to_best_peer']} "
                  f"({r['worst_shape']}), mean {r['mean_ratio_to_best_peer']}, {r['shapes_within_2pct']}/{r['shapes']}"
                  " within 2%")
        if now:
            print(f"  the notebook's constants now {now['constants']}: worst {now['worst_ratio_to_best_peer']} "
                  f"({now['worst_shape']}), mean {now['mean_ratio_to_best_peer']}")
        change = {k: v for k, v in b["constants"].items() if record["notebook_constants"][kind][k] != v}
        print(f"  => in {CHAPTER[kind]}'s solution cell set {change or 'nothing (the constants are the fitted ones)'}"
              + ("; and load the weight after the reduction (the w-late body)" if b["body"] == "late" else ""))
    print("\nPTX global memory instructions:", json.dumps(record.get("ptx", {}), indent=1))


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


# ---------------------------------------------------------------------------------------------------------------
# Dry run
# ---------------------------------------------------------------------------------------------------------------

def dry_run(args) -> int:
    """Build every shape's variants, check a sample at a few rows (on the interpreter without a GPU), and run the
    GPU run's reporting (both rounds, the fit, the table, the JSON) on made-up times at a few shapes: the plan, and
    the code paths the GPU run takes, without timing anything."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    namespaces = {kind: notebook_code(kind) for kind in CHAPTER}
    peers = peers_module()
    shapes_todo = [s for s in SHAPES if not args.only or any(o in shape_key(*s) for o in args.only)]
    jobs = compile_jobs(namespaces, shapes_todo)
    print(f"dry run on {device}: {len(shapes_todo)} shapes, {len(jobs)} compile jobs "
          f"({sum(j[0] == 'peers' for j in jobs)} of peers), {len(rule_settings())} rule settings to score")
    ok = True
    for kind, m, n, dtype in shapes_todo:
        key = shape_key(kind, m, n, dtype)
        if device == "cpu" and dtype is BF16:
            dtype = F16   # the interpreter computes bfloat16 wrongly (chapter 06 says so); float16 stands in
            key += " (checked in float16)"
        ns = namespaces[kind]
        element = torch.empty(0, dtype=dtype).element_size()
        specs = variants(kind, ns, m, n, element)
        # a few rows, ragged against every ROWS checked; a sample of variants: each ROWS, each body, hints, no ALIGN
        small = 2 * max(spec[1] for spec in specs.values()) + 3
        sample, seen = {}, set()
        for name, spec in specs.items():
            sig = (spec[0], spec[1], spec[3], spec[4] == 1)
            if sig not in seen:
                seen.add(sig)
                sample[name] = spec
        fns = {name: variant_fn(kind, ns, n, spec) for name, spec in sample.items()}
        prev, prev_name = previous_fn(kind, small, n)
        fns.update({prev_name: prev, "reference": ns[LAUNCHER[kind]]})
        verdicts = {name: problem or "correct"
                    for name, problem in check_all(fns, kind, _inputs(kind, small, n, dtype, device), peers).items()}
        wrong = {k: v for k, v in verdicts.items() if v != "correct"}
        ok &= not wrong
        mine = variant_name(*rule_launch(kind, ns, m, n, element, notebook_constants(ns)))
        print(f"{key:<30} ALIGN {ns['row_alignment'](n, element, n, n)}  "
              f"{len(specs):>3} variants, {len(verdicts)} checked at {small} rows: "
              f"{'all correct' if not wrong else wrong}; the notebook's rule: {mine}", flush=True)
    # the GPU run's reporting (both rounds, the fit, the table, the JSON), rehearsed on made-up times
    rehearsal = [k for k in REHEARSAL if not args.only or any(o in k for o in args.only)]
    if rehearsal:
        out = Path(os.environ.get("TMPDIR", "/tmp")) / "norms_gaps_dry_run.json"
        sim = types.SimpleNamespace(only=rehearsal, no_precompile=True, budget_s=600.0, out=out)
        with contextlib.redirect_stdout(io.StringIO()) as report:
            code = run_sweep(sim, simulate=True)
        record = json.loads(out.read_text())
        fitted = {k: v.get("best", {}).get("constants") for k, v in record["fitted_rule"].items()}
        expected = [s for s in SHAPES if any(o in shape_key(*s) for o in rehearsal)]
        ok &= code == 0 and len(record["shapes"]) == len(expected) and all(fitted.values())
        print(f"rehearsal of the report on made-up times ({len(expected)} shapes): {len(report.getvalue())} "
              f"characters printed, {len(record['shapes'])} shapes recorded in {out}, fitted {fitted}")
    return 0 if ok else 1


def _inputs(kind: str, m: int, n: int, dtype: torch.dtype, device: str):
    x = torch.randn(m, n, dtype=dtype, device=device)
    w = torch.randn(n, dtype=dtype, device=device)
    return (x, w) if kind == "rmsnorm" else (x, torch.randn(m, n, dtype=dtype, device=device), w)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--only", action="append", default=[], help="shapes whose key contains this, e.g. 'x1000'")
    p.add_argument("--no-precompile", action="store_true")
    p.add_argument("--budget-s", type=float, default=170.0,
                   help="start no new shape of round 1 after this many seconds (round 2: 40 s more)")
    p.add_argument("--kind", choices=sorted(CHAPTER), help="only this kernel's shapes")
    p.add_argument("--timing", choices=("steady", "graphs"), default="steady",
                   help="graphs: calls replayed from CUDA graphs (graph_timing.py), no host in the timed region")
    p.add_argument("--apply", action="store_true",
                   help="write the fitted constants into the solution notebooks (then: python -m grader release)")
    p.add_argument("--short-rows", action="store_true",
                   help="also time launches with under 4 values a thread, and fit rules that stack short rows into "
                        "tiles of 128 to 512 bytes")
    args = p.parse_args(argv)
    if args.short_rows:
        global MIN_VALUES_PER_THREAD
        MIN_VALUES_PER_THREAD = SHORT_ROWS_VALUES_PER_THREAD
        for name in ("TILE_BYTES", "SHORT_TILE_BYTES"):
            RULE_GRID[name] = SHORT_ROWS_TILE_BYTES + RULE_GRID[name]
    if args.dry_run:
        return dry_run(args)
    code = run_sweep(args)
    if code == 0 and args.apply:
        fits = json.loads(Path(args.out).read_text())["fitted_rule"]
        for kind, fit in fits.items():
            print(apply_fit(kind, fit.get("best")))
    return code


def apply_fit(kind: str, best: dict | None) -> str:
    """Write a fitted rule's constants into the solution notebook's cell that assigns them (``NAME = value``
    lines), and say what changed. A rule fitted with the weight loaded late is not applied: that is a change of
    the kernel, not of a constant."""
    chapter = CHAPTER[kind]
    if not best or "constants" not in best:
        return f"{chapter}: no fitted rule, nothing applied"
    if best["body"] != "early" or best.get("shapes", 0) < 3:
        return f"{chapter}: not applied (weight loaded {best['body']}, {best.get('shapes', 0)} shapes)"
    path = solution_notebook(chapter)
    nb = nbformat.read(path, as_version=4)
    changed = {}
    for cell in nb.cells:
        if cell.cell_type != "code" or cell.metadata.get("nbgrader", {}).get("grade_id") != SOLUTION_CELL[kind]:
            continue
        for name, value in best["constants"].items():
            pattern = re.compile(rf"^({name} *= *)(\S+)", re.M)
            found = pattern.search(cell.source)
            if found is None:
                raise SystemExit(f"{chapter}: no line '{name} = ...' in its solution cell to apply the fit to")
            if found.group(2) != str(value):
                changed[name] = (found.group(2), value)
                cell.source = pattern.sub(lambda m, v=value: f"{m.group(1)}{v}", cell.source, count=1)
    if changed:
        nbformat.write(nb, path)
    return f"{chapter}: " + (", ".join(f"{k} {a} -> {b}" for k, (a, b) in changed.items()) if changed
                             else "the fitted constants are the notebook's already")


if __name__ == "__main__":
    sys.exit(main())
