"""The messages between the grader's judge and the student's sandbox, defined once for both ends.

Every request is a folder of its own in an *exchange* folder that both processes see. The judge writes
:data:`REQUEST` there (with a data file per tensor it sends) and has the folder served; the other end answers
with :data:`RESPONSE` (and the data files it names). Three conversations use it:

* **a call** of a graded function (:class:`CallRequest` -> :class:`CallResponse`): the judge's
  ``grader.judge_calls.JudgeCalls.call`` asks, :func:`triton_course.harness.serve` answers in the student's
  kernel and also leaves the call's launch record, :data:`RECORD`;
* **a timed loop** (:class:`TimeRequest` -> :class:`TimeResponse`), one request per step of
  :data:`TIMING_STEPS`: ``grader.judge_timing`` asks, :func:`triton_course.timing_harness.serve_timing` answers
  (``verify`` leaves the fingerprints of every timed output in :data:`FINGERPRINTS`);
* **a re-run** of a call's launch record (:class:`RelaunchRequest` -> :class:`RelaunchResponse`):
  ``grader.judge_calls.relaunch`` asks, :func:`triton_course.relaunch.serve_request` answers in a process that
  runs none of the notebook's Python.

A tensor travels as the bytes of its whole storage in a file of the folder and a :class:`TensorSpec` that says
how to rebuild the view (:func:`tensor_spec`, :func:`load_tensor`); a plain value as a :class:`ValueSpec`.
Everything the student's side writes is untrusted: the judge reads an answer with a size limit where it
gives one (:func:`read_response`, :func:`read_record`) and checks every field it uses.

This module is the student package's (``triton_course``), since the sandbox's end must never import the grader.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict, get_args

import torch

#: The judge's request, in every request's folder.
REQUEST = "request.json"
#: The answer to it.
RESPONSE = "response.json"
#: A call's launch record (:class:`triton_course.relaunch.LaunchRecord`), beside its answer.
RECORD = "record.json"
#: float64 fingerprints of every timed output, [rows, cols] (``TimeResponse["fingerprints"]``), after ``verify``.
FINGERPRINTS = "fingerprints.bin"

#: ``CallRequest["mode"]`` and ``TimeRequest["mode"]``.
CALL_MODE = "call"
TIME_MODE = "time"
#: ``TimeRequest["step"]``: the steps of a timed round, in the order the judge sends them (see
#: :mod:`triton_course.timing_harness`).
TimingStep = Literal["prepare", "capture", "spin", "noop", "run", "verify"]
TIMING_STEPS: tuple[str, ...] = get_args(TimingStep)
#: ``status`` of an answer: done; the notebook has no such function; the student's code raised; a re-run
#: refused the record.
OK, MISSING, RAISED, REFUSED = "ok", "missing", "raised", "refused"

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float64": torch.float64, "int64": torch.int64, "int32": torch.int32, "int16": torch.int16,
          "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool}
NAMES = {v: k for k, v in DTYPES.items()}
#: Python values that cross the boundary as JSON.
PLAIN = (bool, int, float, str, type(None))
#: At most this many tensors in a returned tuple (a function with several outputs returns a few).
MAX_OUTPUTS = 8


# ---------------------------------------------------------------------------------------------------
# The fields of each message
# ---------------------------------------------------------------------------------------------------

class TensorSpec(TypedDict, total=False):
    """A tensor: its storage's bytes in ``file``, and the view on them. A call's returned tensor also carries
    the evidence the judge holds it to (``guard_pad`` and the rest, :func:`triton_course.harness._output_spec`);
    a timed request's argument only ``kind``, ``shape``, ``dtype`` (and ``scale``, ``positive``): the other end
    draws its values from keys (:func:`triton_course.timing_harness.make_tensor`)."""

    kind: Literal["tensor"]
    file: str
    dtype: str
    shape: list[int]
    stride: list[int]
    offset: int
    numel: int
    device: str
    scale: float
    positive: bool
    guard_pad: int | None
    written_by_launch: bool
    known_origin: bool
    input_index: int | None
    is_input: bool
    exact_type: bool
    shares_memory_with: list[int]


class ValueSpec(TypedDict):
    """A plain value (:data:`PLAIN`, or a list of them)."""

    kind: Literal["value"]
    value: Any


class FixtureSpec(TypedDict):
    """An object rebuilt on the student's side (:meth:`triton_course.fixtures.Fixture.spec`)."""

    kind: Literal["fixture"]
    name: str
    args: dict[str, Any]


