"""Helpers for the hidden tests that check correctness at GPU sizes (``triton_course.grading.at_gpu_sizes``) in
chapters 05-08: run such a cell here, as the grader's judge runs it, and describe how the sizes it holds are launched.

A row kernel (softmax, RMSNorm, add + RMSNorm) stacks short rows ``ROWS`` to a program; its test at GPU sizes must
take the largest ``ROWS`` the chapter's launch rule gives at several program counts, each with a ragged last
program, and more rows than a grid's second axis holds (65535), beside the chapter's own constraints on the rows'
length and the sizes its timed test uses."""

from __future__ import annotations

import ast
import contextlib
import io
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import nbformat
import torch

#: The most programs a grid's second or third axis takes on a GPU (its first takes 2^31 - 1).
GRID_AXIS_LIMIT = 65535
#: Input bytes of a whole test at GPU sizes, beyond which it would not fit a T4's 16 GB with its references (in
#: float64), guard copies and outputs, or would take more than a few seconds on a GPU.
MAX_INPUT_BYTES = 1 << 30


def _cells(chapter: str) -> list:
    from grader.course import solution_notebook

    return nbformat.read(solution_notebook(chapter), as_version=4).cells


def cell_source(chapter: str, grade_id: str) -> tuple[str, float]:
    """(source, points) of the solution's cell ``grade_id`` (points: 0 for a cell that is not graded)."""
    cell = next(c for c in _cells(chapter) if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    return cell.source, cell.metadata["nbgrader"].get("points", 0)


def solution_cell(chapter: str, grade_id: str) -> dict:
    """The namespace of the solution's cell ``grade_id`` run on its own (with the modules its launch rules use):
    kernels defined, nothing launched."""
    import functools
    import math

    import triton
    import triton.language as tl

    source, _ = cell_source(chapter, grade_id)
    ns = {"functools": functools, "math": math, "torch": torch, "triton": triton, "tl": tl}
    exec(compile(source, f"<{chapter} {grade_id}>", "exec"), ns)
    return ns


def run_cell(chapter: str, grade_id: str, extra: dict | None = None) -> tuple[str, object, dict]:
    """Run the hidden test ``grade_id`` of ``chapter`` in this process after the chapter's judge cells, as the
    judge runs it (``extra``: names to add, or to replace, before the test runs, such as the graded function):
    (what it printed, its last expression's value, its namespace)."""
    from grader.execute import is_judge_cell
    from triton_course.device import current

    ns: dict = {"torch": torch, "device": current(), "__name__": "__main__"}
    for cell in _cells(chapter):
        if is_judge_cell(cell):
            exec(compile(cell.source, f"<{chapter} judge cell>", "exec"), ns)
    ns.update(extra or {})
    source, _ = cell_source(chapter, grade_id)
    tree = ast.parse(source)
    last = tree.body.pop()
    assert isinstance(last, ast.Expr), f"{grade_id} must end with an expression: its score"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(tree, f"<{grade_id}>", "exec"), ns)
        score = eval(compile(ast.Expression(last.value), f"<{grade_id} score>", "eval"), ns)
    return out.getvalue(), score, ns


def ends_with_at_gpu_sizes(chapter: str, grade_id: str) -> bool:
    """The test's last statement is a call of ``at_gpu_sizes`` (its value is the test's score) and gives it the
    cell's points."""
    source, points = cell_source(chapter, grade_id)
    last = ast.parse(source).body[-1]
    if not (isinstance(last, ast.Expr) and isinstance(last.value, ast.Call)
            and getattr(last.value.func, "id", None) == "at_gpu_sizes"):
        return False
    given = {k.arg: k.value for k in last.value.keywords}
    return isinstance(given.get("points"), ast.Constant) and given["points"].value == points


@dataclass(frozen=True)
class RowLaunch:
    """How a row kernel's launch rule runs one input: ``rows`` (M) rows of ``n`` values, ``rows_per_program``."""

    shape: tuple[int, ...]
    element_size: int
    rows_per_program: int

    @property
    def rows(self) -> int:
        m = 1
        for d in self.shape[:-1]:
            m *= d
        return m

    @property
    def n(self) -> int:
        return self.shape[-1]

    @property
    def programs(self) -> int:
        return -(-self.rows // self.rows_per_program)

    @property
    def ragged(self) -> bool:
        """The last program holds fewer rows than the others."""
        return self.rows % self.rows_per_program != 0


def row_launches(sizes: Iterable[tuple[tuple[int, ...], torch.dtype]],
                 rows_per_program: Callable[[int, int, int], int]) -> list[RowLaunch]:
    """The launch of every (shape, dtype) of a test by a rule ``rows_per_program(M, N, element_size)``."""
    out = []
    for shape, dtype in sizes:
        size = torch.empty(0, dtype=dtype).element_size()
        m = 1
        for d in shape[:-1]:
            m *= d
        out.append(RowLaunch(tuple(shape), size, rows_per_program(m, shape[-1], size)))
    return out


def largest_rows_per_program(rows_per_program: Callable[[int, int, int], int], widest: int) -> int:
    """The most rows the rule stacks into one program, over rows of 1 to ``widest`` values of 2 or 4 bytes."""
    return max(rows_per_program(1 << 24, n, size) for n in range(1, widest + 1) for size in (2, 4))


def spans_many_programs(launches: list[RowLaunch], largest: int) -> list[str]:
    """What the launches lack of a test at GPU sizes for a row kernel (empty when nothing): the largest stack of rows
    at two or more program counts with a ragged last program; stacked rows at three or more such counts; more rows
    than a grid's second axis holds; inputs that fit a T4 and a few seconds."""
    problems = []
    at_largest = {x.programs for x in launches if x.rows_per_program == largest and x.ragged and x.programs > 1}
    if len(at_largest) < 2:
        problems.append(f"the largest stack of rows ({largest}) at {sorted(at_largest)} program counts, ragged")
    stacked = {x.programs for x in launches if x.rows_per_program > 1 and x.ragged and x.programs > 1}
    if len(stacked) < 3:
        problems.append(f"stacked rows at {sorted(stacked)} program counts, ragged")
    if not any(x.rows > GRID_AXIS_LIMIT for x in launches):
        problems.append(f"no input of more than {GRID_AXIS_LIMIT} rows")
    total = sum(x.rows * x.n * x.element_size for x in launches)
    if total > MAX_INPUT_BYTES:
        problems.append(f"{total:,} bytes of inputs")
    return problems
