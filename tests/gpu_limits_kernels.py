"""The kernels each chapter launches and their launches on each GPU a student has, for tests/test_gpu_limits.py; run
as a script (``python tests/gpu_limits_kernels.py JOBS.json``, in a process without ``TRITON_INTERPRET``) it compiles
them with Triton's compiler for GPUs this machine does not have.

A chapter's kernels are the ``@triton.jit`` functions of its solution notebook (model answers, experiments' kernels)
or of the course's helper modules. Its launches on a GPU are what its launchers pass (what the launch rules pick for
that GPU, driven by a description of it) and what its experiments offer; an experiment's launch that the chapter
leaves out on a GPU carries the reason it gives. Only the standard library is imported at the top: the compiling
process imports Triton before the course (whose import turns the interpreter on where there is no GPU).
"""

from __future__ import annotations

import ast
import contextlib
import json
import linecache
import math
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------------------------------------------
# GPUs and launches
# ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Gpu:
    """A GPU students run on, with the limits of one program (CUDA Programming Guide)."""

    name: str
    cc: tuple[int, int]
    shared: int            # bytes of shared memory one block may opt in to
    sms: int
    bf16: bool
    regs_per_thread: int = 255
    regs_per_block: int = 65536


#: From the course's issue "Right on every GPU a student has".
GPUS = [Gpu("T4", (7, 5), 64 * 1024, 40, False), Gpu("A10", (8, 6), 99 * 1024, 72, True),
        Gpu("L4", (8, 9), 99 * 1024, 58, True), Gpu("H100/H200", (9, 0), 227 * 1024, 132, True)]


@dataclass(frozen=True)
class Launch:
    """One kernel launch a chapter makes on a GPU: what to compile, and why the chapter leaves it out, if it does."""

    label: str
    grade_id: str           # unused by the compiler (kernels are found by name); kept for the reader
    kernel: str
    types: tuple            # (argument, Triton type) pairs
    constexprs: tuple       # (argument, value) pairs
    aligned: tuple          # arguments Triton would see as multiples of 16
    num_warps: int
    num_stages: int
    skipped: str | None = None   # the chapter's reason for not running it on this GPU
    chapter: str = field(default="", compare=False)
    module: str = ""             # a kernel of the course's helpers (this module), not of the chapter's notebook

    def job(self, cc: tuple[int, int]) -> dict:
        """The compile job of :func:`main` for a GPU of compute capability ``cc``."""
        from grader.course import solution_notebook

        return {"notebook": "" if self.module else str(solution_notebook(self.chapter)), "module": self.module,
                "kernel": self.kernel, "cc": cc[0] * 10 + cc[1], "types": dict(self.types),
                "constexprs": dict(self.constexprs), "aligned": list(self.aligned), "num_warps": self.num_warps,
                "num_stages": self.num_stages}


#: Triton's CUDA defaults for a launch that names neither.
DEFAULT_WARPS, DEFAULT_STAGES = 4, 3


def launch(chapter: str, kernel: str, label: str, args: dict, constexprs: dict, num_warps: int = DEFAULT_WARPS,
           num_stages: int = DEFAULT_STAGES, skipped: str | None = None, module: str = "") -> Launch:
    """A launch of ``kernel`` with runtime ``args`` (name -> (Triton type, a value Triton would see, or None for a
    pointer)): pointers and integers that are multiples of 16 are marked as Triton marks them."""
    constexprs = dict(constexprs, **{a: 1 for a, (t, v) in args.items() if t == "i32" and v == 1})
    args = {a: tv for a, tv in args.items() if a not in constexprs}
    types = {a: t for a, (t, _) in args.items()}
    aligned = tuple(sorted(a for a, (t, v) in args.items() if t.startswith("*") or (t == "i32" and v is not None
                                                                                  and v % 16 == 0)))
    described = ", ".join(f"{k}={v}" for k, v in constexprs.items())
    dtypes = sorted({m.group(1) for t in types.values() if (m := re.match(r"(?:\*|tensordesc<)(\w+)", t))})
    return Launch(f"{chapter} {kernel} [{label}] {'/'.join(dtypes)}, {described}, {num_warps} warps, "
                  f"{num_stages} stages", "", kernel, tuple(sorted(types.items())),
                  tuple(sorted(constexprs.items())), aligned, num_warps, num_stages, skipped, chapter=chapter,
                  module=module)


@contextlib.contextmanager
def running_on(gpu: Gpu) -> Iterator[None]:
    """The course's device described as ``gpu`` (only the launch rules read it; no kernel runs)."""
    import torch

    from triton_course import device as course_device

    saved = course_device._CURRENT
    course_device._CURRENT = course_device.Device(False, torch.device("cpu"), gpu.name, gpu.cc, gpu.sms, None, None)
    try:
        yield
    finally:
        course_device._CURRENT = saved


