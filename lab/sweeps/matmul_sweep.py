"""Chapter 07's matmul + ReLU against torch at every shape of issue 15's sweep, with the variants the
reference was chosen from, in one run: it says which variant wins without another run.

    python lab/sweeps/matmul_sweep.py [--out solutions/07_matmul_relu/records/07_matmul_relu_sweep.json] [--max-autotune]
        (on a GPU: about 4 minutes on an H200; writes the JSON after every part, prints a table at the end;
        no new shape starts after --budget-s seconds, 420 by default, so it ends within 8 minutes)
    python lab/sweeps/matmul_sweep.py --focus [--out solutions/07_matmul_relu/records/07_matmul_relu_focus.json]
        (on a GPU: under 3 minutes on an H200; only the shapes where the reference was below 95% of torch, and
        4096^3 and 8192^3 as a check, float16 and bfloat16: torch, the reference (its rule: HOPPER_CHOICE), and
        every tile of the Hopper path (the notebook's GPU_TMA_TILES, each with the last wave split as the
        reference splits it, the first also without), each checked against float64 and timed; prints which
        wins per shape; no new shape starts after --budget-s seconds, 150 by default)
    python lab/sweeps/matmul_sweep.py --dry-run [--focus]
        (anywhere, TRITON_INTERPRET=1 without a GPU: builds every variant, checks each one's output at small
        sizes, prints the plan; records nothing)

Shapes (float16 and bfloat16): 1024^3, 3000^3, 4096^3, 8192^3, 4000x3000x5000, 512x16384x4096, and 4096^3 and
3000^3 with ``b`` transposed (the ``.t()`` of a row-major tensor, as ``x @ w.t()`` hands it over). At each,
``triton_course.bench.steady_rounds`` times in turn, on the same rotating fresh inputs, medians of 5 rounds:

* ``torch``: ``torch.relu(a @ b)`` (cuBLAS, then a ReLU kernel);
* ``reference``: chapter 07's fast path (``triton_course.matmul_fast.FastMatmulRelu`` around the notebook's
  kernel: its Hopper path, or the kernel tuned once per shape, then launched directly);
* ``model answer``: the solution notebook's own ``matmul_relu`` (its kernel launched by ``launch_config``);
* ``no hints``: the same kernel and config with ``ALIGNED=False``: the kernel as it was before issue 15;
* ``hints BMxBNxBK sSwW``: the notebook's kernel with ``ALIGNED`` as the launcher sets it, one fixed config
  each (the candidates for 3000^3, where the last wave decides);
* ``tma BMxBNxBK sSwW``: the same tile loop with tensor descriptors (``tl.make_tensor_descriptor``, the TMA
  unit on Hopper: no masks, no hints), defined here: one program per tile, as in the first run (the
  reference's own Hopper path is the fast path's persistent ``matmul_relu_tma_kernel``, timed by --focus).

Every variant's output is checked against float64 first (``correct`` / ``WRONG``). Then, once:
``host``: Python's time per call at 1024^3 float16 (reference, the autotuner's own dispatch, torch), and
TFLOP/s called from Python one call at a time (``do_bench``) and back to back without a GPU sleep;
``group_m``: the notebook's GROUP_M experiment (8192^3, 128x128x32 tiles, 3 stages, 4 warps);
``profile``: ``torch.profiler`` listings of ``relu(a @ b)``, ``torch.compile`` (default mode; with
``--max-autotune`` also ``mode="max-autotune"``) and the reference, for the notebook's CPU cell.
Compilation is done first, in parallel worker processes that fill Triton's cache (``--no-precompile`` skips it).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import json
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import triton_course  # noqa: E402
from grader.course import solution_notebook  # noqa: E402
from grader.notebook_code import load_namespace  # noqa: E402
from triton_course.matmul import kernel_table, launch, make, matmul_flops, tflops, tolerance  # noqa: E402

CHAPTER = "07_matmul_relu"
OUT = ROOT / "solutions" / CHAPTER / "records" / f"{CHAPTER}_sweep.json"
FOCUS_OUT = ROOT / "solutions" / CHAPTER / "records" / f"{CHAPTER}_focus.json"
ROUNDS = 5
#: (name, M, N, K, b transposed); the dry run scales them down.
SHAPES = [("1024^3", 1024, 1024, 1024, False), ("3000^3", 3000, 3000, 3000, False), ("4096^3", 4096, 4096, 4096, False),
          ("8192^3", 8192, 8192, 8192, False), ("4000x3000x5000", 4000, 3000, 5000, False),
          ("512x16384x4096", 512, 16384, 4096, False), ("4096^3 B^T", 4096, 4096, 4096, True),
          ("3000^3 B^T", 3000, 3000, 3000, True)]
DRY_SHAPES = {"1024^3": (48, 48, 48), "3000^3": (72, 40, 136), "4096^3": (64, 64, 64), "8192^3": (64, 64, 64),
              "4000x3000x5000": (40, 24, 56), "512x16384x4096": (16, 96, 32), "4096^3 B^T": (64, 64, 64),
              "3000^3 B^T": (40, 72, 136)}
#: Fixed configs timed beside the reference: (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps).
HINT_CONFIGS = [(128, 256, 64, 3, 8), (128, 256, 64, 4, 8), (256, 128, 64, 3, 8), (128, 128, 64, 4, 4),
                (128, 128, 64, 3, 8)]
TMA_CONFIGS = [(128, 256, 64, 3, 8), (128, 128, 64, 4, 4)]
#: --focus: the shapes below 95% of torch in the first run (solutions/07_matmul_relu/records/07_matmul_relu_sweep.json), and two checks.
FOCUS_SHAPES = [("3000^3", 3000, 3000, 3000, False), ("4000x3000x5000", 4000, 3000, 5000, False),
                ("4096^3 B^T", 4096, 4096, 4096, True), ("3000^3 B^T", 3000, 3000, 3000, True),
                ("4096^3", 4096, 4096, 4096, False), ("8192^3", 8192, 8192, 8192, False)]
#: --focus: the candidates are the notebook's GPU_TMA_TILES (matmul_relu_tma_kernel), each with the last wave
#: split along K as the reference does, and its first tile once more without the split: name -> (tile, split).
def focus_candidates(ns: dict, dry: bool) -> dict[str, tuple[dict, bool]]:
    tiles = {f"tma {name}": (ns["cpu_tile"](tile) if dry else tile, True) for name, tile in ns["GPU_TMA_TILES"].items()}
    first = next(iter(ns["GPU_TMA_TILES"]))
    tiles[f"tma {first}, no split"] = (tiles[f"tma {first}"][0], False)
    return tiles


GROUP_M_FIXED = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, num_stages=3, num_warps=4)
GROUPS = (1, 2, 4, 8, 16, 32)


def cfg_name(kind: str, c: tuple[int, ...]) -> str:
    return f"{kind} {c[0]}x{c[1]}x{c[2]} s{c[3]}w{c[4]}"


# ---------------------------------------------------------------------------------------------------
# The tensor-descriptor variant
# ---------------------------------------------------------------------------------------------------

@triton.jit
def matmul_relu_tma(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_b, stride_cm,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                    B_T: tl.constexpr):
    """relu(A @ B) with tensor descriptors: the TMA unit copies each tile (zero-filling past the edges)
    and stores the result (clipping at them). A is row-major; B row-major, or with B_T the .t() of a
    row-major [N, K] tensor; stride_b is the row stride of that row-major tensor."""
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_row = (pid // per_group) * GROUP_M
    rows_here = tl.minimum(tiles_m - first_row, GROUP_M)
    within = pid % per_group
    off_m = (first_row + within % rows_here) * BLOCK_M
    off_n = (within // rows_here) * BLOCK_N
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
    if B_T:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_b, 1], block_shape=[BLOCK_N, BLOCK_K])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_b, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1], block_shape=[BLOCK_M, BLOCK_N])
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = a_desc.load([off_m, k0])
        if B_T:
            b = b_desc.load([off_n, k0]).T
        else:
            b = b_desc.load([k0, off_n])
        acc = tl.dot(a, b, acc)
    c_desc.store([off_m, off_n], tl.maximum(acc, 0.0).to(c_ptr.dtype.element_ty))


def tma_fits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Descriptors need a unit last stride and other strides that are multiples of 16 bytes."""
    b_rows = b.t() if b.stride(0) == 1 else b
    return (a.stride(1) == 1 and b_rows.stride(1) == 1 and (a.stride(0) * a.element_size()) % 16 == 0
            and (b_rows.stride(0) * b.element_size()) % 16 == 0 and (b.shape[1] * b.element_size()) % 16 == 0)