class OutputSpec(TypedDict, total=False):
    """What a call returned: a ``tensor`` (a :class:`TensorSpec`), a ``tuple`` of them (``items``), a plain
    ``value``, or a type the judge cannot read (``unsupported``, named in ``type``)."""

    kind: Literal["tensor", "tuple", "value", "unsupported"]
    items: list[TensorSpec]
    value: Any
    type: str


class CallRequest(TypedDict):
    """Call the notebook's function ``fn`` once (``label`` names the call in messages)."""

    mode: Literal["call"]
    fn: str
    label: str
    device: str
    args: list[TensorSpec | ValueSpec | FixtureSpec]
    kwargs: dict[str, TensorSpec | ValueSpec | FixtureSpec]
    #: whether the response must carry the tensor arguments after the call (``inputs``); False where the judge re-runs
    #: a call that returns tensors, and reads them from the re-run (an answer that returns no tensor carries them)
    inputs_after: NotRequired[bool]


class CallResponse(TypedDict, total=False):
    """The call's outcome, its output, its tensor arguments after the call, and evidence of how the output was
    made: Triton launches, the PyTorch operators run outside them (``ops``), copies from unknown sources, and the
    state of each fixture."""

    status: Literal["ok", "missing", "raised"]
    error: str
    exception: str
    launches: int
    ops: dict[str, int]
    unknown_copies: int
    fixtures: list[dict[str, Any]]
    output: OutputSpec
    inputs: list[TensorSpec]


class TimeRequest(TypedDict, total=False):
    """One step of a timed round (:data:`TIMING_STEPS`). ``prepare`` names the function, its arguments' specs
    and the per-call keys; ``verify`` sends the challenge and which call's whole output to return."""

    mode: Literal["time"]
    device: str
    step: TimingStep
    label: str
    fn: str
    args: list[TensorSpec | ValueSpec]
    keys: list[int]
    warm_key: int
    challenge: int
    pick: int


class TimeResponse(TypedDict, total=False):
    """A step's answer. ``capture``: whether a CUDA graph holds the calls (``why`` not). ``run``: the timed loop's
    time and the evidence of its calls. ``verify``: the shape of :data:`FINGERPRINTS` and the picked output."""

    status: Literal["ok", "missing", "raised"]
    error: str
    graph: bool
    why: str
    elapsed_ms: float
    launches: int
    ops: dict[str, int]
    unknown_copies: int
    distinct_outputs: int
    outputs_per_call: int
    tensors: bool
    written_by_launch: bool
    fingerprints: dict[str, int]
    picked: TensorSpec | list[TensorSpec] | None


class RelaunchRequest(TypedDict):
    """Re-run ``record`` (a call's launch record, as the student's process left it) on the judge's own copy of
    the call's inputs."""

    record: dict[str, Any]
    inputs: list[TensorSpec]
    device: str


class RelaunchResponse(TypedDict, total=False):
    """The re-run's outputs and inputs as its launches left them; ``refused`` when the record asks for what a
    re-run may not do, ``raised`` when the launches failed."""

    status: Literal["ok", "refused", "raised"]
    error: str
    outputs: list[TensorSpec]
    inputs: list[TensorSpec]


# ---------------------------------------------------------------------------------------------------
# Reading and writing them
# ---------------------------------------------------------------------------------------------------

class NoAnswer(OSError):
    """A folder holds no such file, or one larger than its reader accepts."""


def _write(folder: Path, name: str, message: Any) -> None:
    (folder / name).write_text(json.dumps(message))


