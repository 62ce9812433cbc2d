"""Run a chapter's code outside Jupyter: the cells of its solution notebook, without the tests.

Used by the GPU measurement scripts in ``results/``: they need the reference kernels exactly as the
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


def _strip_magics(source: str) -> str:
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
        source = _strip_magics(c.source) + "\n"
        filename = f"<{notebook.stem} cell {i}>"
        # @triton.jit reads a kernel's source with inspect, which finds it through linecache
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), ns)
    return ns
