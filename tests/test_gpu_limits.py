"""Every kernel a chapter launches fits every GPU a student has: compiled with Triton's compiler for each GPU (no GPU
needed), its shared memory and registers held to that GPU's limits.

Each chapter lists its kernels and launches in :data:`CHAPTERS` (a function from a GPU to the launches that chapter
makes there: what its launch rules pick, and what its experiments offer, each with the reason the chapter gives for
leaving it out, or None where it runs it). The compiler runs in one subprocess without ``TRITON_INTERPRET``
(tests/gpu_limits_compile.py); launches are compiled once per key, and Triton's on-disk cache makes a second run of
this module fast.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
import torch

from grader.course import solution_notebook
from tests.conftest import ROOT
from triton_course import attention as course_attention
from triton_course import device as course_device


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
    grade_id: str
    kernel: str
    types: tuple            # (argument, Triton type) pairs
    constexprs: tuple       # (argument, value) pairs
    aligned: tuple          # arguments Triton would see as multiples of 16
    num_warps: int
    num_stages: int
    skipped: str | None = None   # the chapter's reason for not running it on this GPU
    chapter: str = field(default="", compare=False)
    module: str = ""             # a kernel of the course's helpers (this module), not of the notebook's cell grade_id

    def job(self, cc: tuple[int, int]) -> dict:
        """The compile job of tests/gpu_limits_compile.py for a GPU of compute capability ``cc``."""
        return {"notebook": str(solution_notebook(self.chapter)), "grade_id": self.grade_id, "module": self.module,
                "kernel": self.kernel, "cc": cc[0] * 10 + cc[1], "types": dict(self.types),
                "constexprs": dict(self.constexprs), "aligned": list(self.aligned), "num_warps": self.num_warps,
                "num_stages": self.num_stages}


# ---------------------------------------------------------------------------------------------------
# Chapter 09: attention
# ---------------------------------------------------------------------------------------------------

TRITON_TYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}


def attention_launch(config, dtype: torch.dtype, head_dim: int, causal: bool, label: str,
                     skipped: str | None = None) -> Launch:
    """The exercise's attention kernel (the model answer: pointer loads) as ``attention`` launches it with
    ``config``: contiguous q, k, v, o (unit last stride)."""
    dt = TRITON_TYPES[dtype]
    types = {a: "*" + dt for a in "QKVO"}
    types.update({f"stride_{t}{x}": "i32" for t in "qkvo" for x in "zhn"}, H="i32", N="i32", qk_scale="fp32")
    constexprs = {f"stride_{t}d": 1 for t in "qkvo"}
    constexprs.update(CAUSAL=causal, HEAD_DIM=head_dim, BLOCK_M=config.block_m, BLOCK_N=config.block_n)
    aligned = tuple(a for a in types if a in "QKVO" or a.startswith("stride") or a == "N")
    return Launch(f"{label}: {dt}, D={head_dim}, {'causal' if causal else 'non-causal'}, {config.describe()}",
                  "attention", "attention_kernel", tuple(sorted(types.items())), tuple(sorted(constexprs.items())),
                  aligned, config.num_warps, config.num_stages, skipped, chapter="09_attention")


def fast_attention_launch(config, dtype: torch.dtype, head_dim: int, causal: bool, label: str) -> Launch:
    """The fast path's Triton kernel (triton_course.attention_fast, beyond the exercise) as ``fast_attention``
    launches it with ``config``: contiguous q, k, v, o, host descriptors where it reads through TMA."""
    dt = TRITON_TYPES[dtype]
    types = {a: "*" + dt for a in "QKVO"}
    types.update({f"stride_{t}{x}": "i32" for t in "qkvo" for x in "zhn"}, H="i32", N="i32", qk_scale="fp32")
    constexprs = {f"stride_{t}d": 1 for t in "qkvo"}
    constexprs.update(CAUSAL=causal, HEAD_DIM=head_dim, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
                      TMA=config.tma, WARP_SPEC=config.warp_spec)
    for t, rows in (("q", config.block_m), ("k", config.block_n), ("v", config.block_n), ("o", config.block_m)):
        if config.tma and not config.warp_spec:
            types[f"{t}_desc"] = f"tensordesc<{dt}[1,1,{rows},{head_dim}]>"
        else:
            constexprs[f"{t}_desc"] = None
    aligned = tuple(a for a in types if a in "QKVO" or a.startswith("stride") or a == "N")
    return Launch(f"{label}: {dt}, D={head_dim}, {'causal' if causal else 'non-causal'}, {config.describe()}",
                  "", "attention_kernel", tuple(sorted(types.items())), tuple(sorted(constexprs.items())),
                  aligned, config.num_warps, config.num_stages, None, chapter="09_attention",
                  module="triton_course.attention_fast")


@contextlib.contextmanager
def running_on(gpu: Gpu) -> Iterator[None]:
    """The course's device described as ``gpu`` (only the launch rules read it; no kernel runs)."""
    saved = course_device._CURRENT
    course_device._CURRENT = course_device.Device(False, torch.device("cpu"), gpu.name, gpu.cc, gpu.sms, None, None)
    try:
        yield
    finally:
        course_device._CURRENT = saved


