"""The judge grades what a call's Triton launches compute when re-run alone, from a record of them, in a
process that runs none of the notebook's Python (triton_course.relaunch, grader.relauncher).

Honest launchers of every kind must come out the same: several launches, buffers kept from one call to the
next, views and strides, a callable grid. Work that the student's own evidence cannot see must not: PyTorch
in another thread or behind a switched-off operator log, data made before the call or from Python values,
a kernel written at run time, answers handed to a kernel as arguments, a record forged or removed. Each
dishonest function below is something a submission could hand in (the sandboxed versions of the worst
are in solutions/03_vector_add/submissions/attacks, graded for real by tests/test_grader_safety.py)."""

from __future__ import annotations

import json
import threading

import pytest
import torch
import triton
import triton.language as tl

from grader.judge import InProcessTransport, JudgeSession
from grader.relauncher import (MAX_INFORMATION_BITS, MIN_INFORMATION_BITS, ProcessRelauncher, information_limit,
                               record_information, record_problems, rerun_evidence)
from tests.conftest import run_with_answers
from triton_course import relaunch
from triton_course.checks import CheckFailed, check
from triton_course.relaunch import kernel_shape, kernel_source_problems


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = idx < n
    tl.store(out_ptr + idx, tl.load(x_ptr + idx, mask=ok) + tl.load(y_ptr + idx, mask=ok), mask=ok)


@triton.jit
def _shift_kernel(x_ptr, out_ptr, shift_ptr, n, BLOCK: tl.constexpr):
    """out = x + shift[0], with shift a buffer the launcher made."""
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = idx < n
    tl.store(out_ptr + idx, tl.load(x_ptr + idx, mask=ok) + tl.load(shift_ptr), mask=ok)


@triton.jit
def _countdown_kernel(x_ptr, out_ptr, steps_ptr, n, BLOCK: tl.constexpr):
    """Copies x, after counting down from steps[0] (a buffer made before any call) to zero."""
    k = tl.load(steps_ptr)
    while k != 0:
        k -= 1
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = idx < n
    tl.store(out_ptr + idx, tl.load(x_ptr + idx, mask=ok), mask=ok)


def add(x, y):
    out = torch.empty_like(x)
    _add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out


def add_in_two_halves_with_a_callable_grid(x, y):
    """Two launches on views of strided halves, the grid a function of the meta-parameters."""
    out = torch.empty_like(x)
    h = x.numel() // 2
    for lo, hi in ((0, h), (h, x.numel())):
        xs, ys, os_ = x[lo:hi], y[lo:hi], out[lo:hi]
        _add_kernel[lambda meta, n=hi - lo: (triton.cdiv(n, meta["BLOCK"]),)](xs, ys, os_, hi - lo, BLOCK=64)
    return out


_KEPT: dict[str, torch.Tensor] = {}


def add_with_a_kept_buffer(x, y):
    """x + y + shift, where shift is a zero buffer made at the first call and reused by every later one
    (the count buffer of chapter 07's split tiles is such a buffer)."""
    if "shift" not in _KEPT:
        _KEPT["shift"] = torch.zeros(1)
    tmp = torch.empty_like(x)
    _add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, tmp, x.numel(), BLOCK=256)
    out = torch.empty_like(x)
    _shift_kernel[(triton.cdiv(x.numel(), 256),)](tmp, out, _KEPT["shift"], x.numel(), BLOCK=256)
    return out


_MADE_AT_IMPORT = torch.zeros(1)


def add_with_a_buffer_made_before_any_call(x, y):
    tmp = torch.empty_like(x)
    _add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, tmp, x.numel(), BLOCK=256)
    out = torch.empty_like(x)
    _shift_kernel[(triton.cdiv(x.numel(), 256),)](tmp, out, _MADE_AT_IMPORT, x.numel(), BLOCK=256)
    return out


def add_pytorch_in_a_thread(x, y):
    out = torch.empty_like(x)
    _add_kernel[(1,)](x, y, out, 0, BLOCK=256)   # a launch that computes nothing
    helper = threading.Thread(target=lambda: out.copy_(x + y))
    helper.start()
    helper.join()
    return out


def add_with_the_operator_log_off(x, y):
    from torch.utils._python_dispatch import _disable_current_modes

    out = torch.empty_like(x)
    _add_kernel[(1,)](x, y, out, 0, BLOCK=256)
    with _disable_current_modes():
        out.copy_(x + y)
    return out