def dtypes_on(gpu: Gpu, *names: str) -> list[str]:
    """``names`` (Triton dtypes) without bf16 where the GPU has none."""
    return [n for n in names if n != "bf16" or gpu.bf16]


SIZE = {"fp32": 4, "fp16": 2, "bf16": 2}


def row_align(n_cols: int, element_size: int) -> int:
    """ALIGN of chapters 05, 06 and 08's row kernels for contiguous rows of ``n_cols``."""
    align = 16 // element_size
    while align > 1 and n_cols % align:
        align //= 2
    return align


# ---------------------------------------------------------------------------------------------------
# A notebook's definitions (launch rules), read without running its experiments
# ---------------------------------------------------------------------------------------------------

def _is_jit(node: ast.AST) -> bool:
    return isinstance(node, ast.FunctionDef) and any("triton" in ast.unparse(d) for d in node.decorator_list)


def _is_constant(node: ast.AST) -> bool:
    """An assignment of names from an expression that calls nothing but ``device.pick`` (a constant, a table of
    them): never a sweep or a tensor."""
    return (isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets)
            and all(ast.unparse(n.func) == "device.pick" for n in ast.walk(node.value) if isinstance(n, ast.Call)))


def _definitions(notebook: str, only_kernels: bool) -> list[tuple[str, str]]:
    """(name for tracebacks, source) of the top-level imports, constants and functions of a notebook's code cells
    (hidden tests left out); ``only_kernels``: the ``@triton.jit`` functions and the constants only."""
    import nbformat

    out = []
    for i, cell in enumerate(nbformat.read(notebook, as_version=4).cells):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or (meta.get("grade") and not meta.get("solution")):
            continue
        source = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in tree.body:
            keep = _is_constant(node) or _is_jit(node)
            if not only_kernels:
                keep = keep or isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef))
            if keep:
                first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
                lines = source.splitlines()[first - 1:node.end_lineno]
                out.append((f"<{os.path.basename(notebook)[:-6]}_cell{i}_line{first}>", "\n".join(lines) + "\n"))
    return out


def _exec_definitions(defs: list[tuple[str, str]], ns: dict) -> dict:
    for name, source in defs:
        linecache.cache[name] = (len(source), None, source.splitlines(True), name)
        try:
            exec(compile(source, name, "exec"), ns)
        except Exception:   # an assignment that needs the notebook's run (a tensor, a sweep): not a definition
            pass
    return ns


def _base_namespace(with_torch: bool = True) -> dict:
    import functools

    import triton
    import triton.language as tl

    ns = {"__name__": "notebook", "functools": functools, "math": math, "triton": triton, "tl": tl}
    if with_torch:
        import torch

        ns["torch"] = torch
    return ns


def notebook_rules(chapter: str) -> dict:
    """The namespace of chapter ``chapter``'s definitions (its launch rules among them), nothing run."""
    from grader.course import solution_notebook
    from triton_course.device import current

    ns = _base_namespace()
    ns["device"] = current()
    return _exec_definitions(_definitions(str(solution_notebook(chapter)), False), ns)