def tma_launch(a: torch.Tensor, b: torch.Tensor, config: tuple[int, ...]) -> torch.Tensor:
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), device=a.device, dtype=a.dtype)
    bm, bn, bk, stages, warps = config
    b_t = b.stride(0) == 1 and b.stride(1) != 1
    matmul_relu_tma[(triton.cdiv(m, bm) * triton.cdiv(n, bn),)](
        a, b, c, m, n, k, a.stride(0), b.stride(1) if b_t else b.stride(0), c.stride(0),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, B_T=b_t, num_stages=stages, num_warps=warps)
    return c


def _allocator(size: int, alignment: int, stream):
    """Global scratch for device-side tensor descriptors (Triton asks for it at launch)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


# ---------------------------------------------------------------------------------------------------
# The variants at one shape
# ---------------------------------------------------------------------------------------------------

def aligned_flag(m: int, n: int, k: int, a: torch.Tensor, b: torch.Tensor) -> bool:
    """The reference launcher's test (kept in step with the notebook by test_07's dry run)."""
    return (m % 8 == 0 and n % 8 == 0 and k % 8 == 0
            and all(s == 1 or s % 8 == 0 for s in (*a.stride(), *b.stride())))


def variants(ns: dict, a: torch.Tensor, b: torch.Tensor, *, dry: bool) -> dict[str, object]:
    """name -> fn(a, b) for this shape (the reference's config comes from its first call)."""
    kernel, reference = ns["matmul_relu_kernel"], ns["matmul_relu"]
    m, k = a.shape
    n = b.shape[1]
    aligned = aligned_flag(m, n, k, a, b)
    reference(a, b)   # tunes (on a GPU), fills LAUNCHES
    key = next(key for key in ns["LAUNCHES"] if key[:4] == (m, n, k, a.dtype) and key[4] == a.stride()
               and key[5] == b.stride())
    _, meta, state = ns["LAUNCHES"][key]
    if state is not None:   # the reference took its Hopper path: time the exercise's kernel with a fixed config
        meta = {k: v for k, v in ns["SMALL_CONFIG"].all_kwargs().items()} if dry else dict(
            BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_stages=4, num_warps=8)
    fns = {"torch": lambda x, y: torch.relu(x @ y), "reference": reference, "model answer": ns["model_answer"],
           "no hints": lambda x, y, meta=meta: launch(kernel, x, y, aligned=False, **meta)}
    for c in HINT_CONFIGS:
        fns[cfg_name("hints", c)] = (lambda x, y, c=c: launch(kernel, x, y, aligned=aligned, BLOCK_M=c[0],
                                                              BLOCK_N=c[1], BLOCK_K=c[2], GROUP_M=8,
                                                              num_stages=c[3], num_warps=c[4]))
    if tma_fits(a, b):
        for c in TMA_CONFIGS:
            fns[cfg_name("tma", c)] = lambda x, y, c=c: tma_launch(x, y, c)
    path = "pointer (tuned)" if state is None else "gluon 192x192" if state.get("gluon") else "tma"
    return {"fns": fns, "reference_config": _jsonable(ns["LAUNCHES"][key][1]), "aligned": aligned,
            "reference_path": path}


def _jsonable(meta: dict) -> dict:
    return {k: v for k, v in meta.items() if isinstance(v, (bool, int, float, str))}


def focus_variants(ns: dict, a: torch.Tensor, b: torch.Tensor, *, dry: bool) -> dict[str, object]:
    """--focus: name -> fn(a, b): torch, the reference (its rule), and every Hopper-path candidate."""
    m, k = a.shape
    n = b.shape[1]
    reference = ns["matmul_relu"]
    reference(a, b)   # plans (tunes, where the rule says "pointer")
    key = next(key for key in ns["LAUNCHES"] if key[:4] == (m, n, k, a.dtype) and key[4] == a.stride()
               and key[5] == b.stride())
    grid, meta, state = ns["LAUNCHES"][key]
    fns = {"torch": lambda x, y: torch.relu(x @ y), "reference": reference}
    if ns["tma_fits"](a, b):
        for name, (tile, split) in focus_candidates(ns, dry).items():
            plan = ns["tma_plan"](a, b, tile, split_tail=split)
            fns[name] = (lambda x, y, plan=plan: ns["tma_launch"](
                x, y, torch.empty((x.shape[0], y.shape[1]), device=x.device, dtype=x.dtype), *plan))
    case = ns["hopper_case"](a, b)
    choice = ns["HOPPER_CHOICE"][case] if case else "pointer"
    if state is not None:   # the tile the launcher chose among the case's names
        tile = ns["choose_tile"](a, b, choice)
        gpu = ns["device"].is_gpu
        choice = next(name for name in choice if tile == (ns["GPU_TMA_TILES"][name] if gpu
                                                           else ns["cpu_tile"](ns["GPU_TMA_TILES"][name])))
    return {"fns": fns, "reference_config": _jsonable(meta), "case": case, "choice": choice,
            "reference_is": "pointer (tuned)" if state is None else f"tma {choice}",
            "split": None if state is None else [state["full_tiles"], state["split"]], "aligned": key[6]}


def check_outputs(fns: dict, a: torch.Tensor, b: torch.Tensor) -> dict[str, str]:
    """'correct' or 'WRONG (...)' for each variant, against float64."""
    exact = torch.relu(a.double() @ b.double())
    atol, rtol = tolerance(a.dtype)
    verdicts = {}
    for name, fn in fns.items():
        out = fn(a, b).double()
        bad = ~((out - exact).abs() <= atol + rtol * exact.abs())
        verdicts[name] = "correct" if not bool(bad.any()) else f"WRONG ({int(bad.sum())} of {bad.numel()})"
    del exact
    return verdicts


# ---------------------------------------------------------------------------------------------------
# Precompilation in worker processes (fills Triton's cache; the timed process then loads, not compiles)
# ---------------------------------------------------------------------------------------------------

_NS: dict = {}


def _worker_init() -> None:
    import contextlib
    import io

    import triton_course as course  # noqa: F401 -- chooses the backend
    with contextlib.redirect_stdout(io.StringIO()):   # the notebook's cells print their tables
        from triton_course.matmul_fast import fast_namespace   # the fast path's names
        _NS.update(fast_namespace(load_namespace(solution_notebook(CHAPTER))))


def _warm(job: tuple) -> str:
    kind, dtype_name, m, n, k, b_t, meta = job
    dtype = getattr(torch, dtype_name)
    try:
        a, b = make(m, n, k, transpose_b=b_t, dtype=dtype, device="meta")   # strides only
        if kind == "notebook":
            kernel = _NS["matmul_relu_kernel"]
            kernel.warmup(dtype, dtype, dtype, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), n, 1,
                          grid=(1,), **meta)
        else:
            bm, bn, bk, stages, warps = meta
            stride_b = b.stride(1) if b_t else b.stride(0)
            matmul_relu_tma.warmup(dtype, dtype, dtype, m, n, k, a.stride(0), stride_b, n, grid=(1,), BLOCK_M=bm,
                                   BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, B_T=b_t, num_stages=stages, num_warps=warps)
        return "ok"
    except Exception as exc:  # a config that does not fit is the autotuner's business, not the warm-up's
        return f"{type(exc).__name__}: {str(exc)[:120]}"


