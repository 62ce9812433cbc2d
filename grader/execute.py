"""nbgrader's Execute step, made safe for a class of student notebooks.

:class:`CourseExecute` replaces nbgrader's ``Execute`` preprocessor in ``nbgrader autograde`` (see
:mod:`grader.settings`). It runs the notebook like nbgrader does, and in addition:

* **Trusted state.** Before the first cell, it runs :func:`utils.integrity.install` in the kernel: a
  snapshot of the comparison functions, timers and course helpers taken before any student code runs.
  After each locked cell (restored from the release by nbgrader, so trusted) it remembers the names the
  cell defines; before each graded test cell it restores the snapshot and those names, and re-runs the
  release's import lines, so that a notebook that redefines ``check_all`` or patches
  ``torch.allclose`` cannot change a verdict. What it had to undo is noted under the test's output.
* **A kernel that dies** (a segfault from an out-of-bounds store in Triton's interpreter, an abort) no
  longer loses the whole submission: the cell gets a ``KernelDied`` error, a fresh kernel replays the
  cells above it (outputs discarded), and execution goes on with the next cell. After
  :attr:`CourseExecute.max_restarts` deaths the remaining cells are marked as not run.
* **Huge output** is cut at :attr:`CourseExecute.max_output_bytes` per cell (errors are always kept).
"""

from __future__ import annotations

import ast
import copy
import json
import os

from nbclient.exceptions import DeadKernelError
from nbconvert.preprocessors.execute import NotebookClient
from nbformat.notebooknode import NotebookNode
from traitlets import Integer, Unicode

from nbgrader.preprocessors import Execute

#: The grader writes the trusted import lines of an assignment here (see :func:`trusted_imports`).
TRUSTED_IMPORTS_ENV = "COURSE_TRUSTED_IMPORTS"

KERNEL_DIED = ("The Python process running this notebook crashed during this cell (for example a Triton "
               "kernel that stores outside its output: an out-of-bounds tl.store without a mask). The grader "
               "started a new kernel, re-ran the cells above this one, and went on with the next cell.")


def _nbgrader(cell) -> dict:
    return cell.metadata.get("nbgrader", {}) if cell.cell_type == "code" else {}


def is_test(cell) -> bool:
    m = _nbgrader(cell)
    return bool(m.get("grade")) and not m.get("solution")


