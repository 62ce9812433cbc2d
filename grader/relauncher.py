"""The judge's end of :mod:`triton_course.relaunch`: check a call's launch record, have it re-run in a clean
process, and grade what that process computed.

:func:`record_problems` holds the record to what honest work looks like: kernels that the notebook defines
(or the course's own) whose source names nothing but Triton's language (:func:`triton_course.relaunch.kernel_source_problems`),
operators that only allocate, copy and fill, and launches whose numbers and strings carry a few hundred bits
(:class:`Information`), far less than any graded output holds, so that no answer fits through kernel
arguments, constexprs or the globals a kernel reads. A :class:`Relauncher` runs :func:`triton_course.relaunch.serve_request`
on the record and the judge's own copy of the inputs: :class:`ProcessRelauncher` in a process of its own
(inside a second bubblewrap sandbox when grading), :class:`InProcessRelauncher` in this one (the course's
own tests of hidden tests only). :func:`grader.judge_calls.relaunch` has a call's record re-run by one and
refuses a call whose output the re-run does not reproduce; :func:`rerun_evidence` is what it reads off an
accepted record.
"""

from __future__ import annotations

import ast
import json
import os
import re
import selectors
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.notebook_code import strip_magics
from triton_course.relaunch import (ALLOWED_OPS, MODULE_ROOTS, kernel_shape, kernel_source_problems, scratch_bytes,
                                    serve_request, storage_sizes)

#: How much information a call's record may carry outside its tensors, in bits: every size, stride, offset,
#: block size, grid, eps and string of its launches, operators and the globals its kernels read, each counted
#: by what it can encode (an integer by its bit length, a float as 64 bits, a string by its characters), every
#: step counted again (the order and number of launches carry information too), a step that repeats an earlier
#: one exactly at the bits that say which one it repeats (a kernel launched ten times with the same arguments
#: carries no more than once: tests/gpu/records/gpu_class_throughput_09_class_oom.json, sol). At most
#: ``max(MIN_INFORMATION_BITS, output bits // OUTPUT_SHARE)`` and never more than MAX_INFORMATION_BITS. An honest
#: call of the course carries a few hundred to about two thousand bits (tests/test_relaunch.py measures the model
#: answers); an answer handed to a kernel needs several bits per output element to pass a tolerance.
MIN_INFORMATION_BITS = 4096
MAX_INFORMATION_BITS = 16384
OUTPUT_SHARE = 64
#: Strings a record may carry at the price of one choice: the values Triton's own options take (cache
#: modifiers, eviction policies, padding, rounding, dot precisions) and dtype names. Any other string must be
#: a short identifier (:data:`SHORT_LITERAL`), counted at 8 bits a character; anything else is refused.
TRITON_STRINGS = frozenset({
    "", ".ca", ".cg", ".cs", ".cv", ".lu", ".wb", ".wt", "evict_first", "evict_last", "evict_normal",
    "zero", "nan", "rtne", "rtz", "tf32", "tf32x3", "ieee", "bf16x3", "bf16x6", "cpu", "cuda",
    "int1", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "fp8e4nv", "fp8e5",
    "fp8e4b15", "fp8e4b8", "fp8e5b16", "fp16", "bf16", "fp32", "fp64", "float16", "bfloat16", "float32",
    "float64", "bool", "uint1",
})
SHORT_LITERAL = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,15}")
#: Keys of a recorded value whose strings are the record's own structure, not the student's data.
_STRUCTURE_KEYS = frozenset({"tensor", "dtype", "torch", "device", "tl_dtype", "dataclass", "module", "import",
                             "attr", "kernel", "launch", "op", "refused", "raised", "poison", "unsupported"})
#: Bits charged per step, for the choice of kernel or operator and the step's place in the sequence (more where a
#: record launches more than 256 kernels: a notebook of thousands of kernels, each storing one value, says a
#: value by which one it launches).
STEP_BITS = 8

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


class Information:
    """Counts the bits a record's non-tensor values can carry, and the strings that no launch needs."""

    def __init__(self) -> None:
        self.bits = 0
        self.strange_strings: list[str] = []

    def add(self, value: Any) -> None:
        """Charge ``value`` (a recorded argument, grid, global or operator argument, as JSON)."""
        if value is None or isinstance(value, bool):
            self.bits += 1
        elif isinstance(value, int):
            self.bits += abs(value).bit_length() + 1
        elif isinstance(value, float):
            self.bits += 64
        elif isinstance(value, str):
            self._string(value)
        elif isinstance(value, list):
            for v in value:
                self.add(v)
        elif isinstance(value, dict):
            for k, v in value.items():
                if k == "float":   # a float JSON cannot hold (inf, -inf, nan)
                    self.bits += 64
                elif k in _STRUCTURE_KEYS and not isinstance(v, (dict, list)):
                    self.bits += 4 if k in ("tensor", "dtype", "torch", "device", "tl_dtype") else 0
                else:
                    self.add(v)
        else:
            self.strange_strings.append(repr(type(value)))

    def _string(self, text: str) -> None:
        if text in TRITON_STRINGS:
            self.bits += 8
        elif SHORT_LITERAL.fullmatch(text):
            self.bits += 8 * len(text)
        else:
            self.strange_strings.append(text)