def _spec_class(*values: int) -> tuple[str, ...]:
    """How Triton specialises these integers: equal to 1, divisible by 16, or neither (one binary each)."""
    return tuple("1" if v == 1 else "16" if v % 16 == 0 else "x" for v in values)


def precompile(ns: dict, dtypes: list[torch.dtype]) -> dict[str, object]:
    """Compile, in parallel processes, every kernel the sweep will launch but the unhinted ablations (whose
    config is the reference's choice, known only after tuning); return counts and seconds."""
    jobs: dict[tuple, tuple] = {}
    for dtype in dtypes:
        name = str(dtype).replace("torch.", "")
        for _, m, n, k, b_t in SHAPES:
            a, b = make(m, n, k, transpose_b=b_t, dtype=dtype, device="meta")
            aligned = aligned_flag(m, n, k, a, b)
            spec = (name, b_t) + _spec_class(m, n, k, *a.stride(), *b.stride(), n)
            metas = [{key: v for key, v in c.all_kwargs().items() if (key, v) != ("num_ctas", 1)}
                     for c in ns["CONFIGS"]]
            metas += [dict(BLOCK_M=c[0], BLOCK_N=c[1], BLOCK_K=c[2], GROUP_M=8, num_stages=c[3], num_warps=c[4])
                      for c in HINT_CONFIGS]
            for meta in metas:
                meta = dict(meta, ALIGNED=aligned)
                jobs.setdefault(("notebook", spec, tuple(sorted(meta.items()))), ("notebook", name, m, n, k, b_t, meta))
            if tma_fits(a, b):
                for c in TMA_CONFIGS:
                    jobs.setdefault(("tma", spec, c), ("tma", name, m, n, k, b_t, c))
    for g in GROUPS:
        meta = dict(GROUP_M_FIXED, GROUP_M=g, ALIGNED=False)
        jobs.setdefault(("group", g), ("notebook", "float16", 8192, 8192, 8192, False, meta))
    unique = list(jobs.values())
    start = time.perf_counter()
    workers = max(1, min(16, (os.cpu_count() or 2) - 1))
    ctx = multiprocessing.get_context("spawn")
    try:
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx, initializer=_worker_init) as pool:
            results = list(pool.map(_warm, unique, chunksize=1))
    except Exception as exc:   # the sweep still runs, compiling as it goes
        return {"kernels": len(unique), "workers": workers, "failed": f"{type(exc).__name__}: {exc}",
                "seconds": round(time.perf_counter() - start, 1)}
    failed = [f"{j[0]} {j[1]} {j[2]}x{j[3]}x{j[4]} {j[6]}: {r}" for j, r in zip(unique, results) if r != "ok"]
    return {"kernels": len(unique), "workers": workers, "seconds": round(time.perf_counter() - start, 1),
            "not_compiled": failed[:20]}


