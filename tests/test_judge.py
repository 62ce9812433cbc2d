"""The judge's parts, in this process: evidence of whose work a result is, the secret seed, and the timed
protocol (run under the interpreter here with ``COURSE_JUDGE_TIME_ON_CPU=1``: its numbers mean nothing,
its checks are the same). Each dishonest function below is something a submission could hand in."""

from __future__ import annotations

import json
import time

import pytest
import torch
import triton
import triton.language as tl

from grader.judge import InProcessTransport, JudgeSession, Seed, StudentFunction, work_problems
from grader.judge_timing import MAX_ROUNDS, TIME_ON_CPU_ENV, best_verified_ms, timed_round
from triton_course.checks import CheckFailed, check, tolerance_for


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = idx < n
    tl.store(out_ptr + idx, tl.load(x_ptr + idx, mask=ok) + tl.load(y_ptr + idx, mask=ok), mask=ok)


def add(x, y):
    out = torch.empty_like(x)
    _add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out


def add_numpy_behind_a_launch(x, y):
    out = torch.empty_like(x)
    _add_kernel[(1,)](x, y, out, 0, BLOCK=256)  # a launch that computes nothing
    out.copy_(torch.from_numpy(x.numpy() + y.numpy()))
    return out


def add_python_values(x, y):
    out = torch.empty_like(x)
    _add_kernel[(1,)](x, y, out, 0, BLOCK=256)
    for i in range(x.numel()):
        out[i] = float(x[i]) + float(y[i])
    return out


_CACHE: dict = {}


def add_every_other_call(x, y):
    """Launches its kernel on every other call and returns the previous output in between."""
    _CACHE["n"] = _CACHE.get("n", 0) + 1
    if _CACHE["n"] % 2 == 0 and "last" in _CACHE:
        return _CACHE["last"]
    _CACHE["last"] = add(x, y)
    return _CACHE["last"]


def session(tmp_path, **fns) -> JudgeSession:
    s = JudgeSession(InProcessTransport(dict(fns), tmp_path))
    s.build_namespace([], list(fns))
    return s


def reference(x, y):
    return x + y


