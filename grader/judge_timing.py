"""Speed points, decided by the judge on verified work (the judge's end of :mod:`triton_course.timing_harness`).

One timed round of a student's function:

0. **GPU time, not Python's.** On a GPU the calls are captured into a CUDA graph (watched as any call is)
   and the timed loop replays it, so neither the student's Python nor the grader's evidence-taking adds
   to the measured time; a function that cannot be captured is timed as called.
1. **Fresh inputs for every call.** ``calls`` input sets (plus a warm-up set) are drawn in the student's
   kernel from per-call keys derived from the secret seed; a key says nothing about the next one. No
   two timed calls see the same inputs, so a cache keyed on inputs, addresses or call counts cannot hit.
2. **Two clocks.** The kernel reports the loop's time from CUDA events; the judge times the same request
   with its own clock, less the round trip of an empty request measured just before. They must agree
   within :data:`CLOCK_TOLERANCE` of the judge's time plus :data:`CLOCK_SLACK_MS`: the round trip of a
   request (a Jupyter message each way, a file, a synchronisation) varies by well under a millisecond
   between two requests, and a timed loop lasts tens of milliseconds or more. A disagreement is
   reported and earns nothing.
3. **Every timed output checked.** After the loop the judge sends a challenge key, never seen before,
   and the kernel answers with block fingerprints of *every* output (:func:`triton_course.timing_harness.fingerprints`)
   and one whole output, picked by the judge. The judge re-draws the inputs from the same keys, computes
   the reference in float64 and compares: the whole output element by element, every fingerprint within
   the bound that the element tolerances imply. A skipped, cached, stale or wrong call fails here.
4. **The work is the kernel's.** The operators and launches of the timed loop are held to
   :func:`grader.judge.work_problems`, as every correctness call is.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from grader.judge import JudgeSession, StudentFunction, work_problems
from triton_course.checks import CheckFailed, compare, describe
from triton_course.harness import NAMES, load_tensor
from triton_course.timing_harness import BLOCK, build_args, fingerprints

CLOCK_TOLERANCE = 0.05
CLOCK_SLACK_MS = 2.0
#: Verified rounds that may count toward a speed verdict, and rounds tried in all: a round whose two clocks
#: disagree is set aside (a stall of the machine between the judge's request and the kernel's answer adds
#: milliseconds to the judge's clock once in a while), and only a kernel whose every round disagrees is refused.
COUNTED_ROUNDS = 3
MAX_ROUNDS = 6
#: Set in the course's own tests to run the timing protocol under the interpreter (its numbers mean nothing).
TIME_ON_CPU_ENV = "COURSE_JUDGE_TIME_ON_CPU"


def _request(session: JudgeSession, payload: dict[str, Any], timeout_s: float) -> tuple[dict[str, Any], float, Any]:
    session.calls += 1
    folder = session.transport.exchange / f"time-{session.calls}"
    folder.mkdir(parents=True)
    session.transport.prepare(folder)
    (folder / "request.json").write_text(json.dumps({"mode": "time", "device": session.transport.device, **payload}))
    session.in_flight = payload.get("label", payload.get("fn", "a timed call"))
    with session.gpu_lock.shared():   # a no-op inside the exclusive hold of the timed steps
        t0 = time.perf_counter()
        session.transport.run(folder, timeout_s)
        wall = (time.perf_counter() - t0) * 1e3
    session.in_flight = None
    try:
        resp = json.loads((folder / "response.json").read_text())
        if not isinstance(resp, dict):
            raise ValueError
    except (OSError, ValueError):
        shutil.rmtree(folder, ignore_errors=True)
        raise CheckFailed(f"{payload.get('label')}: the notebook gave no readable answer to the grader's timing "
                          "request") from None
    return resp, wall, folder


def _specs(templates: Sequence[Any]) -> list[dict[str, Any]]:
    specs = []
    for t in templates:
        if isinstance(t, torch.Tensor):
            specs.append({"kind": "tensor", "shape": list(t.shape), "dtype": NAMES[t.dtype]})
        else:
            specs.append({"kind": "value", "value": t})
    return specs


class ClockDisagreement(CheckFailed):
    """The kernel's reported time and the judge's own clock disagree for one timed round."""


def calls_for(bytes_per_call: int, device: str) -> int:
    """How many distinct input sets fit: at most half the free GPU memory (or 40 GB), between 4 and 256.

    More calls make the timed loop longer, and the judge's clock check tighter against its fixed slack:
    a small kernel (tens of microseconds) needs hundreds of calls for a loop of a few milliseconds."""
    if not device.startswith("cuda"):   # the interpreter (the course's own tests): a few calls do
        return int(max(4, min(24, (256 << 20) // max(1, bytes_per_call))))
    free, _ = torch.cuda.mem_get_info()
    return int(max(4, min(256, min(free // 2, 40 << 30) // max(1, bytes_per_call))))


def timed_round(fn: StudentFunction, templates: Sequence[Any], reference: Callable[..., torch.Tensor],
                tolerances: Callable[[torch.dtype], tuple[float, float]], *, what: str, round_no: int = 0,
                timeout_s: float = 300.0) -> tuple[float, int]:
    """One verified timed loop; returns (milliseconds per call, calls). Raises CheckFailed on any doubt."""
    session = fn.session
    device = session.transport.device
    specs = _specs(templates)
    out_bytes = max((t.numel() * t.element_size() for t in templates if isinstance(t, torch.Tensor)), default=0)
    in_bytes = sum(t.numel() * t.element_size() for t in templates if isinstance(t, torch.Tensor))
    calls = calls_for(in_bytes + out_bytes, device)
    keys = [session.seed.key("time", what, round_no, i) for i in range(calls)]
    folders = []
    try:
        resp, _, f = _request(session, {"step": "prepare", "fn": fn.__name__, "label": what, "args": specs,
                                        "keys": keys, "warm_key": session.seed.key("warm", what, round_no)},
                              timeout_s)
        folders.append(f)
        if resp.get("status") != "ok":
            raise CheckFailed(f"{what}: {str(resp.get('error', 'the function failed before timing'))[:2000]}")
        resp, _, f = _request(session, {"step": "capture", "label": what}, timeout_s)
        folders.append(f)
        if resp.get("status") != "ok":
            raise CheckFailed(f"{what}: {str(resp.get('error', 'the function failed while captured'))[:2000]}")
        entry = {"what": what, "round": round_no, "calls": calls, "graph": bool(resp.get("graph")),
                 "why_not_graph": str(resp.get("why", ""))[:300]}
        session.timing_rounds.append(entry)
        with session.gpu_lock.exclusive():  # no other submission's work on this GPU while timed
            _, _, f = _request(session, {"step": "spin", "label": what}, timeout_s)
            folders.append(f)
            overheads = []
            for _ in range(5):
                _, wall, f = _request(session, {"step": "noop", "label": what}, timeout_s)
                folders.append(f)
                overheads.append(wall)
            overhead = sorted(overheads)[2]
            resp, wall, f = _request(session, {"step": "run", "label": what}, timeout_s)
            folders.append(f)
            if resp.get("status") != "ok":
                raise CheckFailed(f"{what}: {str(resp.get('error', 'the timed loop failed'))[:2000]}")
        reported = float(resp.get("elapsed_ms", -1.0))
        judged = max(0.0, wall - overhead)
        entry.update(reported_ms=round(reported, 4), judged_ms=round(judged, 4))
        evidence = {"launches": resp.get("launches", 0), "ops": resp.get("ops", {}),
                    "unknown_copies": resp.get("unknown_copies", 0)}
        problems = work_problems(evidence, True)
        if int(resp.get("launches", 0)) < calls:
            problems.append(f"launched a Triton kernel only {resp.get('launches', 0)} times in {calls} timed calls: "
                            "every call must compute its result with your kernel (no cached or skipped calls).")
        if not resp.get("written_by_launch", False) or not resp.get("tensors", False):
            problems.append("returned, while timed, tensors that no Triton launch received.")
        if int(resp.get("distinct_outputs", 0)) < calls:
            problems.append("returned the same output tensor for different timed calls.")
        if problems:
            raise CheckFailed(f"{what}: " + " ".join(problems))
        if not (reported > 0 and abs(reported - judged) <= CLOCK_TOLERANCE * judged + CLOCK_SLACK_MS):
            raise ClockDisagreement(f"{what}: the notebook reported {reported:.3f} ms for the timed loop, but the grader's "
                              f"own clock measured {judged:.3f} ms. Timings that disagree earn no points.")
        challenge = session.seed.key("challenge", what, round_no)
        pick = session.seed.key("pick", what, round_no) % calls
        resp, _, f = _request(session, {"step": "verify", "label": what, "challenge": challenge, "pick": pick},
                              timeout_s)
        folders.append(f)
        if resp.get("status") != "ok":
            raise CheckFailed(f"{what}: {str(resp.get('error', 'the timed outputs could not be read'))[:2000]}")
        with session.gpu_lock.shared():
            _verify(session, fn.__name__, specs, keys, reference, tolerances, resp, f, challenge, pick, what)
        return reported / calls, calls
    finally:
        for f in folders:
            shutil.rmtree(f, ignore_errors=True)


def _verify(session: JudgeSession, name: str, specs: list[dict[str, Any]], keys: list[int],
            reference: Callable[..., torch.Tensor], tolerances: Callable[[torch.dtype], tuple[float, float]],
            resp: dict[str, Any], folder, challenge: int, pick: int, what: str) -> None:
    device = session.transport.device
    judge_device = device if (not device.startswith("cuda") or torch.cuda.is_available()) else "cpu"
    shape = resp.get("fingerprints") or {}
    rows, cols = int(shape.get("rows", -1)), int(shape.get("cols", -1))
    raw = (folder / "fingerprints.bin").read_bytes() if (folder / "fingerprints.bin").is_file() else b""
    if rows != len(keys) or cols < 0 or len(raw) != rows * cols * 8:
        raise CheckFailed(f"{what}: the notebook did not return a fingerprint of every timed output")
    got_fp = torch.frombuffer(bytearray(raw), dtype=torch.float64).view(rows, cols) if raw else torch.empty(rows, 0)
    dtype = next(torch.empty(0, dtype=getattr(torch, s["dtype"])).dtype for s in specs if s["kind"] == "tensor")
    atol, rtol = tolerances(dtype)
    wrong_calls = []
    for i, key in enumerate(keys):
        args = build_args(specs, key, judge_device)
        wide = [a.to(torch.float64) if isinstance(a, torch.Tensor) else a for a in args]
        expected = reference(*wide)
        ref_fp = fingerprints([expected], challenge, judge_device)[0].cpu()
        g = torch.Generator(device=judge_device)
        g.manual_seed(int(challenge))
        w = torch.randn(BLOCK, generator=g, device=judge_device, dtype=torch.float64).abs()
        flat = expected.reshape(-1).abs()
        pad = (-flat.numel()) % BLOCK
        if pad:
            flat = torch.cat([flat, flat.new_zeros(pad)])
        bound = (atol * w.sum() + rtol * (flat.view(-1, BLOCK) @ w)).cpu() * (1 + 1e-9) + 1e-12
        if ref_fp.numel() != cols:
            raise CheckFailed(f"{what}: timed call {i + 1} returned {cols * BLOCK} elements' worth of output, "
                              f"expected {expected.numel()}")
        diff = (got_fp[i] - ref_fp).abs()
        bad = ~(diff <= bound) & ~(torch.isnan(got_fp[i]) & torch.isnan(ref_fp))
        if bool(bad.any()):
            first = int(torch.nonzero(bad)[0])
            wrong_calls.append(f"call {i + 1} (elements {first * BLOCK}..{(first + 1) * BLOCK - 1} and "
                               f"{int(bad.sum()) - 1} more block(s))")
        if i == pick:
            spec = resp.get("picked")
            if not spec:
                raise CheckFailed(f"{what}: the notebook did not return the timed output the grader asked for")
            got = load_tensor(spec, folder, device="cpu")
            if tuple(got.shape) != tuple(expected.shape):
                raise CheckFailed(f"{what}: timed call {i + 1} returned shape {tuple(got.shape)}, expected "
                                  f"{tuple(expected.shape)}")
            # the same rule as triton_course.checks.compare, on the judge's device; the detailed (CPU) report only on failure
            g = got.to(judge_device, torch.float64).reshape(-1)
            e = expected.reshape(-1)
            close = ((g - e).abs() <= atol + rtol * e.abs()) | (g == e) | (torch.isnan(g) & torch.isnan(e))
            c = None if bool(close.all()) else compare(got, expected.cpu(), atol=atol, rtol=rtol)
            if c is not None and not c.ok:
                raise CheckFailed(f"{what}: the output of timed call {i + 1} (size of the benchmark) is wrong:\n"
                                  + describe(c))
        del args, wide, expected
    if wrong_calls:
        raise CheckFailed(f"{what}: {len(wrong_calls)} of {len(keys)} timed calls returned a wrong result: "
                          + "; ".join(wrong_calls[:4]) + ". Speed counts only for correct results, every call.")


def best_verified_ms(fn: StudentFunction, templates: Sequence[Any], reference: Callable[..., torch.Tensor],
                     tolerances: Callable[[torch.dtype], tuple[float, float]], *, what: str,
                     good_enough: Callable[[float], bool]) -> float:
    """Milliseconds per call of the best verified round: up to :data:`COUNTED_ROUNDS` rounds whose clocks
    agree, stopping at the first that is ``good_enough``. Rounds whose clocks disagree are set aside, up to
    :data:`MAX_ROUNDS` rounds in all; if none agreed, the last disagreement is the verdict. Any other
    failure (a wrong timed output, PyTorch in the loop, a skipped call) ends the check at once."""
    best: float | None = None
    counted = 0
    disagreements: list[str] = []
    for round_no in range(MAX_ROUNDS):
        try:
            ms, _ = timed_round(fn, templates, reference, tolerances, what=what, round_no=round_no)
        except ClockDisagreement as exc:
            disagreements.append(str(exc))
            continue
        best = ms if best is None else min(best, ms)
        counted += 1
        if good_enough(best) or counted >= COUNTED_ROUNDS:
            break
    if best is None:
        raise CheckFailed(f"{disagreements[-1]} (the same in all {len(disagreements)} rounds)")
    return best


def remote_bandwidth(fn: StudentFunction, make_inputs: Callable[[], Sequence[Any]], nbytes: int, *,
                     fraction: float, points: float, what: str, ceiling: float,
                     reference: Callable[..., torch.Tensor],
                     tolerances: Callable[[torch.dtype], tuple[float, float]]) -> tuple[float, str]:
    """(points, verdict line) for the student's function through verified timed rounds (:func:`best_verified_ms`)."""
    templates = list(make_inputs())

    def gbps(ms: float) -> float:
        return nbytes / (ms * 1e-3) / 1e9

    best = gbps(best_verified_ms(fn, templates, reference, tolerances, what=what,
                                 good_enough=lambda ms: gbps(ms) >= fraction * ceiling))
    from triton_course.grading import bandwidth_verdict

    return float(points), bandwidth_verdict(best, fraction, ceiling, what)


def timing_on_cpu() -> bool:
    return os.environ.get(TIME_ON_CPU_ENV) == "1"