def _warm_tma(job: tuple) -> str:
    """Compile one Hopper-path candidate (worker process): its descriptors built on meta tensors."""
    _, dtype_name, m, n, k, b_t, (tile, split), programs = job
    dtype = getattr(torch, dtype_name)
    try:
        a, b = make(m, n, k, transpose_b=b_t, dtype=dtype, device="meta")
        c = torch.empty((m, n), device="meta", dtype=dtype)
        grid, meta, state = _NS["tma_plan"](a, b, tile, split_tail=split, programs=programs)
        _NS["matmul_relu_tma_kernel"].warmup(*_NS["tma_args"](a, b, c, meta, state), grid=grid, **meta)
        return "ok"
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc)[:160]}"


def _warm_any(job: tuple) -> str:
    return _warm_tma(job) if job[0] == "tma" else _warm(job)


def precompile_focus(ns: dict, dtypes: list[torch.dtype]) -> dict[str, object]:
    """--focus: compile in parallel processes every Hopper-path candidate at every focus shape, and the
    exercise's kernel's configs where the reference's rule tunes it (sizes multiples of 16, b row-major)."""
    jobs: dict[tuple, tuple] = {}
    programs = torch.cuda.get_device_properties(0).multi_processor_count
    for dtype in dtypes:
        name = str(dtype).replace("torch.", "")
        for _, m, n, k, b_t in FOCUS_SHAPES:
            a, b = make(m, n, k, transpose_b=b_t, dtype=dtype, device="meta")
            for cand in focus_candidates(ns, dry=False).values():
                grid, meta, state = ns["tma_plan"](a, b, cand[0], split_tail=cand[1], programs=programs)
                spec = (name, tuple(sorted((key, v) for key, v in meta.items())))
                jobs.setdefault(("tma", spec), ("tma", name, m, n, k, b_t, cand, programs))
            case = ns["hopper_case"](a, b)
            if case is None or ns["HOPPER_CHOICE"][case] == "pointer":
                aligned = aligned_flag(m, n, k, a, b)
                spec = (name, b_t) + _spec_class(m, n, k, *a.stride(), *b.stride(), n)
                for c in ns["CONFIGS"]:
                    meta = {key: v for key, v in c.all_kwargs().items() if (key, v) != ("num_ctas", 1)}
                    meta = dict(meta, ALIGNED=aligned)
                    jobs.setdefault(("notebook", spec, tuple(sorted(meta.items()))),
                                    ("notebook", name, m, n, k, b_t, meta))
    unique = list(jobs.values())
    start = time.perf_counter()
    workers = max(1, min(16, (os.cpu_count() or 2) - 1))
    ctx = multiprocessing.get_context("spawn")
    try:
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx, initializer=_worker_init) as pool:
            results = list(pool.map(_warm_any, unique, chunksize=1))
    except Exception as exc:
        return {"kernels": len(unique), "workers": workers, "failed": f"{type(exc).__name__}: {exc}",
                "seconds": round(time.perf_counter() - start, 1)}
    failed = [f"{j[0]} {j[1]} {j[2]}x{j[3]}x{j[4]} {j[6] if j[0] == 'notebook' else j[6][0]}: {r}"
              for j, r in zip(unique, results) if r != "ok"]
    return {"kernels": len(unique), "workers": workers, "seconds": round(time.perf_counter() - start, 1),
            "not_compiled": failed[:20]}