def defined_names(source: str) -> list[str]:
    """Top-level names a cell binds (defs, classes, assignments, imports); [] if it does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names += [(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"]
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                names += [n.id for n in ast.walk(t) if isinstance(n, ast.Name)]
    return names


def trusted_imports(source_notebook) -> str:
    """The top-level import statements of the release's non-solution code cells, as one block of code."""
    lines = []
    for cell in source_notebook.cells:
        if cell.cell_type != "code" or _nbgrader(cell).get("solution"):
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        lines += [ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    return "\n".join(dict.fromkeys(lines))


class CourseExecute(Execute):
    """nbgrader's Execute with a trusted-state guard, kernel-death recovery and an output cap."""

    max_restarts = Integer(3, help="kernel deaths survived per notebook").tag(config=True)
    max_output_bytes = Integer(1_000_000, help="output kept per cell, in bytes (-1: no limit)").tag(config=True)
    trusted_imports_file = Unicode("", help="file with the release's import lines").tag(config=True)

    # -- output cap ------------------------------------------------------------------------------------
    def output(self, outs, msg, display_id, cell_index):
        if self.max_output_bytes >= 0 and msg.get("msg_type") != "error":
            used = self._output_bytes.get(cell_index, 0)
            size = len(json.dumps(msg.get("content", {}), default=str))
            if used + size > self.max_output_bytes:
                if cell_index not in self._truncated:
                    self._truncated.add(cell_index)
                return None
            self._output_bytes[cell_index] = used + size
        return super().output(outs, msg, display_id, cell_index)

    # -- the guard -------------------------------------------------------------------------------------
    def _run_silently(self, code: str, expression: str | None = None) -> tuple[str, str]:
        """Run ``code`` in the kernel without output; (status, text of ``expression``)."""
        user_expressions = {"r": expression} if expression else {}
        msg_id = self.kc.execute(code, silent=True, store_history=False, user_expressions=user_expressions)
        reply = self.wait_for_reply(msg_id)
        content = (reply or {}).get("content", {})
        if content.get("status") != "ok":
            return "error", f"{content.get('ename', '')}: {content.get('evalue', '')}"
        value = content.get("user_expressions", {}).get("r", {})
        return value.get("status", "ok"), value.get("data", {}).get("text/plain", "")

    def _start_guard(self) -> None:
        self._run_silently("import utils.integrity as _course_integrity\n_course_integrity.install()\n"
                           "del _course_integrity")

    def _remember(self, cell) -> None:
        names = defined_names(cell.source)
        if names:
            self._run_silently("import utils.integrity as _course_integrity\n"
                               f"_course_integrity.remember(globals(), {names!r})\ndel _course_integrity")

    def _before_test(self) -> list[str]:
        code = ("import utils.integrity as _course_integrity\n"
                "_course_changed = _course_integrity.restore(globals())\n"
                f"{self._imports}\n")
        status, text = self._run_silently(code, "_course_changed")
        self._run_silently("del _course_integrity, _course_changed")
        if status != "ok":
            return [f"(the grader could not restore its state: {text})"]
        try:
            return list(ast.literal_eval(text))
        except (ValueError, SyntaxError):
            return []

    # -- running the notebook --------------------------------------------------------------------------
    def _run_cell(self, cell, resources, index: int, replay: bool = False):
        meta = _nbgrader(cell)
        changed = self._before_test() if is_test(cell) and cell.source.strip() else []
        target = copy.deepcopy(cell) if replay else cell
        self.preprocess_cell(target, resources, index)
        if meta.get("locked") and not is_test(cell) and not meta.get("solution"):
            self._remember(cell)
        if not replay:
            if changed:
                cell.outputs.append(NotebookNode(output_type="stream", name="stdout", text=(
                    "NOTE: before this test the grader undid changes the notebook made to: "
                    + ", ".join(sorted(set(changed))[:20]) + "\n")))
            if index in self._truncated:
                cell.outputs.append(NotebookNode(output_type="stream", name="stdout", text=(
                    f"... output cut at {self.max_output_bytes:,} bytes by the grader ...\n")))

    def preprocess(self, nb, resources=None, km=None):
        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        self._output_bytes: dict[int, int] = {}
        self._truncated: set[int] = set()
        path = self.trusted_imports_file or os.environ.get(TRUSTED_IMPORTS_ENV, "")
        self._imports = open(path).read() if path and os.path.exists(path) else ""
        crashed: list[int] = []
        start = 0
        while True:
            index = start
            try:
                with self.setup_kernel():
                    info_msg = self.wait_for_reply(self.kc.kernel_info())
                    self.nb.metadata["language_info"] = info_msg["content"]["language_info"]
                    self._start_guard()
                    for index in range(0, start):
                        cell = self.nb.cells[index]
                        if cell.cell_type == "code" and index not in crashed:
                            self._run_cell(cell, resources, index, replay=True)
                    for index in range(start, len(self.nb.cells)):
                        self._run_cell(self.nb.cells[index], resources, index)
                break
            except DeadKernelError:
                cell = self.nb.cells[index]
                cell.outputs.append(NotebookNode(output_type="error", ename="KernelDied", evalue=KERNEL_DIED,
                                                 traceback=[f"KernelDied: {KERNEL_DIED}"]))
                crashed.append(index)
                self.log.warning("kernel died in cell %d; restarting", index)
                self.km = None
                self.kc = None
                start = index + 1
                if len(crashed) > self.max_restarts:
                    for later in self.nb.cells[start:]:
                        if later.cell_type == "code":
                            later.outputs = [NotebookNode(
                                output_type="error", ename="NotRun",
                                evalue=f"not run: the kernel died {len(crashed)} times in this notebook",
                                traceback=["NotRun: the kernel died too many times"])]
                    break
        self.nb.metadata.setdefault("course_grader", {})["crashed_cells"] = crashed
        self.set_widgets_metadata()
        return self.nb, self.resources