def add_from_python_values(x, y):
    """The sum computed in Python, made a tensor, and moved into the output by a real kernel."""
    values = torch.tensor([a + b for a, b in zip(x.tolist(), y.tolist())], dtype=x.dtype)
    out = torch.empty_like(x)
    _add_kernel[(triton.cdiv(x.numel(), 256),)](values, torch.zeros_like(x), out, x.numel(), BLOCK=256)
    return out


@triton.jit
def _put_kernel(out_ptr, i, value):
    tl.store(out_ptr + i, value)


def add_value_by_value(x, y):
    """PyTorch's answer (from another thread) stored one value per launch by a real kernel."""
    answer = []
    helper = threading.Thread(target=lambda: answer.extend((x + y).tolist()))
    helper.start()
    helper.join()
    out = torch.empty_like(x)
    for i, v in enumerate(answer):
        _put_kernel[(1,)](out, i, v)
    return out


@triton.jit
def _add_desc_kernel(x_desc, y_desc, out_desc, BLOCK: tl.constexpr):
    """out = x + y, every tensor read and written through a host tensor descriptor."""
    i = tl.program_id(0) * BLOCK
    out_desc.store([i], x_desc.load([i]) + y_desc.load([i]))


@triton.jit
def _touch_nothing_kernel(out_desc):
    pass


def add_through_descriptors(x, y):
    """Honest: the output reaches the kernel only inside a TensorDescriptor (chapters 07 and 09 teach them)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    out = torch.empty_like(x)
    x_d, y_d, out_d = (TensorDescriptor.from_tensor(t, [256]) for t in (x, y, out))
    _add_desc_kernel[(triton.cdiv(x.numel(), 256),)](x_d, y_d, out_d, BLOCK=256)
    return out


def add_behind_a_descriptor_decoy(x, y):
    """PyTorch's answer from another thread, with the output handed to a kernel inside a descriptor that the
    kernel never writes through: the launch "received" it, and the re-run still computes nothing."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    out = torch.empty_like(x)
    _touch_nothing_kernel[(1,)](TensorDescriptor.from_tensor(out, [256]))
    helper = threading.Thread(target=lambda: out.copy_(x + y))
    helper.start()
    helper.join()
    return out


def session(tmp_path, allowed=None, **fns) -> JudgeSession:
    s = JudgeSession(InProcessTransport(dict(fns), tmp_path), allowed_kernels=allowed)
    s.build_namespace([], list(fns))
    return s


def reference(x, y):
    return x + y


