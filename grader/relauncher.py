"""The judge's end of :mod:`triton_course.relaunch`: check a call's launch record, have it re-run in a clean
process, and grade what that process computed.

:func:`record_problems` holds the record to what honest work looks like: kernels that the notebook defines
(or the course's own), operators that only allocate, copy and fill, and at most :data:`MAX_SCALARS`
distinct numbers in its launches and operators, far fewer than the elements of any graded output, so
that no answer fits through kernel arguments. A :class:`Relauncher` runs :func:`triton_course.relaunch.serve_request`
on the record and the judge's own copy of the inputs: :class:`ProcessRelauncher` in a process of its own
(inside a second bubblewrap sandbox when grading), :class:`InProcessRelauncher` in this one (the course's
own tests of hidden tests only). :func:`relaunch` returns the outputs and inputs as the re-run left them,
and refuses a call whose output the re-run does not reproduce.
"""

from __future__ import annotations

import ast
import json
import os
import selectors
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from grader.notebook_code import strip_magics
from triton_course.checks import CheckFailed
from triton_course.harness import tensor_spec
from triton_course.relaunch import ALLOWED_OPS, MODULE_ROOTS, free_names, kernel_shape

if TYPE_CHECKING:
    from grader.judge import JudgeSession

#: Distinct numbers a call's record may carry (sizes, strides, offsets, block sizes, eps...): at most
#: ``max(MIN_SCALARS, elements // 8)`` for an output of that many elements, and never more than MAX_SCALARS.
#: An honest call of the course uses 10 to 30 (its reference answers, under the interpreter); an answer
#: handed to a kernel needs a number per output element, or one per four with float16 values packed into
#: 64-bit integers. So no graded cell can be passed that way: the smallest of their largest outputs has 600
#: elements (chapter 07).
MAX_SCALARS = 256
MIN_SCALARS = 48
#: A record larger than this is refused unread.
MAX_RECORD_BYTES = 32 << 20
#: Python builtins a kernel may name (the rest of a kernel's names must come from its recorded globals).
SAFE_BUILTINS = frozenset({
    "range", "len", "min", "max", "int", "float", "bool", "abs", "print", "isinstance", "tuple", "list", "zip",
    "enumerate", "divmod", "round", "sum", "any", "all", "str", "True", "False", "None",
    "ValueError", "AssertionError", "RuntimeError", "NotImplementedError", "TypeError", "IndexError",
})


# ---------------------------------------------------------------------------------------------------
# What the record may hold
# ---------------------------------------------------------------------------------------------------

def notebook_kernel_shapes(nb) -> set[str]:
    """:func:`triton_course.relaunch.kernel_shape` of every function defined in the notebook's code cells (read,
    never run): the kernels a record may launch."""
    shapes = set()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(strip_magics(cell.source))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                node.decorator_list = []
                shapes.add(ast.dump(node, include_attributes=False))
    return shapes


