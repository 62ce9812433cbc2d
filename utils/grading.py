"""What the hidden tests of every chapter call.

nbgrader gives a test cell zero points if it writes anything to stderr, so :func:`quiet_stderr` sends
stderr (Python's and the file descriptor Triton's compiler writes to) to stdout while a check runs: a
warning must never cost an honest submission its points. :func:`bandwidth_points` is the performance
check: full points on a GPU when the kernel reaches its target, and on a machine without a GPU a
plain "NOT GRADED" line and 0 points, never a silent pass.

A speed check times the function it grades through a :class:`Timing` (:func:`timing_of`): here, in the
student's notebook, :class:`LocalTiming`; in the grader, the timing that the judge's proxy of a student's
function carries (``fn.judge_timing``). The checks are the same code in both places, and this package never
imports the grader.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

from .bench import copy_bandwidth, measure_gbps
from .checks import CheckFailed, explain_exception
from .device import current
from .i18n import _

if TYPE_CHECKING:
    from .integrity import LaunchesPerCall

#: The grader looks for this at the start of a test cell's output to report ``not_graded``.
NOT_GRADED = "NOT GRADED"


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """Route stderr to stdout and silence warnings inside the block."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fd = None
    try:
        saved_fd = os.dup(2)
        os.dup2(1, 2)
    except OSError:
        saved_fd = None
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(sys.stdout):
            warnings.simplefilter("ignore")
            yield
    finally:
        sys.stdout.flush()
        if saved_fd is not None:
            os.dup2(saved_fd, 2)
            os.close(saved_fd)


def require_launch_per_call(timed: "LaunchesPerCall", what: str) -> None:
    """Raise :class:`CheckFailed` if a timed function returned results without launching a kernel (when
    the grader requires kernels): a cached result has no bandwidth to grade."""
    from .integrity import require_kernel_default

    if require_kernel_default() and timed.launches < timed.calls:
        raise CheckFailed(_("{what}: while it was being timed, the function launched a Triton kernel in only "
                            "{launches} of {calls} calls. A result returned without a launch (a cached one, say) has "
                            "no bandwidth to grade: compute it with your kernel every time.").format(
            what=what, launches=timed.launches, calls=timed.calls))


# ---------------------------------------------------------------------------------------------------
# How a speed check times the function it grades
# ---------------------------------------------------------------------------------------------------

class Timing(Protocol):
    """How a speed check times the function it grades (:func:`timing_of`).

    Without the grader, :class:`LocalTiming` times it in this process. The grader's judge hands the checks its
    proxy of a student's function, whose ``judge_timing`` (``grader.judge_timing.ProxyTiming``) times it in the
    student's sandboxed kernel on inputs drawn from secret keys, every timed output checked against ``reference``
    with ``tolerances``, and times the yardstick (a same-size copy, a library's baseline) in the judge's own
    process on the same GPU."""

    #: Every timed output is checked against the hidden test's ``reference`` and ``tolerances``: it must give them.
    checks_outputs: bool

    @property
    def protocol_only(self) -> bool:
        """Whether a run under Triton's interpreter is timed all the same (the course's own tests of the judge's
        protocol): the numbers mean nothing, the target is 0."""

    def quiet(self) -> contextlib.AbstractContextManager[None]:
        """What a check's own steps (its correctness check, the copy bandwidth) run inside."""

    def bandwidth(self, make_inputs: Callable[[], Sequence[object]], nbytes: int, *, fraction: float,
                  points: float, what: str, ceiling: float, reference: Callable[..., object] | None,
                  tolerances: Callable[[object], tuple[float, float]] | None,
                  same_size_copy: bool) -> tuple[float, str]:
        """(points, the verdict line) for moving ``nbytes`` at ``fraction`` of ``ceiling`` GB/s, or, with
        ``same_size_copy``, of a copy of as many bytes timed in the same rounds; :class:`CheckFailed` below
        target (:func:`bandwidth_verdict`, :func:`same_size_copy_verdict`)."""

    def against_baseline(self, baseline: Callable[..., object], make_inputs: Callable[[], Sequence[object]], *,
                         fraction: float, what: str, reference: Callable[..., object] | None,
                         tolerances: Callable[[object], tuple[float, float]] | None) -> tuple[float, float]:
        """(ms per call of the function, ms per call of ``baseline``) on the same work."""


