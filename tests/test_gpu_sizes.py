"""The hidden tests of chapters 03 and 04 that check correctness at sizes of many blocks, on a GPU.

On a GPU (simulated here: the interpreter's "is this the CPU?" answered no, inputs made as shapes only, the checks
recorded instead of run) each cell checks sizes beyond the largest block any launch configuration takes, at
several block counts with ragged last blocks, the sizes the timed test uses, float16 and 2-D, and reads the masks
of every kernel the calls launched, with inputs of at most a GiB in all (tests/gpu_sizes.py). On the CPU it
prints NOT GRADED and scores 0 (never a pass), and real autograde reports it as not_graded
(solutions/04_gelu/test_04_gelu.py).
"""

from __future__ import annotations

import types

import pytest
import torch

import triton_course.grading
from grader.judge import run_test_cell
from tests.conftest import solution_cell
from tests.gpu_sizes import MAX_INPUT_BYTES, ends_with_at_gpu_sizes

#: (chapter, grade_id of the GPU-size test, the graded function and its kernel, the chapter's largest launch
#: block, the timed test's sizes: its N and the sizes its correct_first checks)
CELLS = [("03_vector_add", "test_add_gpu_sizes", "add", "add_kernel", 16384, (2**26, 2**26 // 64 + 3, 5121)),
         ("04_gelu", "test_gelu_gpu_sizes", "gelu", "gelu_kernel", 16384, (2**26, 2**26 // 64 + 3, 5121))]
NAMES = "chapter, grade_id, function, kernel, largest_block, timed"


class _ShapesOnly:
    """torch, with torch.randn making meta tensors: the shapes and dtypes of the inputs, no memory."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def randn(*shape, dtype=torch.float32, device=None, **_):
        return torch.empty(*shape, dtype=dtype, device="meta")


def _judge_namespace(chapter: str, function: str, kernel: str, calls: list) -> dict:
    """The chapter's judge cell executed here, with the graded function and its kernel as placeholders, and
    check_all and check_masked_loads replaced by recorders."""
    import triton_course

    ns = {"torch": torch, "device": triton_course.current()}
    exec(compile(solution_cell(chapter, "judge_defs"), "<judge_defs>", "exec"), ns)
    ns["torch"] = _ShapesOnly()
    ns[function] = types.SimpleNamespace(__name__=function)
    ns[kernel] = types.SimpleNamespace(__name__=kernel)
    ns["check_all"] = lambda fn, cases, *a, **kw: calls.append(("check_all", fn, [tuple(c) for c in cases]))
    ns["check_masked_loads"] = lambda *kernels, **kw: calls.append(("check_masked_loads", kernels, kw))
    return ns


@pytest.mark.parametrize(NAMES, CELLS)
def test_on_a_gpu_the_cell_checks_many_ragged_blocks_and_the_timed_sizes(chapter, grade_id, function, kernel,
                                                                         largest_block, timed, monkeypatch):
    assert ends_with_at_gpu_sizes(chapter, grade_id)
    monkeypatch.setattr(triton_course.grading, "current", lambda: types.SimpleNamespace(interpreted=False))
    calls: list = []
    ns = _judge_namespace(chapter, function, kernel, calls)
    out = run_test_cell(solution_cell(chapter, grade_id), ns, grade_id)
    assert out.error is None and out.score == 1 and "correct at every size" in out.stdout, out
    cases = [case for name, fn, cases in calls if name == "check_all" for case in cases]
    assert all(fn is ns[function] for name, fn, _ in calls if name == "check_all")
    tensors = [t for case in cases for t in case]
    sizes = {t.numel() for t in tensors}
    assert sum(t.numel() * t.element_size() for t in tensors) <= MAX_INPUT_BYTES     # a T4 and a few seconds
    assert set(timed) <= sizes, sorted(sizes)
    for block in (1024, largest_block, 4 * largest_block):    # the course's block, its largest, and beyond
        ragged = {-(-n // block) for n in sizes if n % block and n > 2 * block}
        assert len(ragged) >= 3, (block, sorted(sizes))
    assert any(t.dtype == torch.float16 for t in tensors) and any(t.dim() == 2 and min(t.shape) > 1024
                                                                  for t in tensors)
    masks = [c for c in calls if c[0] == "check_masked_loads"]
    assert masks and masks[-1][1] == (ns[kernel],) and masks[-1][2].get("launched_by") is ns[function], masks
    assert calls[-1] is masks[-1]      # after the calls whose kernels it reads


@pytest.mark.parametrize(NAMES, CELLS)
def test_on_the_cpu_the_cell_is_not_graded_and_checks_nothing(chapter, grade_id, function, kernel, largest_block,
                                                             timed):
    calls: list = []
    ns = _judge_namespace(chapter, function, kernel, calls)
    out = run_test_cell(solution_cell(chapter, grade_id), ns, grade_id)
    assert out.error is None and out.score == 0 and calls == []
    assert out.stdout.startswith("NOT GRADED") and "0 of 1 points" in out.stdout, out.stdout