def _picked(gpu: Gpu, rule: Callable) -> dict[tuple, int]:
    """(dtype, launch, causal) -> the largest head dimension at which ``rule(q, causal)`` picks that launch on
    ``gpu``, for every head dimension attention accepts (those under 16 are padded to 16), float16 and float32 and,
    where the GPU has it, bfloat16, causal and not, at sequence lengths on both sides of the fast table's
    ``up_to_n``. Where the rule picks the same launch with and without the mask, causal only (that kernel holds
    both stages of the other)."""
    picked: dict[tuple, int] = {}
    with running_on(gpu), _no_tma_scratch():
        for dtype in (torch.float16, torch.float32) + ((torch.bfloat16,) if gpu.bf16 else ()):
            for d in (16, 32, 64, 128):
                for n in (1024, 4096):
                    q = torch.empty(1, 1, n, d, dtype=dtype)
                    configs = {c: rule(q, c) for c in (False, True)}
                    for causal, config in configs.items():
                        if configs[False] == configs[True] and not causal:
                            continue
                        picked[(dtype, config, causal)] = max(d, picked.get((dtype, config, causal), 0))
    return picked


def attention_launches(gpu: Gpu) -> list[Launch]:
    """What chapter 09 launches on ``gpu``: the launch rule's pick (``launch_config``) for the exercise's kernel, a
    launch compiled at the largest head dimension that takes it (its tiles are the largest there); every block shape
    of the block-size experiment; and the fast path's Triton kernel at every launch its rule takes
    (``fast_launch_config`` with its Hopper table)."""
    from triton_course.attention_fast import HOPPER_CONFIGS

    launches = [attention_launch(config, dtype, d, causal, f"{gpu.name} launch rule")
                for (dtype, config, causal), d in _picked(gpu, course_attention.launch_config).items()]
    interpreted, limit = False, course_attention.shared_memory_limit(gpu.cc)
    for block_m, block_n in EXPERIMENT_BLOCKS:
        config = course_attention.experiment_launch(block_m, block_n, interpreted)
        reason = course_attention.experiment_skip_reason(config, EXPERIMENT_D, 2, limit)
        launches.append(attention_launch(config, torch.float16, EXPERIMENT_D, True, f"{gpu.name} block experiment",
                                         reason))

    def fast_rule(q, causal):
        return course_attention.fast_launch_config(q, q, q, causal, HOPPER_CONFIGS)

    launches += [fast_attention_launch(config, dtype, d, causal, f"{gpu.name} fast path")
                 for (dtype, config, causal), d in _picked(gpu, fast_rule).items()]
    return launches


@contextlib.contextmanager
def _no_tma_scratch() -> Iterator[None]:
    """fast_launch_config sets Triton's allocator for TMA scratch on a GPU: nothing to set here."""
    saved = course_attention._use_tma_scratch
    course_attention._use_tma_scratch = lambda: None
    try:
        yield
    finally:
        course_attention._use_tma_scratch = saved


