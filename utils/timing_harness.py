"""The student's end of a timed loop (see :mod:`grader.judge_timing`); runs inside the sandboxed kernel.

Four requests, each answered with plain data that the judge verifies:

* ``prepare``: make ``calls`` input sets from per-call keys (:func:`make_tensor`, reproducible by the
  judge), plus one warm-up set, and call the function once on the warm-up set (compilation, autotuning);
* ``capture`` (GPU): call the function once per set while a CUDA graph records what it enqueues, with the
  evidence of :class:`triton_course.integrity.OperatorLog` and :class:`triton_course.integrity.KernelLaunches` taken
  meanwhile. The timed loop then replays the graph: only the GPU work that the calls enqueued, with none of
  Python's per-call time (the student's nor the evidence's), and exactly the work that was watched, since
  no Python runs during a replay. A function that cannot be captured (one that synchronises, say) is
  timed as it is called instead, watched in the timed loop itself;
* ``run``: replay the graph (or call the function once per set, back to back), between two CUDA events,
  keeping every output; report the events' time. The judge times the same request with its own clock;
* ``verify``: for a challenge key sent only now, return block fingerprints of every output (one dot
  product per block of :data:`BLOCK` elements with random weights; every tensor of a call that returns
  several) and the whole output of one call picked by the judge; then free everything.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from .checks import explain_exception
from .exchange import (DTYPES, FINGERPRINTS, MISSING, OK, RAISED, TimeRequest, TimeResponse, notebook_namespace,
                       tensor_spec, write_response)
from .integrity import KernelLaunches, OperatorLog

#: Elements per fingerprint block.
BLOCK = 4096
_STATE: dict[str, Any] = {}


def make_tensor(spec: dict[str, Any], key: int, device: str) -> torch.Tensor:
    """A contiguous tensor of ``spec``'s shape and dtype, standard-normal values drawn from ``key``."""
    g = torch.Generator(device=device)
    g.manual_seed(int(key))
    t = torch.randn(spec["shape"], generator=g, device=device, dtype=torch.float32)
    scale = float(spec.get("scale", 1.0))
    if scale != 1.0:
        t = t * scale
    if spec.get("positive"):
        t = t.abs() + 0.5
    return t.to(DTYPES[spec["dtype"]])


def build_args(arg_specs: list[dict[str, Any]], key: int, device: str) -> list[Any]:
    out = []
    for j, a in enumerate(arg_specs):
        out.append(make_tensor(a, (key * 31 + j) % 2**63, device) if a["kind"] == "tensor" else a["value"])
    return out


def fingerprints(outputs: list[torch.Tensor], challenge: int, device: str) -> torch.Tensor:
    """float64 [len(outputs), blocks]: each output, flattened and zero-padded, dotted blockwise with weights.

    Outputs of different sizes (a function's ``y`` and its per-row ``rstd``) are zero-padded to the
    blocks of the largest."""
    g = torch.Generator(device=device)
    g.manual_seed(int(challenge))
    w = torch.randn(BLOCK, generator=g, device=device, dtype=torch.float64)
    rows = []
    for out in outputs:
        flat = out.detach().reshape(-1).to(torch.float64)
        pad = (-flat.numel()) % BLOCK
        if pad:
            flat = torch.cat([flat, flat.new_zeros(pad)])
        rows.append(flat.view(-1, BLOCK) @ w)
    cols = max((r.numel() for r in rows), default=0)
    rows = [torch.cat([r, r.new_zeros(cols - r.numel())]) if r.numel() < cols else r for r in rows]
    return torch.stack(rows) if rows else torch.empty(0, 0, dtype=torch.float64, device=device)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def serve_timing(path: Path, req: TimeRequest) -> None:
    """Answer one step of a timed round (:class:`triton_course.exchange.TimeRequest`) in ``path``."""
    try:
        _serve_timing(path, req)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # answer with the reason rather than with silence
        _STATE.clear()
        error = explain_exception(exc, req.get("label", "the timed function"))
        write_response(path, {"status": RAISED, "error": error})


def flat_outputs(outs: list[Any]) -> list[Any]:
    """Every returned tensor of every call, call after call (a call that returns a tuple adds each of its
    tensors in order)."""
    return [t for o in outs for t in (o if isinstance(o, (tuple, list)) else (o,))]


def _evidence(outs: list[Any], launches: KernelLaunches, log: OperatorLog) -> dict[str, Any]:
    """What the judge holds the timed calls to (:func:`grader.judge_calls.work_problems` and its own checks).

    ``outputs_per_call``: how many tensors each call returned (one number if all agree, else -1);
    ``distinct_outputs``: for the output position that repeats most, how many calls returned a tensor of
    their own there (a cache that hands back last call's ``rstd``, say, repeats one)."""
    flat = flat_outputs(outs)
    counts = {len(o) if isinstance(o, (tuple, list)) else 1 for o in outs}
    per_call = counts.pop() if len(counts) == 1 else -1
    distinct = 0
    if per_call > 0:
        distinct = min(len({o.untyped_storage().data_ptr() for o in flat[k::per_call] if isinstance(o, torch.Tensor)})
                       for k in range(per_call))
    return dict(launches=launches.count, ops=log.ops, unknown_copies=log.unknown_copies,
                distinct_outputs=distinct, outputs_per_call=per_call,
                tensors=bool(flat) and all(type(o) is torch.Tensor for o in flat),
                written_by_launch=all(o.untyped_storage().data_ptr() in launches.written
                                      for o in flat if isinstance(o, torch.Tensor)))