class LocalTiming:
    """:class:`Timing` in the student's own notebook: ``fn`` timed in this process, every timed call required to
    launch a kernel (:class:`triton_course.integrity.LaunchesPerCall`)."""

    checks_outputs = False
    protocol_only = False

    def __init__(self, fn: Callable[..., object]):
        self.fn = fn

    def quiet(self) -> contextlib.AbstractContextManager[None]:
        return quiet_stderr()

    def bandwidth(self, make_inputs: Callable[[], Sequence[object]], nbytes: int, *, fraction: float,
                  points: float, what: str, ceiling: float, reference: Callable[..., object] | None = None,
                  tolerances: Callable[[object], tuple[float, float]] | None = None,
                  same_size_copy: bool = False) -> tuple[float, str]:
        """One call first, which must launch a kernel where the grader requires one; then
        :func:`same_size_copy_gbps`, or :func:`timed_gbps` (measured again below target: a kernel that reaches
        it should not lose its points to one noisy set of runs). Run inside :meth:`quiet`."""
        from .integrity import KernelLaunches, require_kernel_default

        fn = self.fn
        try:
            with KernelLaunches() as launches:
                fn(*make_inputs())
            if require_kernel_default() and launches.count == 0:
                raise CheckFailed(_("{what}: the function launched no Triton kernel, so there is no kernel "
                                    "bandwidth to grade (results computed by PyTorch earn no points).").format(
                    what=what))
            if same_size_copy:
                achieved, copy = same_size_copy_gbps(fn, make_inputs, nbytes, what)
                return float(points), same_size_copy_verdict(achieved, copy, fraction, what, ceiling=ceiling)
            achieved = timed_gbps(fn, make_inputs, nbytes, what)
            if achieved < fraction * ceiling:
                # One more independent measurement before a verdict of "too slow": a kernel that reaches
                # the target should not lose its points to one noisy set of runs.
                achieved = max(achieved, timed_gbps(fn, make_inputs, nbytes, what))
        except CheckFailed:
            raise
        except Exception as exc:
            raise CheckFailed(explain_exception(exc, what)) from None
        return float(points), bandwidth_verdict(achieved, fraction, ceiling, what)

    def against_baseline(self, baseline: Callable[..., object], make_inputs: Callable[[], Sequence[object]], *,
                         fraction: float, what: str, reference: Callable[..., object] | None = None,
                         tolerances: Callable[[object], tuple[float, float]] | None = None) -> tuple[float, float]:
        """Both timed in turn on the same inputs (:func:`triton_course.bench.steady_rounds`), the median of each."""
        import statistics

        from .bench import steady_rounds
        from .integrity import LaunchesPerCall

        with quiet_stderr():
            try:
                with LaunchesPerCall(self.fn) as timed:
                    times = steady_rounds({"fn": timed, "baseline": baseline}, make_inputs)
            except Exception as exc:
                raise CheckFailed(explain_exception(exc, what)) from None
            require_launch_per_call(timed, what)
        return statistics.median(times["fn"]), statistics.median(times["baseline"])


def timing_of(fn: Callable[..., object]) -> Timing:
    """The timing the judge's proxy of a student's function carries (``fn.judge_timing``), or for any other
    function :class:`LocalTiming`."""
    timing = getattr(fn, "judge_timing", None)
    return timing if timing is not None else LocalTiming(fn)


def _require_reference(timing: Timing, reference: object, tolerances: object, what: str) -> None:
    if timing.checks_outputs and (reference is None or tolerances is None):
        raise CheckFailed(_("{what}: this hidden test gives no reference to check the timed outputs with "
                            "(a bug of the course, not of your code)").format(what=what))


def _correct_first(correct_first: Callable[[], object] | None, what: str) -> None:
    """Run ``correct_first`` (a check that raises :class:`CheckFailed` on a wrong result) before any timing."""
    if correct_first is not None:
        try:
            correct_first()
        except CheckFailed as exc:
            # TRANSLATORS: {report} is the self-check's report of what is wrong, several lines.
            raise CheckFailed(_("{what}: bandwidth is graded only for a correct kernel, and this one is "
                                "not:\n{report}").format(what=what, report=exc)) from None


# ---------------------------------------------------------------------------------------------------
# The checks
# ---------------------------------------------------------------------------------------------------