def kernel_source_problems(name: str, source: str, global_names: set[str]) -> list[str]:
    """Why a recorded kernel's source is not a plain Triton function (under the interpreter a kernel is
    Python, so it must not reach anything but triton.language, its arguments and its recorded globals)."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return [f"the recorded source of `{name}` does not parse"]
    if len(body) != 1 or not isinstance(body[0], ast.FunctionDef) or body[0].name != name or body[0].decorator_list:
        return [f"the recorded source of `{name}` is not one function of that name"]
    problems = []
    for node in ast.walk(body[0]):
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.ClassDef, ast.AsyncFunctionDef,
                             ast.Await, ast.Yield, ast.YieldFrom)):
            problems.append(f"the kernel `{name}` contains a {type(node).__name__} statement")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            problems.append(f"the kernel `{name}` reads the private attribute `{node.attr}`")
        elif isinstance(node, ast.Name) and node.id.startswith("__"):
            problems.append(f"the kernel `{name}` names `{node.id}`")
    outside = [n for n in free_names(source) if n not in global_names and n not in SAFE_BUILTINS]
    if outside:
        problems.append(f"the kernel `{name}` names {', '.join(f'`{n}`' for n in outside[:4])}, which is neither a "
                        "global it was launched with nor a builtin a kernel may use")
    return problems


def _scalars(value: Any, out: set) -> None:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, (int, float, str)):
        out.add((type(value).__name__, value))
    elif isinstance(value, list):
        for v in value:
            _scalars(v, out)
    elif isinstance(value, dict):
        for k, v in value.items():
            if k not in ("tensor", "torch", "device", "dtype"):
                _scalars(v, out)


def scalar_limit(output_elements: int) -> int:
    """How many distinct numbers a call whose outputs hold ``output_elements`` elements may pass."""
    return min(MAX_SCALARS, max(MIN_SCALARS, output_elements // 8))


def record_problems(record: Any, kernel_shapes: set[str] | None, output_elements: int = 0) -> list[str]:
    """Why a launch record is not one the grader re-runs ([] if it is). ``kernel_shapes``: the notebook's
    functions (:func:`notebook_kernel_shapes`); None accepts any kernel (the course's tests of the judge).
    ``output_elements``: of all the call's outputs together (see :func:`scalar_limit`)."""
    lists = ("inputs", "steps", "outputs")
    if not isinstance(record, dict) or not all(isinstance(record.get(k), list) for k in lists) \
            or not isinstance(record.get("kernels"), dict):
        return ["left no readable record of its launches (did it replace the grader's harness?)"]
    problems = [str(p)[:300] for p in record["problems"][:3]] if isinstance(record.get("problems"), list) else []
    kernels = record["kernels"]
    for key, desc in kernels.items():
        if not isinstance(desc, dict):
            problems.append(f"recorded a kernel {str(key)[:80]} without its description")
        elif "course" in desc:
            if str(desc["course"]).split(".")[0] != "triton_course":
                problems.append(f"launched {desc.get('name')} from {desc['course']}, which is not the course's")
        else:
            name, source = str(desc.get("name")), str(desc.get("source"))
            found = desc.get("globals") if isinstance(desc.get("globals"), dict) else {}
            problems += kernel_source_problems(name, source, set(found))
            if kernel_shapes is not None and kernel_shape(source) not in kernel_shapes:
                problems.append(f"launched a kernel `{name}` that the notebook does not define (a kernel made while "
                                "the function runs cannot be graded)")
            for gname, spec in found.items():
                if not isinstance(spec, dict):
                    continue
                module = spec.get("module", spec.get("import"))
                if module is not None and str(module).split(".")[0] not in MODULE_ROOTS:
                    problems.append(f"the kernel `{name}` reads `{gname}` from {module}")
                if "kernel" in spec and spec["kernel"] not in kernels:
                    problems.append(f"the kernel `{name}` calls a kernel the record does not describe")
                if "unsupported" in spec:
                    problems.append(f"the kernel `{name}` reads `{gname}`, which the grader cannot rebuild")
    numbers: set = set()
    for step in record["steps"]:
        if not isinstance(step, dict):
            problems.append("left a malformed record of its launches")
            break
        if "op" in step:
            parts = str(step["op"]).split(".")
            if step.get("refused") or len(parts) != 3 or parts[1] not in ALLOWED_OPS:
                problems.append(f"ran {step['op']} outside its kernels")
            _scalars([step.get("args"), step.get("kwargs")], numbers)
        elif "launch" in step:
            if step["launch"] not in kernels:
                problems.append("launched a kernel the record does not describe")
            _scalars([step.get("args"), step.get("kwargs"), step.get("grid")], numbers)
    for desc in kernels.values():
        if isinstance(desc, dict) and isinstance(desc.get("globals"), dict):
            _scalars(list(desc["globals"].values()), numbers)
    limit = scalar_limit(output_elements)
    if len(numbers) > limit:
        problems.append(f"passed {len(numbers)} distinct numbers to its launches and operators (at most {limit} for "
                        f"an output of {output_elements:,} elements): a result must be computed by a kernel from "
                        "its inputs, not handed to it value by value")
    return list(dict.fromkeys(problems))


# ---------------------------------------------------------------------------------------------------
# Where records are re-run
# ---------------------------------------------------------------------------------------------------

class Relauncher:
    """Runs :func:`triton_course.relaunch.serve_request` on a folder of ``exchange``; ``run`` returns when
    the folder holds ``response.json``."""

    exchange: Path
    uid: int | None = None

    def run(self, folder: Path, timeout_s: float) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def describe(self) -> str:
        return type(self).__name__


class InProcessRelauncher(Relauncher):
    """In this very process: for the course's own tests of hidden tests, never for grading."""

    def __init__(self, exchange: Path):
        self.exchange = exchange

    def run(self, folder: Path, timeout_s: float) -> None:
        from triton_course.relaunch import serve_request

        serve_request(folder)

    def describe(self) -> str:
        return "in the grader's process (tests only)"


class ProcessRelauncher(Relauncher):
    """A long-lived ``python -m triton_course.relaunch EXCHANGE`` process, started at the first call and
    again after one that did not answer; ``wrap`` puts it in a sandbox (:meth:`grader.sandbox.Sandbox.wrap`)."""

    def __init__(self, exchange: Path, wrap: Callable[[list[str]], list[str]] | None = None,
                 uid: int | None = None, log: Path | None = None, what: str = "a process of its own"):
        self.exchange = exchange
        self.wrap = wrap
        self.uid = uid
        self.log = log   # the process's stderr (the grader's file, never the sandbox's)
        self.what = what
        self.proc: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        argv = [sys.executable, "-m", "triton_course.relaunch", str(self.exchange)]
        if self.wrap is not None:
            argv = self.wrap(argv)
        with open(self.log, "a") if self.log is not None else open(os.devnull, "w") as err:
            return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                                    bufsize=1, start_new_session=True)

    def run(self, folder: Path, timeout_s: float) -> None:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        proc = self.proc
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(folder.name + "\n")
            proc.stdin.flush()
        except OSError:
            self.close()
            return
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + timeout_s
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(timeout=left):
                    self.close()   # a re-run that does not finish: the next call starts a new process
                    return
                line = proc.stdout.readline()
                if not line or line.strip() in ("done", "refused"):
                    if not line:
                        self.close()
                    return

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.proc.kill()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            self.proc = None

    def describe(self) -> str:
        return self.what