def open_regular(folder: Path, name: str) -> int:
    """A file descriptor of ``folder/name``, neither of them followed if it is a link, the file a regular one.

    The folder is the other side's to write in: a file of it may be a link to a file of the reader's machine (a
    solution notebook, a key), or a FIFO that blocks whoever opens it. ``OSError`` or ``ValueError`` otherwise."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    dir_fd = os.open(folder, flags | os.O_DIRECTORY)
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValueError(f"{name} is not a regular file")
    return fd


def _read(folder: Path, name: str, max_bytes: int | None) -> Any:
    try:
        with os.fdopen(open_regular(folder, name), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if max_bytes is not None and size > max_bytes:
                raise ValueError(f"{name} is {size} bytes")
            raw = f.read(size + 1 if max_bytes is None else max_bytes + 1)
    except (OSError, ValueError):
        raise NoAnswer(f"no readable {name}") from None
    if max_bytes is not None and len(raw) > max_bytes:
        raise NoAnswer(f"no readable {name}")
    return json.loads(raw.decode())


def write_request(folder: Path, request: CallRequest | TimeRequest | RelaunchRequest) -> None:
    _write(folder, REQUEST, request)


def read_request(folder: Path) -> Any:
    """The request in ``folder`` (the judge's: trusted by the side that serves it)."""
    return _read(folder, REQUEST, None)


def write_response(folder: Path, response: CallResponse | TimeResponse | RelaunchResponse) -> None:
    _write(folder, RESPONSE, response)


def read_response(folder: Path, max_bytes: int | None = None) -> dict[str, Any]:
    """The answer in ``folder``: :class:`NoAnswer` (an ``OSError``) when there is none, or one over
    ``max_bytes``; ``ValueError`` when it is not a JSON object."""
    response = _read(folder, RESPONSE, max_bytes)
    if not isinstance(response, dict):
        raise ValueError("not an object")
    return response


def write_record(folder: Path, record: dict[str, Any]) -> None:
    _write(folder, RECORD, record)


def read_record(folder: Path, max_bytes: int | None = None) -> Any:
    """The launch record in ``folder``, as parsed (the judge checks its every field): :class:`NoAnswer` when
    there is none, or one over ``max_bytes``; ``ValueError`` when it does not parse."""
    return _read(folder, RECORD, max_bytes)


def notebook_namespace() -> dict[str, Any]:
    """Where a request's ``fn`` is looked up: the notebook's own namespace (its ``__main__``)."""
    return vars(sys.modules["__main__"])


# ---------------------------------------------------------------------------------------------------
# Tensors as bytes
# ---------------------------------------------------------------------------------------------------

def tensor_spec(t: torch.Tensor, folder: Path, name: str) -> dict[str, Any]:
    """Write ``t``'s whole storage to ``folder/name.bin``; return how to rebuild the view on it."""
    storage = t.untyped_storage()
    n = storage.nbytes() // t.element_size()
    base = torch.empty(0, dtype=t.dtype, device=t.device).set_(storage, 0, (n,), (1,))
    base.detach().cpu().contiguous().view(torch.uint8).numpy().tofile(folder / f"{name}.bin")   # no copy in between
    return {"kind": "tensor", "file": f"{name}.bin", "dtype": NAMES.get(t.dtype, str(t.dtype)),
            "shape": list(t.shape), "stride": list(t.stride()), "offset": t.storage_offset(), "numel": n,
            "device": str(t.device)}


def load_tensor(spec: dict[str, Any], folder: Path, device: torch.device | str | None = None) -> torch.Tensor:
    """The view ``spec`` describes, on ``device`` (default: the one it names)."""
    dtype = DTYPES[spec["dtype"]]
    expected = spec["numel"] * torch.empty(0, dtype=dtype).element_size()
    with os.fdopen(open_regular(folder, spec["file"]), "rb") as f:   # never a link to a file of the reader's
        size = os.fstat(f.fileno()).st_size
        if size != expected:   # checked before anything of that size is allocated
            raise ValueError(f"{spec['file']}: {size} bytes, expected {expected}")
        raw = torch.empty(expected, dtype=torch.uint8)   # a private copy, read once: the file is the other side's
        got = f.readinto(memoryview(raw.numpy())) if expected else 0
    if got != expected:   # the file shrank after its size was read
        raise ValueError(f"{spec['file']}: {got} bytes, expected {expected}")
    base = raw.view(dtype).to(device or spec["device"])
    return base.as_strided(spec["shape"], spec["stride"], spec["offset"])