def at_gpu_sizes(check: Callable[[], object], *, points: float, what: str) -> float:
    """Correctness at sizes that span many blocks: ``points`` when ``check`` passes on a GPU; on the CPU,
    where the interpreter cannot run such sizes, 0 and a NOT GRADED line, never a pass.

    ``check`` runs the chapter's ``check_all`` on those sizes and raises :class:`CheckFailed` naming the first
    size that is wrong, so a kernel right up to some size and wrong past it loses these points. The last
    expression of a graded cell is its score: a hidden test ends with ``at_gpu_sizes(...)``."""
    __tracebackhide__ = True
    if current().interpreted:
        # TRANSLATORS: {not_graded} is "NOT GRADED", which the grader looks for at the start of the line: keep it
        # first and untranslated. {what} names the check, as the notebook gives it.
        print(_("{not_graded}: {what} runs sizes that only a CUDA GPU runs in reasonable time, and this run used "
                "Triton's interpreter on the CPU. 0 of {points} points are awarded for it here; the instructor "
                "grades it on a GPU.").format(not_graded=NOT_GRADED, what=what, points=f"{points:g}"))
        return 0.0
    with quiet_stderr():
        check()
    print(_("{what}: correct at every size.").format(what=what))
    return float(points)


def _not_graded_here(points: float, what: str, why: str) -> float:
    # TRANSLATORS: {not_graded} is "NOT GRADED", which the grader looks for at the start of the line: keep it first
    # and untranslated. {why} is a sentence saying why the check cannot run here.
    print(_("{not_graded}: {why} 0 of {points} points are awarded for {what} here; the instructor grades it on a "
            "GPU.").format(not_graded=NOT_GRADED, why=why, points=f"{points:g}", what=what))
    return 0.0


def throughput_points(fn: Callable[..., object], baseline: Callable[..., object],
                      make_inputs: Callable[[], Sequence[object]], work: float, *, fraction: float, points: float,
                      what: str, baseline_name: str, unit: str = "TFLOP/s", per_unit: float = 1e12,
                      reference: Callable[..., object] | None = None,
                      tolerances: Callable[[object], tuple[float, float]] | None = None,
                      not_here: str | None = None, advice: str = "") -> float:
    """Points for reaching ``fraction`` of ``baseline``'s throughput (a trusted library doing the same ``work``,
    FLOPs by default, shown in ``unit``); 0 and NOT GRADED under the interpreter, or on a GPU where ``not_here``
    (a sentence) says why no kernel could be compared with the baseline there.

    Called by the grader's judge with the student's function as a proxy, the student's function is timed in
    its sandboxed kernel on inputs drawn from secret keys, every timed output checked against ``reference``
    with ``tolerances``, and the baseline in the judge's own process on the same GPU
    (:func:`grader.judge_timing.verified_against_baseline`). Without the judge, both are timed in turn on the
    same inputs (:func:`triton_course.bench.steady_rounds`). A kernel below target raises :class:`CheckFailed`
    with the numbers and ``advice``; the last expression of a graded cell is its score."""
    __tracebackhide__ = True
    dev, timing = current(), timing_of(fn)
    # the course's own tests run the judge's protocol under the interpreter
    protocol_only = dev.interpreted and timing.protocol_only
    if dev.interpreted and not protocol_only:
        return _not_graded_here(points, what, _("the speed of {what} can only be measured on a CUDA GPU, and this "
                                                "run used Triton's interpreter on the CPU.").format(what=what))
    _require_reference(timing, reference, tolerances, what)
    if not dev.interpreted and not_here:
        return _not_graded_here(points, what, not_here)
    fraction = 0.0 if protocol_only else fraction   # the interpreter's numbers mean nothing
    ours_ms, theirs_ms = timing.against_baseline(baseline, make_inputs, fraction=fraction, what=what,
                                                 reference=reference, tolerances=tolerances)
    ours, theirs = work / (ours_ms * 1e-3) / per_unit, work / (theirs_ms * 1e-3) / per_unit
    verdict = throughput_verdict(what, ours, theirs, fraction, baseline_name, unit)
    if ours < fraction * theirs:
        # TRANSLATORS: {verdict} is a speed check's verdict line; {advice} what to look at, as the notebook gives it.
        raise CheckFailed(_("{verdict}. {advice}").format(verdict=verdict, advice=advice) if advice else verdict)
    print(passed(verdict))
    return float(points)