# ---------------------------------------------------------------------------------------------------
# One call
# ---------------------------------------------------------------------------------------------------

def _read_record(folder: Path, label: str) -> dict[str, Any]:
    path = folder / "record.json"
    if not path.is_file() or path.stat().st_size > MAX_RECORD_BYTES:
        raise CheckFailed(f"{label} left no record of its launches the grader can read (did it replace the "
                          "grader's harness?)")
    try:
        return json.loads(path.read_text())
    except ValueError:
        raise CheckFailed(f"{label} left a record of its launches that does not parse") from None


def _disagreement(returned: torch.Tensor, rerun: torch.Tensor) -> str | None:
    """Where ``returned`` (what the student's process handed back) and ``rerun`` (the relaunch) differ by
    more than the order of a floating-point sum can explain; None if they agree."""
    if tuple(returned.shape) != tuple(rerun.shape) or returned.dtype != rerun.dtype:
        return f"the re-run output is {tuple(rerun.shape)} {rerun.dtype}, the returned one {tuple(returned.shape)} " \
               f"{returned.dtype}"
    a, b = returned.reshape(-1), rerun.reshape(-1)
    if a.dtype.is_floating_point:
        a, b = a.double(), b.double()
        finite = b[torch.isfinite(b)]
        scale = float(finite.abs().max()) if finite.numel() else 1.0
        same = (a == b) | (torch.isnan(a) & torch.isnan(b)) | ((a - b).abs() <= 1e-3 * scale + 1e-2 * b.abs())
    else:
        same = a == b
    if bool(same.all()):
        return None
    bad = torch.nonzero(~same).flatten()
    i = int(bad[0])
    return (f"{bad.numel():,} of {a.numel():,} elements differ; the first at flat index {i}: "
            f"returned {a[i].item():.6g}, re-run {b[i].item():.6g}")