# ---------------------------------------------------------------------------------------------------
# Host time, GROUP_M, profiler listings
# ---------------------------------------------------------------------------------------------------

def host_us_per_call(fns: dict, calls: int = 200, rounds: int = 9) -> dict[str, float]:
    """Python's microseconds per call of each function: ``calls`` calls in a row, the functions in turn,
    median of ``rounds`` rounds (one pass over each measured 29 and 47 us for the same launcher on two days)."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter() - start) / calls * 1e6)
            torch.cuda.synchronize()
    return {name: round(statistics.median(t), 1) for name, t in times.items()}


def back_to_back_ms(fn, calls: int = 200) -> float:
    """Milliseconds per call of ``calls`` calls issued from Python as fast as it can, no GPU sleep ahead."""
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3 / calls


def measure_host(ns: dict) -> dict[str, object]:
    from triton_course.bench import time_ms

    m = n = k = 1024
    a, b = make(m, n, k, device="cuda")
    c = torch.empty((m, n), device="cuda", dtype=a.dtype)
    tuned = ns["matmul_relu_tuned"]
    aligned = aligned_flag(m, n, k, a, b)
    grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)  # noqa: E731

    def autotuner(x=a, y=b):
        tuned[grid](x, y, c, m, n, k, x.stride(0), x.stride(1), y.stride(0), y.stride(1), n, 1, ALIGNED=aligned)
        return c

    fns = {"reference": lambda: ns["matmul_relu"](a, b), "autotuner dispatch": autotuner,
           "torch": lambda: torch.relu(a @ b)}
    flops = matmul_flops(m, n, k)
    host = host_us_per_call(fns)
    return {"shape": [m, n, k], "dtype": "float16", "host_us_per_call": host,
            "host_ratio_reference_to_torch": round(host["reference"] / host["torch"], 2),
            "one_call_at_a_time_tflops": {name: round(tflops(flops, time_ms(fn)), 1) for name, fn in fns.items()},
            "back_to_back_from_python_tflops": {name: round(tflops(flops, back_to_back_ms(fn)), 1)
                                                for name, fn in fns.items()}}


def measure_group_m(ns: dict) -> dict[str, object]:
    from triton_course.bench import steady_rounds

    n = 8192
    kernel = ns["matmul_relu_kernel"]
    fns = {str(g): (lambda a, b, g=g: launch(kernel, a, b, GROUP_M=g, **GROUP_M_FIXED)) for g in GROUPS}
    times = steady_rounds(fns, lambda: make(n, n, n, device="cuda"), rounds=ROUNDS)
    return {"shape": [n, n, n], "dtype": "float16", "config": GROUP_M_FIXED,
            "tflops": {g: round(tflops(matmul_flops(n, n, n), statistics.median(t)), 1) for g, t in times.items()}}


def measure_profile_max_autotune() -> list[dict[str, object]]:
    relu_mm = lambda x, y: torch.relu(x @ y)  # noqa: E731
    a, b = make(4096, 4096, 4096, device="cuda")
    torch._dynamo.reset()
    return [{"what": 'torch.compile(relu(a @ b), mode="max-autotune"), 4096^3 float16',
             "kernels": kernel_table(torch.compile(relu_mm, mode="max-autotune"), a, b)}]


def measure_profile(ns: dict) -> list[dict[str, object]]:
    relu_mm = lambda x, y: torch.relu(x @ y)  # noqa: E731
    listing = []
    for n, dtype in ((4096, torch.float16), (4096, torch.bfloat16), (3000, torch.float16)):
        a, b = make(n, n, n, dtype=dtype, device="cuda")
        name = str(dtype).replace("torch.", "")
        listing.append({"what": f"torch relu(a @ b), {n}^3 {name}", "kernels": kernel_table(relu_mm, a, b)})
        listing.append({"what": f"reference matmul_relu, {n}^3 {name}",
                        "kernels": kernel_table(ns["matmul_relu"], a, b)})
    a, b = make(4096, 4096, 4096, device="cuda")
    torch._dynamo.reset()
    listing.append({"what": "torch.compile(relu(a @ b)), default mode, 4096^3 float16",
                    "kernels": kernel_table(torch.compile(relu_mm), a, b)})
    return listing


# ---------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------

def dry_run(ns: dict) -> int:
    """Every variant at small sizes under the interpreter (or on whatever device this is), checked."""
    print("dry run: each variant built and checked at a small size; nothing is timed or recorded")
    print(f"precompile would cover {len(ns['CONFIGS'])} notebook config(s) per shape and dtype on this device")
    ok = True
    for name, m, n, k, b_t in SHAPES:
        dm, dn, dk = DRY_SHAPES[name]
        a, b = make(dm, dn, dk, transpose_b=b_t)
        plan = variants(ns, a, b, dry=True)
        verdicts = check_outputs(plan["fns"], a, b)
        ok &= all(v == "correct" for v in verdicts.values())
        print(f"{name:<16} ({dm}x{dn}x{dk} here, ALIGNED={plan['aligned']}): "
              + ", ".join(f"{v_name} {verdict}" for v_name, verdict in verdicts.items()))
    print("parts timed on a GPU: host (1024^3: reference, autotuner dispatch, torch), "
          f"group_m (8192^3, GROUP_M {', '.join(map(str, GROUPS))}), profile (torch, torch.compile, reference)")
    return 0 if ok else 1


def dry_run_focus(ns: dict) -> int:
    """--focus --dry-run: every focus variant at small sizes under the interpreter, checked."""
    print("dry run (--focus): each variant built and checked at a small size; nothing is timed or recorded")
    ok = True
    for name, m, n, k, b_t in FOCUS_SHAPES:
        dm, dn, dk = DRY_SHAPES[name]
        a, b = make(dm, dn, dk, transpose_b=b_t)
        plan = focus_variants(ns, a, b, dry=True)
        verdicts = check_outputs(plan["fns"], a, b)
        ok &= all(v == "correct" for v in verdicts.values())
        print(f"{name:<16} ({dm}x{dn}x{dk} here, case {plan['case']!r}: {plan['choice']}, split {plan['split']}): "
              + ", ".join(f"{v_name} {verdict}" for v_name, verdict in verdicts.items()))
    print(f"candidates: {', '.join(focus_candidates(ns, dry=False))}")
    return 0 if ok else 1


def run_focus(ns: dict, out: Path, do_precompile: bool, budget_s: float) -> int:
    """--focus on a GPU: the focus shapes, every candidate against torch; the JSON and a table of winners."""
    from triton_course.bench import METHOD, steady_rounds

    dev = triton_course.current()
    dtypes = dev.dtypes(torch.float16, torch.bfloat16)
    record: dict[str, object] = {
        "chapter": CHAPTER, "mode": "focus", "command": "python lab/sweeps/matmul_sweep.py --focus",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "device": dev.name,
        "compute_capability": list(dev.compute_capability or ()), "torch": torch.__version__,
        "triton": triton.__version__, "method": METHOD + f"; {ROUNDS} interleaved rounds per shape",
        "unit": "TFLOP/s = 2*M*N*K / median time per call",
        "rule": {"HOPPER_CHOICE": ns["HOPPER_CHOICE"], "SPLIT_LAST_WAVE_AT_MOST": ns["SPLIT_LAST_WAVE_AT_MOST"]},
        "candidates": {name: dict(tile, split_last_wave=split)
                       for name, (tile, split) in focus_candidates(ns, dry=False).items()},
        "shapes": []}
    t0 = time.perf_counter()
    if do_precompile:
        record["precompile"] = precompile_focus(ns, dtypes)
        print(f"precompiled {record['precompile']}", flush=True)

    def save() -> None:
        record["seconds"] = round(time.perf_counter() - t0, 1)
        out.write_text(json.dumps(record, indent=2) + "\n")

    skipped = []
    for dtype in dtypes:
        for name, m, n, k, b_t in FOCUS_SHAPES:
            if time.perf_counter() - t0 > budget_s:
                skipped.append(f"{name} {dtype}")
                continue
            t_shape = time.perf_counter()
            a, b = make(m, n, k, transpose_b=b_t, dtype=dtype, device="cuda")
            plan = focus_variants(ns, a, b, dry=False)
            verdicts = check_outputs(plan["fns"], a, b)
            del a, b
            times = steady_rounds(plan["fns"], lambda: make(m, n, k, transpose_b=b_t, dtype=dtype, device="cuda"),
                                  rounds=ROUNDS)
            flops = matmul_flops(m, n, k)
            tf = {v: round(tflops(flops, statistics.median(t)), 1) for v, t in times.items()}
            best = max((v for v in tf if v != "torch" and verdicts[v] == "correct"), key=tf.get)
            row = {"name": name, "m": m, "n": n, "k": k, "transpose_b": b_t, "dtype": str(dtype).replace("torch.", ""),
                   "case": plan["case"], "choice": plan["choice"], "reference_is": plan["reference_is"],
                   "split": plan["split"], "reference_config": plan["reference_config"], "tflops": tf,
                   "check": verdicts, "ratio_reference_to_torch": round(tf["reference"] / tf["torch"], 3),
                   "fastest_triton": best, "ratio_fastest_to_torch": round(tf[best] / tf["torch"], 3),
                   "at_least_95pct": sorted(v for v in tf if v != "torch" and tf[v] >= 0.95 * tf["torch"]
                                            and verdicts[v] == "correct"),
                   "seconds": round(time.perf_counter() - t_shape, 1)}
            record["shapes"].append(row)
            save()
            print(f"{name:<16} {row['dtype']:<9} torch {tf['torch']:6.1f}  reference {tf['reference']:6.1f} "
                  f"({row['ratio_reference_to_torch']:.0%}, {row['reference_is']})  fastest {best} {tf[best]:.1f} "
                  f"({row['ratio_fastest_to_torch']:.0%})  [{row['seconds']} s]", flush=True)
            torch.cuda.empty_cache()
    rows = record["shapes"]
    wins: dict[str, int] = {}
    for r in rows:
        wins[r["fastest_triton"]] = wins.get(r["fastest_triton"], 0) + 1
    record["skipped_for_time"] = skipped
    record["verdict"] = {
        "reference_at_least_95pct_of_torch_everywhere": all(r["ratio_reference_to_torch"] >= 0.95 for r in rows),
        "below_95pct": [f"{r['name']} {r['dtype']}: {r['ratio_reference_to_torch']:.0%}" for r in rows
                        if r["ratio_reference_to_torch"] < 0.95],
        "fastest_per_shape": {f"{r['name']} {r['dtype']}": f"{r['fastest_triton']} ({r['ratio_fastest_to_torch']:.0%})"
                              for r in rows},
        "wins": dict(sorted(wins.items(), key=lambda kv: -kv[1])),
        "every_variant_correct": all(v == "correct" for r in rows for v in r["check"].values()),
        "suggested_HOPPER_CHOICE": suggest_choice(rows),
    }
    save()
    print_focus_table(record)
    return 0


def suggest_choice(rows: list[dict]) -> dict[str, str]:
    """Per case of the rule: the variant with the best geometric mean of its share of torch over that case's
    shapes (both dtypes), among the Hopper-path tiles and, where the reference tuned it, the pointer kernel;
    as a value for the notebook's HOPPER_CHOICE, with the mean."""
    by_case: dict[str, list[dict]] = {}
    for r in rows:
        by_case.setdefault(str(r["case"]), []).append(r)
    out = {}
    for case, case_rows in by_case.items():
        scores = {}
        names = {v for r in case_rows for v in r["tflops"] if v.startswith("tma ") and "no split" not in v}
        if all(r["reference_is"] == "pointer (tuned)" for r in case_rows):
            names.add("reference")
        for name in names:
            ratios = [r["tflops"][name] / r["tflops"]["torch"] for r in case_rows
                      if name in r["tflops"] and r["check"].get(name) == "correct"]
            if len(ratios) == len(case_rows):
                scores[name] = statistics.geometric_mean(ratios)
        if scores:
            best = max(scores, key=scores.get)
            value = "'pointer'" if best == "reference" else f"({best.removeprefix('tma ')!r},)"
            out[case] = f"{value} (mean {scores[best]:.0%} of torch over {len(case_rows)} runs)"
    return out


