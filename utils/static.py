"""What can be read off a kernel's source without running it: loads that have no mask.

On a GPU an unmasked ``tl.load`` past the end of a tensor reads whatever lies there, and a masked
``tl.store`` then throws that value away: every output is right, and the kernel still reads out of
bounds (a fault waiting for the allocation that ends at a page boundary). Tests cannot see it; the
source can. :func:`check_masked_loads` works on a ``@triton.jit`` function (its ``.src``) and on the
grader's :class:`KernelSource` (the source as the notebook handed it in).
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass

from .checks import CheckFailed


@dataclass(frozen=True)
class KernelSource:
    """The source of a kernel of a handed-in notebook, read by the grader (never run)."""

    name: str
    src: str


def _is_tl_load(node: ast.Call) -> bool:
    f = node.func
    return isinstance(f, ast.Attribute) and f.attr == "load" and isinstance(f.value, ast.Name) and \
        f.value.id in ("tl", "language")


def unmasked_loads(src: str) -> list[tuple[int, str]]:
    """(line within the kernel, source) of every ``tl.load`` that has neither a mask nor a boundary check."""
    text = textwrap.dedent(src)
    tree = ast.parse(text)
    lines = text.splitlines()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _is_tl_load(node):
            keywords = {k.arg for k in node.keywords}
            if len(node.args) >= 2 or keywords & {"mask", "boundary_check"}:
                continue
            found.append((node.lineno, lines[node.lineno - 1].strip()))
    return found


def kernel_source(kernel: object) -> tuple[str, str]:
    name = getattr(kernel, "name", None) or getattr(getattr(kernel, "fn", None), "__name__", "the kernel")
    src = getattr(kernel, "src", None)
    if not isinstance(src, str) and callable(getattr(kernel, "fn", None)):  # the interpreter's kernels
        import inspect

        try:
            src = inspect.getsource(kernel.fn)
        except (OSError, TypeError):
            src = None
    if not isinstance(src, str):
        raise CheckFailed(f"the grader could not read the source of {name}: define it with @triton.jit in a cell")
    return str(name), src


def check_masked_loads(kernel: object) -> None:
    """Raise :class:`CheckFailed` naming every load of ``kernel`` that has no mask."""
    name, src = kernel_source(kernel)
    try:
        bad = unmasked_loads(src)
    except SyntaxError as exc:
        raise CheckFailed(f"the source of {name} could not be read: {exc}") from None
    if bad:
        where = "\n".join(f"  line {n} of {name}: {line}" for n, line in bad)
        raise CheckFailed(f"{len(bad)} tl.load call(s) in {name} have no mask:\n{where}\nOn a GPU they read past "
                          "the end of the tensor in the last block (a masked store then hides it). Pass "
                          "mask= (and other=) to every load.")