def throughput_verdict(what: str, ours: float, theirs: float, fraction: float, baseline_name: str,
                       unit: str = "TFLOP/s") -> str:
    """The verdict line of a speed check against a baseline (``ours`` and ``theirs`` in ``unit``), before its end:
    ``add: 1.0 TFLOP/s = 50% of torch (2.0 TFLOP/s); target 80%``."""
    # TRANSLATORS: a speed check's verdict; {ratio} and {target} are percentages ("50%"), {baseline} a library
    # ("cuBLAS", "torch"), {unit} "TFLOP/s". grader/report.py reads the English line only.
    return _("{what}: {ours} {unit} = {ratio} of {baseline} ({theirs} {unit}); target {target}").format(
        what=what, ours=f"{ours:,.1f}", unit=unit, ratio=f"{ours / theirs:.0%}", baseline=baseline_name,
        theirs=f"{theirs:,.1f}", target=f"{fraction:.0%}")


def passed(verdict: str) -> str:
    """A verdict line that reached its target."""
    return _("{verdict}: passed").format(verdict=verdict)


def _too_slow(verdict: str) -> str:
    return _("{verdict}. Count the bytes your kernel moves: is anything read or written twice, or are the blocks "
             "too small to keep the memory system busy?").format(verdict=verdict)


def timed_gbps(fn: Callable[..., object], make_inputs: Callable[[], Sequence[object]], nbytes: int,
               what: str) -> float:
    """:func:`triton_course.bench.measure_gbps` of ``fn``, checking that every timed call launched a kernel."""
    from .integrity import LaunchesPerCall

    with LaunchesPerCall(fn) as timed:
        achieved = measure_gbps(timed, make_inputs, nbytes)
    require_launch_per_call(timed, what)
    return achieved


def bandwidth_points(fn: Callable[..., object], make_inputs: Callable[[], Sequence[object]], nbytes: int,
                     *, fraction: float, points: float, what: str,
                     correct_first: Callable[[], object] | None = None,
                     reference: Callable[..., object] | None = None,
                     tolerances: Callable[[object], tuple[float, float]] | None = None,
                     against: str = "copy") -> float:
    """Points for reaching ``fraction`` of this GPU's copy bandwidth; 0 and NOT GRADED without a GPU.

    ``against="same_size_copy"``: the target is ``fraction`` of a copy that moves ``nbytes`` (half read,
    half written), timed in the same rounds as ``fn``, instead of the 1 GiB copy: at a few tens of MB
    the fixed costs of a launch hold back any kernel, a copy too.

    The last expression of a graded cell is its score (nbgrader's partial credit), so a hidden test ends
    with ``bandwidth_points(...)``. A kernel below target raises :class:`CheckFailed` with the numbers.
    ``correct_first`` (a check that raises on a wrong result) runs before timing: speed earns points
    only for a kernel that is right, so a fast kernel without masks cannot collect them.

    Called by the grader's judge with the student's function as a proxy (``fn.judge_timing``, :class:`Timing`),
    the timing runs in the student's sandboxed kernel on inputs drawn from secret keys, and every timed output
    is checked against ``reference`` with ``tolerances`` (see :mod:`grader.judge_timing`).
    """
    __tracebackhide__ = True
    timing = timing_of(fn)
    interpreted = current().interpreted
    if interpreted and not timing.protocol_only:
        # TRANSLATORS: {not_graded} is "NOT GRADED", which the grader looks for at the start of the line: keep it
        # first and untranslated.
        print(_("{not_graded}: the bandwidth of {what} can only be measured on a CUDA GPU, and this run used "
                "Triton's interpreter on the CPU. 0 of {points} points are awarded for it here; the instructor "
                "grades it on a GPU.").format(not_graded=NOT_GRADED, what=what, points=f"{points:g}"))
        return 0.0
    _require_reference(timing, reference, tolerances, what)
    with timing.quiet():
        _correct_first(correct_first, what)
        ceiling = copy_bandwidth() if not interpreted else 1.0
        earned, verdict = timing.bandwidth(make_inputs, nbytes, fraction=fraction if not interpreted else 0.0,
                                           points=points, what=what, ceiling=ceiling, reference=reference,
                                           tolerances=tolerances, same_size_copy=against == "same_size_copy")
    print(verdict)
    return earned


