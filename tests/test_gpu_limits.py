"""Every kernel a chapter launches fits every GPU a student has: compiled with Triton's compiler for each GPU (no GPU
needed: sm_75 T4, sm_86 A10, sm_89 L4, sm_90 H100/H200), its shared memory and registers held to that GPU's limits.

Each chapter lists its kernels and launches in :data:`CHAPTERS` (a function from a GPU to the launches that chapter
makes there: what its launchers pass, with the launch rules driven by a description of that GPU, and what its
experiments offer, each with the reason the chapter gives for leaving it out, or None where it runs it). Chapter 09's
are built here; the others' in tests/gpu_limits_kernels.py, which also compiles them in a process of its own without
``TRITON_INTERPRET``. Launches are compiled once per (kernel, launch, GPU), one chapter per test (``make test``'s two
workers take a chapter each), and Triton's on-disk cache makes a second run of this module fast.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator

import pytest
import torch

from grader.course import solution_notebook
from tests.gpu_limits_kernels import (CHAPTERS as OTHER_CHAPTERS, GPUS, MATMUL_FAST_CONFIGS, NO_KERNELS, Gpu,
                                      Launch, compile_all, hidden_gpu_sizes, over_limits, running_on)
from triton_course import attention as course_attention


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
    of the block-size experiment; and on Hopper (the only GPU whose appendix cell runs it) the fast path's Triton kernel
    at every launch its rule takes (``fast_launch_config`` with its Hopper table)."""
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

    if gpu.cc[0] == 9:   # the chapter runs the fast path on Hopper only (its appendix cell skips it elsewhere)
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

#: Per chapter: its launches on a GPU. A chapter joins by adding a function here (or in gpu_limits_kernels.CHAPTERS).
CHAPTERS: dict[str, Callable[[Gpu], list[Launch]]] = {"09_attention": attention_launches, **OTHER_CHAPTERS}


def course_chapters() -> list[str]:
    import tomllib

    from tests.conftest import ROOT

    with open(f"{ROOT}/course.toml", "rb") as f:
        return list(tomllib.load(f)["chapters"])


#: The (chapter, GPU) pairs ``make test`` compiles: where shared memory binds (the attention chapters on a T4 and
#: an A10). The whole matrix, every chapter on every GPU, is ``make test-gpu-limits`` (marker ``gpu_limits``; about
#: 17 minutes on 2 cores from a cold Triton cache, too long for ``make test``'s 20): CI runs it as a job of its own.
IN_MAKE_TEST = {("09_attention", "T4"), ("09_attention", "A10"), ("11_attention_backward", "T4"),
                ("11_attention_backward", "A10")}


def _matrix() -> list:
    return [pytest.param(chapter, gpu, id=f"{chapter}-{gpu.name.split('/')[0]}",
                         marks=() if (chapter, gpu.name.split("/")[0]) in IN_MAKE_TEST else pytest.mark.gpu_limits)
            for chapter in sorted(CHAPTERS) for gpu in GPUS]


@pytest.mark.parametrize("chapter, gpu", _matrix())
def test_every_launch_fits_every_gpu(chapter, gpu):
    """Every launch a chapter runs fits the GPU's shared memory and registers; one it offers but leaves out on that
    GPU says why. Zero failures: the message lists every launch that does not fit, by chapter, kernel, launch and
    GPU. (One test per chapter and GPU, so that ``make test``'s two workers share the compiling.)"""
    todo: dict[str, Launch] = {}
    skipped = []
    for launch in CHAPTERS[chapter](gpu):
        if launch.skipped:
            assert "skipped" in launch.skipped, launch
            skipped.append(launch.label)
        else:
            todo.setdefault(json.dumps(launch.job(gpu.cc), sort_keys=True), launch)
    results = compile_all([json.loads(key) for key in todo])
    failures = [f"{gpu.name} (sm_{gpu.cc[0]}{gpu.cc[1]}): {launch.label}: {why}"
                for launch, result in zip(todo.values(), results) if (why := over_limits(gpu, launch, result))]
    assert not failures, f"{len(failures)} of {len(todo)} launches do not fit:\n" + "\n".join(failures)
    if chapter == "09_attention":   # the 128 x 128 experiment needs 96 KB on a T4 (64 KB): left out there only
        assert len(skipped) == (gpu.name == "T4"), skipped
        assert all("BLOCK_M=128, BLOCK_N=128" in label for label in skipped), skipped
    elif chapter == "03_vector_add":   # the power-of-two experiment's 96, and nothing else
        assert len(skipped) == 1 and "BLOCK=96" in skipped[0], skipped
    else:
        assert not skipped, skipped


