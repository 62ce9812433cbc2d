"""Dependencies point one way (issue 44), read from the source with :mod:`ast` (nothing is imported):

* the student's package (``utils/``, imported as ``triton_course``) never imports the grader, at module level or
  inside a function: the student wheel ships it alone, and the sandbox's end of every message runs without it;
* no module imports a module that imports it back, directly or through others, counting imports inside functions
  and under ``if TYPE_CHECKING``;
* no function of ``grader/`` or ``utils/`` is longer than :data:`MAX_FUNCTION_LINES` lines;
* the module lists in the docstrings of ``grader/__init__.py`` and ``utils/__init__.py`` name every module, and
  only modules that exist.

Each rule is also shown to fail, on a small tree of two packages that breaks it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Import name of each package -> its folder in the repository (``triton_course`` is installed from ``utils/``).
PACKAGES = {"grader": "grader", "triton_course": "utils"}
#: The student's package, which must never import the instructor's.
STUDENT, INSTRUCTOR = "triton_course", "grader"
MAX_FUNCTION_LINES = 80


def module_files(root: Path) -> dict[str, Path]:
    """Module name -> file, for every module of the packages (a package's ``__init__.py`` as the package)."""
    found = {}
    for package, folder in PACKAGES.items():
        for path in sorted((root / folder).glob("*.py")):
            found[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return found


def _canonical(name: str) -> str:
    """``utils.X`` is ``triton_course.X`` (the folder's name, as a test or a script may import it)."""
    for package, folder in PACKAGES.items():
        if name == folder or name.startswith(folder + "."):
            return package + name[len(folder):]
    return name


def _imported(tree: ast.Module, module: str, is_package: bool, modules: set[str]) -> list[tuple[str, int]]:
    """(absolute name, line) of everything a module imports, anywhere in it: ``from a import b`` names the module
    ``a.b`` where there is one, else ``a``; a literal ``importlib.import_module("a")`` names ``a``."""
    package = module if is_package else module.rpartition(".")[0]
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(_canonical(a.name), node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = _canonical(node.module or "")
            names += [(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base, node.lineno)
                      for a in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) and \
                isinstance(node.args[0].value, str) and (
                    (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module") or
                    (isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__"))):
            names.append((_canonical(node.args[0].value), node.lineno))
    return names


def import_graph(root: Path) -> dict[str, list[tuple[str, int]]]:
    """Module -> (name, line) of everything it imports (:func:`_imported`), in the order of its lines."""
    files = module_files(root)
    return {module: sorted(_imported(ast.parse(path.read_text(), str(path)), module, path.stem == "__init__",
                                     set(files)), key=lambda n: n[1])
            for module, path in files.items()}


def student_imports_of_grader(root: Path) -> list[str]:
    """Every import of the instructor's package by a module of the student's."""
    return [f"{module} imports {name} (line {line})" for module, names in sorted(import_graph(root).items())
            if module.split(".")[0] == STUDENT
            for name, line in names if name == INSTRUCTOR or name.startswith(INSTRUCTOR + ".")]


def import_cycles(root: Path) -> list[str]:
    """One cycle, named module by module with the line of each import, per group of modules that import each
    other (a strongly connected component of the import graph)."""
    files = module_files(root)
    graph: dict[str, dict[str, int]] = {}   # module -> {module of the packages it imports: its first line}
    for module, names in import_graph(root).items():
        graph[module] = {}
        for name, line in names:
            if name in files and name != module:
                graph[module].setdefault(name, line)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(v: str) -> None:   # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_one_cycle(graph, group) for group in groups]


def _one_cycle(graph: dict[str, dict[str, int]], group: list[str]) -> str:
    """A shortest cycle through the first module of ``group``, as ``a -(line 3)-> b -(line 9)-> a``."""
    start, members = group[0], set(group)
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v]):
            if w == start:
                path = paths[v] + [start]
                return " ".join(f"{a} -(line {graph[a][b]})->" for a, b in zip(path, path[1:])) + f" {start}"
            if w in members and w not in paths:
                paths[w] = paths[v] + [w]
                queue.append(w)
    raise AssertionError(f"no cycle through {start} in {group}")


def long_functions(root: Path) -> list[str]:
    """Every function (or method) longer than :data:`MAX_FUNCTION_LINES` lines, from ``def`` to its last line."""
    found = []
    for module, path in module_files(root).items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name}: {lines} lines")
    return found


def unlisted_modules(root: Path) -> list[str]:
    """Modules a package's ``__init__`` docstring does not name (``:mod:`package.module```), and names of
    modules that do not exist."""
    problems = []
    files = module_files(root)
    for package, folder in PACKAGES.items():
        init = root / folder / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        named = set(re.findall(rf":mod:`({re.escape(package)}\.[A-Za-z_][A-Za-z0-9_]*)`", doc))
        modules = {m for m in files if m.startswith(package + ".")}
        problems += [f"{init.relative_to(root)} does not name {m}" for m in sorted(modules - named)]
        problems += [f"{init.relative_to(root)} names {m}, which is no module" for m in sorted(named - modules)]
    return problems


# ---------------------------------------------------------------------------------------------------
# The course's own packages
# ---------------------------------------------------------------------------------------------------

def test_the_students_package_never_imports_the_grader():
    assert student_imports_of_grader(ROOT) == []


def test_no_module_imports_a_module_that_imports_it_back():
    assert import_cycles(ROOT) == []


def test_no_function_is_longer_than_80_lines():
    assert long_functions(ROOT) == []


def test_the_package_docstrings_name_every_module():
    assert unlisted_modules(ROOT) == []


# ---------------------------------------------------------------------------------------------------
# Each rule fails where it is broken
# ---------------------------------------------------------------------------------------------------

def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in {"grader/__init__.py": '"""Grader.\n\n* :mod:`grader.a`\n* :mod:`grader.b`\n"""\n',
                       "utils/__init__.py": '"""Course.\n\n* :mod:`triton_course.x`\n"""\n',
                       "grader/a.py": "", "grader/b.py": "", "utils/x.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_a_clean_tree_passes(tmp_path):
    root = _tree(tmp_path, {"grader/a.py": "from grader import b\nimport triton_course.x\n",
                            "grader/b.py": "def f():\n    from triton_course import x\n",
                            "utils/x.py": "import math\n"})
    assert (student_imports_of_grader(root), import_cycles(root), long_functions(root),
            unlisted_modules(root)) == ([], [], [], [])


def test_an_import_of_the_grader_inside_a_function_of_the_students_package_fails(tmp_path):
    root = _tree(tmp_path, {"utils/x.py": "import math\n\n\ndef f():\n    from grader.a import g\n    return g\n"})
    assert student_imports_of_grader(root) == ["triton_course.x imports grader.a (line 5)"]


@pytest.mark.parametrize("files, cycle", [
    ({"grader/a.py": "from grader import b\n", "grader/b.py": "def f():\n    from grader.a import g\n"},
     "grader.a -(line 1)-> grader.b -(line 2)-> grader.a"),
    ({"grader/a.py": "from . import b\n",
      "grader/b.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from .a import g\n"},
     "grader.a -(line 1)-> grader.b -(line 4)-> grader.a"),
    ({"grader/a.py": "import triton_course.x\n", "utils/x.py": "import grader.b\n", "grader/b.py": "import grader.a\n"},
     "grader.a -(line 1)-> triton_course.x -(line 1)-> grader.b -(line 1)-> grader.a"),
], ids=["inside-a-function", "type-checking", "through-a-third-module"])
def test_a_cycle_fails_and_is_named(tmp_path, files, cycle):
    assert import_cycles(_tree(tmp_path, files)) == [cycle]


def test_a_long_function_fails(tmp_path):
    def body(indent: str) -> str:
        return "".join(f"{indent}x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 1))

    source = f"def short():\n{body('    ')}\n\nclass C:\n    def long(self):\n{body('        ')}        pass\n"
    root = _tree(tmp_path, {"grader/a.py": source})   # short: 80 lines; long: 81
    assert long_functions(root) == [f"grader/a.py:{MAX_FUNCTION_LINES + 4} long: {MAX_FUNCTION_LINES + 1} lines"]


def test_a_module_missing_from_its_package_docstring_fails(tmp_path):
    root = _tree(tmp_path, {"grader/c.py": "",
                            "utils/__init__.py": '"""* :mod:`triton_course.x`, :mod:`triton_course.y`"""'})
    assert unlisted_modules(root) == ["grader/__init__.py does not name grader.c",
                                      "utils/__init__.py names triton_course.y, which is no module"]