def _check(s, n=700):
    check(s.base["add"], (torch.randn(n), torch.randn(n)), reference, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("fn", [add, add_in_two_halves_with_a_callable_grid, add_with_a_kept_buffer,
                                add_through_descriptors])
def test_honest_launchers_are_graded_as_re_run(tmp_path, fn):
    s = session(tmp_path, add=fn)
    for n in (1, 300, 1000, 4097):
        _check(s, n)
    assert s.relaunches == 4


def test_a_kept_buffer_is_followed_and_freed(tmp_path):
    """Storages the student's process still holds stay in the relaunch; those it dropped are freed there."""
    _KEPT.clear()
    s = session(tmp_path, add=add_with_a_kept_buffer)
    for _ in range(6):
        _check(s)
    kept = len(relaunch._STATE.storages)
    for _ in range(6):
        _check(s)
    assert len(relaunch._STATE.storages) <= kept   # six more calls' inputs and outputs did not pile up


@pytest.mark.parametrize("fn", [add_pytorch_in_a_thread, add_with_the_operator_log_off,
                                add_with_a_buffer_made_before_any_call, add_from_python_values,
                                add_behind_a_descriptor_decoy])
def test_work_outside_the_recorded_launches_earns_nothing(tmp_path, fn):
    s = session(tmp_path, add=fn)
    with pytest.raises(CheckFailed, match="do not compute") as err:
        _check(s)
    assert "re-ran them alone" in str(err.value)


def test_a_descriptor_decoy_earns_nothing_and_the_honest_launcher_after_it_everything(tmp_path):
    """The descriptor decoy, then an honest launcher that writes through descriptors, in the same process (as
    one worker grades one student after another): the decoy fails every check, the honest one passes every
    check, so nothing the decoy left in the relaunch carries over."""
    decoy = session(tmp_path / "decoy", add=add_behind_a_descriptor_decoy)
    for n in (300, 1000):
        with pytest.raises(CheckFailed, match="do not compute"):
            _check(decoy, n)
    honest = session(tmp_path / "honest", add=add_through_descriptors)
    for n in (300, 1000, 4097):
        _check(honest, n)
    assert honest.relaunches == 3


@pytest.mark.parametrize("student, words", [
    ("zed_pytorch_in_a_thread", "do not compute"),
    ("cal_kernel_made_at_run_time", "that the notebook does not define"),
    ("dee_answers_as_arguments", "bits of numbers and strings"),
    ("ned_answer_in_a_string", "string Triton has no use for"),
    ("ola_answer_in_one_integer", "Triton's arguments and constexprs hold at most 64"),
    ("pat_answer_in_short_names", "bits of numbers and strings"),
    ("quo_torch_through_the_course", "reaches the module torch"),
])
def test_the_notebook_cheats_earn_no_correctness_point(student, words):
    """Chapter 03 notebooks from its attack corpus (solutions/03_vector_add/submissions/attacks), through the judge in this process (the patched launcher, which
    needs the second sandbox's own Triton, is graded by tests/test_grader_safety.py)."""
    outcomes = run_with_answers("03_vector_add", student, kind="attacks")
    correctness = [gid for gid in outcomes if gid not in ("test_add_bandwidth", "test_add_gpu_sizes")]
    assert len(correctness) == 4
    for gid in correctness:
        assert outcomes[gid].startswith("CheckFailed") and words in outcomes[gid], (gid, outcomes[gid][:500])


def test_a_blinded_operator_log_earns_nothing_and_the_honest_student_after_it_everything():
    """solutions/03_vector_add/submissions/attacks/kai_blinds_the_operator_log: the log's path once torch._dynamo is imported,
    hijacked so that no operator is logged, and x + y by PyTorch behind an empty launch. The verdict comes from
    the re-run launches, so it earns no correctness point; the honest student graded next in the same process
    earns every one. (Run in this process, so what the cheat replaces in torch is put back before the next
    student, whose real grading starts a fresh kernel process.)"""
    import sys

    had_dynamo, disable = "torch._dynamo" in sys.modules, torch._disable_dynamo
    try:
        outcomes = run_with_answers("03_vector_add", "kai_blinds_the_operator_log", kind="attacks")
    finally:  # as a fresh kernel process would start for the next student
        torch._disable_dynamo = disable
        if not had_dynamo:
            sys.modules.pop("torch._dynamo", None)
    honest = run_with_answers("03_vector_add", "ada_correct")
    correctness = [gid for gid in outcomes if gid not in ("test_add_bandwidth", "test_add_gpu_sizes")]
    assert len(correctness) == 4
    for gid in correctness:
        assert outcomes[gid].startswith("CheckFailed") and "do not compute" in outcomes[gid], (gid, outcomes[gid][:500])
        assert honest[gid] == "passed", (gid, honest[gid][:500])


def test_only_kernels_the_notebook_defines_are_re_run(tmp_path):
    allowed = {kernel_shape('''
@triton.jit
def _shift_kernel(x_ptr, out_ptr, shift_ptr, n, BLOCK: tl.constexpr):
    """out = x + shift[0], with shift a buffer the launcher made."""
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = idx < n
    tl.store(out_ptr + idx, tl.load(x_ptr + idx, mask=ok) + tl.load(shift_ptr), mask=ok)
''')}
    with pytest.raises(CheckFailed, match="`_add_kernel` that the notebook does not define"):
        _check(session(tmp_path, allowed=allowed, add=add))


class ForgingTransport(InProcessTransport):
    """The student's process answers, then edits the record of its launches with ``forge``."""

    def __init__(self, namespace, exchange, forge):
        super().__init__(namespace, exchange)
        self.forge = forge

    def run(self, folder, timeout_s):
        super().run(folder, timeout_s)
        self.forge(folder / "record.json")


def _forged(tmp_path, forge) -> JudgeSession:
    s = JudgeSession(ForgingTransport({"add": add}, tmp_path, forge))
    s.build_namespace([], ["add"])
    return s


def _edit(path, change):
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))


