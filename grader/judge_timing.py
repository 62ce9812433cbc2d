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
   the bound that the element tolerances imply. A skipped, cached, stale or wrong call fails here. A fingerprint
   is a weighted sum, so an error of a few small elements in one call that is not the picked one can stay within
   the bound by chance (ten elements zeroed in one call of 5000 normal values: about 1 in 150); an error in
   every call, a large error, or a call that was never made escapes it only with a vanishing chance.
4. **The work is the kernel's.** The operators and launches of the timed loop are held to
   :func:`grader.judge_calls.work_problems`, as every correctness call is.
5. **The yardstick is the judge's alone.** What the judge times itself beside the student's kernel (the
   same-size copy of a bandwidth check here, the library's product of :func:`triton_course.matmul.tflops_points`,
   the baseline of :func:`triton_course.grading.throughput_points` through :func:`verified_against_baseline`)
   runs with the submission's own sandboxes frozen and the GPU drained (:meth:`grader.gpu_lock.GpuLock.quieted`):
   a thread of the student's kernel, or work it left queued, would otherwise share the GPU with the yardstick
   and lower the target. A large copy that still ran far below the GPU's calibrated copy bandwidth was disturbed
   all the same (:func:`copy_disturbed`), and its round does not count.

The judge's proxy of a student's function carries these methods to the speed checks of :mod:`triton_course.grading`
and :mod:`triton_course.matmul` as :class:`ProxyTiming` (``proxy.judge_timing``): the student's package never
imports the grader. The requests and answers are the messages of :mod:`triton_course.exchange`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from grader.gpu_lock import TIMED_ROUND_BYTES
from grader.judge_calls import JudgeCalls, RemoteFunction, work_problems
from grader.phases import phase
from triton_course.checks import CheckFailed, compare, describe
from triton_course.exchange import (FINGERPRINTS, NAMES, OK, TIME_MODE, TimeRequest, load_tensor, read_response,
                                    write_request)
from triton_course.grading import bandwidth_verdict, quiet_stderr, same_size_copy_verdict
from triton_course.timing_harness import BLOCK, build_args, fingerprints

CLOCK_TOLERANCE = 0.05
CLOCK_SLACK_MS = 2.0
#: Verified rounds that may count toward a speed verdict, and rounds tried in all: a round whose two clocks
#: disagree is set aside (a stall of the machine between the judge's request and the kernel's answer adds
#: milliseconds to the judge's clock once in a while), and only a kernel whose every round disagrees is refused.
COUNTED_ROUNDS = 3
MAX_ROUNDS = 6
#: A same-size copy of at least DISTURBED_COPY_MIN_BYTES that ran below DISTURBED_COPY_FRACTION of the GPU's
#: calibrated copy bandwidth was disturbed: something else used the GPU while the judge timed it (on the H200,
#: copies of 64 MiB or more reach 0.90-0.97 of it undisturbed, and ran at 0.43 and 0.50 when another
#: submission's re-run shared the GPU: tests/gpu/records/gpu_class_throughput_course_relaunch_unfrozen.json).
DISTURBED_COPY_FRACTION = 0.6
DISTURBED_COPY_MIN_BYTES = 32 << 20
#: Set in the course's own tests to run the timing protocol under the interpreter (its numbers mean nothing).
TIME_ON_CPU_ENV = "COURSE_JUDGE_TIME_ON_CPU"


def _request(session: JudgeCalls, payload: TimeRequest, timeout_s: float) -> tuple[dict[str, Any], float, Any]:
    session.calls += 1
    folder = session.transport.exchange / f"time-{session.calls}"
    folder.mkdir(parents=True)
    session.transport.prepare(folder)
    write_request(folder, {"mode": TIME_MODE, "device": session.transport.device, **payload})
    session.in_flight = payload.get("label", payload.get("fn", "a timed call"))
    with session.gpu_lock.shared():   # a no-op inside the exclusive hold of the timed steps
        t0 = time.perf_counter()
        session.transport.run(folder, timeout_s)
        wall = (time.perf_counter() - t0) * 1e3
    session.in_flight = None
    try:
        resp = read_response(folder)
    except (OSError, ValueError):
        shutil.rmtree(folder, ignore_errors=True)
        raise CheckFailed(f"{payload.get('label')}: the notebook gave no readable answer to the grader's timing "
                          "request") from None
    return resp, wall, folder