def _after_failed_capture() -> None:
    """Leave the process as a failed capture found it: a capture cut short leaves PyTorch's default CUDA
    generator marked as captured (its next ``torch.randn`` would fail); one empty capture that ends
    properly clears the mark."""
    try:
        torch.cuda.synchronize()
    except Exception:
        pass
    try:
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            pass
        torch.cuda.synchronize()
    except Exception:
        pass


def _capture(device: str) -> dict[str, Any]:
    """Record one call per input set into a CUDA graph, watched; replay it once (its outputs are then the
    calls' results). ``{"graph": False, "why": ...}`` when the function cannot be captured."""
    _STATE.pop("graph", None)
    if not device.startswith("cuda") or "fn" not in _STATE:
        return {"graph": False, "why": "not on a GPU"}
    fn, sets = _STATE["fn"], _STATE["sets"]
    flat_inputs = [a for s in sets for a in s if isinstance(a, torch.Tensor)]
    launches = KernelLaunches()
    log = OperatorLog(flat_inputs, launches)
    outs: list[Any] = []
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    try:
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            with launches, log:
                for s in sets:
                    outs.append(fn(*s))
        graph.replay()
        torch.cuda.synchronize()
    except Exception as exc:  # not capturable: the run step calls the function itself
        del graph, outs
        _after_failed_capture()
        return {"graph": False, "why": f"{type(exc).__name__}: {exc}"[:300]}
    _STATE["graph"] = graph
    _STATE["outs"] = outs
    _STATE["evidence"] = _evidence(outs, launches, log)
    return {"graph": True}


def _serve_timing(path: Path, req: TimeRequest) -> None:
    step, device = req["step"], req.get("device", "cpu")
    resp: TimeResponse = {"status": OK}
    if step == "noop":
        _sync(device)
    elif step == "spin" and device.startswith("cuda"):  # an idle GPU drops its clocks: busy ~100 ms first
        a = torch.randn(2048, 2048, device=device)
        end_at = time.perf_counter() + 0.1
        while time.perf_counter() < end_at:
            a @ a
            torch.cuda.synchronize()
        del a
    elif step == "prepare":
        _STATE.clear()
        fn = notebook_namespace().get(req["fn"])
        if fn is None or not callable(fn):
            resp = {"status": MISSING, "error": f"the notebook defines no function `{req['fn']}`"}
        else:
            _STATE["fn"] = fn
            _STATE["sets"] = [build_args(req["args"], k, device) for k in req["keys"]]
            warm = build_args(req["args"], req["warm_key"], device)
            try:
                fn(*warm)
                _sync(device)
            except Exception as exc:
                resp = {"status": RAISED, "error": explain_exception(exc, req.get("label", req["fn"]))}
            del warm
    elif step == "capture":
        resp.update(_capture(device))
    elif step == "run" and _STATE.get("graph") is not None:
        graph = _STATE["graph"]
        _sync(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        resp.update(elapsed_ms=start.elapsed_time(end), graph=True, **_STATE["evidence"])
    elif step == "run":
        fn, sets = _STATE["fn"], _STATE["sets"]
        flat_inputs = [a for s in sets for a in s if isinstance(a, torch.Tensor)]
        launches = KernelLaunches()
        log = OperatorLog(flat_inputs, launches)
        outs = []
        _sync(device)
        with launches, log:
            if device.startswith("cuda"):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for s in sets:
                    outs.append(fn(*s))
                end.record()
                end.synchronize()
                elapsed = start.elapsed_time(end)
            else:
                t0 = time.perf_counter()
                for s in sets:
                    outs.append(fn(*s))
                elapsed = (time.perf_counter() - t0) * 1e3
        _STATE["outs"] = outs
        resp.update(elapsed_ms=elapsed, graph=False, **_evidence(outs, launches, log))
    elif step == "verify":
        outs = _STATE.get("outs", [])
        flat = flat_outputs(outs)
        fp = fingerprints(flat, req["challenge"], device)
        (path / FINGERPRINTS).write_bytes(fp.cpu().contiguous().numpy().tobytes())
        resp["fingerprints"] = {"rows": fp.shape[0], "cols": fp.shape[1]}
        pick = int(req["pick"])
        if pick < len(outs) and isinstance(outs[pick], (tuple, list)):
            resp["picked"] = [tensor_spec(t.contiguous(), path, f"picked{k}") for k, t in enumerate(outs[pick])]
        else:
            resp["picked"] = tensor_spec(outs[pick].contiguous(), path, "picked") if pick < len(outs) else None
        _STATE.clear()
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    write_response(path, resp)