@pytest.mark.parametrize("forge, words", [
    (lambda p: p.unlink(), "no record of its launches"),
    (lambda p: p.write_text("{not json"), "does not parse"),
    (lambda p: _edit(p, lambda r: r["steps"].insert(0, {"op": "aten.add.Tensor", "args": [], "kwargs": {}, "out": []})),
     "ran aten.add.Tensor outside its kernels"),
    (lambda p: _edit(p, lambda r: [d.update(source=d["source"].replace("idx = ", "import os\n    idx = ", 1))
                                   for d in r["kernels"].values()]), "contains a Import statement"),
    (lambda p: _edit(p, lambda r: r["outputs"].clear()), "does not match its inputs and outputs"),
])
def test_a_forged_or_missing_record_earns_nothing(tmp_path, forge, words):
    with pytest.raises(CheckFailed, match=words):
        _check(_forged(tmp_path, forge))


def test_record_rules_name_each_problem():
    honest = {"inputs": [0], "steps": [], "outputs": [], "kernels": {}}
    assert record_problems(honest, None) == []
    assert "readable record" in record_problems({"steps": 3}, None)[0]
    many = {**honest, "steps": [{"launch": "k", "args": list(range(1000)), "kwargs": {}}],
            "kernels": {"k": {"course": "triton_course.checks", "name": "k"}}}
    # the step (8), its missing grid (None, 1) and each integer by its bit length and sign: about 10,000 bits
    assert record_information(many).bits == 8 + 1 + sum(i.bit_length() + 1 for i in range(1000))
    assert "bits of numbers and strings" in " ".join(record_problems(many, None, output_bits=32 * 600))
    assert record_problems(many, None, output_bits=32 * 64 * 9000) == []   # 1/64 of a large output may pass
    assert information_limit(1) == MIN_INFORMATION_BITS and information_limit(10**9) == MAX_INFORMATION_BITS
    source = "def k(x):\n    return os.getcwd()\n"
    outside = {**honest, "kernels": {"k": {"name": "k", "source": source, "globals": {}}}}
    assert "`os`" in " ".join(record_problems(outside, None))
    alien = {**honest, "kernels": {"k": {"course": "numpy", "name": "k"}}}
    assert "not the course's" in " ".join(record_problems(alien, None))


def _one_launch(*args, globals_=None, source="def k(out):\n    pass\n"):
    """A record of one launch of a notebook kernel ``k`` with ``args``, reading ``globals_``."""
    return {"inputs": [], "outputs": [], "steps": [{"launch": "k", "args": list(args), "kwargs": {}, "grid": {"tuple": [1]}}],
            "kernels": {"k": {"name": "k", "source": source, "globals": globals_ or {}}}}


@pytest.mark.parametrize("record, words", [
    # one number of any bit length: counted by its bits, not as one distinct value
    (_one_launch({"constexpr": 7 ** 3000}), "bits of numbers"),
    # a long string, as an argument, a constexpr, a global the launcher rebinds, or inline-asm text
    (_one_launch("1.25,-0.5,3.75"), "string Triton has no use for"),
    (_one_launch({"constexpr": "0.1 0.2 0.3"}), "string Triton has no use for"),
    (_one_launch(globals_={"ANSWER": "3.5;1.25"}, source="def k(out):\n    tl.store(out, float(ANSWER))\n"),
     "string Triton has no use for"),
    (_one_launch({"constexpr": "mov.b32 $0, 0x3f800000;"}), "string Triton has no use for"),
    # short names, each one harmless, many in a tuple: every character counts
    (_one_launch({"tuple": [f"v{i:08d}" for i in range(200)]}), "bits of numbers"),
    # one launch a value, the value said by which of thousands of notebook kernels is launched
    ({"inputs": [], "outputs": [], "steps": [{"launch": f"k{i}", "args": [], "kwargs": {}} for i in range(300)],
      "kernels": {f"k{i}": {"course": "triton_course.checks", "name": f"k{i}"} for i in range(70000)}},
     "bits of numbers"),
    # the same small numbers over and over, one launch each (the order carries the answer)
    ({**_one_launch(), "steps": [{"launch": "k", "args": [i % 2, i % 3], "kwargs": {}, "grid": {"tuple": [1]}}
                                 for i in range(600)]}, "bits of numbers"),
])
def test_answers_in_non_tensor_values_are_refused_by_what_they_can_carry(record, words):
    assert words in " ".join(record_problems(record, None, output_bits=32 * 1000))