def experiment_cell() -> str:
    """The source of chapter 09's block-size experiment cell."""
    import nbformat

    cells = nbformat.read(solution_notebook("09_attention"), as_version=4).cells
    return next(c.source for c in cells if "causal_block_sweep(attention" in c.source)


#: The block-size experiment's shapes and head dimension on a GPU, as its cell sets them (checked below).
EXPERIMENT_BLOCKS = [(32, 16), (64, 32), (64, 64), (128, 64), (128, 128)]
EXPERIMENT_D = 64

#: Per chapter: its launches on a GPU. A chapter joins by adding a function here.
CHAPTERS: dict[str, Callable[[Gpu], list[Launch]]] = {"09_attention": attention_launches}


# ---------------------------------------------------------------------------------------------------
# Compiling and checking
# ---------------------------------------------------------------------------------------------------

def compile_all(jobs: list[dict]) -> list[dict]:
    """Compile each job in one subprocess without the interpreter: [{"shared", "regs"} or {"error"}]."""
    path = os.path.join(ROOT, "test-artefacts", f"gpu_limits_jobs_{os.getpid()}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(jobs, f)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    try:
        proc = subprocess.run([sys.executable, "-W", "ignore", os.path.join(ROOT, "tests", "gpu_limits_compile.py"),
                               path], capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    finally:
        os.remove(path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def over_limits(gpu: Gpu, launch: Launch, result: dict) -> str | None:
    """Why a compiled launch would not run on ``gpu``, or None when it fits."""
    if "error" in result:
        return f"does not compile: {result['error']}"
    if result["shared"] > gpu.shared:
        return f"needs {result['shared']:,} B of shared memory, the {gpu.name} has {gpu.shared:,}"
    regs = result["regs"]
    if regs is None or regs > gpu.regs_per_thread or regs * 32 * launch.num_warps > gpu.regs_per_block:
        return f"needs {regs} registers per thread x {32 * launch.num_warps} threads"
    return None


@pytest.mark.parametrize("chapter", sorted(CHAPTERS))
def test_every_launch_fits_every_gpu(chapter):
    """Every launch a chapter runs fits each GPU's shared memory and registers; one it offers but leaves out on a
    GPU says why. Zero failures: the message lists every launch that does not fit."""
    todo: dict[tuple, Launch] = {}
    skipped = []
    for gpu in GPUS:
        for launch in CHAPTERS[chapter](gpu):
            if launch.skipped:
                assert "skipped" in launch.skipped and "shared memory" in launch.skipped, launch
                skipped.append((gpu.name, launch.label))
            else:
                todo.setdefault((gpu, launch), launch)
    results = compile_all([launch.job(gpu.cc) for gpu, launch in todo])
    failures = [f"{launch.label}: {why}" for (gpu, launch), result in zip(todo, results)
                if (why := over_limits(gpu, launch, result))]
    assert not failures, "\n".join(failures)
    if chapter == "09_attention":   # the 128 x 128 experiment needs 96 KB on a T4 (64 KB): left out there only
        assert len(skipped) == 1 and skipped[0][0] == "T4", skipped
        assert "BLOCK_M=128, BLOCK_N=128" in skipped[0][1], skipped


def test_the_shared_memory_table_is_the_issues():
    """The launch rule's table of shared memory by compute capability holds each student GPU's figure."""
    for gpu in GPUS:
        assert course_attention.shared_memory_limit(gpu.cc) == gpu.shared, gpu


def test_the_experiment_cell_offers_what_this_module_compiles():
    """The experiment's block shapes, head dimension and dtype on a GPU are those compiled above."""
    cell = experiment_cell()
    assert f"exp_blocks = {EXPERIMENT_BLOCKS}" in cell
    assert "gpu=(4096, 64, 128)" in cell and "gpu=torch.float16" in cell