def same_size_copy_gbps(fn: Callable[..., object], make_inputs: Callable[[], Sequence[object]], nbytes: int,
                        what: str) -> tuple[float, float]:
    """(GB/s of ``fn``, GB/s of a copy that moves as many bytes) timed in the same rounds
    (:func:`triton_course.bench.steady_rounds`), the median of each. The copy moves ``nbytes`` (half read,
    half written) in the first input's dtype, from a fresh tensor in each input set. Every timed call of
    ``fn`` must launch a kernel."""
    import statistics

    import torch

    from .bench import gbps, steady_rounds
    from .integrity import LaunchesPerCall

    x = next(t for t in make_inputs() if isinstance(t, torch.Tensor))
    numel = max(1, nbytes // 2 // x.element_size())

    def with_copy_source():
        inputs = tuple(make_inputs())
        return (*inputs, torch.empty(numel, dtype=x.dtype, device=x.device).normal_())

    with LaunchesPerCall(fn) as timed:
        times = steady_rounds({"fn": lambda *a: timed(*a[:-1]), "copy": lambda *a: a[-1].clone()}, with_copy_source)
    require_launch_per_call(timed, what)
    return gbps(nbytes, statistics.median(times["fn"])), gbps(2 * numel * x.element_size(),
                                                              statistics.median(times["copy"]))


#: No kernel moves its bytes this many times faster than the GPU copies them (the references reach 1.07 at
#: most, lab/records/peers.json): a timed loop that does is not doing the work it is credited with.
IMPLAUSIBLE_OVER_COPY = 1.5


def _implausible(verdict: str, achieved: float, copy: float) -> None:
    if achieved > IMPLAUSIBLE_OVER_COPY * copy:
        raise CheckFailed(_("{verdict}: faster than this GPU can move those bytes (more than {factor} times its copy "
                            "bandwidth). The timed loop did not do the work it is credited with (were the outputs "
                            "computed before the timing, on another stream or thread?): no points, and the "
                            "submission is flagged for the instructor.").format(
            verdict=verdict, factor=f"{IMPLAUSIBLE_OVER_COPY:g}"))


def same_size_copy_verdict(achieved: float, copy: float, fraction: float, what: str, on_gpu: bool = True,
                           ceiling: float = 0.0) -> str:
    """The line a passing check against a same-size copy prints; raises :class:`CheckFailed` below target, or
    (``on_gpu``: timed on a GPU, not by the interpreter's host clock) above what any kernel can reach
    (:data:`IMPLAUSIBLE_OVER_COPY` times the faster of the same-size copy and ``ceiling``, the GPU's copy
    bandwidth measured once: a same-size copy that happened to run slow never makes honest work implausible)."""
    # TRANSLATORS: {ratio} and {target} are percentages ("90%"). grader/report.py reads the English line only.
    verdict = _("{what}: {achieved} GB/s = {ratio} of a copy of the same size (as many bytes), timed in the same "
                "rounds ({copy} GB/s); target {target}").format(
        what=what, achieved=f"{achieved:,.0f}", ratio=f"{achieved / copy:.0%}", copy=f"{copy:,.0f}",
        target=f"{fraction:.0%}")
    if on_gpu:
        _implausible(verdict, achieved, max(copy, ceiling))
    if achieved < fraction * copy:
        raise CheckFailed(_too_slow(verdict))
    return passed(verdict)


def bandwidth_verdict(achieved: float, fraction: float, ceiling: float, what: str, on_gpu: bool = True) -> str:
    """The line a passing bandwidth check prints; raises :class:`CheckFailed` with the numbers below target,
    or (``on_gpu``: timed on a GPU against its measured copy bandwidth) above what any kernel can reach
    (:data:`IMPLAUSIBLE_OVER_COPY`)."""
    target = fraction * ceiling
    # TRANSLATORS: {percent} is a percentage ("80%"). grader/report.py reads the English line only.
    verdict = _("{what}: {achieved} GB/s; target {percent} of this GPU's copy bandwidth ({ceiling} GB/s) = "
                "{target} GB/s").format(what=what, achieved=f"{achieved:,.0f}", percent=f"{fraction:.0%}",
                                        ceiling=f"{ceiling:,.0f}", target=f"{target:,.0f}")
    if on_gpu:
        _implausible(verdict, achieved, ceiling)
    if achieved < target:
        raise CheckFailed(_too_slow(verdict))
    return passed(verdict)