def test_strings_triton_uses_pass_and_cost_little():
    record = _one_launch(".cg", "evict_last", {"constexpr": "float16"}, {"tl_dtype": "fp32"}, {"constexpr": "relu"})
    assert record_problems(record, None, output_bits=32 * 1000) == []
    assert record_information(record).bits < 100


@pytest.mark.parametrize("source, globals_, words", [
    # a chain through an allowed module to PyTorch, the shell, or a plain Python function of the course
    ("def k(q):\n    t = triton_course.relaunch.torch\n", {"triton_course": {"module": "triton_course"}},
     "reaches the module torch"),
    ("def k(q):\n    triton_course.relaunch.os.system('id')\n", {"triton_course": {"module": "triton_course"}},
     "reaches the module os"),
    ("def k(q):\n    R.torch.zeros(1)\n", {"R": {"module": "triton_course.relaunch"}}, "reaches the module torch"),
    ("def k(q):\n    tl.core.builtins.open('/etc/passwd')\n", {"tl": {"module": "triton.language"}}, "builtins"),
    ("def k(q):\n    triton.runtime.driver\n", {"triton": {"module": "triton"}}, "triton.runtime"),
    ("def k(q):\n    return ref(q, q, q)\n",
     {"ref": {"import": "triton_course.attention", "attr": "attention_reference"}}, "neither Triton's language"),
    # the interpreter's tensors hold NumPy arrays: values may use Triton's attributes only
    ("def k(q):\n    q.handle.data[:] = 0\n", {}, "`.handle`"),
    ("def k(q):\n    return NAMES.encode()\n", {"NAMES": "a"}, "`.encode`"),
    ("def k(q):\n    f = lambda: 0\n", {}, "Lambda"),
    # the course's own @triton.jit helpers (the fast paths' tile loops) are the course's work, not the student's
    ("def k(q):\n    return tile(q, 0, 1, 1, 1, 16, 16)\n",
     {"tile": {"import": "triton_course.attention_fast", "attr": "load_tile"}}, "neither Triton's language"),
    ("def k(q):\n    return F.load_tile(q, 0, 1, 1, 1, 16, 16)\n", {"F": {"module": "triton_course.attention_fast"}},
     "neither Triton's language"),
])
def test_kernel_source_names_only_the_language(source, globals_, words):
    problems = kernel_source_problems("k", source, globals_)
    assert words in " ".join(problems), problems


def test_the_language_and_its_jit_helpers_pass():
    source = ("def k(x_ptr, BLOCK: tl.constexpr):\n"
              "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
              "    x = tl.load(x_ptr + offs, mask=offs < 8, other=0.0).to(tl.float32)\n"
              "    w = x_ptr.dtype.element_ty.primitive_bitwidth + math.pi + tl.math.exp(x) + x.T.shape[0]\n"
              "    tl.store(x_ptr + offs, tl.extra.libdevice.rsqrt(x) + triton.language.sum(x, 0), mask=offs < 8)\n")
    globals_ = {"tl": {"module": "triton.language"}, "math": {"module": "math"}, "triton": {"module": "triton"}}
    assert kernel_source_problems("k", source, globals_) == []


def test_the_relaunch_process_refuses_such_a_kernel_by_itself(tmp_path):
    """Defence in depth: a record that reached the re-run process with a kernel that leads out of the language
    is refused there too, before any of its source runs."""
    from triton_course.relaunch import RelaunchError, _Relaunch

    kernels = {"k": {"name": "k", "source": "def k(q):\n    triton_course.relaunch.os.system('touch /tmp/x')\n",
                     "globals": {"triton_course": {"module": "triton_course"}}}}
    with pytest.raises(RelaunchError, match="reaches the module os"):
        _Relaunch(tmp_path).build("k", kernels)


