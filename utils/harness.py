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

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .checks import _span, shares_memory
from .integrity import KernelLaunches, inside_launch

if TYPE_CHECKING:
    from .checks import GuardedAllocations

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float64": torch.float64, "int64": torch.int64, "int32": torch.int32, "int16": torch.int16,
          "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool}
NAMES = {v: k for k, v in DTYPES.items()}
#: Python values that cross the boundary as JSON.
PLAIN = (bool, int, float, str, type(None))
#: At most this many tensors in a returned tuple (a function with several outputs returns a few).
MAX_OUTPUTS = 8


# ---------------------------------------------------------------------------------------------------
# Tensors as bytes
# ---------------------------------------------------------------------------------------------------

def tensor_spec(t: torch.Tensor, folder: Path, name: str) -> dict[str, Any]:
    """Write ``t``'s whole storage to ``folder/name.bin``; return how to rebuild the view on it."""
    storage = t.untyped_storage()
    n = storage.nbytes() // t.element_size()
    base = torch.empty(0, dtype=t.dtype, device=t.device).set_(storage, 0, (n,), (1,))
    raw = base.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()
    (folder / f"{name}.bin").write_bytes(raw)
    return {"kind": "tensor", "file": f"{name}.bin", "dtype": NAMES.get(t.dtype, str(t.dtype)),
            "shape": list(t.shape), "stride": list(t.stride()), "offset": t.storage_offset(), "numel": n,
            "device": str(t.device)}


def load_tensor(spec: dict[str, Any], folder: Path, device: torch.device | str | None = None) -> torch.Tensor:
    """The view ``spec`` describes, on ``device`` (default: the one it names)."""
    dtype = DTYPES[spec["dtype"]]
    raw = (folder / spec["file"]).read_bytes()
    itemsize = torch.empty(0, dtype=dtype).element_size()
    if len(raw) != spec["numel"] * itemsize:
        raise ValueError(f"{spec['file']}: {len(raw)} bytes, expected {spec['numel'] * itemsize}")
    base = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype) if raw else torch.empty(0, dtype=dtype)
    base = base.to(device or spec["device"])
    return base.as_strided(spec["shape"], spec["stride"], spec["offset"])


def _plain(value: Any, depth: int = 0) -> Any:
    if isinstance(value, PLAIN):
        return value
    if isinstance(value, (list, tuple)) and depth < 4 and len(value) <= 10_000:
        return [_plain(v, depth + 1) for v in value]
    raise TypeError(type(value).__name__)


# ---------------------------------------------------------------------------------------------------
# Evidence: which PyTorch operators a call ran outside its Triton launches, and where its output came from
# ---------------------------------------------------------------------------------------------------

