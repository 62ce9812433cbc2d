"""The judge: runs the hidden tests in the grader's own process and calls into the student's kernel only
for outputs.

The hidden test cells of the *source* notebook (restored by nbgrader, never taken from the submission)
are executed here, in a namespace built from trusted code only: the cells of the source notebook tagged
``judge`` (the chapter's references, hints, tolerances and input makers), the course's ``triton_course`` as the
grader has it, and one proxy per graded function (:class:`StudentFunction`). Calling a proxy sends the
arguments as bytes to :func:`triton_course.harness.serve` in the student's kernel and reads back the output, the
arguments after the call and evidence about the call. So:

* inputs are made here, from a secret per-run seed (:class:`Seed`) that never leaves this process: each
  test cell draws from its own stream, derived from the seed and its grade_id, so every input can be
  reproduced by a regrade that has the seed, and none can be predicted by the student's code;
* references are computed here, from copies taken before the call;
* whatever the student's process prints, displays or returns is data: only the judge's comparison and
  the policy of :func:`work_problems` turn it into points;
* hidden test code, references and seeds never enter the student's process.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import hmac
import io
import json
import secrets
import shutil
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from grader.gpu_lock import GpuLock
from grader.phases import PhaseClock, phase
from triton_course.checks import CheckFailed, GuardedTensor
from triton_course.harness import DTYPES, MAX_OUTPUTS, PLAIN, load_tensor
from triton_course.relaunch import ALLOWED_OPS

if TYPE_CHECKING:
    from grader.relauncher import Relauncher, RerunEvidence

# ---------------------------------------------------------------------------------------------------
# The secret seed
# ---------------------------------------------------------------------------------------------------


class Seed:
    """A secret of 32 random bytes per grading run; per-test streams and per-call keys derive from it."""

    def __init__(self, secret: bytes | None = None):
        self._secret = secret if secret is not None else secrets.token_bytes(32)

    @property
    def fingerprint(self) -> str:
        """What records keep: a hash that identifies the seed without revealing it."""
        return hashlib.sha256(b"course-seed:" + self._secret).hexdigest()[:16]

    def key(self, *parts: object) -> int:
        """A 63-bit key for ``parts`` (a test's stream, one timed call): HMAC-SHA256 of the secret."""
        msg = "/".join(str(p) for p in parts).encode()
        return int.from_bytes(hmac.new(self._secret, msg, hashlib.sha256).digest()[:8], "big") >> 1

    def hex(self) -> str:
        """The secret itself, for the instructor's own record of a run (never sent to a sandbox)."""
        return self._secret.hex()


# ---------------------------------------------------------------------------------------------------
# What counts as the student's own work
# ---------------------------------------------------------------------------------------------------

#: Input checks may look at a few values (``.item()``); reading more is computing in Python.
MAX_SCALAR_READS = 16


def work_problems(evidence: dict[str, Any], require_kernel: bool, outputs: list[str] | None = None,
                  arg_names: list[str] | None = None) -> list[str]:
    """Why a call's output is not the work of the student's Triton kernel ([] if nothing is wrong).

    ``evidence["output"]`` is one tensor, or a tuple whose every tensor is held to the same rules
    (``outputs`` names them, ``arg_names`` the inputs, in messages)."""
    problems: list[str] = []
    if not require_kernel:
        return problems
    if int(evidence.get("launches", 0)) == 0:
        problems.append("returned without launching a Triton kernel. The grader awards points only for "
                        "results your Triton kernel computes (not PyTorch, NumPy or stored answers).")
    ops = {str(k): int(v) for k, v in dict(evidence.get("ops", {})).items()}
    computed = sorted(k for k in ops if k not in ALLOWED_OPS)
    if computed:
        problems.append("computed with PyTorch outside its kernel (" + ", ".join(f"aten.{k}" for k in computed[:6])
                        + "). Allocating, views and .contiguous() are fine; the result must come from your kernel.")
    if ops.get("_local_scalar_dense", 0) > MAX_SCALAR_READS:
        problems.append(f"read {ops['_local_scalar_dense']} tensor values into Python (.item(), float(...)): "
                        "the result must come from your kernel, not from Python arithmetic.")
    if int(evidence.get("unknown_copies", 0)):
        problems.append("copied data into a tensor that neither its inputs nor a Triton kernel produced "
                        "(a tensor made from NumPy or Python values?).")
    out = evidence.get("output") or {}
    if out.get("kind") == "tensor":
        problems += _output_problems(out, None, arg_names)
    elif out.get("kind") == "tuple":
        items = [i for i in out.get("items", []) if isinstance(i, dict)]
        names = outputs if outputs is not None and len(outputs) == len(items) else \
            [f"output {i + 1}" for i in range(len(items))]
        for item, name in zip(items, names):
            problems += _output_problems(item, name, arg_names)
        for i, item in enumerate(items):
            twins = [j for j in item.get("shares_memory_with", []) if isinstance(j, int) and i < j < len(items)]
            for j in twins:
                problems.append(f"returned outputs `{names[i]}` and `{names[j]}` in the same memory (the same "
                                "tensor twice?): each output needs a tensor of its own, written by your kernel.")
    return problems


def _output_problems(out: dict[str, Any], name: str | None, arg_names: list[str] | None) -> list[str]:
    """The evidence of one returned tensor (``name`` is None for a function's only output)."""
    problems = []
    which = "a tensor" if name is None else f"as output `{name}` a tensor"
    if out.get("is_input"):
        k = out.get("input_index")
        arg = f"`{arg_names[k]}`" if isinstance(k, int) and arg_names and 0 <= k < len(arg_names) else "one of its inputs"
        problems.append(f"returned its input {arg} instead of a new output tensor." if name is None else
                        f"returned its input {arg} as output `{name}` instead of a new tensor.")
    elif not out.get("written_by_launch"):
        problems.append(f"returned {which} that no Triton kernel launch received, so the kernel cannot "
                        "have written it.")
    if not out.get("exact_type", True):
        problems.append("returned a subclass of torch.Tensor; return a plain tensor." if name is None else
                        f"returned as output `{name}` a subclass of torch.Tensor; return a plain tensor.")
    return problems


# ---------------------------------------------------------------------------------------------------
# Talking to the student's kernel
# ---------------------------------------------------------------------------------------------------

class StudentCrashed(Exception):
    """The student's process died while serving a call (its label says which)."""


class StudentTimeout(Exception):
    """A call into the student's process ran past its time limit (and was interrupted)."""


class Transport:
    """How a request reaches :func:`triton_course.harness.serve`: ``run(folder)`` returns when it has answered."""

    exchange: Path
    device: str = "cpu"

    def prepare(self, folder: Path) -> None:  # make the folder writable for the student's process
        pass

    def run(self, folder: Path, timeout_s: float) -> None:
        raise NotImplementedError


class InProcessTransport(Transport):
    """Calls the harness in this very process: for the course's own tests of hidden tests, never for grading."""

    def __init__(self, namespace: dict[str, Any], exchange: Path):
        self.namespace = namespace
        self.exchange = exchange

    def run(self, folder: Path, timeout_s: float) -> None:
        import sys
        import types

        from triton_course import harness

        main = types.ModuleType("__main__")
        main.__dict__.update(self.namespace)
        saved = sys.modules["__main__"]
        sys.modules["__main__"] = main
        try:
            harness.serve(str(folder))
        finally:
            sys.modules["__main__"] = saved


@dataclass
class CallResult:
    """What came back from one call: the output (a tensor on the CPU, a tuple of them, or a plain value),
    the guarded allocation of each returned tensor (None where it is not one), the inputs after the call,
    and the evidence."""

    output: Any
    allocation: GuardedTensor | None
    inputs_after: list[torch.Tensor]
    evidence: dict[str, Any]
    allocations: list[GuardedTensor | None] = field(default_factory=list)
    #: what the accepted launch record shows (None for a call that is not re-run: no kernel required)
    rerun: "RerunEvidence | None" = None


class StudentFunction:
    """A graded function of the student's notebook, called through the harness (see module docs)."""

    def __init__(self, session: "JudgeSession", name: str, require_kernel: bool = True):
        self.session = session
        self.__name__ = name
        self.require_kernel = require_kernel

    def __repr__(self) -> str:
        return f"<the student's {self.__name__}>"

    def remote_call(self, args: list[Any], kwargs: dict[str, Any] | None = None, label: str | None = None,
                    outputs: list[str] | None = None, arg_names: list[str] | None = None) -> CallResult:
        """One call; ``outputs`` and ``arg_names`` only name the outputs and inputs in messages. The kernels its
        accepted launch record ran are noted for this proxy (``check_masked_loads(..., launched_by=add)``)."""
        result = self.session.call(self.__name__, args, kwargs or {}, label or self.__name__, self.require_kernel,
                                   outputs=outputs, arg_names=arg_names)
        if result.rerun is not None:
            from triton_course.static import KernelSource, note_launches

            note_launches(self, [KernelSource(name, src) for name, src in result.rerun.kernels.items()])
        return result

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.remote_call(list(args), kwargs).output

    @property
    def reruns(self) -> "list[RerunEvidence]":
        """The evidence of every call of this function so far whose launches the judge re-ran and accepted."""
        return list(self.session.reruns.get(self.__name__, []))


class Student:
    """``student.NAME`` is the proxy of the notebook's function NAME."""

    def __init__(self, session: "JudgeSession"):
        self._session = session

    def __getattr__(self, name: str) -> StudentFunction:
        if name.startswith("_"):
            raise AttributeError(name)
        return StudentFunction(self._session, name)


class JudgeSession:
    """The judge of one submission: its seed, its line to the student's kernel, its trusted namespace."""

    def __init__(self, transport: Transport, seed: Seed | None = None, call_timeout_s: float = 300.0,
                 relauncher: "Relauncher | None" = None, allowed_kernels: set[str] | None = None):
        from grader.relauncher import InProcessRelauncher

        self.transport = transport
        #: where each call's launches are re-run alone (grader.relauncher); in this process for the course's tests
        self.relauncher = relauncher or InProcessRelauncher(transport.exchange)
        #: the functions the notebook defines (grader.relauncher.notebook_kernel_shapes); None: any kernel
        self.allowed_kernels = allowed_kernels
        self.relaunches = 0
        #: graded function name -> the evidence of each of its calls whose launches were re-run and accepted
        self.reruns: dict[str, list[RerunEvidence]] = {}
        #: the bytes of each storage the student's process has named in a record, by (process nonce, id)
        self.storage_sizes: dict[tuple[str, int], int] = {}
        self.seed = seed or Seed()
        self.call_timeout_s = call_timeout_s
        self.calls = 0
        self.timing_rounds: list[dict[str, Any]] = []  # one entry per timed round (grader.judge_timing)
        self.phases = PhaseClock()  # seconds in calls, re-runs and timing (grader.phases)
        self.in_flight: str | None = None
        self.last_call_seconds = 0.0
        self._fixtures: list[Any] = []
        self.base: dict[str, Any] = {}
        self.gpu_lock = GpuLock(None)  # shared during calls, exclusive while timing (set by the grader)
        #: the submission's own sandboxes (grader.sandbox.Sandbox.member, without the judge): frozen while the
        #: judge times its own yardstick beside the student's kernel (grader.gpu_lock.GpuLock.quieted)
        self.own_sandboxes: list[dict[str, Any]] = []

    # -- the namespace ---------------------------------------------------------------------------------
    def build_namespace(self, judge_cells: list[str], graded_functions: list[str],
                        kernels: dict[str, str] | None = None) -> list[str]:
        """Run the source notebook's ``judge`` cells here; bind the graded functions to proxies.

        Returns problems (a judge cell that failed: a bug of the course, reported, never the student's)."""
        import triton_course
        from triton_course.device import current

        ns: dict[str, Any] = {"__name__": "__judge__", "torch": torch, "device": current(),
                              "student": Student(self), "triton_course": triton_course}
        for name in graded_functions:
            ns[name] = StudentFunction(self, name)
        problems = []
        torch.manual_seed(self.seed.key("judge-cells"))
        for i, source in enumerate(judge_cells):
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    exec(compile(source, f"<judge cell {i}>", "exec"), ns)
            except Exception as exc:
                problems.append(f"judge cell {i}: {type(exc).__name__}: {exc}")
        for name in graded_functions:  # a judge cell must not replace a proxy
            ns[name] = StudentFunction(self, name)
        from triton_course.static import KernelSource

        for name, src in (kernels or {}).items():  # kernels as source text, for static checks only
            ns[name] = KernelSource(name, src)
        self.base = ns
        return problems

    def namespace_for(self, grade_id: str) -> dict[str, Any]:
        torch.manual_seed(self.seed.key("test", grade_id))
        if torch.cuda.is_available():
            torch.cuda.manual_seed_all(self.seed.key("test-cuda", grade_id))
        return dict(self.base)

    # -- one call --------------------------------------------------------------------------------------
    @phase("calls")
    def call(self, name: str, args: list[Any], kwargs: dict[str, Any], label: str,
             require_kernel: bool = True, outputs: list[str] | None = None,
             arg_names: list[str] | None = None) -> CallResult:
        self.calls += 1
        folder = self.transport.exchange / f"call-{self.calls}"
        folder.mkdir(parents=True)
        self.transport.prepare(folder)
        try:
            sent: list[torch.Tensor] = []
            self._fixtures: list[Any] = []
            request = {"mode": "call", "fn": name, "label": label, "device": self.transport.device,
                       "args": [self._encode(a, folder, f"arg{i}", sent) for i, a in enumerate(args)],
                       "kwargs": {k: self._encode(v, folder, f"kw_{k}", sent) for k, v in kwargs.items()}}
            (folder / "request.json").write_text(json.dumps(request))
            self.in_flight = label
            t0 = time.perf_counter()
            with self.gpu_lock.shared():
                self.transport.run(folder, self.call_timeout_s)
            self.last_call_seconds = time.perf_counter() - t0
            self.in_flight = None
            result = self._decode(folder, label, sent, require_kernel, outputs, arg_names)
            if result.rerun is not None:
                self.reruns.setdefault(name, []).append(result.rerun)
            return result
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _encode(self, value: Any, folder: Path, name: str, sent: list[torch.Tensor]) -> dict[str, Any]:
        if isinstance(value, torch.Tensor):
            from triton_course.harness import tensor_spec

            spec = tensor_spec(value, folder, name)
            spec["device"] = self.transport.device
            sent.append(value)
            return spec
        from triton_course.fixtures import Fixture

        if isinstance(value, Fixture):
            self._fixtures.append(value)
            return value.spec()
        if isinstance(value, PLAIN) or (isinstance(value, (list, tuple)) and all(isinstance(v, PLAIN) for v in value)):
            return {"kind": "value", "value": list(value) if isinstance(value, tuple) else value}
        raise TypeError(f"the judge cannot send a {type(value).__name__} to the student's notebook")

    def _decode(self, folder: Path, label: str, sent: list[torch.Tensor], require_kernel: bool,
                outputs: list[str] | None = None, arg_names: list[str] | None = None) -> CallResult:
        path = folder / "response.json"
        if not path.is_file() or path.stat().st_size > 1_000_000:
            raise CheckFailed(f"{label}: the notebook gave no answer to the grader's call (did it replace the "
                              "grader's harness, or exit?)")
        try:
            resp = json.loads(path.read_text())
            if not isinstance(resp, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            raise CheckFailed(f"{label}: the notebook's answer could not be read ({exc})") from None
        status = resp.get("status")
        states = resp.get("fixtures") if isinstance(resp.get("fixtures"), list) else []
        for fixture, state in zip(self._fixtures, states):
            if isinstance(state, dict):
                fixture.update(state)
        if status == "missing":
            raise CheckFailed(f"{label}: {str(resp.get('error'))[:300]}. Keep the name the TODO asks for.")
        if status == "raised":
            raise CheckFailed(str(resp.get("error", "the function raised an exception"))[:3000])
        if status != "ok":
            raise CheckFailed(f"{label}: the notebook's answer has no valid status")
        out = resp.get("output") or {}
        if not isinstance(out, dict):
            raise CheckFailed(f"{label}: the notebook's answer could not be read (no output)")
        budget = output_budget(sent)
        if out.get("kind") == "tensor":
            output, allocation = self._load_output(out, folder, budget, label)
            allocations = [allocation]
        elif out.get("kind") == "tuple":
            items = out.get("items")
            if not isinstance(items, list) or not items or len(items) > MAX_OUTPUTS or \
                    not all(isinstance(i, dict) for i in items):
                raise CheckFailed(f"{label}: the notebook's answer could not be read (a malformed tuple)")
            loaded, remaining = [], budget
            for item in items:   # the budget holds for all outputs together: two huge ones are no better
                tensor, allocation = self._load_output(item, folder, remaining, label)
                remaining -= tensor.untyped_storage().nbytes()
                loaded.append((tensor, allocation))
            output = tuple(t for t, _ in loaded)
            allocation, allocations = loaded[0][1], [a for _, a in loaded]
        elif out.get("kind") == "value":
            output, allocation, allocations = out.get("value"), None, []
        else:
            raise CheckFailed(f"{label} returned a {str(out.get('type', 'value'))[:200]} that the grader cannot read; "
                              "return a tensor, a tuple of tensors or plain numbers")
        after = []
        specs = resp.get("inputs") or []
        if len(specs) != len(sent):
            raise CheckFailed(f"{label}: the notebook's answer lost track of its inputs")
        for spec in specs:
            after.append(self._load(spec, folder, budget, label))
        if outputs is not None:   # the caller expects several outputs: their number comes first
            want = f"a tuple of {len(outputs)} tensors ({', '.join(outputs)})"
            if not isinstance(output, tuple):
                got = "Tensor" if isinstance(output, torch.Tensor) else type(output).__name__
                raise CheckFailed(f"{label} returned {got}, expected {want}")
            if len(output) != len(outputs):
                raise CheckFailed(f"{label} returned {len(output)} outputs, expected {want}")
        problems = work_problems(resp, require_kernel and isinstance(output, (torch.Tensor, tuple)), outputs,
                                 arg_names)
        if problems:
            raise CheckFailed(f"{label} " + " ".join(problems))
        if require_kernel and isinstance(output, (torch.Tensor, tuple)):
            # graded: what the call's launches compute when re-run alone, not what its process returned
            from grader.relauncher import relaunch

            returned = list(output) if isinstance(output, tuple) else [output]
            specs = out.get("items") if out.get("kind") == "tuple" else [out]
            rerun, allocations, after, shown = relaunch(self, folder, specs, returned, sent, label, budget)
            output, allocation = (tuple(rerun) if isinstance(output, tuple) else rerun[0]), allocations[0]
            return CallResult(output, allocation, after, resp, allocations, shown)
        return CallResult(output, allocation, after, resp, allocations)

    def _load_output(self, spec: dict[str, Any], folder: Path, budget: int,
                     label: str) -> tuple[torch.Tensor, GuardedTensor | None]:
        """One returned tensor, and its guarded allocation when the evidence says it covers one."""
        output = self._load(spec, folder, budget, label)
        pad = spec.get("guard_pad")
        if isinstance(pad, int) and not isinstance(pad, bool) and 0 <= pad <= output.untyped_storage().nbytes():
            storage = output.untyped_storage()
            buffer = torch.empty(0, dtype=output.dtype).set_(storage, 0, (storage.nbytes() // max(1, output.element_size()),),
                                                             (1,))
            if output.storage_offset() == pad:
                return output, GuardedTensor(output, buffer, pad)
        return output, None

    @staticmethod
    def _load(spec: dict[str, Any], folder: Path, budget: int, label: str) -> torch.Tensor:
        try:
            if spec.get("dtype") not in DTYPES or Path(str(spec.get("file"))).name != spec.get("file"):
                raise ValueError("unknown dtype or file name")
            f = folder / spec["file"]
            if f.stat().st_size > budget:
                raise ValueError(f"{f.stat().st_size:,} bytes is more than any answer needs")
            shape = [int(d) for d in spec.get("shape", [])]
            elements = 1
            for d in shape:
                elements *= max(d, 0)
            if elements * torch.empty(0, dtype=DTYPES[spec["dtype"]]).element_size() > max(budget, 0):
                raise ValueError(f"a view of {elements:,} elements is more than any answer needs")
            return load_tensor(spec, folder, device="cpu")
        except (OSError, ValueError, KeyError, TypeError, RuntimeError, OverflowError) as exc:
            raise CheckFailed(f"{label}: the tensor the notebook returned could not be read ({exc})") from None


def output_budget(sent: list[torch.Tensor]) -> int:
    """Bytes of output the judge reads back from one call: 64 MiB plus four times the inputs (with their
    guard regions). Enough for any answer of the course; a flood of bytes is refused, not read."""
    return (64 << 20) + sum(4 * (t.untyped_storage().nbytes() + 2 * 4096 * 8) for t in sent)


# ---------------------------------------------------------------------------------------------------
# Running one hidden test cell
# ---------------------------------------------------------------------------------------------------

@dataclass
class TestOutcome:
    """What a hidden test cell produced: printed text, a score (last expression) or an error."""

    stdout: str = ""
    score: Any = None
    error: tuple[str, str] | None = None
    crashed: str | None = None
    timeout: str | None = None
    notes: list[str] = field(default_factory=list)


def run_test_cell(source: str, ns: dict[str, Any], name: str = "hidden test") -> TestOutcome:
    """Execute trusted test code in ``ns``; the value of a final expression is the score."""
    outcome = TestOutcome()
    buf = io.StringIO()
    try:
        tree = ast.parse(source)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            exec(compile(tree, f"<{name}>", "exec"), ns)
            if last is not None:
                outcome.score = eval(compile(ast.Expression(last.value), f"<{name}>", "eval"), ns)
    except StudentCrashed as exc:
        outcome.crashed = str(exc)
    except StudentTimeout as exc:
        outcome.timeout = str(exc)
    except CheckFailed as exc:
        outcome.error = ("CheckFailed", str(exc))
    except AssertionError as exc:
        outcome.error = ("AssertionError", str(exc) or "a check of this test failed")
    except Exception as exc:  # the student's answer made a trusted check fail in an unexpected way
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == f"<{name}>"]
        where = f" (hidden test line {frames[-1].lineno})" if frames else ""
        outcome.error = (type(exc).__name__, f"{exc}{where}")
    outcome.stdout = buf.getvalue()[-20_000:]
    return outcome
