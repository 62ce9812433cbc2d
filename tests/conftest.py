"""Shared fixtures. The whole suite runs on a machine without a GPU, through Triton's interpreter."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MPLBACKEND", "Agg")

from grader.course import assignments  # noqa: E402

CHAPTERS = assignments()


@functools.lru_cache(maxsize=None)
def _solution(chapter: str):
    import nbformat

    from grader.course import solution_notebook

    return nbformat.read(solution_notebook(chapter), as_version=4)


def solution_cell(chapter: str, grade_id: str) -> str:
    """The source of the solution notebook's cell with this nbgrader ``grade_id``."""
    return next(c.source for c in _solution(chapter).cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


@functools.lru_cache(maxsize=None)
def judge_defs(chapter: str) -> dict:
    """The chapter's ``judge_defs`` cell (reference, inputs, tolerances, hints), executed as the grader does."""
    import torch

    import triton_course

    ns = {"torch": torch, "device": triton_course.current()}
    exec(compile(solution_cell(chapter, "judge_defs"), "<judge_defs>", "exec"), ns)
    return ns


def main_path(chapter: str) -> tuple[list[str], list[str]]:
    """The solution notebook's markdown cells before its "## Appendix" cell (the main path), and from it on
    (empty when there is no appendix)."""
    markdown = [c.source for c in _solution(chapter).cells if c.cell_type == "markdown"]
    at = next((i for i, s in enumerate(markdown) if s.lstrip().startswith("## Appendix")), len(markdown))
    return markdown[:at], markdown[at:]


def chapter_tests(chapter: str):
    """A chapter's test module (``solutions/<chapter>/test_<chapter>.py``), for the helpers another test shares
    with it. Imported under the name pytest gives it (its file name), so both see one module."""
    import importlib.util

    name = f"test_{chapter}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "solutions" / chapter / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


def chapter_params():
    """One pytest parameter per chapter that has a solution notebook."""
    return pytest.mark.parametrize("chapter", CHAPTERS)


def run_with_answers(chapter: str, student: str, kind: str = "examples", cells=None,
                     only: list[str] | None = None, edit=None, printed: dict[str, str] | None = None) -> dict[str, str]:
    """Execute a chapter's student notebook in this process with ``student``'s answer cells (from
    ``solutions/<chapter>/submissions/<kind>/``, kind "examples" or "attacks"; an answer file without sections is an untouched notebook), then run every hidden test through the grader's
    judge (:mod:`grader.judge`: the tests see only the ``judge`` cells and proxies of the graded
    functions, exactly as when grading); return each test's outcome: "passed" or the error it raised.

    Much faster than nbgrader (no kernel, no sandbox: the judge calls the harness in this process), for
    checking that each example mistake fails the test it should; the chapters' tests still send some
    submissions through real autograde.

    ``cells(i, cell)``, when given, picks the student's cells to execute (a chapter whose self-checks and benchmarks
    define nothing its tests use can skip them); ``only`` names the hidden tests to run (all by default);
    ``edit(grade_id, source)``, when given, returns the hidden test's source to run (a benchmark's size made one the
    interpreter can time); ``printed``, when given, receives what each test printed."""
    import tempfile

    import nbformat

    from grader.course import answers_folder, solution_notebook
    from grader.examples import apply_answers, parse_answers
    from grader.execute import graded_functions, is_judge_cell, is_test, submitted_kernels
    from grader.judge import InProcessTransport, JudgeSession, run_test_cell
    from grader.notebook_code import exec_cell
    from grader.relauncher import notebook_kernel_shapes

    answers = parse_answers((answers_folder(chapter, kind) / f"{student}.py").read_text())
    nb = apply_answers(chapter, answers)
    source = nbformat.read(solution_notebook(chapter), as_version=4)
    ns: dict[str, object] = {"__name__": "__main__"}
    tests = [c for c in source.cells if is_test(c)  # the hidden tests, as nbgrader restores them
             and (only is None or c.metadata["nbgrader"]["grade_id"] in only)]
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or is_test(cell) or (cells is not None and not cells(i, cell)):
            continue
        try:   # with the source where inspect finds it, as in Jupyter (the judge re-runs kernels from it)
            exec_cell(cell.source, f"<{chapter} {student} cell {i}>", ns)
        except Exception:  # a failing self-check is the student's business; the tests below decide
            pass
    outcomes = {}
    with tempfile.TemporaryDirectory(prefix="judge-") as tmp:
        session = JudgeSession(InProcessTransport(ns, Path(tmp)), allowed_kernels=notebook_kernel_shapes(nb))
        problems = session.build_namespace([c.source for c in source.cells if is_judge_cell(c)],
                                           graded_functions(source), submitted_kernels(nb))
        assert not problems, problems
        for cell in tests:
            gid = cell.metadata["nbgrader"]["grade_id"]
            out = run_test_cell(edit(gid, cell.source) if edit else cell.source, session.namespace_for(gid), gid)
            if printed is not None:
                printed[gid] = out.stdout
            if out.error is not None:
                outcomes[gid] = f"{out.error[0]}: {out.error[1]}"
            elif out.crashed or out.timeout:
                outcomes[gid] = f"crashed: {out.crashed or out.timeout}"
            elif isinstance(out.score, (int, float)) and not isinstance(out.score, bool) and \
                    out.score < cell.metadata["nbgrader"].get("points", 0) and \
                    not out.stdout.lstrip().startswith("NOT GRADED"):
                outcomes[gid] = f"partial: {out.score} ({out.stdout.strip()[-300:]})"
            else:
                outcomes[gid] = "passed"
    return outcomes