def _specs(templates: Sequence[Any]) -> list[dict[str, Any]]:
    """What each timed call's inputs are drawn from: a tensor's shape and dtype, standard-normal values, positive
    ones where the template's are all positive (a stored rstd, a scale). Chapter 10's timed rstd drawn from both
    signs made the float64 reference and an honest kernel disagree on every row with a negative rstd, and cost the
    model answer its bandwidth point on an H100 (tests/gpu/records/gpu_class_throughput_course_twice.json)."""
    specs = []
    for t in templates:
        if isinstance(t, torch.Tensor):
            spec = {"kind": "tensor", "shape": list(t.shape), "dtype": NAMES[t.dtype]}
            if t.is_floating_point() and t.numel() and bool((t > 0).all()):
                spec["positive"] = True
            specs.append(spec)
        else:
            specs.append({"kind": "value", "value": t})
    return specs


class ClockDisagreement(CheckFailed):
    """The kernel's reported time and the judge's own clock disagree for one timed round."""


def calls_for(bytes_per_call: int, device: str) -> int:
    """How many distinct input sets fit: at most half the free GPU memory (or :data:`grader.gpu_lock.TIMED_ROUND_BYTES`,
    the figure the GPU lock's memory share leaves room for), between 4 and 256.

    More calls make the timed loop longer, and the judge's clock check tighter against its fixed slack:
    a small kernel (tens of microseconds) needs hundreds of calls for a loop of a few milliseconds."""
    if not device.startswith("cuda"):   # the interpreter (the course's own tests): a few calls do
        return int(max(4, min(24, (256 << 20) // max(1, bytes_per_call))))
    free, _ = torch.cuda.mem_get_info()
    return int(max(4, min(256, min(free // 2, TIMED_ROUND_BYTES) // max(1, bytes_per_call))))


def _output_bytes(templates: Sequence[Any], reference: Callable[..., Any]) -> int:
    """Bytes one call returns, from the reference's output shapes (run on the meta device: no data), at the
    first input's element size; the largest input's size if the reference cannot run there."""
    tensors = [t for t in templates if isinstance(t, torch.Tensor)]
    size = tensors[0].element_size() if tensors else 4
    try:
        out = reference(*[t.to("meta", torch.float64) if isinstance(t, torch.Tensor) else t for t in templates])
        outs = out if isinstance(out, (tuple, list)) else (out,)
        return sum(o.numel() * size for o in outs if isinstance(o, torch.Tensor))
    except Exception:
        return max((t.numel() * t.element_size() for t in tensors), default=0)


@phase("timing")
def timed_round(fn: RemoteFunction, templates: Sequence[Any], reference: Callable[..., torch.Tensor],
                tolerances: Callable[[torch.dtype], tuple[float, float]], *, what: str, round_no: int = 0,
                timeout_s: float = 300.0, same_size_copy: int = 0) -> tuple[float, int]:
    """One verified timed loop; returns (milliseconds per call, calls). Raises CheckFailed on any doubt.

    ``same_size_copy`` (bytes, 0 for none): right after the timed loop, the judge also times, in its own
    process on the same GPU, ``calls`` copies that move that many bytes (half read, half written) in the
    first input's dtype; the round's entry in ``session.timing_rounds`` keeps ``copy_ms`` (per copy) and
    ``copy_bytes``."""
    session = fn.session
    device = session.transport.device
    specs = _specs(templates)
    out_bytes = _output_bytes(templates, reference)
    in_bytes = sum(t.numel() * t.element_size() for t in templates if isinstance(t, torch.Tensor))
    calls = calls_for(in_bytes + out_bytes, device)
    keys = [session.seed.key("time", what, round_no, i) for i in range(calls)]
    folders = []
    try:
        resp, _, f = _request(session, {"step": "prepare", "fn": fn.__name__, "label": what, "args": specs,
                                        "keys": keys, "warm_key": session.seed.key("warm", what, round_no)},
                              timeout_s)
        folders.append(f)
        if resp.get("status") != OK:
            raise CheckFailed(f"{what}: {str(resp.get('error', 'the function failed before timing'))[:2000]}")
        resp, _, f = _request(session, {"step": "capture", "label": what}, timeout_s)
        folders.append(f)
        if resp.get("status") != OK:
            raise CheckFailed(f"{what}: {str(resp.get('error', 'the function failed while captured'))[:2000]}")
        entry = {"what": what, "round": round_no, "calls": calls, "graph": bool(resp.get("graph")),
                 "why_not_graph": str(resp.get("why", ""))[:300]}
        session.timing_rounds.append(entry)
        resp, wall, overhead = _timed_loop(session, what, timeout_s, folders)
        reported = float(resp.get("elapsed_ms", -1.0))
        judged = max(0.0, wall - overhead)
        entry.update(reported_ms=round(reported, 4), judged_ms=round(judged, 4))
        problems = _loop_problems(resp, calls)
        if problems:
            raise CheckFailed(f"{what}: " + " ".join(problems))
        if not (reported > 0 and abs(reported - judged) <= CLOCK_TOLERANCE * judged + CLOCK_SLACK_MS):
            raise ClockDisagreement(f"{what}: the notebook reported {reported:.3f} ms for the timed loop, but the grader's "
                              f"own clock measured {judged:.3f} ms. Timings that disagree earn no points.")
        if same_size_copy:   # the ceiling of this round: a copy of as many bytes, timed by the judge
            x = next(t for t in templates if isinstance(t, torch.Tensor))
            numel = max(1, same_size_copy // 2 // x.element_size())
            entry["copy_ms"] = round(time_same_size_copy(session, x.dtype, numel, calls), 6)
            entry["copy_bytes"] = 2 * numel * x.element_size()
        challenge = session.seed.key("challenge", what, round_no)
        pick = session.seed.key("pick", what, round_no) % calls
        resp, _, f = _request(session, {"step": "verify", "label": what, "challenge": challenge, "pick": pick},
                              timeout_s)
        folders.append(f)
        if resp.get("status") != OK:
            raise CheckFailed(f"{what}: {str(resp.get('error', 'the timed outputs could not be read'))[:2000]}")
        with session.gpu_lock.shared():
            _verify(session, fn.__name__, specs, keys, reference, tolerances, resp, f, challenge, pick, what)
        return reported / calls, calls
    finally:
        for f in folders:
            shutil.rmtree(f, ignore_errors=True)


def _timed_loop(session: JudgeCalls, what: str, timeout_s: float,
                folders: list[Any]) -> tuple[dict[str, Any], float, float]:
    """(the ``run`` step's answer, the judge's milliseconds for it, the median of five empty requests' round
    trips just before), with the GPU held alone and busy first (``spin``); each request's folder added to
    ``folders``."""
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
        if resp.get("status") != OK:
            raise CheckFailed(f"{what}: {str(resp.get('error', 'the timed loop failed'))[:2000]}")
    return resp, wall, overhead


def _loop_problems(resp: dict[str, Any], calls: int) -> list[str]:
    """Why the timed loop's ``calls`` calls were not all the work of the student's kernel ([] if nothing is wrong)."""
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
    if int(resp.get("outputs_per_call", 1)) < 1:
        problems.append("returned, while timed, a different number of outputs from one call to the next.")
    return problems


def _tolerances_per_output(tolerances: Callable[[torch.dtype], Any], dtype: torch.dtype,
                           n: int) -> list[tuple[float, float]]:
    """``tolerances(dtype)`` is ``(atol, rtol)`` or one such pair per output."""
    tol = tolerances(dtype)
    if isinstance(tol[0], (tuple, list)):
        pairs = [(float(a), float(r)) for a, r in tol]
        if len(pairs) != n:
            raise CheckFailed(f"the hidden test gives {len(pairs)} tolerances for {n} outputs (a bug of the course)")
        return pairs
    return [(float(tol[0]), float(tol[1]))] * n


def _verify(session: JudgeCalls, name: str, specs: list[dict[str, Any]], keys: list[int],
            reference: Callable[..., torch.Tensor], tolerances: Callable[[torch.dtype], tuple[float, float]],
            resp: dict[str, Any], folder, challenge: int, pick: int, what: str) -> None:
    device = session.transport.device
    judge_device = device if (not device.startswith("cuda") or torch.cuda.is_available()) else "cpu"
    shape = resp.get("fingerprints") or {}
    rows, cols = int(shape.get("rows", -1)), int(shape.get("cols", -1))
    raw = (folder / FINGERPRINTS).read_bytes() if (folder / FINGERPRINTS).is_file() else b""
    dtype = next(torch.empty(0, dtype=getattr(torch, s["dtype"])).dtype for s in specs if s["kind"] == "tensor")
    n_out = None
    g = torch.Generator(device=judge_device)
    g.manual_seed(int(challenge))
    w = torch.randn(BLOCK, generator=g, device=judge_device, dtype=torch.float64).abs()
    wrong_calls = []
    got_fp = None
    for i, key in enumerate(keys):
        args = build_args(specs, key, judge_device)
        wide = [a.to(torch.float64) if isinstance(a, torch.Tensor) else a for a in args]
        result = reference(*wide)
        expected = list(result) if isinstance(result, (tuple, list)) else [result]
        if n_out is None:   # the first call fixes the layout of the fingerprints: calls x outputs rows
            n_out = len(expected)
            if rows != len(keys) * n_out or cols < 0 or len(raw) != rows * cols * 8:
                per_call = resp.get("outputs_per_call", 1)
                raise CheckFailed(f"{what}: the notebook did not return a fingerprint of every timed output"
                                  + (f" (each call returned {per_call} outputs, expected {n_out})"
                                     if per_call != n_out else ""))
            got_fp = torch.frombuffer(bytearray(raw), dtype=torch.float64).view(rows, cols) if raw \
                else torch.empty(rows, 0, dtype=torch.float64)
            tols = _tolerances_per_output(tolerances, dtype, n_out)
        bad_outputs = []
        for k, (e, (atol, rtol)) in enumerate(zip(expected, tols)):
            ref_fp = fingerprints([e], challenge, judge_device)[0].cpu()
            flat = e.reshape(-1).abs()
            pad = (-flat.numel()) % BLOCK
            if pad:
                flat = torch.cat([flat, flat.new_zeros(pad)])
            bound = (atol * w.sum() + rtol * (flat.view(-1, BLOCK) @ w)).cpu() * (1 + 1e-9) + 1e-12
            row = got_fp[i * n_out + k]
            if ref_fp.numel() > cols or bool((row[ref_fp.numel():] != 0).any()):
                raise CheckFailed(f"{what}: timed call {i + 1} returned {cols * BLOCK} elements' worth of output"
                                  + (f" `{k + 1}`" if n_out > 1 else "") + f", expected {e.numel()}")
            diff = (row[:ref_fp.numel()] - ref_fp).abs()
            bad = ~(diff <= bound) & ~(torch.isnan(row[:ref_fp.numel()]) & torch.isnan(ref_fp))
            if bool(bad.any()):
                first = int(torch.nonzero(bad)[0])
                which = f"output {k + 1}, " if n_out > 1 else ""
                bad_outputs.append(f"{which}elements {first * BLOCK}..{(first + 1) * BLOCK - 1} and "
                                   f"{int(bad.sum()) - 1} more block(s)")
        if bad_outputs:
            wrong_calls.append(f"call {i + 1} ({'; '.join(bad_outputs)})")
        if i == pick:
            picked = resp.get("picked")
            picked = picked if isinstance(picked, list) else [picked]
            if not picked or not all(isinstance(p, dict) for p in picked) or len(picked) != n_out:
                raise CheckFailed(f"{what}: the notebook did not return the timed output the grader asked for")
            for k, (spec, e, (atol, rtol)) in enumerate(zip(picked, expected, tols)):
                got = _load_picked(spec, folder, e, what)
                which = f" (output {k + 1})" if n_out > 1 else ""
                if tuple(got.shape) != tuple(e.shape):
                    raise CheckFailed(f"{what}: timed call {i + 1} returned shape {tuple(got.shape)}{which}, "
                                      f"expected {tuple(e.shape)}")
                # the same rule as triton_course.checks.compare, on the judge's device; the detailed (CPU)
                # report only on failure
                gv = got.to(judge_device, torch.float64).reshape(-1)
                ev = e.reshape(-1)
                close = ((gv - ev).abs() <= atol + rtol * ev.abs()) | (gv == ev) | (torch.isnan(gv) & torch.isnan(ev))
                c = None if bool(close.all()) else compare(got, e.cpu(), atol=atol, rtol=rtol)
                if c is not None and not c.ok:
                    whose = f"output {k + 1}" if n_out > 1 else "the output"
                    raise CheckFailed(f"{what}: {whose} of timed call {i + 1} (size of the benchmark) is "
                                      "wrong:\n" + describe(c))
        del args, wide, expected, result
    if wrong_calls:
        raise CheckFailed(f"{what}: {len(wrong_calls)} of {len(keys)} timed calls returned a wrong result: "
                          + "; ".join(wrong_calls[:4]) + ". Speed counts only for correct results, every call.")


def _load_picked(spec: dict[str, Any], folder, expected: torch.Tensor, what: str) -> torch.Tensor:
    """One tensor of the picked call, read only if its size is that of the expected output (a dishonest
    answer of gigabytes is refused, not read)."""
    try:
        if spec.get("dtype") not in NAMES.values() or str(spec.get("file", "")) != os.path.basename(str(spec.get("file"))):
            raise ValueError("unknown dtype or file name")
        size = (folder / spec["file"]).stat().st_size
        if size > expected.numel() * 8 + 4096:
            raise ValueError(f"{size:,} bytes for {expected.numel():,} elements")
        return load_tensor(spec, folder, device="cpu")
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
        raise CheckFailed(f"{what}: the timed output the notebook returned could not be read ({exc})") from None


def _agreeing_rounds(fn: RemoteFunction, templates: Sequence[Any], reference: Callable[..., torch.Tensor],
                     tolerances: Callable[[torch.dtype], tuple[float, float]], *, what: str,
                     same_size_copy: int = 0):
    """Yield (ms per call, the round's entry) for each verified round whose clocks agree, up to
    :data:`MAX_ROUNDS` rounds in all; raise the last disagreement if no round agreed. Any other failure (a
    wrong timed output, PyTorch in the loop, a skipped call) ends the rounds at once."""
    disagreements: list[str] = []
    agreed = 0
    for round_no in range(MAX_ROUNDS):
        try:
            ms, _ = timed_round(fn, templates, reference, tolerances, what=what, round_no=round_no,
                                same_size_copy=same_size_copy)
        except ClockDisagreement as exc:
            disagreements.append(str(exc))
            continue
        agreed += 1
        yield ms, fn.session.timing_rounds[-1]
    if not agreed:
        raise CheckFailed(f"{disagreements[-1]} (the same in all {len(disagreements)} rounds)")


def best_verified_ms(fn: RemoteFunction, templates: Sequence[Any], reference: Callable[..., torch.Tensor],
                     tolerances: Callable[[torch.dtype], tuple[float, float]], *, what: str,
                     good_enough: Callable[[float], bool]) -> float:
    """Milliseconds per call of the best verified round: up to :data:`COUNTED_ROUNDS` rounds whose clocks
    agree, stopping at the first that is ``good_enough``. Rounds whose clocks disagree are set aside, up to
    :data:`MAX_ROUNDS` rounds in all; if none agreed, the last disagreement is the verdict. Any other
    failure (a wrong timed output, PyTorch in the loop, a skipped call) ends the check at once."""
    best: float | None = None
    counted = 0
    for ms, _ in _agreeing_rounds(fn, templates, reference, tolerances, what=what):
        best = ms if best is None else min(best, ms)
        counted += 1
        if good_enough(best) or counted >= COUNTED_ROUNDS:
            break
    assert best is not None
    return best


def copy_disturbed(copy_gbps: float, copy_bytes: int, ceiling: float) -> bool:
    """A same-size copy too slow to be this GPU undisturbed: at least :data:`DISTURBED_COPY_MIN_BYTES` moved
    below :data:`DISTURBED_COPY_FRACTION` of ``ceiling``, the copy bandwidth calibrated before grading (0:
    not known, nothing is judged disturbed). Smaller copies are left alone: launch costs slow them honestly."""
    return ceiling > 0 and copy_bytes >= DISTURBED_COPY_MIN_BYTES and copy_gbps < DISTURBED_COPY_FRACTION * ceiling


def best_verified_fraction_of_copy(fn: RemoteFunction, templates: Sequence[Any], nbytes: int,
                                   reference: Callable[..., torch.Tensor],
                                   tolerances: Callable[[torch.dtype], tuple[float, float]], *, what: str,
                                   fraction: float, ceiling: float = 0.0) -> tuple[float, float]:
    """(GB/s of the student's function, GB/s of a same-size copy) of the verified round where their ratio
    is best. The copy moves the bytes the function is credited with (``nbytes``: half read, half written,
    in the first input's dtype) and is timed by the judge right after each round's loop, on the same GPU
    (:func:`time_same_size_copy`), so both meet the same clocks and the same state of the machine. Up to
    :data:`COUNTED_ROUNDS` agreeing rounds, stopping at the first whose ratio reaches ``fraction``. A round
    whose copy was disturbed (:func:`copy_disturbed` against ``ceiling``) does not count: its slow copy would
    lower the target; if no round's copy was undisturbed, nothing can be judged."""
    best: tuple[float, float] | None = None
    counted, disturbed = 0, []
    for ms, entry in _agreeing_rounds(fn, templates, reference, tolerances, what=what, same_size_copy=nbytes):
        ours, copy = gbps(nbytes, ms), gbps(entry["copy_bytes"], entry["copy_ms"])
        entry.update(gbps=round(ours, 1), same_size_copy_gbps=round(copy, 1))
        if copy_disturbed(copy, entry["copy_bytes"], ceiling):
            entry["copy_disturbed"] = True
            disturbed.append(copy)
            continue
        if best is None or ours / copy > best[0] / best[1]:
            best = (ours, copy)
        counted += 1
        if best[0] >= fraction * best[1] or counted >= COUNTED_ROUNDS:
            break
    if best is None:
        raise CheckFailed(f"{what}: the judge's same-size copy ran at {max(disturbed):,.0f} GB/s or less in all "
                          f"{len(disturbed)} timed rounds, under {DISTURBED_COPY_FRACTION:.0%} of this GPU's copy "
                          f"bandwidth ({ceiling:,.0f} GB/s): other work shared the GPU while it was timed, so no "
                          "round could be judged. This says nothing about your kernel's speed: the instructor "
                          "should grade this notebook again.")
    return best


def gbps(nbytes: int, ms: float) -> float:
    return nbytes / (max(ms, 1e-9) * 1e-3) / 1e9


@phase("timing")
def time_same_size_copy(session: JudgeCalls, dtype: torch.dtype, numel: int, calls: int) -> float:
    """Milliseconds per copy of ``numel`` elements of ``dtype``, ``calls`` copies back to back, timed by the
    judge in its own process (no student code) on the GPU the student's kernel uses.

    On a GPU the copies are a replayed CUDA graph, as the student's calls are, over a rotating pool of
    source and destination tensors four L2 caches large, so that none is read from the L2. Under the
    interpreter (the course's own tests of the protocol) a host clock, whose numbers mean nothing. The
    submission's own sandboxes are frozen meanwhile (``session.own_sandboxes``): the student's threads and
    queued work must not share the GPU with the copy that sets the student's target."""
    device = session.transport.device
    numel = max(1, int(numel))
    with session.gpu_lock.exclusive(quiet=session.own_sandboxes):
        if not (device.startswith("cuda") and torch.cuda.is_available()):
            src = torch.randn(numel).to(dtype)
            dst = torch.empty_like(src)
            t0 = time.perf_counter()
            for _ in range(calls):
                dst.copy_(src)
            return max((time.perf_counter() - t0) * 1e3 / calls, 1e-9)
        per = numel * torch.empty(0, dtype=dtype).element_size()
        l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
        free, _ = torch.cuda.mem_get_info()
        pool = int(max(1, min(calls, max(2, -(-4 * l2 // max(1, 2 * per))), free // 4 // max(1, 2 * per))))
        srcs = [torch.randn(numel, device=device).to(dtype) for _ in range(pool)]
        dsts = [torch.empty_like(t) for t in srcs]
        for a, b in zip(srcs, dsts):   # warm: the copy kernel is loaded, the memory touched
            b.copy_(a)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(calls):
                dsts[i % pool].copy_(srcs[i % pool])
        graph.replay()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end) / calls
        del graph, srcs, dsts
        torch.cuda.empty_cache()   # the student's kernel shares this GPU: leave it the memory
        return ms


def remote_bandwidth(fn: RemoteFunction, make_inputs: Callable[[], Sequence[Any]], nbytes: int, *,
                     fraction: float, points: float, what: str, ceiling: float,
                     reference: Callable[..., torch.Tensor],
                     tolerances: Callable[[torch.dtype], tuple[float, float]],
                     same_size_copy: bool = False) -> tuple[float, str]:
    """(points, verdict line) for the student's function through verified timed rounds (:func:`best_verified_ms`).

    ``same_size_copy``: the target is ``fraction`` of a copy that moves ``nbytes``, timed in the same rounds
    (:func:`best_verified_fraction_of_copy`), not of ``ceiling``."""
    templates = list(make_inputs())
    on_gpu = fn.session.transport.device.startswith("cuda")   # the interpreter's host clock proves nothing
    if same_size_copy:
        ours, copy = best_verified_fraction_of_copy(fn, templates, nbytes, reference, tolerances, what=what,
                                                    fraction=fraction, ceiling=ceiling if on_gpu else 0.0)
        return float(points), same_size_copy_verdict(ours, copy, fraction, what, on_gpu=on_gpu, ceiling=ceiling)

    best = gbps(nbytes, best_verified_ms(fn, templates, reference, tolerances, what=what,
                                         good_enough=lambda ms: gbps(nbytes, ms) >= fraction * ceiling))
    return float(points), bandwidth_verdict(best, fraction, ceiling, what, on_gpu=on_gpu)


def timing_on_cpu() -> bool:
    return os.environ.get(TIME_ON_CPU_ENV) == "1"


@phase("timing")
def baseline_ms(session: JudgeCalls, baseline: Callable[..., Any], make_inputs: Callable[[], Sequence[Any]]) -> float:
    """Milliseconds per call of ``baseline`` (trusted code: the library a kernel is held to), timed here in the
    judge's process on the GPU the student's kernel uses, with :func:`triton_course.bench.steady_ms`, while the
    submission's own sandboxes are frozen (their threads or queued work must not slow the yardstick). Under the
    interpreter (the course's own tests of the protocol) a host clock, whose numbers mean nothing."""
    from triton_course.device import current

    with quiet_stderr(), session.gpu_lock.exclusive(quiet=session.own_sandboxes):
        if current().is_gpu:
            from triton_course.bench import steady_ms

            ms = steady_ms(baseline, make_inputs)
            torch.cuda.synchronize()
            torch.cuda.empty_cache()   # the student's kernel shares this GPU: leave it the memory
            return ms
        inputs = list(make_inputs())
        baseline(*inputs)
        t0 = time.perf_counter()
        baseline(*inputs)
        return max((time.perf_counter() - t0) * 1e3, 1e-6)


def verified_against_baseline(fn: RemoteFunction, baseline: Callable[..., Any],
                              make_inputs: Callable[[], Sequence[Any]], *, fraction: float, what: str,
                              reference: Callable[..., torch.Tensor],
                              tolerances: Callable[[torch.dtype], tuple[float, float]]) -> tuple[float, float]:
    """(ms per call of the student's function, ms per call of ``baseline``) on the same work: the baseline timed
    by the judge (:func:`baseline_ms`), the student's function in verified rounds on inputs drawn from secret keys
    (:func:`best_verified_ms`: every timed output checked against ``reference``), stopping at the first round that
    reaches ``fraction`` of the baseline's speed. Any throughput against a trusted library is the ratio of these
    two times (:func:`triton_course.grading.throughput_points`)."""
    templates = list(make_inputs())
    theirs = baseline_ms(fn.session, baseline, make_inputs)
    ours = best_verified_ms(fn, templates, reference, tolerances, what=what,
                            good_enough=lambda ms: theirs >= fraction * ms)
    return ours, theirs


# ---------------------------------------------------------------------------------------------------
# What the judge's proxy of a student's function carries to the speed checks
# ---------------------------------------------------------------------------------------------------

class ProxyTiming:
    """The judge's timing of its proxy ``fn`` of a student's function (``fn.judge_timing``,
    :class:`grader.judge.StudentFunction`): the :class:`triton_course.grading.Timing` that the speed checks of the
    student's package time a judge's proxy through, plus :meth:`best_verified_ms` for chapter 07's check
    (:func:`triton_course.matmul.tflops_points`)."""

    #: every timed output is checked against the hidden test's reference (:func:`timed_round`)
    checks_outputs = True

    def __init__(self, fn: RemoteFunction):
        self.fn = fn

    @property
    def protocol_only(self) -> bool:
        """Timed under the interpreter all the same (:func:`timing_on_cpu`: the course's own tests)."""
        return timing_on_cpu()

    def quiet(self) -> contextlib.AbstractContextManager[None]:
        """Nothing to quiet: a hidden test's output is captured in the judge already
        (:func:`grader.judge.run_test_cell`), and the yardsticks quiet their own stderr."""
        return contextlib.nullcontext()

    def bandwidth(self, make_inputs: Callable[[], Sequence[Any]], nbytes: int, *, fraction: float, points: float,
                  what: str, ceiling: float, reference: Callable[..., torch.Tensor],
                  tolerances: Callable[[torch.dtype], tuple[float, float]],
                  same_size_copy: bool = False) -> tuple[float, str]:
        """:func:`remote_bandwidth`."""
        return remote_bandwidth(self.fn, make_inputs, nbytes, fraction=fraction, points=points, what=what,
                                ceiling=ceiling, reference=reference, tolerances=tolerances,
                                same_size_copy=same_size_copy)

    def against_baseline(self, baseline: Callable[..., Any], make_inputs: Callable[[], Sequence[Any]], *,
                         fraction: float, what: str, reference: Callable[..., torch.Tensor],
                         tolerances: Callable[[torch.dtype], tuple[float, float]]) -> tuple[float, float]:
        """:func:`verified_against_baseline`."""
        return verified_against_baseline(self.fn, baseline, make_inputs, fraction=fraction, what=what,
                                         reference=reference, tolerances=tolerances)

    def best_verified_ms(self, templates: Sequence[Any], reference: Callable[..., torch.Tensor],
                         tolerances: Callable[[torch.dtype], tuple[float, float]], *, what: str,
                         good_enough: Callable[[float], bool]) -> float:
        """:func:`best_verified_ms`."""
        return best_verified_ms(self.fn, templates, reference, tolerances, what=what, good_enough=good_enough)