def test_an_honest_kernel_passes_through_the_judge(tmp_path):
    s = session(tmp_path, add=add)
    for n in (1, 255, 257, 1000):
        check(s.base["add"], (torch.randn(n), torch.randn(n)), reference, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("fn, words", [
    (add_numpy_behind_a_launch, "neither its inputs nor a Triton kernel produced"),
    (add_python_values, "into Python"),
])
def test_results_made_outside_the_kernel_earn_nothing(tmp_path, fn, words):
    s = session(tmp_path, add=fn)
    with pytest.raises(CheckFailed, match=words):
        check(s.base["add"], (torch.randn(300), torch.randn(300)), reference, atol=1e-6, rtol=1e-5)


def test_work_problems_names_each_kind_of_evidence():
    ok = {"launches": 1, "ops": {"empty_like": 1}, "output": {"kind": "tensor", "written_by_launch": True}}
    assert work_problems(ok, True) == []
    assert work_problems({**ok, "launches": 0}, True)
    assert "aten.mul" in " ".join(work_problems({**ok, "ops": {"mul": 1}}, True))
    assert work_problems({**ok, "output": {"kind": "tensor", "written_by_launch": False}}, True)
    assert work_problems({**ok, "output": {"kind": "tensor", "written_by_launch": True, "is_input": True}}, True)
    assert work_problems({**ok, "launches": 0}, False) == []


def test_seeds_are_secret_and_streams_independent():
    a, b = Seed(), Seed()
    assert a.key("test", "x") != b.key("test", "x")
    assert a.key("test", "x") != a.key("test", "y")
    assert a.key("t") == Seed(bytes.fromhex(a.hex())).key("t")  # a regrade with the secret reproduces it
    assert a.hex() not in a.fingerprint and len(a.fingerprint) == 16


@pytest.fixture
def timing_on_cpu(monkeypatch):
    monkeypatch.setenv(TIME_ON_CPU_ENV, "1")


def _time(s: JudgeSession, name: str = "add"):
    return timed_round(StudentFunction(s, name), [torch.randn(5000), torch.randn(5000)], reference, tolerance_for,
                       what="add on 5000 elements")


def test_timed_protocol_accepts_an_honest_kernel(tmp_path, timing_on_cpu):
    ms, calls = _time(session(tmp_path, add=add))
    assert ms > 0 and calls >= 4


def test_timed_protocol_catches_skipped_calls(tmp_path, timing_on_cpu):
    _CACHE.clear()
    with pytest.raises(CheckFailed, match="launched a Triton kernel only|same output tensor"):
        _time(session(tmp_path, add=add_every_other_call))


def test_timed_protocol_catches_pytorch_in_the_loop(tmp_path, timing_on_cpu):
    with pytest.raises(CheckFailed, match="aten.add"):
        _time(session(tmp_path, add=lambda x, y: (add(x, y), x + y)[1]))


class LyingTransport(InProcessTransport):
    """The student's process answers, then rewrites its reported loop time to a tenth."""

    def run(self, folder, timeout_s):
        super().run(folder, timeout_s)
        resp_file = folder / "response.json"
        resp = json.loads(resp_file.read_text())
        if "elapsed_ms" in resp:
            resp["elapsed_ms"] /= 10
            resp_file.write_text(json.dumps(resp))


def test_timed_protocol_catches_a_forged_time(tmp_path, timing_on_cpu):
    s = JudgeSession(LyingTransport({"add": add}, tmp_path))
    s.build_namespace([], ["add"])
    with pytest.raises(CheckFailed, match="grader's own clock"):
        _time(s)


class StallingTransport(InProcessTransport):
    """An honest kernel on a machine that stalls once: the first timed loop's answer reaches the judge late."""

    stalls = 1

    def run(self, folder, timeout_s):
        super().run(folder, timeout_s)
        request = json.loads((folder / "request.json").read_text())
        if request.get("step") == "run" and self.stalls > 0:
            self.stalls -= 1
            time.sleep(0.25)


def _best(s: JudgeSession) -> float:
    return best_verified_ms(StudentFunction(s, "add"), [torch.randn(5000), torch.randn(5000)], reference,
                            tolerance_for, what="add on 5000 elements", good_enough=lambda ms: False)


def test_a_stall_of_the_machine_costs_an_honest_kernel_nothing(tmp_path, timing_on_cpu):
    s = JudgeSession(StallingTransport({"add": add}, tmp_path))
    s.build_namespace([], ["add"])
    with pytest.raises(CheckFailed, match="grader's own clock"):  # one round alone would be refused ...
        _time(s)
    s.transport.stalls = 1
    assert _best(s) > 0                                             # ... the rounds set the stalled one aside


def test_a_time_forged_in_every_round_earns_nothing(tmp_path, timing_on_cpu):
    s = JudgeSession(LyingTransport({"add": add}, tmp_path))
    s.build_namespace([], ["add"])
    with pytest.raises(CheckFailed, match=f"the same in all {MAX_ROUNDS} rounds"):
        _best(s)


def test_timed_protocol_catches_a_kernel_wrong_only_at_the_timed_size(tmp_path, timing_on_cpu):
    def add_wrong_when_large(x, y):
        out = add(x, y)
        if x.numel() >= 5000:
            out[-1:] = 0  # a single wrong element at the timed size
        return out

    with pytest.raises(CheckFailed, match="timed call"):
        _time(session(tmp_path, add=add_wrong_when_large))


def add_numpy_viewed(x, y):
    """The same, with the outside data viewed and cloned first, so that it looks like PyTorch's own."""
    out = torch.empty_like(x)
    _add_kernel[(1,)](x, y, out, 0, BLOCK=256)
    out.copy_(torch.from_numpy(x.numpy() + y.numpy()).view(-1).clone().reshape(x.shape))
    return out


def test_outside_data_stays_outside_when_viewed_and_copied(tmp_path):
    s = session(tmp_path, add=add_numpy_viewed)
    with pytest.raises(CheckFailed, match="neither its inputs nor a Triton kernel produced"):
        check(s.base["add"], (torch.randn(300), torch.randn(300)), reference, atol=1e-6, rtol=1e-5)


def test_the_operator_log_does_without_torch_dynamo_and_still_logs_beside_it(tmp_path):
    """The student's process logs operators with a dispatch mode; PyTorch's own wrapping of it would import
    torch._dynamo on the first operator (2 s of CPU per graded submission). The log imports nothing of the
    kind, and once torch._dynamo is imported (by the student, say) it still catches what it caught."""
    import subprocess
    import sys
    import textwrap

    from tests.conftest import ROOT

    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        import torch
        from triton_course.checks import CheckFailed, check
        from tests.test_judge import add, add_numpy_behind_a_launch, reference, session

        def caught(folder, fn):
            try:
                check(session(Path(folder), add=fn).base["add"],
                      (torch.randn(300), torch.randn(300)), reference, atol=1e-6, rtol=1e-5)
            except CheckFailed as failure:
                return "neither its inputs nor a Triton kernel produced" in str(failure)
            return False

        results = [caught({str(tmp_path / "a")!r}, add), caught({str(tmp_path / "b")!r}, add_numpy_behind_a_launch),
                   "torch._dynamo" in sys.modules]
        import torch._dynamo
        results.append(caught({str(tmp_path / "c")!r}, add_numpy_behind_a_launch))
        print(results)
    """)
    for name in "abc":
        (tmp_path / name).mkdir()
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "[False, True, False, True]", proc.stdout[-2000:]


# -- on a GPU (the device machine): the timed loop replays a CUDA graph of the watched calls -------------

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: run on the device machine")


def _gpu_session(folder, **fns) -> JudgeSession:
    folder.mkdir(parents=True, exist_ok=True)
    s = session(folder, **fns)
    s.transport.device = "cuda"
    return s


def _time_on_gpu(s: JudgeSession, n: int = 1 << 24):
    return timed_round(StudentFunction(s, "add"), [torch.randn(n, device="cuda"), torch.randn(n, device="cuda")],
                       reference, tolerance_for, what="add on 2^24 elements")


@needs_gpu
def test_on_a_gpu_the_timed_loop_is_a_replayed_graph(tmp_path):
    s = _gpu_session(tmp_path, add=add)
    ms, calls = _time_on_gpu(s)
    assert s.timing_rounds[-1]["graph"] and ms > 0 and calls >= 4


@needs_gpu
def test_on_a_gpu_python_time_per_call_is_not_counted(tmp_path):
    def add_after_python_work(x, y):
        time.sleep(0.001)  # a millisecond of Python per call: twenty times the kernel's own time
        return add(x, y)

    quick, _ = _time_on_gpu(_gpu_session(tmp_path / "a", add=add))
    slow, _ = _time_on_gpu(_gpu_session(tmp_path / "b", add=add_after_python_work))
    assert slow < 1.3 * quick + 0.005, (quick, slow)


@needs_gpu
def test_on_a_gpu_a_function_that_synchronises_is_timed_as_called(tmp_path):
    def add_and_wait(x, y):
        out = add(x, y)
        torch.cuda.synchronize()
        return out

    s = _gpu_session(tmp_path, add=add_and_wait)
    ms, _ = _time_on_gpu(s)
    assert not s.timing_rounds[-1]["graph"] and ms > 0
    assert torch.randn(4, device="cuda").isfinite().all()  # the failed capture left the process usable


@needs_gpu
def test_on_a_gpu_pytorch_behind_a_launch_is_caught_while_captured(tmp_path):
    def add_with_torch(x, y):
        out = torch.empty_like(x)
        _add_kernel[(1,)](x, y, out, 0, BLOCK=256)
        out.copy_(x + y)
        return out

    with pytest.raises(CheckFailed, match="aten.add"):
        _time_on_gpu(_gpu_session(tmp_path, add=add_with_torch))


@needs_gpu
def test_on_a_gpu_outputs_made_off_the_graph_are_refused_as_implausible(tmp_path):
    """Launched during the watched capture on a stream the graph does not record, the kernel runs once, before
    the timed loop, and the loop replays an empty graph: every output is right and both clocks agree, but no
    kernel moves its bytes at that speed (grading.IMPLAUSIBLE_OVER_COPY)."""
    from grader.judge_timing import remote_bandwidth
    from triton_course.bench import copy_bandwidth

    side = torch.cuda.Stream()

    def add_off_the_graph(x, y):
        out = torch.empty_like(x)
        if torch.cuda.is_current_stream_capturing():
            with torch.cuda.stream(side):
                _add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
            return out
        return add(x, y)

    n = 1 << 24
    s = _gpu_session(tmp_path, add=add_off_the_graph)
    inputs = lambda: [torch.randn(n, device="cuda"), torch.randn(n, device="cuda")]  # noqa: E731
    with pytest.raises(CheckFailed, match="faster than this GPU can move those bytes"):
        remote_bandwidth(StudentFunction(s, "add"), inputs, 3 * n * 4, fraction=0.5, points=1,
                         what="add on 2^24 elements", ceiling=copy_bandwidth(), reference=reference,
                         tolerances=tolerance_for)
    assert s.timing_rounds[-1]["graph"]


@needs_gpu
def test_on_a_gpu_the_relaunch_process_re_runs_the_launches_on_the_gpu(tmp_path):
    """The grader's separate relaunch process (grader.relauncher.ProcessRelauncher) on CUDA tensors: the honest
    launcher's record re-runs there and passes; PyTorch run in another thread behind a launch that computes
    nothing is not in the record, so the re-run's output differs and earns nothing."""
    import threading

    from grader.relauncher import ProcessRelauncher

    def add_pytorch_in_a_thread(x, y):
        out = torch.empty_like(x)
        _add_kernel[(1,)](x, y, out, 0, BLOCK=256)
        helper = threading.Thread(target=lambda: out.copy_(x + y))
        helper.start()
        helper.join()
        return out

    (tmp_path / "relaunch").mkdir()
    relauncher = ProcessRelauncher(tmp_path / "relaunch", log=tmp_path / "relaunch.log")
    s = JudgeSession(InProcessTransport({"add": add, "thread": add_pytorch_in_a_thread}, tmp_path),
                     relauncher=relauncher)
    s.transport.device = "cuda"
    s.build_namespace([], ["add", "thread"])
    try:
        inputs = lambda: (torch.randn(1 << 20, device="cuda"), torch.randn(1 << 20, device="cuda"))  # noqa: E731
        check(s.base["add"], inputs(), reference, atol=1e-6, rtol=1e-5)
        with pytest.raises(CheckFailed, match="do not compute"):
            check(s.base["thread"], inputs(), reference, atol=1e-6, rtol=1e-5)
        assert s.relaunches == 2 and relauncher.proc is not None
    finally:
        relauncher.close()


# -- functions that return several tensors (06's rmsnorm_with_rstd, 08's add_rmsnorm) -----------------------
# Each returned tensor is held to the rules of one output: its bytes, written by a launch, not an input, a
# plain tensor, guard pad and poison; and the outputs must be distinct tensors. Each dishonest function
# below returns two tensors; each earns nothing, with a message that names what it did.

@triton.jit
def _sum_diff_kernel(x_ptr, y_ptr, s_ptr, d_ptr, n, BLOCK: tl.constexpr):
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = idx < n
    x, y = tl.load(x_ptr + idx, mask=ok), tl.load(y_ptr + idx, mask=ok)
    tl.store(s_ptr + idx, x + y, mask=ok)
    tl.store(d_ptr + idx, x - y, mask=ok)


def sum_diff(x, y):
    s, d = torch.empty_like(x), torch.empty_like(x)
    _sum_diff_kernel[(triton.cdiv(x.numel(), 256),)](x, y, s, d, x.numel(), BLOCK=256)
    return s, d


def sum_diff_reference(x, y):
    return x + y, x - y


def _check_pair(fn, n=300, **kw):
    s = session(kw.pop("tmp_path"), sum_diff=fn)
    return check(s.base["sum_diff"], (torch.randn(n), torch.randn(n)), sum_diff_reference, atol=1e-6, rtol=1e-5,
                 outputs=("sum", "diff"), **kw)


def test_a_kernel_with_two_outputs_passes_through_the_judge(tmp_path):
    comparisons = _check_pair(sum_diff, tmp_path=tmp_path)
    assert [c.output for c in comparisons] == ["sum", "diff"] and all(c.ok for c in comparisons)


def _sum_twice(x, y):
    s, _ = sum_diff(x, y)
    return s, s


def _input_as_second_output(x, y):
    s, _ = sum_diff(x, y)
    return s, x


def _second_output_by_pytorch(x, y):
    s, _ = sum_diff(x, y)
    return s, x - y


def _second_output_from_numpy(x, y):
    s, _ = sum_diff(x, y)
    d = torch.empty_like(x)
    d.copy_(torch.from_numpy(x.numpy() - y.numpy()))
    return s, d


def _second_output_never_launched(x, y):
    s, _ = sum_diff(x, y)
    return s, torch.zeros_like(x)


def _three_outputs(x, y):
    return (*sum_diff(x, y), torch.empty_like(x))


def _one_output(x, y):
    return sum_diff(x, y)[0]


class Marked(torch.Tensor):
    """A tensor subclass: it could compare equal to anything, or record what the judge does with it."""


def _subclass_output(x, y):
    s, d = sum_diff(x, y)
    return s, d.as_subclass(Marked)


def _huge_second_output(x, y):
    s, _ = sum_diff(x, y)
    big = torch.empty(24 << 20)          # 96 MB: more than the judge reads back for 2.4 KB of inputs
    _sum_diff_kernel[(1,)](x, y, s, big, 0, BLOCK=256)
    return s, big


def _huge_view_second_output(x, y):
    s, _ = sum_diff(x, y)
    one = torch.empty(1)
    _sum_diff_kernel[(1,)](x, y, s, one, 0, BLOCK=256)
    return s, one.expand(1 << 40)        # four bytes of storage, a trillion elements in its view


@pytest.mark.parametrize("fn, words", [
    (_sum_twice, "outputs `sum` and `diff` in the same memory"),
    (_input_as_second_output, "returned its input `x` as output `diff`"),
    (_second_output_by_pytorch, "aten.sub"),
    (_second_output_from_numpy, "neither its inputs nor a Triton kernel produced"),
    (_second_output_never_launched, "as output `diff` a tensor that no Triton kernel launch received"),
    (_three_outputs, "returned 3 outputs, expected a tuple of 2 tensors (sum, diff)"),
    (_one_output, "returned Tensor, expected a tuple of 2 tensors (sum, diff)"),
    (_subclass_output, "as output `diff` a subclass of torch.Tensor"),
    (_huge_second_output, "more than any answer needs"),
    (_huge_view_second_output, "more than any answer needs"),
])
def test_dishonest_second_outputs_earn_nothing(tmp_path, fn, words):
    with pytest.raises(CheckFailed) as info:
        _check_pair(fn, tmp_path=tmp_path)
    assert words in str(info.value), str(info.value)
    _check_pair(sum_diff, tmp_path=tmp_path / "honest")   # the honest student graded after it is untouched


def test_a_mixed_tuple_is_refused_with_its_reason(tmp_path):
    with pytest.raises(CheckFailed, match="tuple holding a int beside tensors"):
        _check_pair(lambda x, y: (sum_diff(x, y)[0], 3), tmp_path=tmp_path)


def test_never_written_elements_of_a_reshaped_output_are_named_through_the_judge(tmp_path):
    """A launcher returns out.reshape(x.shape): the judge still reads its guard and poison."""
    def add_rows(x, y):
        out = torch.empty(x.numel(), dtype=x.dtype)
        _add_kernel[(x.numel() // 256,)](x, y, out, x.numel(), BLOCK=256)  # floor: the ragged tail is never written
        return out.reshape(x.shape)

    s = session(tmp_path, add=add_rows)
    with pytest.raises(CheckFailed, match="44 elements were never written"):
        check(s.base["add"], (torch.randn(3, 100), torch.randn(3, 100)), reference, atol=1e-6, rtol=1e-5)


def _time_pair(s: JudgeSession, n: int = 5000):
    return timed_round(StudentFunction(s, "sum_diff"), [torch.randn(n), torch.randn(n)], sum_diff_reference,
                       tolerance_for, what=f"sum_diff on {n} elements")


def test_timed_protocol_checks_every_output_of_every_call(tmp_path, timing_on_cpu):
    ms, calls = _time_pair(session(tmp_path, sum_diff=sum_diff))
    assert ms > 0 and calls >= 4

    def second_wrong_when_large(x, y):
        s, d = sum_diff(x, y)
        if x.numel() >= 5000:
            d[-1:] = 0
        return s, d

    with pytest.raises(CheckFailed, match="output 2(, elements 4096| of timed call)"):
        _time_pair(session(tmp_path / "a", sum_diff=second_wrong_when_large))


_LAST: dict = {}


def _cached_second_output(x, y):
    """A fresh sum every call, but the diff of the first call handed back ever after."""
    s, d = sum_diff(x, y)
    return s, _LAST.setdefault("d", d)


def test_timed_protocol_catches_a_cached_second_output(tmp_path, timing_on_cpu):
    _LAST.clear()
    with pytest.raises(CheckFailed, match="same output tensor for different timed calls"):
        _time_pair(session(tmp_path, sum_diff=_cached_second_output))


def test_timed_protocol_catches_an_output_dropped_while_timed(tmp_path, timing_on_cpu):
    def sum_only_when_large(x, y):
        return sum_diff(x, y)[:1] if x.numel() >= 5000 else sum_diff(x, y)

    with pytest.raises(CheckFailed, match="each call returned 1 outputs, expected 2"):
        _time_pair(session(tmp_path, sum_diff=sum_only_when_large))


def test_timed_protocol_times_a_same_size_copy_in_each_round(tmp_path, timing_on_cpu):
    from grader.judge_timing import remote_bandwidth

    s = session(tmp_path, add=add)
    points, verdict = remote_bandwidth(StudentFunction(s, "add"), lambda: (torch.randn(5000), torch.randn(5000)),
                                       3 * 5000 * 4, fraction=0.0, points=2, what="add", ceiling=1.0,
                                       reference=reference, tolerances=tolerance_for, same_size_copy=True)
    assert points == 2 and "of a copy of the same size (as many bytes), timed in the same rounds" in verdict
    assert all(r["copy_ms"] > 0 and r["same_size_copy_gbps"] > 0 for r in s.timing_rounds)


def test_a_large_copy_far_below_the_calibrated_bandwidth_was_disturbed():
    """The H200's figures: undisturbed same-size copies of 64 MiB ran at 3,808-4,119 GB/s against a calibrated
    4,245; with another submission's re-run sharing the GPU, at 1,828 and 2,104. Small copies are never judged
    disturbed (launch costs slow them honestly), nor anything without a calibrated bandwidth."""
    from grader.judge_timing import copy_disturbed

    mib64 = 64 << 20
    assert not any(copy_disturbed(gbps, mib64, 4245.0) for gbps in (3808.3, 3886.1, 4119.4))
    assert all(copy_disturbed(gbps, mib64, 4245.0) for gbps in (1828.0, 2104.0))
    assert not copy_disturbed(1828.0, 1 << 20, 4245.0) and not copy_disturbed(1828.0, mib64, 0.0)


def test_rounds_whose_copy_was_disturbed_do_not_set_the_target(tmp_path, timing_on_cpu, monkeypatch):
    """A round whose same-size copy ran far below the GPU's copy bandwidth would make any kernel look fast
    against it: it does not count, the judge tries more rounds, and when every round's copy was disturbed no
    verdict is given (the notebook is to be graded again). Under the interpreter the copy is a host copy: the
    ceiling is set far above it, and the size limit low enough for this test's copy."""
    import grader.judge_timing as jt

    monkeypatch.setattr(jt, "DISTURBED_COPY_MIN_BYTES", 1)
    s = session(tmp_path, add=add)
    with pytest.raises(CheckFailed, match=f"in all {MAX_ROUNDS} timed rounds.*grade this notebook again"):
        jt.best_verified_fraction_of_copy(StudentFunction(s, "add"), [torch.randn(5000), torch.randn(5000)],
                                          3 * 5000 * 4, reference, tolerance_for, what="add", fraction=0.0,
                                          ceiling=1e12)
    assert len(s.timing_rounds) == MAX_ROUNDS and all(r["copy_disturbed"] for r in s.timing_rounds)
    ours, copy = jt.best_verified_fraction_of_copy(StudentFunction(s, "add"), [torch.randn(5000), torch.randn(5000)],
                                                   3 * 5000 * 4, reference, tolerance_for, what="add",
                                                   fraction=0.0, ceiling=1e-6)
    assert ours > 0 and copy > 0 and "copy_disturbed" not in s.timing_rounds[-1]


def test_the_judge_times_its_copy_with_the_submissions_own_sandbox_frozen(tmp_path, timing_on_cpu):
    """``time_same_size_copy`` runs with ``session.own_sandboxes`` frozen (tests/test_gpu_lock.py shows that a
    frozen sandbox makes no progress) and thawed afterwards: a thread the student's kernel left running cannot
    share the GPU with the copy that sets the student's target."""
    from grader.judge_timing import time_same_size_copy
    from tests.test_sandbox import CountingSandbox

    (tmp_path / "box").mkdir()
    sandbox = CountingSandbox(tmp_path / "box")
    try:
        s = session(tmp_path / "judge", add=add)
        s.own_sandboxes = [sandbox.box.member(judge=False)]
        assert time_same_size_copy(s, torch.float32, 1 << 16, 4) > 0
        assert [q.split(":")[0] for q in s.gpu_lock.history[-1]["quieted"]] == [sandbox.box.name]
        assert sandbox.advancing() == [True, True]
    finally:
        sandbox.close()


@pytest.mark.parametrize("reading", [37, 0], ids=["never-idle", "idle"])
def test_a_tflops_check_times_its_baseline_only_beside_an_idle_gpu(tmp_path, timing_on_cpu, monkeypatch, reading):
    """Chapter 07's check through the judge (``tflops_points`` with a proxy), the submission's own sandbox in
    ``session.own_sandboxes``, NVML's counter stood in (no GPU here). A GPU that never reads idle after the
    freeze (solutions/07_matmul_relu/submissions/attacks/cy_slows_the_baseline queues spinning kernels to slow the baseline)
    gets no speed verdict and no points; an idle one is timed and earns them. The sandbox is thawed after."""
    import grader.gpu_lock as gl
    from tests.test_sandbox import CountingSandbox
    from triton_course.matmul import tflops_points

    monkeypatch.setattr(gl, "utilization", lambda gpu: reading)
    monkeypatch.setattr(gl, "DRAIN_TIMEOUT_S", 1.0)
    (tmp_path / "box").mkdir()
    sandbox = CountingSandbox(tmp_path / "box")
    try:
        s = session(tmp_path / "judge", add=add)
        s.own_sandboxes = [sandbox.box.member(judge=False)]
        check = lambda: tflops_points(  # noqa: E731
            StudentFunction(s, "add"), lambda x, y: x + y, lambda: (torch.randn(5000), torch.randn(5000)), 5000,
            fraction=0.75, points=2, what="add", reference=reference, tolerances=tolerance_for)
        if reading:
            with pytest.raises(CheckFailed, match="could not time its yardstick"):
                check()
            assert not s.timing_rounds, "the student's rounds ran after the baseline was refused"
        else:
            assert check() == 2.0 and s.timing_rounds
        assert s.gpu_lock.history[0]["busy"] == bool(reading) and len(s.gpu_lock.history[0]["quieted"]) == 1
        assert sandbox.advancing() == [True, True]
    finally:
        sandbox.close()


def test_timed_protocol_fingerprints_the_second_output_of_every_call(tmp_path, timing_on_cpu):
    """Wrong in the second output of one timed call only: the fingerprints find it, whichever call is picked.

    Ten elements are made far off, not zeroed: a fingerprint is a random weighted sum over 4096 elements, and ten
    zeroed ones of this size stay within its tolerance in about 1 of 150 draws of the weights and inputs (0.67% of
    20,000 simulated draws; this test once failed so in CI); ten a million off cannot."""
    count = {"n": 0}

    def second_wrong_once(x, y):
        s, d = sum_diff(x, y)
        count["n"] += 1
        if count["n"] == 2:   # call 1 is the warm-up; call 2 the first timed one
            d[:10] = 1e6
        return s, d

    with pytest.raises(CheckFailed, match=r"call 1 \(output 2, elements 0\.\.4095|output 2 of timed call 1 "):
        _time_pair(session(tmp_path, sum_diff=second_wrong_once))


@needs_gpu
def test_on_a_gpu_two_outputs_are_captured_timed_and_checked_beside_a_same_size_copy(tmp_path):
    from grader.judge_timing import best_verified_fraction_of_copy

    def sum_diff_cuda(x, y):
        s, d = torch.empty_like(x), torch.empty_like(x)
        _sum_diff_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, s, d, x.numel(), BLOCK=1024)
        return s, d

    s = _gpu_session(tmp_path, sum_diff=sum_diff_cuda)
    n = 1 << 24
    ours, copy = best_verified_fraction_of_copy(
        StudentFunction(s, "sum_diff"), [torch.randn(n, device="cuda"), torch.randn(n, device="cuda")],
        4 * n * 4, sum_diff_reference, tolerance_for, what="sum_diff on 2^24 elements", fraction=0.5)
    assert s.timing_rounds[-1]["graph"] and ours > 0.5 * copy, (ours, copy)


class ListingTransport(InProcessTransport):
    """Lists the files of each call's folder as the student's process left them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.left: list[set[str]] = []

    def run(self, folder, timeout_s):
        super().run(folder, timeout_s)
        self.left.append({p.name for p in folder.iterdir()})


def count_elements(x, y):
    return int(x.numel())


def test_a_re_run_call_carries_no_inputs_after_and_a_call_without_one_still_must(tmp_path):
    """A call whose launches the judge re-runs reads the arguments after the call from the re-run, so the student's
    process writes none (4 of the 20 passes of a 93M-element call through files); a call that is not re-run still
    returns them, and an answer that lost them is refused."""
    transport = ListingTransport({"add": add, "count": count_elements}, tmp_path)
    s = JudgeSession(transport)
    s.build_namespace([], ["add", "count"])
    x, y = torch.randn(300), torch.randn(300)
    out = s.call("add", [x, y], {}, "add(x, y)").output
    assert torch.allclose(out, x + y) and not {f for f in transport.left[-1] if f.startswith("input")}
    result = s.call("count", [x, y], {}, "count(x, y)", require_kernel=False)
    assert result.output == 300 and len(result.inputs_after) == 2
    assert {"input0.bin", "input1.bin"} <= transport.left[-1]


class LinkingTransport(InProcessTransport):
    """A dishonest answer: after the harness wrote the output, it is swapped for a link to a file of the grader's
    machine (the exchange folder is the student's to write in; the judge reads it on the host)."""

    def __init__(self, secret, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.secret = secret

    def run(self, folder, timeout_s):
        super().run(folder, timeout_s)
        out = folder / "output.bin"
        size = out.stat().st_size
        self.secret.write_bytes(b"\x00\x00\x80\x3f" * (size // 4))   # float32 1.0s: any value would leak
        out.unlink()
        out.symlink_to(self.secret)


def test_an_output_that_links_to_a_host_file_is_refused_and_quotes_nothing_of_it(tmp_path):
    """The judge reads the student's exchange files without following a link: a link to a file of the grader's
    machine is refused unread, as a FIFO or a device would be (triton_course.exchange.open_regular)."""
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    s = JudgeSession(LinkingTransport(tmp_path / "host-secret.bin", {"add": add}, exchange))
    s.build_namespace([], ["add"])
    with pytest.raises(CheckFailed, match="could not be read") as caught:
        s.call("add", [torch.randn(300), torch.randn(300)], {}, "add(x, y)")
    assert "symbolic link" in str(caught.value), caught.value   # before: the host file's bytes graded as the output