def test_rerun_evidence_names_the_kernels_and_the_scratch_memory(tmp_path):
    """What the judge reads off an accepted record: the notebook kernels launched (and those they call), and
    the bytes used besides inputs and outputs: a buffer made in the call, and one kept from an earlier call,
    in every call that uses it."""
    _KEPT.clear()
    s = session(tmp_path, add=add_with_a_kept_buffer)
    for _ in range(2):
        result = s.base["add"].remote_call([torch.randn(1000), torch.randn(1000)])
        evidence = result.rerun
        assert set(evidence.kernels) == {"_add_kernel", "_shift_kernel"}
        assert "tl.load(shift_ptr)" in evidence.kernels["_shift_kernel"]
        guard = result.allocation.buffer.untyped_storage().nbytes() - 1000 * 4   # the harness pads allocations
        assert guard > 0 and evidence.scratch_bytes == (1000 * 4 + guard) + (4 + guard), evidence.scratch_bytes
    assert len(s.base["add"].reruns) == 2 and s.base["add"].reruns[-1] == evidence
    record = {"nonce": "n", "inputs": [0], "outputs": [{"tensor": 1}], "kernels": {},
              "steps": [{"op": "aten.empty.memory_format", "out": [1], "nbytes": [64], "args": []},
                        {"op": "aten.empty.memory_format", "out": [2], "nbytes": [8], "args": []},
                        {"launch": "k", "args": [{"tensor": 2}, {"tensor": 1}, {"tensor": 0}]}]}
    assert rerun_evidence(record, {}).scratch_bytes == 8


def test_answers_handed_over_as_arguments_are_refused(tmp_path):
    """The re-run would reproduce these (each value is in the record), but no honest call passes thousands of
    bits of numbers to its launches."""
    with pytest.raises(CheckFailed, match="bits of numbers"):
        _check(session(tmp_path, add=add_value_by_value))


def test_the_relaunch_process_answers_times_out_and_restarts(tmp_path):
    """The grader's real relauncher (unsandboxed here): a separate process that re-runs the record; a re-run
    that never ends is stopped at the call's time limit, and the next call gets a fresh process."""
    steps = torch.ones(1, dtype=torch.int32)   # made before the call: -1 (garbage) in the re-run, which never ends

    def copy_after_countdown(x, y):
        out = torch.empty_like(x)
        _countdown_kernel[(triton.cdiv(x.numel(), 256),)](x, out, steps, x.numel(), BLOCK=256)
        return out

    (tmp_path / "relaunch").mkdir()
    relauncher = ProcessRelauncher(tmp_path / "relaunch", log=tmp_path / "relaunch.log")
    s = JudgeSession(InProcessTransport({"add": add, "copy": copy_after_countdown, "thread": add_pytorch_in_a_thread},
                                        tmp_path), call_timeout_s=20, relauncher=relauncher)
    s.build_namespace([], ["add", "copy", "thread"])
    try:
        relauncher.start()   # as the grader starts it, before the first call: that call uses this process
        early = relauncher.proc.pid
        relauncher.start()
        assert relauncher.proc.pid == early and relauncher.proc.poll() is None
        _check(s)
        first = relauncher.proc.pid
        assert first == early
        with pytest.raises(CheckFailed, match="do not compute"):
            check(s.base["thread"], (torch.randn(500), torch.randn(500)), reference, atol=1e-6, rtol=1e-5)
        s.call_timeout_s = 3
        with pytest.raises(CheckFailed, match="did not finish within 3 s"):
            check(s.base["copy"], (torch.randn(500), torch.randn(500)), lambda x, y: x, atol=0, rtol=0)
        assert relauncher.proc is None
        s.call_timeout_s = 20
        _check(s)
        assert relauncher.proc.pid != first
    finally:
        relauncher.close()


def test_a_launch_repeated_with_the_same_arguments_costs_only_the_repeat():
    """A correct kernel launched ten times with the same arguments (09's sol_ten_times_slower on a GPU) carries no
    more than one launch and a count; on the H200 it was refused as 5,000-8,000 bits before repeats were priced so.
    Arguments that change from launch to launch are charged in full, every time."""
    args = list(range(40))
    once = _one_launch(*args)
    ten = {**once, "steps": once["steps"] * 10}
    varied = {**once, "steps": [{**once["steps"][0], "args": [a + i for a in args]} for i in range(10)]}
    one_step = record_information(once).bits
    assert record_information(ten).bits == one_step + 9 * (8 + 1)
    assert record_information(varied).bits > 9 * one_step
    assert record_problems(ten, None, output_bits=32 * 1000) == []
