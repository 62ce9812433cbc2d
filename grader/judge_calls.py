"""The judge's line to the student's kernel: one call sent, its answer read back and held to the rules of the
student's own work, its launches re-run alone.

:class:`JudgeCalls` is the part of a submission's judge (:class:`grader.judge.JudgeSession`) that talks to the
student's process, in the messages of :mod:`triton_course.exchange`: its secret :class:`Seed`, its
:class:`Transport` to :func:`triton_course.harness.serve`, its share of the GPU, and the calls so far. A call
(:meth:`JudgeCalls.call`) sends the arguments as bytes and reads back the output, the arguments after the call and
evidence about the call; :func:`work_problems` says what in that evidence is not the work of the student's
Triton kernel; and the output graded is the one the call's launches compute when :func:`relaunch` has them re-run
alone from their record (:mod:`grader.relauncher`). :class:`RemoteFunction` is the graded function as the judge
calls it. The timed rounds (:mod:`grader.judge_timing`) use the same line.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from grader.gpu_lock import GpuLock
from grader.phases import PhaseClock, phase
from grader.relauncher import InProcessRelauncher, Relauncher, RerunEvidence, record_problems, rerun_evidence
# What counts as the student's own work is one rule, the self-checks' and the judge's: triton_course.checks.
from triton_course.checks import MAX_SCALAR_READS, CheckFailed, GuardedTensor, work_problems  # noqa: F401
from triton_course.exchange import (CALL_MODE, DTYPES, MAX_OUTPUTS, MISSING, OK, PLAIN, RAISED, REFUSED, NoAnswer,
                                    load_tensor, read_record, read_response, tensor_spec, write_request)
from triton_course.fixtures import Fixture
from triton_course.integrity import KernelSource, note_launches

#: An answer to a call larger than this is refused unread (its tensors are files of their own).
MAX_RESPONSE_BYTES = 1_000_000
#: A record larger than this is refused unread.
MAX_RECORD_BYTES = 32 << 20

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
    rerun: RerunEvidence | None = None


class RemoteFunction:
    """A graded function of the student's notebook, called through the harness: what the judge's proxy
    (:class:`grader.judge.StudentFunction`) does besides timing."""

    def __init__(self, session: JudgeCalls, name: str, require_kernel: bool = True):
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
            note_launches(self, [KernelSource(name, src) for name, src in result.rerun.kernels.items()])
        return result

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.remote_call(list(args), kwargs).output

    @property
    def reruns(self) -> list[RerunEvidence]:
        """The evidence of every call of this function so far whose launches the judge re-ran and accepted."""
        return list(self.session.reruns.get(self.__name__, []))


class JudgeCalls:
    """The line between the judge of one submission and the student's kernel: its seed, its transport, its
    share of the GPU, its calls and their evidence so far."""

    def __init__(self, transport: Transport, seed: Seed | None = None, call_timeout_s: float = 300.0,
                 relauncher: Relauncher | None = None, allowed_kernels: set[str] | None = None):
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
        #: the longest call so far, in seconds, hung ones included (the evidence a limit per call is set from)
        self.longest_call_seconds = 0.0
        self._fixtures: list[Any] = []
        self.gpu_lock = GpuLock(None)  # shared during calls, exclusive while timing (set by the grader)
        #: the submission's own sandboxes (grader.sandbox.Sandbox.member, without the judge): frozen while the
        #: judge times its own yardstick beside the student's kernel (grader.gpu_lock.GpuLock.quieted)
        self.own_sandboxes: list[dict[str, Any]] = []

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
            write_request(folder, {"mode": CALL_MODE, "fn": name, "label": label, "device": self.transport.device,
                                   "inputs_after": not require_kernel,   # a re-run's inputs after are the ones read
                                   "args": [self._encode(a, folder, f"arg{i}", sent) for i, a in enumerate(args)],
                                   "kwargs": {k: self._encode(v, folder, f"kw_{k}", sent) for k, v in kwargs.items()}})
            self.in_flight = label
            t0 = time.perf_counter()
            try:
                with self.gpu_lock.shared():
                    self.transport.run(folder, self.call_timeout_s)
            finally:
                self.last_call_seconds = time.perf_counter() - t0
                self.longest_call_seconds = max(self.longest_call_seconds, self.last_call_seconds)
            self.in_flight = None
            result = self._decode(folder, label, sent, require_kernel, outputs, arg_names)
            if result.rerun is not None:
                self.reruns.setdefault(name, []).append(result.rerun)
            return result
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _encode(self, value: Any, folder: Path, name: str, sent: list[torch.Tensor]) -> dict[str, Any]:
        if isinstance(value, torch.Tensor):
            spec = tensor_spec(value, folder, name)
            spec["device"] = self.transport.device
            sent.append(value)
            return spec
        if isinstance(value, Fixture):
            self._fixtures.append(value)
            return value.spec()
        if isinstance(value, PLAIN) or (isinstance(value, (list, tuple)) and all(isinstance(v, PLAIN) for v in value)):
            return {"kind": "value", "value": list(value) if isinstance(value, tuple) else value}
        raise TypeError(f"the judge cannot send a {type(value).__name__} to the student's notebook")

    def _decode(self, folder: Path, label: str, sent: list[torch.Tensor], require_kernel: bool,
                outputs: list[str] | None = None, arg_names: list[str] | None = None) -> CallResult:
        try:
            resp = read_response(folder, MAX_RESPONSE_BYTES)
        except NoAnswer:
            raise CheckFailed(f"{label}: the notebook gave no answer to the grader's call (did it replace the "
                              "grader's harness, or exit?)") from None
        except ValueError as exc:
            raise CheckFailed(f"{label}: the notebook's answer could not be read ({exc})") from None
        status = resp.get("status")
        states = resp.get("fixtures") if isinstance(resp.get("fixtures"), list) else []
        for fixture, state in zip(self._fixtures, states):
            if isinstance(state, dict):
                fixture.update(state)
        if status == MISSING:
            raise CheckFailed(f"{label}: {str(resp.get('error'))[:300]}. Keep the name the TODO asks for.")
        if status == RAISED:
            raise CheckFailed(str(resp.get("error", "the function raised an exception"))[:3000])
        if status != OK:
            raise CheckFailed(f"{label}: the notebook's answer has no valid status")
        out = resp.get("output") or {}
        if not isinstance(out, dict):
            raise CheckFailed(f"{label}: the notebook's answer could not be read (no output)")
        budget = output_budget(sent)
        output, allocation, allocations = self._read_output(out, folder, budget, label)
        rerun = require_kernel and isinstance(output, (torch.Tensor, tuple))
        after = []
        specs = resp.get("inputs") or []
        if not rerun and len(specs) != len(sent):
            raise CheckFailed(f"{label}: the notebook's answer lost track of its inputs")
        for spec in [] if rerun else specs:   # a re-run's inputs after replace the process's: never read those
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
        if rerun:
            # graded: what the call's launches compute when re-run alone, not what its process returned
            returned = list(output) if isinstance(output, tuple) else [output]
            specs = out.get("items") if out.get("kind") == "tuple" else [out]
            rerun, allocations, after, shown = relaunch(self, folder, specs, returned, sent, label, budget)
            output, allocation = (tuple(rerun) if isinstance(output, tuple) else rerun[0]), allocations[0]
            return CallResult(output, allocation, after, resp, allocations, shown)
        return CallResult(output, allocation, after, resp, allocations)

    def _read_output(self, out: dict[str, Any], folder: Path, budget: int,
                     label: str) -> tuple[Any, GuardedTensor | None, list[GuardedTensor | None]]:
        """(output, the guarded allocation of the first tensor, that of each) of an answer's ``output``: one
        tensor, a tuple of them within one budget together, or a plain value."""
        if out.get("kind") == "tensor":
            output, allocation = self._load_output(out, folder, budget, label)
            return output, allocation, [allocation]
        if out.get("kind") == "tuple":
            items = out.get("items")
            if not isinstance(items, list) or not items or len(items) > MAX_OUTPUTS or \
                    not all(isinstance(i, dict) for i in items):
                raise CheckFailed(f"{label}: the notebook's answer could not be read (a malformed tuple)")
            loaded, remaining = [], budget
            for item in items:   # the budget holds for all outputs together: two huge ones are no better
                tensor, allocation = self._load_output(item, folder, remaining, label)
                remaining -= tensor.untyped_storage().nbytes()
                loaded.append((tensor, allocation))
            return tuple(t for t, _ in loaded), loaded[0][1], [a for _, a in loaded]
        if out.get("kind") == "value":
            return out.get("value"), None, []
        raise CheckFailed(f"{label} returned a {str(out.get('type', 'value'))[:200]} that the grader cannot read; "
                          "return a tensor, a tuple of tensors or plain numbers")

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
# Re-running a call's launches alone
# ---------------------------------------------------------------------------------------------------

def _read_record(folder: Path, label: str) -> dict[str, Any]:
    try:
        return read_record(folder, MAX_RECORD_BYTES)
    except NoAnswer:
        raise CheckFailed(f"{label} left no record of its launches the grader can read (did it replace the "
                          "grader's harness?)") from None
    except ValueError:
        raise CheckFailed(f"{label} left a record of its launches that does not parse") from None


def _disagreement(returned: torch.Tensor, rerun: torch.Tensor) -> str | None:
    """Where ``returned`` (what the student's process handed back) and ``rerun`` (the relaunch) differ by
    more than the order of a floating-point sum can explain; None if they agree."""
    if tuple(returned.shape) != tuple(rerun.shape) or returned.dtype != rerun.dtype:
        return f"the re-run output is {tuple(rerun.shape)} {rerun.dtype}, the returned one {tuple(returned.shape)} " \
               f"{returned.dtype}"
    a, b = returned.reshape(-1), rerun.reshape(-1)
    if torch.equal(a, b):   # the usual answer, and the cheap one: float64 copies of 93M elements cost seconds
        return None
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


@phase("reruns")
def relaunch(session: JudgeCalls, folder: Path, out_specs: list[dict[str, Any]], returned: list[torch.Tensor],
             sent: list[torch.Tensor], label: str,
             budget: int) -> tuple[list[torch.Tensor], list[Any], list[torch.Tensor], RerunEvidence]:
    """(outputs, their guarded allocations, inputs after, evidence) of the call in ``folder`` as its launches
    alone compute them, re-run by ``session.relauncher``; CheckFailed if the record is refused, the re-run
    fails or its output differs from the one the student's process returned (``returned``)."""
    record = _read_record(folder, label)
    problems = record_problems(record, session.allowed_kernels, sum(t.numel() * t.element_size() * 8 for t in returned))
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
        write_request(rfolder, {"record": record, "inputs": inputs, "device": session.transport.device})
        with session.gpu_lock.shared():
            relauncher.run(rfolder, session.call_timeout_s)
        try:
            resp = read_response(rfolder)
        except (OSError, ValueError):
            raise CheckFailed(f"{label}: the grader re-ran its Triton launches alone and the re-run did not finish "
                              f"within {session.call_timeout_s:.0f} s or crashed (an out-of-bounds store, or a loop "
                              "that never ends on other data?)") from None
        if resp.get("status") != OK:
            raise CheckFailed(f"{label}: the grader re-ran its Triton launches alone, from a record of them, and "
                              f"{'refused' if resp.get('status') == REFUSED else 'that failed'}: "
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
        for sid, t in zip(record["inputs"], sent):   # an input kept for a later call counts there as scratch
            session.storage_sizes[(str(record.get("nonce")), int(sid))] = t.untyped_storage().nbytes()
        return outputs, allocations, after, rerun_evidence(record, session.storage_sizes)
    finally:
        shutil.rmtree(rfolder, ignore_errors=True)