def print_focus_table(record: dict) -> None:
    rows = record["shapes"]
    names = ["torch", "reference"] + [v for v in record["candidates"] if any(v in r["tflops"] for r in rows)]
    short = {v: v.replace("tma ", "").replace(", no split", " nosplit") for v in names}
    print(f"\n{'shape':<16} {'dtype':<9}" + "".join(f"{short[v]:>{len(short[v]) + 2}}" for v in names))
    for r in rows:
        print(f"{r['name']:<16} {r['dtype']:<9}"
              + "".join(f"{r['tflops'].get(v, float('nan')):>{len(short[v]) + 2}.1f}" for v in names))
    print("\nwinner per shape (fastest correct Triton variant; reference = the rule's choice):")
    for r in rows:
        print(f"  {r['name']:<16} {r['dtype']:<9} case {str(r['case']):<29} reference={r['reference_is']:<26} "
              f"{r['ratio_reference_to_torch']:>5.0%}  winner {r['fastest_triton']} {r['ratio_fastest_to_torch']:.0%}"
              f"  split {r['split']}")
    print(f"\nverdict: {json.dumps(record['verdict'], indent=1)}")
    print(f"HOPPER_CHOICE now: {record['rule']['HOPPER_CHOICE']}")
    print(f"{record['seconds']} s in all")