def information_limit(output_bits: int) -> int:
    """How many bits of non-tensor values a call whose outputs hold ``output_bits`` bits may pass."""
    return min(MAX_INFORMATION_BITS, max(MIN_INFORMATION_BITS, output_bits // OUTPUT_SHARE))


def record_information(record: dict[str, Any]) -> Information:
    """The :class:`Information` of a record's steps and of the globals its kernels read."""
    info = Information()
    choice = max(STEP_BITS, len(record["kernels"]).bit_length())   # which of the record's kernels a step launches
    seen: set[str] = set()
    for step in record["steps"]:
        if isinstance(step, dict) and ("op" in step or "launch" in step):
            info.bits += choice
            values = [step.get("args"), step.get("kwargs"), step.get("grid")]
            key = json.dumps([step.get("launch"), step.get("op"), values], sort_keys=True, default=repr)
            if key in seen:   # a repeat says only which earlier step it repeats
                info.bits += max(1, len(seen).bit_length())
            else:
                seen.add(key)
                info.add(values)
    for desc in record["kernels"].values():
        if isinstance(desc, dict) and isinstance(desc.get("globals"), dict):
            info.add(list(desc["globals"].values()))
    return info


def record_problems(record: Any, kernel_shapes: set[str] | None, output_bits: int = 0) -> list[str]:
    """Why a launch record is not one the grader re-runs ([] if it is). ``kernel_shapes``: the notebook's
    functions (:func:`notebook_kernel_shapes`); None accepts any kernel (the course's tests of the judge).
    ``output_bits``: of all the call's outputs together (see :func:`information_limit`)."""
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
            elif kernel_shapes is not None:   # grading: only the notebook's kernels are the student's work
                problems.append(f"launched the course's own kernel {desc.get('name')} ({desc['course']}): only the "
                                "kernels your notebook defines are graded")
        else:
            name, source = str(desc.get("name")), str(desc.get("source"))
            found = desc.get("globals") if isinstance(desc.get("globals"), dict) else {}
            problems += kernel_source_problems(name, source, found)
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
    for step in record["steps"]:
        if not isinstance(step, dict):
            problems.append("left a malformed record of its launches")
            return problems
        if "op" in step:
            parts = str(step["op"]).split(".")
            if step.get("refused") or len(parts) != 3 or parts[1] not in ALLOWED_OPS:
                problems.append(f"ran {step['op']} outside its kernels")
        elif "launch" in step and step["launch"] not in kernels:
            problems.append("launched a kernel the record does not describe")
    info = record_information(record)
    if info.strange_strings:
        shown = ", ".join(repr(t[:24] + ("..." if len(t) > 24 else "")) for t in info.strange_strings[:2])
        problems.append(f"passed its launches a string Triton has no use for ({shown}; {len(info.strange_strings)} in "
                        "all): a launch may carry Triton's option values, dtype names and short names, nothing else")
    limit = information_limit(output_bits)
    if info.bits > limit:
        problems.append(f"passed {info.bits:,} bits of numbers and strings to its launches and operators (at most "
                        f"{limit:,} for an output of {output_bits:,} bits; an honest call passes sizes, strides and "
                        "block sizes, a few hundred bits): a result must be computed by a kernel from its inputs, "
                        "not handed to it in its arguments or in the globals it reads")
    return list(dict.fromkeys(problems))


# ---------------------------------------------------------------------------------------------------
# Where records are re-run
# ---------------------------------------------------------------------------------------------------

class Relauncher:
    """Runs :func:`triton_course.relaunch.serve_request` on a folder of ``exchange``; ``run`` returns when
    the folder holds its answer (:data:`triton_course.exchange.RESPONSE`)."""

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

    def start(self) -> None:
        """Start the process now, ahead of the first call, so that its imports and its GPU context come up while the
        student's cells run (it then waits on its stdin); a process already running is kept."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()

    def run(self, folder: Path, timeout_s: float) -> None:
        self.start()
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
# What an accepted record shows
# ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RerunEvidence:
    """What the judge reads off an accepted launch record, beyond the outputs: facts the student's process
    cannot forge, since the re-run does exactly what the record says and nothing else.

    ``kernels``: name -> source of every notebook kernel the call launched (the course's own excluded);
    ``scratch_bytes``: memory the call's steps used besides its inputs and outputs (storages it allocates, and
    storages kept from before it, a workspace made in an earlier call too), an upper bound on its peak extra
    memory."""

    kernels: dict[str, str]
    scratch_bytes: int


def rerun_evidence(record: dict[str, Any], sizes: dict[tuple[str, int], int]) -> RerunEvidence:
    """The :class:`RerunEvidence` of an accepted record (:func:`record_problems` found nothing). ``sizes``: the
    bytes of every storage the student's process has shown the judge, by (process nonce, id), kept by the
    session from call to call and updated here."""
    launched = [str(s["launch"]) for s in record["steps"] if isinstance(s, dict) and "launch" in s]
    kernels: dict[str, str] = {}
    while launched:   # the kernels launched, and the notebook kernels they call
        desc = record["kernels"].get(launched.pop())
        if not isinstance(desc, dict) or "source" not in desc or str(desc["name"]) in kernels:
            continue
        kernels[str(desc["name"])] = str(desc["source"])
        launched += [str(g["kernel"]) for g in dict(desc.get("globals", {})).values() if isinstance(g, dict) and "kernel" in g]
    nonce = str(record.get("nonce"))
    for sid, nbytes in storage_sizes(record).items():
        sizes[(nonce, sid)] = nbytes
    return RerunEvidence(kernels, scratch_bytes(record, lambda sid: sizes.get((nonce, sid), 0)))