class OperatorLog:
    """Context manager recording the ATen operators run outside Triton launches, and data provenance.

    ``ops`` counts operators by name. ``storages`` are the data pointers this call may legitimately
    produce an output from: its inputs, fresh allocations, views and copies of those, and buffers passed
    to a Triton launch. ``unknown_copies`` counts copies whose source is none of these (a tensor built from
    NumPy or Python, say).
    """

    FRESH = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
             "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full"}
    COPIES = {"copy_", "_to_copy", "clone", "contiguous", "to"}
    OUTSIDE = {"lift_fresh", "lift_fresh_copy"}

    def __init__(self, inputs: list[torch.Tensor], launches: KernelLaunches, record: Any = None):
        self.ops: dict[str, int] = {}
        self.record = record   # a triton_course.relaunch.LaunchRecord: every operator is also written into it
        self.known: set[int] = {t.untyped_storage().data_ptr() for t in inputs}
        self.launches = launches
        self.unknown_copies = 0
        self._mode = None

    def is_known(self, t: torch.Tensor) -> bool:
        ptr = t.untyped_storage().data_ptr()
        return ptr in self.known or ptr in self.launches.written

    def __enter__(self) -> "OperatorLog":
        from torch.utils._python_dispatch import TorchDispatchMode

        log = self

        class _Mode(TorchDispatchMode):
            @classmethod
            def _should_skip_dynamo(cls) -> bool:
                """PyTorch would wrap ``__torch_dispatch__`` in ``torch._disable_dynamo``, whose first call imports
                ``torch._dynamo`` (2 s of CPU in every graded process). It is done below, and only where
                ``torch._dynamo`` is imported already: without it, torch.compile cannot be tracing the call."""
                return False

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if "torch._dynamo" in sys.modules:
                    return _record_outside_dynamo(self, func, types, args, kwargs)
                return _record(self, func, types, args, kwargs)

        def _record(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if inside_launch():
                return out
            name = func.overloadpacket.__name__
            log.ops[name] = log.ops.get(name, 0) + 1
            if log.record is not None:
                log.record.on_op(func, args, kwargs, out)
            if name in log.COPIES:
                src = args[1] if name == "copy_" else args[0]
                if isinstance(src, torch.Tensor) and src.device.type != "meta" and not log.is_known(src):
                    log.unknown_copies += 1
            # fresh allocations are known; views and copies are known when their source is (so data
            # lifted from NumPy or Python by lift_fresh never becomes known by being viewed or copied)
            source_known = bool(args) and isinstance(args[0], torch.Tensor) and log.is_known(args[0])
            if name in log.FRESH or (name not in log.OUTSIDE and source_known and
                                     (name in log.COPIES or _is_view(func))):
                for t in (out if isinstance(out, (tuple, list)) else (out,)):
                    if isinstance(t, torch.Tensor) and t.device.type != "meta":
                        log.known.add(t.untyped_storage().data_ptr())
            return out

        _record_outside_dynamo = torch._disable_dynamo(_record, recursive=True)
        self._mode = _Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._mode.__exit__(*exc)


def _is_view(func) -> bool:
    try:
        return bool(func._schema.returns) and any(r.alias_info is not None for r in func._schema.returns)
    except Exception:
        return False


# ---------------------------------------------------------------------------------------------------
# Serving one request
# ---------------------------------------------------------------------------------------------------

def _namespace() -> dict[str, Any]:
    return vars(sys.modules["__main__"])


def _sync(device: str) -> None:
    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.synchronize()


def _respond(folder: Path, response: dict[str, Any]) -> None:
    (folder / "response.json").write_text(json.dumps(response))


def serve(folder: str) -> None:
    """Answer the request in ``folder`` (``request.json``) with ``response.json`` and data files."""
    path = Path(folder)
    req = json.loads((path / "request.json").read_text())
    if req.get("mode") == "time":
        from .timing_harness import serve_timing

        return serve_timing(path, req)
    fn = _namespace().get(req["fn"])
    if fn is None or not callable(fn):
        return _respond(path, {"status": "missing", "error": f"the notebook defines no function `{req['fn']}`"})
    from . import fixtures

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
    from .checks import GuardedAllocations, explain_exception

    from .relaunch import LaunchRecord

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
        return _respond(path, {"status": "raised", "error": explain_exception(exc, req.get("label", req["fn"])),
                               "exception": type(exc).__name__, "launches": launches.count, "ops": log.ops,
                               "fixtures": [f.state() for f in made]})
    response: dict[str, Any] = {"status": "ok", "launches": launches.count, "ops": log.ops,
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
    response["inputs"] = [tensor_spec(t, path, f"input{i}") for i, t in enumerate(tensors)]
    returned = [g for g in (got if isinstance(got, (tuple, list)) else (got,)) if isinstance(g, torch.Tensor)]
    record.finish(returned)
    (path / "record.json").write_text(json.dumps(record.as_dict()))
    _respond(path, response)


def _output_spec(got: torch.Tensor, path: Path, name: str, allocs: "GuardedAllocations", launches: KernelLaunches,
                 log: OperatorLog, inputs: list[torch.Tensor]) -> dict[str, Any]:
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