def run(ns: dict, out: Path, max_autotune: bool, do_precompile: bool, budget_s: float) -> int:
    from triton_course.bench import METHOD, steady_rounds

    dev = triton_course.current()
    triton.set_allocator(_allocator)
    dtypes = dev.dtypes(torch.float16, torch.bfloat16)
    record: dict[str, object] = {
        "chapter": CHAPTER,
        "command": "python lab/sweeps/matmul_sweep.py" + (" --max-autotune" if max_autotune else ""),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "device": dev.name,
        "compute_capability": list(dev.compute_capability or ()), "torch": torch.__version__,
        "triton": triton.__version__, "method": METHOD + f"; {ROUNDS} interleaved rounds per shape",
        "unit": "TFLOP/s = 2*M*N*K / median time per call", "shapes": []}
    t0 = time.perf_counter()
    if do_precompile:
        record["precompile"] = precompile(ns, dtypes)
        print(f"precompiled {record['precompile']}", flush=True)

    def save() -> None:
        record["seconds"] = round(time.perf_counter() - t0, 1)
        out.write_text(json.dumps(record, indent=2) + "\n")

    record["host"] = measure_host(ns)
    save()
    record["profile"] = measure_profile(ns)
    save()
    skipped = []
    for dtype in dtypes:
        if dtype is torch.bfloat16:
            record["group_m"] = measure_group_m(ns)
            save()
        for name, m, n, k, b_t in SHAPES:
            if time.perf_counter() - t0 > budget_s:
                skipped.append(f"{name} {dtype}")
                continue
            t_shape = time.perf_counter()
            a, b = make(m, n, k, transpose_b=b_t, dtype=dtype, device="cuda")
            plan = variants(ns, a, b, dry=False)
            verdicts = check_outputs(plan["fns"], a, b)
            del a, b
            times = steady_rounds(plan["fns"], lambda: make(m, n, k, transpose_b=b_t, dtype=dtype, device="cuda"),
                                  rounds=ROUNDS)
            flops = matmul_flops(m, n, k)
            tf = {v: round(tflops(flops, statistics.median(t)), 1) for v, t in times.items()}
            triton_best = max((v for v in tf if v != "torch" and verdicts[v] == "correct"), key=tf.get)
            row = {"name": name, "m": m, "n": n, "k": k, "transpose_b": b_t, "dtype": str(dtype).replace("torch.", ""),
                   "aligned": plan["aligned"], "reference_path": plan["reference_path"],
                   "reference_config": plan["reference_config"], "tflops": tf,
                   "check": verdicts, "ratio_reference_to_torch": round(tf["reference"] / tf["torch"], 3),
                   "ratio_no_hints_to_torch": round(tf["no hints"] / tf["torch"], 3),
                   "ratio_model_answer_to_torch": round(tf["model answer"] / tf["torch"], 3),
                   "fastest_triton": triton_best, "ratio_fastest_to_torch": round(tf[triton_best] / tf["torch"], 3),
                   "rounds_reference_faster_than_torch": sum(r < t for r, t in zip(times["reference"], times["torch"])),
                   "seconds": round(time.perf_counter() - t_shape, 1)}
            record["shapes"].append(row)
            save()
            print(f"{name:<16} {row['dtype']:<9} torch {tf['torch']:6.1f}  reference {tf['reference']:6.1f} "
                  f"({row['ratio_reference_to_torch']:.0%})  no hints {tf['no hints']:6.1f}  fastest {triton_best} "
                  f"{tf[triton_best]:.1f}  [{row['seconds']} s]", flush=True)
            torch.cuda.empty_cache()
    if "group_m" not in record:
        record["group_m"] = measure_group_m(ns)
    record["skipped_for_time"] = skipped
    if max_autotune:   # last: Inductor's autotuning takes minutes
        record["profile"] += measure_profile_max_autotune()
    rows = record["shapes"]
    record["verdict"] = {
        "reference_at_least_95pct_of_torch_everywhere": all(r["ratio_reference_to_torch"] >= 0.95 for r in rows),
        "below_95pct": [f"{r['name']} {r['dtype']}: {r['ratio_reference_to_torch']:.0%}" for r in rows
                        if r["ratio_reference_to_torch"] < 0.95],
        "every_variant_correct": all(v == "correct" for r in rows for v in r["check"].values()),
        "host_within_2x_of_torch": record["host"]["host_ratio_reference_to_torch"] <= 2.0,
        "wins_by_family": {fam: sum(1 for r in rows if r["fastest_triton"].split(" ")[0] == fam)
                           for fam in ("reference", "hints", "tma", "no")},
    }
    save()
    print_table(record)
    return 0