def test_every_chapter_is_covered():
    """Every chapter of course.toml has its launches here, or launches no Triton kernel of its own."""
    assert sorted(course_chapters()) == sorted([*CHAPTERS, *NO_KERNELS])


def test_the_launch_rules_fit_what_they_are_driven_with():
    """The GPUs' launch rules differ where the GPUs do: the matmul and attention rules pick other launches on a T4
    than on an H100 (so the rules here are driven by the GPU described, not by this machine)."""
    t4, h100 = GPUS[0], GPUS[-1]
    for chapter in ("07_matmul_relu", "11_attention_backward"):
        on_t4 = {(x.kernel, x.constexprs, x.num_warps, x.num_stages) for x in CHAPTERS[chapter](t4)}
        on_h100 = {(x.kernel, x.constexprs, x.num_warps, x.num_stages) for x in CHAPTERS[chapter](h100)}
        assert on_t4 != on_h100, chapter


def test_the_experiment_leaves_out_what_does_not_fit():
    """Chapter 09's block-size experiment offers a shape a T4 cannot run: the course's helper
    (``experiment_skip_reason``, which ``causal_block_sweep`` prints) names it and says why, before any launch, on that
    GPU only; and the attention launch rule never picks a launch the helper would refuse."""
    for gpu in GPUS:
        limit = course_attention.shared_memory_limit(gpu.cc)
        for block_m, block_n in EXPERIMENT_BLOCKS:
            config = course_attention.experiment_launch(block_m, block_n, False)
            reason = course_attention.experiment_skip_reason(config, EXPERIMENT_D, 2, limit)
            if gpu.name == "T4" and (block_m, block_n) == (128, 128):
                assert reason and "skipped" in reason and "shared memory" in reason and f"{limit:,}" in reason
            else:
                assert reason is None, (gpu, block_m, block_n, reason)
        for (dtype, config, causal), d in _picked(gpu, course_attention.launch_config).items():
            size = torch.empty((), dtype=dtype).element_size()
            assert course_attention.experiment_skip_reason(config, d, size, limit) is None, (gpu, config, d)


def test_the_sizes_compiled_are_the_chapters():
    """The fast matmul's autotuned configs compiled for Hopper are triton_course.matmul_fast's; the hidden tests'
    sizes at GPU scale are read from the notebooks (a chapter that renames them fails here, not silently)."""
    from triton_course import matmul_fast

    assert [dict(c.kwargs, num_warps=c.num_warps, num_stages=c.num_stages)
            for c in matmul_fast.GPU_CONFIGS] == MATMUL_FAST_CONFIGS
    for chapter, grade_id in (("05_softmax", "test_softmax_gpu_sizes"), ("06_rmsnorm", "test_rmsnorm_gpu_sizes"),
                              ("08_fusion", "test_fused_gpu_sizes")):
        assert hidden_gpu_sizes(chapter, grade_id), chapter


def test_the_shared_memory_table_is_the_issues():
    """The launch rule's table of shared memory by compute capability holds each student GPU's figure."""
    for gpu in GPUS:
        assert course_attention.shared_memory_limit(gpu.cc) == gpu.shared, gpu


def test_the_experiment_cell_offers_what_this_module_compiles():
    """The experiment's block shapes, head dimension and dtype on a GPU are those compiled above."""
    cell = experiment_cell()
    assert f"exp_blocks = {EXPERIMENT_BLOCKS}" in cell
    assert "gpu=(4096, 64, 128)" in cell and "gpu=torch.float16" in cell
