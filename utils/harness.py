"""The grader's end of a call into a student's notebook: runs inside the student's (sandboxed) kernel.

The judge (``grader.judge``, in another process) never runs student code and never sends test code: it
writes a *request* into the exchange folder (which function, and its arguments as raw bytes) and runs
``triton_course.harness.serve(folder)`` in the kernel. :func:`serve` rebuilds the arguments, calls the student's
function, and writes back plain data: the output's bytes, the arguments' bytes after the call, and
*evidence* about the call (Triton launches, the PyTorch operators it ran, where its output came from). A
function may return one tensor, a tuple (or list) of up to :data:`MAX_OUTPUTS` tensors, each sent back with
its own evidence, or plain values.

Everything written here is untrusted by construction -- the student's code runs in this process and can
change this module -- so the judge checks every byte against its own inputs and reference, and treats
the evidence only as evidence. A request for a timed loop (:func:`serve` with ``mode="time"``) makes its
inputs from per-call keys (:func:`make_tensor`), which the judge can reproduce.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from . import fixtures
from .checks import GuardedAllocations, _span, explain_exception, shares_memory
from .exchange import (MAX_OUTPUTS, MISSING, OK, PLAIN, RAISED, TIME_MODE, CallRequest, CallResponse, TensorSpec,
                       load_tensor, notebook_namespace, read_request, tensor_spec, write_record, write_response)
from .integrity import KernelLaunches, OperatorLog
from .relaunch import LaunchRecord
from .timing_harness import serve_timing


def _plain(value: Any, depth: int = 0) -> Any:
    if isinstance(value, PLAIN):
        return value
    if isinstance(value, (list, tuple)) and depth < 4 and len(value) <= 10_000:
        return [_plain(v, depth + 1) for v in value]
    raise TypeError(type(value).__name__)


# ---------------------------------------------------------------------------------------------------
# Serving one request
# ---------------------------------------------------------------------------------------------------

def _sync(device: str) -> None:
    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.synchronize()


def serve(folder: str) -> None:
    """Answer the request in ``folder`` (:data:`triton_course.exchange.REQUEST`) with its response and data files
    (:mod:`triton_course.exchange`)."""
    path = Path(folder)
    req = read_request(path)
    if req.get("mode") == TIME_MODE:
        return serve_timing(path, req)
    release_cached_gpu_memory(req.get("device", "cpu"))   # what the notebook's own cells left cached
    try:
        _serve_call(path, req)
    finally:
        release_cached_gpu_memory(req.get("device", "cpu"))


def release_cached_gpu_memory(device: str) -> None:
    """Give the GPU back the memory PyTorch keeps cached in this process. Several submissions share a grading GPU:
    what one process keeps cached after a large call is memory another one's call cannot have (ten at once on
    one H200 ran seven honest copies out of memory: tests/gpu/records/gpu_class_throughput_09_class_oom.json)."""
    if device.startswith("cuda") and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _serve_call(path: Path, req: CallRequest) -> None:
    fn = notebook_namespace().get(req["fn"])
    if fn is None or not callable(fn):
        return write_response(path, {"status": MISSING, "error": f"the notebook defines no function `{req['fn']}`"})
    args, tensors, made = [], [], []

    def decode(a: dict[str, Any]) -> Any:
        if a["kind"] == "tensor":
            t = load_tensor(a, path)
            tensors.append(t)
            return t
        if a["kind"] == "fixture":
            made.append(fixtures.build(a))
            return made[-1]
        return a["value"]

    args = [decode(a) for a in req["args"]]
    kwargs = {k: decode(v) for k, v in req.get("kwargs", {}).items()}
    record = LaunchRecord(tensors)
    launches = KernelLaunches(record)
    log = OperatorLog(tensors, launches, record)
    try:
        with GuardedAllocations() as allocs, launches, log:
            got = fn(*args, **kwargs)
        _sync(req.get("device", "cpu"))
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # the student's code failed: explain it in words, no Triton internals
        return write_response(path, {"status": RAISED, "error": explain_exception(exc, req.get("label", req["fn"])),
                                     "exception": type(exc).__name__, "launches": launches.count, "ops": log.ops,
                                     "fixtures": [f.state() for f in made]})
    response: CallResponse = {"status": OK, "launches": launches.count, "ops": log.ops,
                              "unknown_copies": log.unknown_copies, "fixtures": [f.state() for f in made]}
    if isinstance(got, (tuple, list)) and got and all(isinstance(g, torch.Tensor) for g in got):
        if len(got) > MAX_OUTPUTS:
            response["output"] = {"kind": "unsupported", "type": f"{type(got).__name__} of {len(got)} tensors"}
        else:
            items = [_output_spec(g, path, f"output{i}", allocs, launches, log, tensors) for i, g in enumerate(got)]
            for i, g in enumerate(got):
                items[i]["shares_memory_with"] = [j for j, h in enumerate(got) if j != i and shares_memory(g, h)]
            response["output"] = {"kind": "tuple", "items": items}
    elif isinstance(got, (tuple, list)) and any(isinstance(g, torch.Tensor) for g in got):
        other = next(type(g).__name__ for g in got if not isinstance(g, torch.Tensor))
        response["output"] = {"kind": "unsupported", "type": f"{type(got).__name__} holding a {other} beside tensors"}
    elif isinstance(got, torch.Tensor):
        response["output"] = _output_spec(got, path, "output", allocs, launches, log, tensors)
    else:
        try:
            response["output"] = {"kind": "value", "value": _plain(got)}
        except TypeError as exc:
            response["output"] = {"kind": "unsupported", "type": str(exc)}
    if req.get("inputs_after", True) or response["output"].get("kind") not in ("tensor", "tuple"):
        response["inputs"] = [tensor_spec(t, path, f"input{i}") for i, t in enumerate(tensors)]
    # else the judge re-runs the call's launches and reads the inputs after them from the re-run, not from here
    returned = [g for g in (got if isinstance(got, (tuple, list)) else (got,)) if isinstance(g, torch.Tensor)]
    record.finish(returned)
    write_record(path, record.as_dict())
    write_response(path, response)


def _output_spec(got: torch.Tensor, path: Path, name: str, allocs: GuardedAllocations, launches: KernelLaunches,
                 log: OperatorLog, inputs: list[torch.Tensor]) -> TensorSpec:
    """One returned tensor: its storage's bytes, and the evidence the judge holds it to.

    ``guard_pad`` is set when the tensor covers exactly the span of a guarded allocation (the allocation
    itself or a reshaped view of it): the judge then reads the guard regions around it and the poison of
    elements never written. The rest: whether a Triton launch received its storage, whether that storage
    has a known origin, whether it is one of the inputs (and which), and whether it is a plain tensor."""
    g = allocs.find(got)
    whole = g is not None and got.data_ptr() == g.view.data_ptr() and \
        _span(got.shape, got.stride()) == _span(g.view.shape, g.view.stride())
    spec = tensor_spec(got, path, name)
    ptr = got.untyped_storage().data_ptr()
    spec["guard_pad"] = g.pad if whole else None
    spec["written_by_launch"] = ptr in launches.written
    spec["known_origin"] = ptr in log.known or g is not None
    spec["input_index"] = next((i for i, t in enumerate(inputs) if ptr == t.untyped_storage().data_ptr()), None)
    spec["is_input"] = spec["input_index"] is not None
    spec["exact_type"] = type(got) is torch.Tensor
    return spec