def print_table(record: dict) -> None:
    rows = record["shapes"]
    names = ["torch", "reference", "no hints"] + sorted({v for r in rows for v in r["tflops"]} -
                                                        {"torch", "reference", "no hints"})
    print(f"\n{'shape':<16} {'dtype':<9}" + "".join(f"{v[:18]:>19}" for v in names))
    for r in rows:
        print(f"{r['name']:<16} {r['dtype']:<9}" + "".join(f"{r['tflops'].get(v, float('nan')):>19.1f}" for v in names))
    host = record["host"]
    print(f"\nhost us per call at 1024^3: {host['host_us_per_call']} (reference / torch = "
          f"{host['host_ratio_reference_to_torch']})")
    print(f"TFLOP/s from Python, one call at a time: {host['one_call_at_a_time_tflops']}")
    print(f"TFLOP/s from Python, back to back: {host['back_to_back_from_python_tflops']}")
    print(f"GROUP_M at 8192^3: {record['group_m']['tflops']}")
    for entry in record["profile"]:
        print(f"{entry['what']}: " + "; ".join(f"{k['name'][:70]} {k['us_per_call']} us" for k in entry["kernels"][:3]))
    print(f"\nverdict: {json.dumps(record['verdict'], indent=1)}")
    print(f"{record['seconds']} s in all; written to {OUT.relative_to(ROOT)} (or --out)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=None, help=f"default {OUT.name}, or {FOCUS_OUT.name} with --focus")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--focus", action="store_true",
                   help="only the shapes below 95%% of torch (and 4096^3, 8192^3), every Hopper-path candidate")
    p.add_argument("--max-autotune", action="store_true", help="also profile torch.compile(mode='max-autotune')")
    p.add_argument("--no-precompile", action="store_true")
    p.add_argument("--budget-s", type=float, default=None,
                   help="start no new shape after this many seconds (the JSON says which were skipped); "
                        "420 by default, 150 with --focus")
    args = p.parse_args(argv)
    dev = triton_course.current()
    from triton_course.matmul_fast import fast_namespace   # the fast path's names
    ns = fast_namespace(load_namespace(solution_notebook(CHAPTER)))
    if args.dry_run:
        return dry_run_focus(ns) if args.focus else dry_run(ns)
    if dev.interpreted:
        print("lab/sweeps/matmul_sweep.py needs a CUDA GPU (or --dry-run): these numbers are GPU claims",
              file=sys.stderr)
        return 2
    if args.focus:
        return run_focus(ns, args.out or FOCUS_OUT, not args.no_precompile,
                         150.0 if args.budget_s is None else args.budget_s)
    return run(ns, args.out or OUT, args.max_autotune, not args.no_precompile,
               420.0 if args.budget_s is None else args.budget_s)


if __name__ == "__main__":
    sys.exit(main())