def hidden_gpu_sizes(chapter: str, grade_id: str, name: str = "GPU_SIZES"):
    """The value of ``name`` in the hidden test ``grade_id`` (its sizes at GPU scale), float16 and float32 as
    Triton's names."""
    import nbformat
    import torch

    from grader.course import solution_notebook

    cell = next(c for c in nbformat.read(solution_notebook(chapter), as_version=4).cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    node = next(n for n in ast.parse(cell.source).body
                if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == name)
    names = {torch.float16: "fp16", torch.float32: "fp32", torch.bfloat16: "bf16"}
    value = eval(compile(ast.Expression(node.value), grade_id, "eval"),
                 {"torch": torch, "f16": torch.float16, "f32": torch.float32})

    def named(v):
        if isinstance(v, dict):
            return {names[k]: named(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return type(v)(named(x) for x in v)
        return names.get(v, v) if isinstance(v, torch.dtype) else v
    return named(value)


# ---------------------------------------------------------------------------------------------------
# Chapters' launches
# ---------------------------------------------------------------------------------------------------

def gpu_model_launches(gpu: Gpu) -> list[Launch]:
    """01: row_sum_kernel over 4096 float32 columns with 1, 4, 8 and 16 warps (the occupancy experiment)."""
    args = {"x_ptr": ("*fp32", None), "out_ptr": ("*fp32", None), "n_cols": ("i32", 4096)}
    return [launch("01_gpu_model", "row_sum_kernel", "occupancy experiment", args, {"BLOCK": 4096}, num_warps=w)
            for w in (1, 4, 8, 16)]


def vector_add_launches(gpu: Gpu) -> list[Launch]:
    """03: iota_kernel at the experiment's blocks (96 is refused by design), add_kernel as ``add`` launches it,
    shifted_copy_kernel as the debugging cell launches it."""
    ch = "03_vector_add"
    out = [launch(ch, "iota_kernel", "power-of-two experiment", {"out_ptr": ("*i32", None)}, {"BLOCK": b},
                  skipped=None if b & (b - 1) == 0 else
                  "BLOCK = 96 skipped: the experiment shows Triton refusing a block that is not a power of two")
           for b in (64, 96, 128)]
    for dt in ("fp32", "fp16"):
        out.append(launch(ch, "add_kernel", "add", {"x_ptr": (f"*{dt}", None), "y_ptr": (f"*{dt}", None),
                                                     "out_ptr": (f"*{dt}", None), "n_elements": ("i32", None)},
                          {"BLOCK": 1024}))
    out.append(launch(ch, "shifted_copy_kernel", "debugging cell", {"x_ptr": ("*fp32", None),
                                                                    "out_ptr": ("*fp32", None),
                                                                    "n_elements": ("i32", 10)},
                      {"BLOCK": 4}, num_warps=1))
    return out


def gelu_launches(gpu: Gpu) -> list[Launch]:
    """04: gelu_kernel as ``gelu`` launches it and gelu_hw_tanh_kernel as the SFU experiment does, in each dtype the
    GPU runs."""
    out = []
    for dt in dtypes_on(gpu, "fp32", "fp16", "bf16"):
        args = {"x_ptr": (f"*{dt}", None), "out_ptr": (f"*{dt}", None), "n_elements": ("i32", None)}
        out.append(launch("04_gelu", "gelu_kernel", "gelu", args, {"BLOCK": 1024}))
        out.append(launch("04_gelu", "gelu_hw_tanh_kernel", "SFU experiment", args, {"BLOCK": 1024}))
    return out


def row_shapes(gpu: Gpu, widest: int, extra: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """(rows, row length, dtype) a row kernel's launch rule is driven with: ``extra``, the chapter's own sizes (its
    hidden test's at GPU scale, its sweeps'), and ``widest``, the longest row it takes, at 1 and 4096 rows in float32,
    float16 and bfloat16 (bfloat16 only where the GPU has it)."""
    shapes = list(extra) + [(m, widest, dt) for m in (1, 4096) for dt in ("fp32", "fp16", "bf16")]
    return [(m, n, dt) for m, n, dt in shapes if dt != "bf16" or gpu.bf16]


def first_of_each(launches: list[Launch]) -> list[Launch]:
    """One launch per kernel, dtype, tile, rows and warps: the row kernels' cache hints (STREAM) and alignment
    promise (ALIGN) change neither their shared memory nor their registers much, and the first launch picked with
    each tile is compiled as picked."""
    seen, out = set(), []
    for x in launches:
        key = (x.kernel, x.types, tuple(kv for kv in x.constexprs if kv[0] not in ("STREAM", "ALIGN")), x.num_warps,
               x.skipped)
        if key not in seen:
            seen.add(key)
            out.append(x)
    return out


def softmax_launches(gpu: Gpu) -> list[Launch]:
    """05: softmax_kernel at every launch softmax_config picks at the chapter's sizes (its hidden test's at GPU scale,
    the row-length sweep's, the longest row it takes), the launch-shape sweep's launches; softmax_long_kernel as
    softmax_long launches it."""
    ch, ns = "05_softmax", notebook_rules("05_softmax")

    def kernel_args(dt):
        return {"x_ptr": (f"*{dt}", None), "out_ptr": (f"*{dt}", None), "n_rows": ("i32", None),
                "n_cols": ("i32", None), "x_row_stride": ("i32", None), "out_row_stride": ("i32", None)}

    extra = [tuple(x) for x in hidden_gpu_sizes(ch, "test_softmax_gpu_sizes")]
    extra += [(4096, n, "fp32") for n in (512, 1024, 2048, 4096, 8192, 16384)]   # the row-length sweep
    out = []
    for n_rows, n_cols, dt in row_shapes(gpu, ns["MAX_COLS"], extra):
        block_n, rows, warps, stream = ns["softmax_config"](n_rows, n_cols, SIZE[dt])
        out.append(launch(ch, "softmax_kernel", "softmax_config", kernel_args(dt),
                          {"BLOCK_N": block_n, "ROWS": rows, "STREAM": stream, "ALIGN": row_align(n_cols, SIZE[dt])},
                          num_warps=warps))
    for rows, warps in SOFTMAX_SWEEP:
        out.append(launch(ch, "softmax_kernel", "launch-shape sweep", kernel_args("fp32"),
                          {"BLOCK_N": 4096, "ROWS": rows}, num_warps=warps))
    for dt in dtypes_on(gpu, "fp32", "fp16", "bf16"):
        out.append(launch(ch, "softmax_long_kernel", "softmax_long",
                          {"x_ptr": (f"*{dt}", None), "out_ptr": (f"*{dt}", None), "n_cols": ("i32", None),
                           "x_row_stride": ("i32", None), "out_row_stride": ("i32", None)},
                          {"CHUNK": ns["CHUNK"]}, num_warps=8))
    return first_of_each(out)


#: The launch-shape sweeps' (ROWS, num_warps) at rows of 4096 (05: float32, 06: float16), as their cells set them.
SOFTMAX_SWEEP = [(1, 1), (1, 2), (1, 4), (1, 16), (1, 32), (2, 4), (4, 8), (8, 8)]
RMSNORM_SWEEP = [(1, 1), (1, 4), (1, 8), (1, 32), (2, 8), (2, 16), (4, 8), (8, 8)]


def rmsnorm_launches(gpu: Gpu) -> list[Launch]:
    """06: rmsnorm_kernel and rmsnorm_rstd_kernel at every launch launch_config picks at the chapter's sizes (its
    hidden test's at GPU scale, the sweep's), and the launch-shape sweep's launches."""
    ch, ns = "06_rmsnorm", notebook_rules("06_rmsnorm")

    def kernel_args(dt, rstd=False):
        args = {"x_ptr": (f"*{dt}", None), "w_ptr": (f"*{dt}", None), "out_ptr": (f"*{dt}", None)}
        if rstd:
            args["rstd_ptr"] = ("*fp32", None)
        args.update(M=("i32", None), N=("i32", None), stride_x=("i32", None), stride_out=("i32", None),
                    eps=("fp32", None))
        return args

    extra = [(math.prod(shape[:-1]), shape[-1], dt) for shape, dt in hidden_gpu_sizes(ch, "test_rmsnorm_gpu_sizes")]
    extra += [(4096, n, "fp16") for n in (1024, 2048, 4096, 8192, 16384)]   # the row-length sweep
    widest = max(n for _, n, _ in extra)
    out = []
    for n_rows, n_cols, dt in row_shapes(gpu, widest, extra):
        block_n, rows, warps, _, stream = ns["launch_config"](n_rows, n_cols, SIZE[dt])
        out.append(launch(ch, "rmsnorm_kernel", "launch_config", kernel_args(dt),
                          {"BLOCK_N": block_n, "ROWS": rows, "STREAM": stream, "ALIGN": row_align(n_cols, SIZE[dt])},
                          num_warps=warps))
        out.append(launch(ch, "rmsnorm_rstd_kernel", "launch_config", kernel_args(dt, True),
                          {"BLOCK_N": block_n, "ROWS": rows}, num_warps=warps))
    for rows, warps in RMSNORM_SWEEP:
        out.append(launch(ch, "rmsnorm_kernel", "launch-shape sweep", kernel_args("fp16"),
                          {"BLOCK_N": 4096, "ROWS": rows}, num_warps=warps))
    return first_of_each(out)


#: Products chapter 07 runs beside its hidden test's at GPU scale (read from the notebook): the self-checks' small
#: ragged ones (b = w.t() too), the program-order map's, the flops sweep's and the GROUP_M experiment's sizes.
MATMUL_SHAPES = [(67, 45, 129, False), (40, 33, 70, True), (128, 128, 16, False)] + \
    [(n, n, n, False) for n in (256, 512, 1024, 2048, 3000, 4096, 8192)]


def matmul_launches(gpu: Gpu) -> list[Launch]:
    """07: matmul_relu_kernel at every launch launch_config picks for this GPU, ALIGNED or not, and at the
    experiments' fixed launches; on Hopper, at the fast path's autotuned configs."""
    import torch

    from triton_course import matmul

    ch = "07_matmul_relu"

    def kernel_args(dt, m, n, k, b_t=False):
        ints = {"M": m, "N": n, "K": k, "stride_am": k, "stride_ak": 1, "stride_bk": 1 if b_t else n,
                "stride_bn": k if b_t else 1, "stride_cm": n, "stride_cn": 1}
        args = {"a_ptr": (f"*{dt}", None), "b_ptr": (f"*{dt}", None), "c_ptr": (f"*{dt}", None)}
        args.update({a: ("i32", v) for a, v in ints.items()})
        return args

    out = []
    torch_dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
    for dt in dtypes_on(gpu, "fp16", "bf16"):
        for m, n, k, b_t in MATMUL_SHAPES + [tuple(x) for x in hidden_gpu_sizes(ch, "test_matmul_relu_gpu_sizes")]:
            meta = matmul.launch_config(m, n, k, torch_dtypes[dt], compute_capability=gpu.cc, sms=gpu.sms)
            warps, stages = meta.pop("num_warps"), meta.pop("num_stages")
            aligned = m % 8 == n % 8 == k % 8 == 0   # as matmul_relu decides it (contiguous a, b = w.t() or b)
            out.append(launch(ch, "matmul_relu_kernel", "launch_config", kernel_args(dt, m, n, k, b_t),
                              dict(meta, ALIGNED=aligned), num_warps=warps, num_stages=stages))
    fixed = [({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": g}, DEFAULT_WARPS, DEFAULT_STAGES,
              "program-order map", (128, 128, 16)) for g in (1, 8)]
    # GROUP_M changes only the tile arithmetic: the experiment's 1, 2, 4, 8, 16 and 32 compiled at both ends
    fixed += [({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": g}, 4, 3, "GROUP_M experiment",
               (2048, 2048, 2048)) for g in (1, 32)]
    fixed += [({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 1}, DEFAULT_WARPS, DEFAULT_STAGES,
               "first-kernel sweep", (4096, 4096, 4096)),
              ({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 1}, DEFAULT_WARPS, DEFAULT_STAGES,
               "appendix", (1024, 1024, 1024))]
    for meta, warps, stages, label, (m, n, k) in fixed:
        out.append(launch(ch, "matmul_relu_kernel", label, kernel_args("fp16", m, n, k), dict(meta, ALIGNED=False),
                          num_warps=warps, num_stages=stages))
    if gpu.cc[0] == 9:   # the fast path (triton_course.matmul_fast): Hopper only
        for c in MATMUL_FAST_CONFIGS:   # float16 (bfloat16 takes the same tiles; its TMA launches are below)
            for dt in ("fp16",):
                meta = dict(c)
                warps, stages = meta.pop("num_warps"), meta.pop("num_stages")
                out.append(launch(ch, "matmul_relu_kernel", "fast path, autotuned", kernel_args(dt, 4096, 4096, 4096),
                                  dict(meta, ALIGNED=True), num_warps=warps, num_stages=stages))
        out += matmul_tma_launches()
    return out


def matmul_tma_launches() -> list[Launch]:
    """07's fast path on Hopper: matmul_relu_tma_kernel at each tile HOPPER_CHOICE takes, for its case (b = w.t() or
    b row-major), with the last wave cut along K (the most registers), in float16 and bfloat16, and the
    add_pieces_kernel that adds the cuts up. (solutions/07_matmul_relu's tests compile every candidate tile.)"""
    from triton_course import matmul_fast as mf

    ch, module, out = "07_matmul_relu", "triton_course.matmul_fast", []
    for case, names in sorted(mf.HOPPER_CHOICE.items()):
        b_t = case == "b = w.t()"
        for name in names:
            tile = dict(mf.GPU_TMA_TILES[name])
            warps, stages = tile.pop("num_warps"), tile.pop("num_stages")
            bm, bn, bk, extra = tile["BLOCK_M"], tile["BLOCK_N"], tile["BLOCK_K"], tile.pop("EXTRA_N", 0)
            half, e = (bn // 2 if tile["HALVES"] else bn), extra or bn
            for dt in ("fp16", "bf16"):
                args = {"a_desc": (f"tensordesc<{dt}[{bm}, {bk}]>", None),
                        "b_desc": (f"tensordesc<{dt}[{bn}, {bk}]>" if b_t else f"tensordesc<{dt}[{bk}, {bn}]>", None),
                        "b2_desc": (f"tensordesc<{dt}[{e}, {bk}]>" if b_t else f"tensordesc<{dt}[{bk}, {e}]>", None),
                        "c_desc": (f"tensordesc<{dt}[{bm}, {half}]>", None),
                        "c2_desc": (f"tensordesc<{dt}[{bm}, {extra or half}]>", None),
                        "partial_ptr": ("*fp32", None)}
                args.update({a: ("i32", None) for a in ("M", "N", "K", "full_tiles", "split")})
                out.append(launch(ch, "matmul_relu_tma_kernel", f"fast path, {case}, {name}", args,
                                  dict(tile, EXTRA_N=extra, B_T=b_t, PROGRAMS=132, SPLIT_TAIL=True),
                                  num_warps=warps, num_stages=stages, module=module))
                if dt == "fp16":
                    out.append(launch(ch, "add_pieces_kernel", f"fast path, {name}",
                                      {"partial_ptr": ("*fp32", None), "c_ptr": ("*fp16", None),
                                       **{a: ("i32", None) for a in ("M", "N", "stride_cm", "full_tiles")}},
                                      dict(SPLIT=mf.MAX_SPLIT, BLOCK_M=bm, TILE_N=bn + extra, GROUP_M=tile["GROUP_M"],
                                           ROWS=mf.ADD_ROWS, SUB_N=min(64, bn, extra or 64)),
                                      num_warps=4, num_stages=DEFAULT_STAGES, module=module))
    return out


#: triton_course.matmul_fast.GPU_CONFIGS, as the autotuner launches them on a GPU (checked by the test module).
MATMUL_FAST_CONFIGS = [dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=g, num_stages=s, num_warps=w)
                       for bm, bn, bk, g, s, w in [(128, 256, 64, 8, 3, 8), (128, 256, 64, 8, 4, 8),
                                                   (256, 128, 64, 8, 3, 8), (128, 128, 64, 8, 4, 4),
                                                   (128, 128, 64, 8, 3, 8), (64, 256, 64, 8, 4, 4),
                                                   (128, 64, 64, 8, 4, 4), (64, 128, 64, 8, 4, 4),
                                                   (64, 64, 64, 8, 4, 4), (64, 64, 32, 8, 3, 4)]]


def fusion_launches(gpu: Gpu) -> list[Launch]:
    """08: add_rmsnorm_kernel at every launch the chapter's launch_config picks at its sizes (its hidden test's at
    GPU scale, the sweep's rows of 4096 float16 values, the longest row it takes)."""
    ch, ns = "08_fusion", notebook_rules("08_fusion")
    sizes = hidden_gpu_sizes(ch, "test_fused_gpu_sizes")
    extra = [(math.prod(shape[:-1]), shape[-1], dt) for dt, shapes in sizes.items() for shape in shapes]
    extra += [(m, 4096, "fp16") for m in (256, 1024, 4096, 8192, 16384)]   # the sweep
    out = []
    for n_rows, n_cols, dt in row_shapes(gpu, FUSION_MAX_COLS, extra):
        args = {p: (f"*{dt}", None) for p in ("x_ptr", "r_ptr", "w_ptr", "y_ptr", "h_ptr")}
        args.update(n_rows=("i32", None), n_cols=("i32", None), eps=("fp32", None))
        block_n, rows, warps, stream = ns["launch_config"](n_rows, n_cols, SIZE[dt])
        out.append(launch(ch, "add_rmsnorm_kernel", "launch_config", args,
                          {"BLOCK_N": block_n, "ROWS": rows, "STREAM": stream, "ALIGN": row_align(n_cols, SIZE[dt])},
                          num_warps=warps))
    return first_of_each(out)


#: The longest rows add_rmsnorm takes (its launcher refuses longer ones).
FUSION_MAX_COLS = 65536


def rowwise_backward_launches(gpu: Gpu) -> list[Launch]:
    """10: the forward kernels (one row per program, the next power of two, 4 warps), softmax_backward_kernel with its
    launcher's warps (one per KB of row, 4 to 16), rmsnorm_backward_kernel at every launch backward_config picks
    (ATOMIC or not) and dw_sum_kernel, at the hidden test's sizes at GPU scale and the bandwidth check's."""
    import triton

    ch, ns = "10_rowwise_backward", notebook_rules("10_rowwise_backward")
    soft = [(math.prod(s[:-1]), s[-1], dt) for s, dt in hidden_gpu_sizes(ch, "test_grads_gpu_sizes", "SOFTMAX_SIZES")]
    rms = [(math.prod(s[:-1]), s[-1], dt) for s, dt in hidden_gpu_sizes(ch, "test_grads_gpu_sizes", "RMS_SIZES")]
    widest = max(n for _, n, _ in soft + rms)
    out = []

    def ptrs(dt, *names, f32=()):
        return {p: ("*fp32" if p in f32 else f"*{dt}", None) for p in names}

    ints = {"N": ("i32", None), "stride_x": ("i32", None), "stride_y": ("i32", None)}
    for m, n, dt in row_shapes(gpu, widest, soft):
        block_n = 1 << (n - 1).bit_length()
        out.append(launch(ch, "softmax_forward_kernel", "softmax_forward", dict(ptrs(dt, "x_ptr", "y_ptr"), **ints),
                          {"BLOCK_N": block_n}))
        warps = min(16, max(4, triton.next_power_of_2(block_n * SIZE[dt] // 1024)))   # as softmax_backward picks
        out.append(launch(ch, "softmax_backward_kernel", "softmax_backward",
                          dict(ptrs(dt, "y_ptr", "dy_ptr", "dx_ptr"), N=("i32", None), stride_y=("i32", None),
                               stride_dy=("i32", None), stride_dx=("i32", None)), {"BLOCK_N": block_n}, num_warps=warps))
    for m, n, dt in row_shapes(gpu, widest, rms):
        block_n = 1 << (n - 1).bit_length()
        out.append(launch(ch, "rmsnorm_forward_kernel", "rmsnorm_forward",
                          dict(ptrs(dt, "x_ptr", "w_ptr", "y_ptr", "rstd_ptr", f32=("rstd_ptr",)), **ints,
                               eps=("fp32", None)), {"BLOCK_N": block_n}))
        block_n, rows, _, _, warps = ns["backward_config"](m, n, SIZE[dt])
        for atomic in (True, False):
            args = ptrs(dt, "x_ptr", "w_ptr", "rstd_ptr", "dy_ptr", "dx_ptr", "dw_ptr", f32=("rstd_ptr", "dw_ptr"))
            args.update({a: ("i32", None) for a in ("M", "N", "stride_x", "stride_dy", "stride_dx", "TILES")})
            out.append(launch(ch, "rmsnorm_backward_kernel", "rmsnorm_backward", args,
                              {"BLOCK_N": block_n, "ROWS": rows, "ATOMIC": atomic}, num_warps=warps))
    out.append(launch(ch, "dw_sum_kernel", "rmsnorm_backward", {"partials_ptr": ("*fp32", None),
                                                                "dw_ptr": ("*fp32", None), "P": ("i32", None),
                                                                "N": ("i32", None)}, {"BLOCK_P": 32, "BLOCK_N": 64}))
    return first_of_each(out)


def attention_backward_launches(gpu: Gpu) -> list[Launch]:
    """11: forward_kernel at every launch the attention launch rule picks for this GPU, and the backward's three
    kernels at every launch backward_config picks, in each dtype and head dimension the chapter takes, each at the
    largest head dimension that takes it, causal only where the launch is the same without the mask; bfloat16
    (float16's launches, other conversions) at D = 128."""
    import torch

    from triton_course.attention import launch_config
    from triton_course.attention_backward import backward_config

    ch = "11_attention_backward"
    torch_dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    out = []
    with running_on(gpu):
        for dt in dtypes_on(gpu, "fp32", "fp16", "bf16"):
            for d in (16, 32, 64, 128):
                for n in (4096,):   # the pointer launches do not depend on the length
                    q = torch.empty(1, 1, n, d, dtype=torch_dtypes[dt])
                    for causal in (False, True):
                        c = launch_config(q, causal)
                        args = {p: (f"*{dt}", None) for p in "QKVO"}
                        args.update(LSE=("*fp32", None), N=("i32", n), qk_scale=("fp32", None))
                        out.append(launch(ch, "forward_kernel", "launch_config", args,
                                          {"CAUSAL": causal, "HEAD_DIM": d, "BLOCK_M": c.block_m,
                                           "BLOCK_N": c.block_n}, num_warps=c.num_warps, num_stages=c.num_stages))
                        b = backward_config(q, causal)
                        out.append(launch(ch, "delta_kernel", "backward_config",
                                          {"O": (f"*{dt}", None), "DO": (f"*{dt}", None), "DELTA": ("*fp32", None),
                                           "N": ("i32", n)}, {"HEAD_DIM": d, "BLOCK_M": b.block_q}))
                        grads = {p: (f"*{dt}", None) for p in ("Q", "K", "V", "DO")}
                        grads.update(LSE=("*fp32", None), DELTA=("*fp32", None))
                        for name, blocks in (("dkdv_kernel", {"BLOCK_N": b.block_kv, "BLOCK_M": b.block_q_step}),
                                             ("dq_kernel", {"BLOCK_M": b.block_q, "BLOCK_N": b.block_kv_step})):
                            args = dict(grads)
                            args.update({p: (f"*{dt}", None) for p in (("DK", "DV") if name == "dkdv_kernel"
                                                                       else ("DQ",))})
                            args.update(N=("i32", n), sm_scale=("fp32", None))
                            out.append(launch(ch, name, "backward_config", args,
                                              dict(CAUSAL=causal, HEAD_DIM=d, **blocks),
                                              num_warps=b.num_warps, num_stages=b.num_stages))
    kept = [x for x in widest_head(out) if "bf16" not in str(x.types) or dict(x.constexprs)["HEAD_DIM"] == 128]
    causal = {(x.kernel, x.types, tuple(kv for kv in x.constexprs if kv[0] != "CAUSAL"), x.num_warps, x.num_stages)
              for x in kept if dict(x.constexprs).get("CAUSAL")}
    # where the causal launch is the same, the causal kernel holds every stage of the other (chapter 09 does so too)
    return [x for x in kept if dict(x.constexprs).get("CAUSAL", True) or
            (x.kernel, x.types, tuple(kv for kv in x.constexprs if kv[0] != "CAUSAL"), x.num_warps, x.num_stages)
            not in causal]


def widest_head(launches: list[Launch]) -> list[Launch]:
    """Of the launches that differ only in HEAD_DIM, the one at the largest head dimension (its tiles are the
    largest; chapter 09's launches are chosen so too)."""
    widest: dict[tuple, Launch] = {}
    for x in launches:
        key = (x.kernel, x.types, tuple(kv for kv in x.constexprs if kv[0] != "HEAD_DIM"), x.num_warps, x.num_stages)
        if key not in widest or dict(x.constexprs)["HEAD_DIM"] > dict(widest[key].constexprs)["HEAD_DIM"]:
            widest[key] = x
    return list(widest.values())


#: Per chapter (but 09, whose launches tests/test_gpu_limits.py builds): its launches on a GPU.
CHAPTERS: dict[str, Callable[[Gpu], list[Launch]]] = {
    "01_gpu_model": gpu_model_launches, "03_vector_add": vector_add_launches, "04_gelu": gelu_launches,
    "05_softmax": softmax_launches, "06_rmsnorm": rmsnorm_launches, "07_matmul_relu": matmul_launches,
    "08_fusion": fusion_launches, "10_rowwise_backward": rowwise_backward_launches,
    "11_attention_backward": attention_backward_launches}
#: Chapters that launch no Triton kernel of their own (02 times torch's operations).
NO_KERNELS = ("02_benchmarking",)


# ---------------------------------------------------------------------------------------------------
# Compiling (in a process of its own) and checking
# ---------------------------------------------------------------------------------------------------

def compile_all(jobs: list[dict], workers: int = 1) -> list[dict]:
    """Compile each job without the interpreter, in ``workers`` processes: [{"shared", "regs", "stack"} or
    {"error"}]."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    shares = [jobs[i::workers] for i in range(workers)]
    procs, paths = [], []
    os.makedirs(os.path.join(ROOT, "test-artefacts"), exist_ok=True)
    for i, share in enumerate(shares):
        fd, path = tempfile.mkstemp(prefix="gpu_limits_jobs_", suffix=".json", dir=os.path.join(ROOT, "test-artefacts"))
        with os.fdopen(fd, "w") as f:
            json.dump(share, f)
        paths.append(path)
        procs.append(subprocess.Popen([sys.executable, "-W", "ignore", os.path.abspath(__file__), path],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT))
    results: list[list[dict]] = []
    try:
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=900)
            assert proc.returncode == 0, stderr[-3000:]
            results.append(json.loads(stdout.strip().splitlines()[-1]))
    finally:
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
    merged = [None] * len(jobs)
    for i, share in enumerate(results):
        merged[i::workers] = share
    return merged


def over_limits(gpu: Gpu, launch: Launch, result: dict) -> str | None:
    """Why a compiled launch would not run on ``gpu``, or None when it fits."""
    if "error" in result:
        return f"does not compile for sm_{gpu.cc[0]}{gpu.cc[1]}: {result['error']}"
    if result["shared"] > gpu.shared:
        return f"needs {result['shared']:,} B of shared memory, the {gpu.name} has {gpu.shared:,}"
    regs = result["regs"]
    if regs is None or regs > gpu.regs_per_thread or regs * 32 * launch.num_warps > gpu.regs_per_block:
        return f"needs {regs} registers per thread x {32 * launch.num_warps} threads"
    return None


def _load_kernel(job: dict, cache: dict):
    """The @triton.jit function ``job["kernel"]`` of the notebook or module the job names, compiled (not
    interpreted)."""
    source = job["module"] or job["notebook"]
    if source not in cache:
        import triton  # noqa: F401  (first: Triton's own jit functions stay compiled ones)

        if job["module"]:
            import importlib

            from triton_course.device import current  # sets TRITON_INTERPRET without a GPU: undone below

            current()   # the device settled now, so that no later import of the course's sets it again
            os.environ.pop("TRITON_INTERPRET", None)
            # reloaded: the course's import may have decorated its kernels for the interpreter already
            cache[source] = vars(importlib.reload(importlib.import_module(job["module"])))
        else:   # the notebook's kernels and constants need neither torch nor the course (a faster start)
            cache[source] = _exec_definitions(_definitions(source, True), _base_namespace(with_torch=False))
    return cache[source][job["kernel"]]


def _usage(cubin: bytes) -> tuple[int | None, int]:
    """(registers per thread, bytes of stack per thread: spilled registers) of the one kernel in ``cubin``, from
    Triton's bundled cuobjdump."""
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True).stdout
    regs, stack = re.search(r"REG:(\d+)", out), re.search(r"STACK:(\d+)", out)
    return (int(regs.group(1)) if regs else None), (int(stack.group(1)) if stack else 0)


def compile_job(job: dict, cache: dict) -> dict:
    """{"shared": bytes, "regs": per thread} of one job, or {"error": text}."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    try:
        fn = _load_kernel(job, cache)
        names = fn.arg_names
        signature = {a: job["types"].get(a, "constexpr") for a in names}
        defaults = {p.name: p.default for p in fn.params if p.is_constexpr and p.has_default}
        constexprs = {(i,): job["constexprs"][a] if a in job["constexprs"] else defaults[a]
                      for i, a in enumerate(names) if a in job["constexprs"] or a in defaults}
        attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(names) if a in job["aligned"]}
        compiled = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=GPUTarget("cuda", job["cc"], 32),
                                  options={"num_warps": job["num_warps"], "num_stages": job["num_stages"]})
    except Exception as exc:  # reported per job: the test names the launch that failed to compile
        return {"error": f"{type(exc).__name__}: {str(exc)[-600:]}"}
    regs, stack = _usage(compiled.asm["cubin"])
    return {"shared": int(compiled.metadata.shared), "regs": regs, "stack": stack}


def main() -> None:
    sys.path.insert(0, ROOT)
    with open(sys.argv[1]) as f:
        jobs = json.load(f)
    cache: dict = {}
    print(json.dumps([compile_job(job, cache) for job in jobs]))


if __name__ == "__main__":
    main()