def relaunch(session: JudgeSession, folder: Path, out_specs: list[dict[str, Any]], returned: list[torch.Tensor],
             sent: list[torch.Tensor], label: str,
             budget: int) -> tuple[list[torch.Tensor], list[Any], list[torch.Tensor]]:
    """(outputs, their guarded allocations, inputs after) of the call in ``folder`` as its launches alone
    compute them, re-run by ``session.relauncher``; CheckFailed if the record is refused, the re-run fails
    or its output differs from the one the student's process returned (``returned``)."""
    record = _read_record(folder, label)
    problems = record_problems(record, session.allowed_kernels, sum(t.numel() for t in returned))
    if not problems and (len(record["outputs"]) != len(returned) or len(record["inputs"]) != len(sent)):
        problems = ["left a record of its launches that does not match its inputs and outputs"]
    if problems:
        raise CheckFailed(f"{label} " + "; ".join(problems[:3]) + ". The grader re-runs a call's Triton launches "
                          "alone, from a record of them, and grades what they compute.")
    relauncher = session.relauncher
    session.relaunches += 1
    rfolder = relauncher.exchange / f"relaunch-{session.relaunches}"
    rfolder.mkdir(parents=True)
    try:
        if relauncher.uid is not None:
            os.chown(rfolder, relauncher.uid, relauncher.uid)
        inputs = [tensor_spec(t, rfolder, f"input{i}") for i, t in enumerate(sent)]
        (rfolder / "request.json").write_text(json.dumps({"record": record, "inputs": inputs,
                                                          "device": session.transport.device}))
        with session.gpu_lock.shared():
            relauncher.run(rfolder, session.call_timeout_s)
        try:
            resp = json.loads((rfolder / "response.json").read_text())
            if not isinstance(resp, dict):
                raise ValueError
        except (OSError, ValueError):
            raise CheckFailed(f"{label}: the grader re-ran its Triton launches alone and the re-run did not finish "
                              f"within {session.call_timeout_s:.0f} s or crashed (an out-of-bounds store, or a loop "
                              "that never ends on other data?)") from None
        if resp.get("status") != "ok":
            raise CheckFailed(f"{label}: the grader re-ran its Triton launches alone, from a record of them, and "
                              f"{'refused' if resp.get('status') == 'refused' else 'that failed'}: "
                              f"{str(resp.get('error'))[:1500]}")
        outs = resp.get("outputs") if isinstance(resp.get("outputs"), list) else []
        ins = resp.get("inputs") if isinstance(resp.get("inputs"), list) else []
        if len(outs) != len(returned) or len(ins) != len(sent):
            raise CheckFailed(f"{label}: the re-run of its launches gave no readable output")
        outputs, allocations = [], []
        for spec, student_spec, got in zip(outs, out_specs, returned):
            spec["guard_pad"] = student_spec.get("guard_pad")
            tensor, allocation = session._load_output(spec, rfolder, budget, label)
            why = _disagreement(got, tensor)
            if why is not None:
                raise CheckFailed(
                    f"{label} returned a result that its Triton launches do not compute: the grader re-ran them "
                    f"alone, on the same inputs, in a clean process, and {why}. Only the work of your kernels "
                    "counts: nothing computed in another thread, by a patched launcher or before the call carries "
                    "over. (A kernel that reads memory it never wrote, or whose programs race, also gives a "
                    "different answer when run again.)")
            outputs.append(tensor)
            allocations.append(allocation)
        after = [session._load(spec, rfolder, budget, label) for spec in ins]
        return outputs, allocations, after
    finally:
        shutil.rmtree(rfolder, ignore_errors=True)
