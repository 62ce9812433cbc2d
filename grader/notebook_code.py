"""Run a chapter's code outside Jupyter: the cells of its solution notebook, without the tests.

Used by the GPU measurement scripts (``tests/gpu/``, ``lab/``): they need the reference kernels exactly as the
solution notebook defines them, not a copy that could drift.
"""

from __future__ import annotations

import linecache
import re
import sys
import types
from pathlib import Path

import nbformat


def _is_test(cell) -> bool:
    meta = cell.metadata.get("nbgrader", {})
    return bool(meta.get("grade")) and not meta.get("solution")


def strip_magics(source: str) -> str:
    """A cell's source without its IPython magic and shell lines (``%...``, ``!...``)."""
    return "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))


def load_namespace(notebook: Path, through_last_solution: bool = True) -> dict[str, object]:
    """Execute the notebook's code cells (hidden-test cells excluded) in a fresh namespace.

    With ``through_last_solution`` it stops after the last solution cell, so benchmark and plot cells
    that follow the exercises are not run.
    """
    import matplotlib

    matplotlib.use("Agg")
    nb = nbformat.read(notebook, as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code" and not _is_test(c)]
    if through_last_solution:
        last = max((i for i, c in enumerate(cells) if c.metadata.get("nbgrader", {}).get("solution")), default=-1)
        cells = cells[: last + 1] if last >= 0 else cells
    # a real module in sys.modules: torch.compile and pickle look functions up by their module's name
    module = types.ModuleType("course_notebook_" + re.sub(r"\W", "_", notebook.stem))
    sys.modules[module.__name__] = module
    ns: dict[str, object] = module.__dict__
    for i, c in enumerate(cells):
        exec_cell(c.source, f"<{notebook.stem} cell {i}>", ns)
    return ns


def exec_cell(source: str, filename: str, ns: dict[str, object]) -> None:
    """Execute one cell's code in ``ns`` so that ``@triton.jit`` can read the source of its kernels."""
    source = strip_magics(source) + "\n"
    # @triton.jit reads a kernel's source with inspect, which finds it through linecache
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), ns)


def exec_cells_starting_with(notebook: Path, ns: dict[str, object], starts: tuple[str, ...]) -> None:
    """Execute, in ``ns``, the code cells whose source starts with one of ``starts`` (for helpers that a
    chapter defines after its exercises, such as a baseline kernel a measurement compares against)."""
    nb = nbformat.read(notebook, as_version=4)
    for i, c in enumerate(nb.cells):
        if c.cell_type == "code" and not _is_test(c) and c.source.lstrip().startswith(starts):
            exec_cell(c.source, f"<{notebook.stem} cell {i}>", ns)
