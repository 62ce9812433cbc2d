"""Chapter 09 (attention): the offset checks catch the Z = 1-only row offset; the model answer (FlashAttention-2's
forward with pointer loads) is right on the cases the hidden tests use and stays a model answer (few lines, nothing
that asks whether the grader records it, no Hopper machinery in the student's template); each named hint fires on the
mistake it names and stays silent on another; each example submission fails the test it should -- at the
interpreter's block sizes and, for the mistakes that only long sequences or the diagonal block expose (no
online-softmax rescale, a causal bound in whole blocks), at every launch a GPU uses; the causal-skipping experiment
counts the key blocks the kernel really visits; and the fast path beyond the exercise (triton_course.attention_fast:
Hopper's TMA and warp-specialised launches, which the interpreter emulates) stays right."""

from __future__ import annotations

import functools
import json
import math
import zlib

import nbformat
import pytest
import torch

from grader.autograde import find_submissions, grade_all
from grader.course import answers_folder, attack_submissions, example_submissions, solution_notebook
from grader.examples import build_submissions
from grader.notebook_code import load_namespace
from tests.conftest import ROOT, run_with_answers, solution_cell
from triton_course.attention import (AMPERE_CONFIGS, ATTENTION_HINTS, COPY_HINTS, INTERPRETER_CONFIG,
                                     POINTER_CONFIGS, TURING_CONFIG, AttentionConfig, attention_reference,
                                     attention_tolerance, causal_block_sweep, check_base_offset, check_row_offset,
                                     check_split, copy_reference, estimated_shared_bytes, fast_launch_config,
                                     fit_shared_memory, for_length, fused_allowance, launch_config, pinned_config,
                                     recorded_causal_ratios, shared_memory_limit, tiles_visited)
from triton_course.attention_fast import HOPPER_CONFIGS, fast_attention
from triton_course.checks import CheckFailed, check, error_over_tolerance

CHAPTER = "09_attention"
ATTENTION_TESTS = ["test_attention_one_batch", "test_attention_batches_and_heads", "test_attention_causal",
                   "test_attention_strided_heads", "test_attention_sm_scale", "test_attention_fp16"]
#: Hidden tests whose cases span several key blocks even at the GPU's largest BLOCK_N (128).
LONG_TESTS = ["test_attention_one_batch", "test_attention_batches_and_heads", "test_attention_causal",
              "test_attention_fp16"]


def table_launches() -> list[AttentionConfig]:
    """Every launch of the fast path's Hopper table (an entry by length holds several)."""
    return [c for entry in HOPPER_CONFIGS.values()
            for c in ((entry,) if isinstance(entry, AttentionConfig) else entry)]


#: (BLOCK_M, BLOCK_N) of every configuration a GPU launches the exercise's kernel with: Hopper's, Ampere's, Turing's.
GPU_BLOCKS = sorted({(c.block_m, c.block_n) for c in (*POINTER_CONFIGS.values(), *AMPERE_CONFIGS.values(),
                                                       TURING_CONFIG)})
#: The fast path's Hopper table, with its TMA and warp-specialisation switches (emulated on the CPU).
HOPPER_PATHS = sorted(set(table_launches()), key=str)


@pytest.fixture(scope="module")
def ns():
    return load_namespace(solution_notebook(CHAPTER))


def widely_copied(off_z, off_h, H, N):
    return off_z + off_h * N


def test_the_widely_copied_row_offset_passes_z1_and_fails_past_it():
    check_row_offset(widely_copied, Z=1, H=5, N=9)          # the easy case hides it
    with pytest.raises(CheckFailed, match="wrong"):
        check_row_offset(widely_copied, Z=2, H=5, N=9)


def test_offset_checks_accept_the_reference_and_read_strides_from_the_tensor(ns):
    check_split(ns["split_program_id"], Z=3, H=4)
    check_row_offset(ns["row_offset_2d"], Z=3, H=4, N=11)
    projection = torch.empty(2, 7, 3, 8).transpose(1, 2)
    check_base_offset(ns["base_offset"], projection)
    with pytest.raises(CheckFailed):   # assuming contiguous heads is wrong for a transposed layout
        check_base_offset(lambda z, h, sz, sh: (z * 3 + h) * 7 * 8, projection)


def test_reference_kernel_matches_float64(ns):
    attention = ns["attention"]
    torch.manual_seed(1)
    for (z, h, n, d), causal, scale, dtype in [((2, 3, 37, 16), False, None, torch.float32),
                                               ((2, 2, 19, 32), True, 0.7, torch.float32),
                                               ((3, 2, 5, 8), True, None, torch.float16)]:
        q, k, v = (torch.randn(z, h, n, d, dtype=dtype) for _ in range(3))
        got = attention(q, k, v, causal, scale)
        want = attention_reference(q.double(), k.double(), v.double(), causal, scale)
        assert got.dtype == dtype and got.shape == q.shape
        torch.testing.assert_close(got.double(), want, atol=1e-2, rtol=1e-2)


def test_reference_kernel_on_heads_from_a_projection(ns):
    z, n, h, d = 2, 21, 3, 16
    qkv = torch.randn(z, n, 3, h, d)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    assert not q.is_contiguous()
    got = ns["attention"](q, k, v, True, 1 / math.sqrt(d))
    torch.testing.assert_close(got.double(), attention_reference(q.double(), k.double(), v.double(), True),
                               atol=1e-4, rtol=1e-4)


def test_flop_count(ns):
    assert ns["attention_flops"](2, 3, 128, 64) == 4 * 2 * 3 * 128 * 128 * 64
    assert ns["attention_flops"](2, 3, 128, 64, causal=True) == 2 * 2 * 3 * 128 * 128 * 64


@pytest.mark.notebook
def test_examples_fail_for_the_right_reason(tmp_path):

    students = build_submissions(CHAPTER, tmp_path / "submitted")
    students += build_submissions(CHAPTER, tmp_path / "submitted", kind="attacks")
    keep = ["cy_row_offset_z1", "dan_contiguous_heads", "eli_causal_off_by_one", "fay_ignores_sm_scale",
            "lin_right_only_up_to_2048_keys"]
    assert {"ada_correct", "ben_untouched", *keep} <= set(students)
    subs = [s for s in find_submissions(tmp_path / "submitted", CHAPTER) if s.student in keep]
    records = {(r.student, r.grade_id): r for r in grade_all(subs, tmp_path / "out", workers=2, feedback=False)}

    def status(student, test):
        return records[(student, test)].status

    # Z = 1 passes, Z > 1 exposes the widely copied row offset, in the exercise and in the kernel.
    assert status("cy_row_offset_z1", "test_row_offset_one_batch") == "passed"
    assert status("cy_row_offset_z1", "test_attention_one_batch") == "passed"
    assert status("cy_row_offset_z1", "test_row_offset_batched") == "failed"
    copy = records[("cy_row_offset_z1", "test_contiguous_heads")]
    assert copy.status == "failed" and "off_z * H * N + off_h * N" in copy.message
    batched = records[("cy_row_offset_z1", "test_attention_batches_and_heads")]
    assert batched.status == "failed" and "off_z * H * N + off_h * N" in batched.message
    # Contiguous heads assumed: fine until the heads come from a projection.
    assert status("dan_contiguous_heads", "test_attention_batches_and_heads") == "passed"
    strided = records[("dan_contiguous_heads", "test_attention_strided_heads")]
    assert strided.status == "failed" and "not contiguous" in strided.message
    copy = records[("dan_contiguous_heads", "test_contiguous_heads")]
    assert copy.status == "failed" and "not contiguous" in copy.message
    # The causal mask off by one fails causal tests only.
    assert status("eli_causal_off_by_one", "test_attention_batches_and_heads") == "passed"
    causal = records[("eli_causal_off_by_one", "test_attention_causal")]
    assert causal.status == "failed" and "key <= query" in causal.message
    # An ignored sm_scale fails only where a scale is passed.
    assert status("fay_ignores_sm_scale", "test_attention_causal") == "passed"
    scale = records[("fay_ignores_sm_scale", "test_attention_sm_scale")]
    assert scale.status == "failed" and "sm_scale explicitly" in scale.message
    for student in keep:
        assert status(student, "test_split_program_id") == "passed"
        # past correctness: each is fused, and fusion counts for right answers only (the causal mask off by one loses
        # it too); the long sequences and the speed are not graded without a GPU (0 points)
        fused = records[(student, "test_attention_fused")]
        assert fused.status == ("failed" if student == "eli_causal_off_by_one" else "passed"), (student, fused.message)
        for test in ("test_attention_long_sequences", *SPEED_TESTS):
            assert status(student, test) == "not_graded" and records[(student, test)].points == 0, (student, test)
    # Right up to 2,048 keys: every correctness test here passes; its long-sequence test is not graded, not passed
    # (on a GPU it fails: test_an_attention_wrong_past_2048_keys_loses_the_long_sequence_points_and_is_told_the_size).
    lin = {gid: r for (student, gid), r in records.items() if student == "lin_right_only_up_to_2048_keys"}
    assert {gid for gid, r in lin.items() if r.status != "passed"} == {"test_attention_long_sequences", *SPEED_TESTS}
    assert "NOT GRADED" in lin["test_attention_long_sequences"].message


def test_the_gpu_configurations_fit_what_these_tests_assume():
    """Every GPU configuration has BLOCK_M a multiple of BLOCK_N (the causal stages rely on it), and the hidden
    tests' long N spans more than three key blocks of the largest BLOCK_N, so a missing rescale shows."""
    assert all(bm % bn == 0 for bm, bn in GPU_BLOCKS + [(c.block_m, c.block_n) for c in HOPPER_PATHS])
    assert set(POINTER_CONFIGS) == set(HOPPER_CONFIGS) == {(64, False), (64, True), (128, False), (128, True)}
    judge = solution_cell(CHAPTER, "judge_attention")
    assert "LONG_N = 3 * 128 + 17" in judge and max(bn for _, bn in GPU_BLOCKS) <= 128


# ---------------------------------------------------------------------------------------------------
# A model answer: FlashAttention-2's forward with pointer loads, and a template without Hopper machinery
# ---------------------------------------------------------------------------------------------------

def _solution_regions(nb) -> list[str]:
    """The code between ### BEGIN SOLUTION and ### END SOLUTION in every cell of a notebook."""
    import re

    return [m for c in nb.cells for m in re.findall(r"### BEGIN SOLUTION\n(.*?)\n *### END SOLUTION", c.source, re.S)]


def test_the_solution_is_a_model_answer_of_at_most_150_lines():
    """Issue 44: the graded solution regions of the chapter are code a student can read as the answer, at most 150
    lines in all, with plain pointer loads and no logic that asks whether the grader is recording; the Hopper
    machinery (descriptors, warp specialisation, Gluon) lives in triton_course.attention_fast, outside them."""
    nb = nbformat.read(solution_notebook(CHAPTER), as_version=4)
    regions = _solution_regions(nb)
    assert sum(len(r.splitlines()) for r in regions) <= 150, [len(r.splitlines()) for r in regions]
    code = "\n".join(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))
    for word in ("recording", "make_block_ptr", "descriptor", "desc", "warp_specialize", "WARP_SPEC", "TMA",
                 "gluon", "HOPPER_CONFIGS"):
        assert word not in code, word
    assert "tl.exp2" in code and "alpha" in code and "tl.where(" in code


def test_the_template_leaves_the_offsets_the_loop_the_softmax_and_the_masks_to_the_student():
    """The student's attention cell keeps the signatures, the launch rule and the input checks, and asks for the rest:
    no descriptor tuples, no warp-specialisation flags, no masks or rescale written for them."""
    from grader.course import student_notebook

    cell = next(c.source for c in nbformat.read(student_notebook(CHAPTER), as_version=4).cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == "attention")
    assert cell.count("raise NotImplementedError()") == 3
    for given in ("def _attend_blocks(", "MASKED: tl.constexpr", "def attention_kernel(",
                  "config = launch_config(q, causal)", 'expect("q", q'):
        assert given in cell, given
    for word in ("desc", "TMA", "WARP_SPEC", "warp_specialize", "tile_source", "tl.where(", "alpha", "tl.exp2(",
                 "tl.dot(", "tl.load(", "tl.store("):
        assert word not in cell, word


def test_an_attention_that_calls_the_fast_path_earns_no_attention_point():
    """solutions/09_attention/submissions/attacks/pat_calls_the_fast_path hands every call to
    triton_course.attention_fast.fast_attention: right answers, from kernels beyond the exercise that the student did not
    write. Every attention correctness test must earn 0; the offsets and the copy keep their points."""
    outcomes = run_with_answers(CHAPTER, "pat_calls_the_fast_path", kind="attacks")
    assert all(outcomes[t] == "passed" for t in ("test_split_program_id", "test_contiguous_heads")), outcomes
    for test in ATTENTION_TESTS:
        assert outcomes[test].startswith("CheckFailed") and "the course's own kernel" in outcomes[test], \
            (test, outcomes[test][:300])
    honest = run_with_answers(CHAPTER, "ada_correct")   # graded next in the same process: every point it earns
    assert all(honest[test] == "passed" for test in ATTENTION_TESTS), honest


def hopper_device():
    """This process's device, described as an H200 (kernels still run nowhere: only the launch rules read it)."""
    from triton_course import device as course_device

    return course_device.Device(False, torch.device("cpu"), "NVIDIA H200", (9, 0), 132, 4800.0, None)


def test_launch_config_on_hopper_takes_the_pointer_table_and_float32_a_smaller_launch(monkeypatch):
    """On a Hopper GPU the exercise's kernel takes POINTER_CONFIGS for 16-bit inputs, never TMA or warp
    specialisation, and float32 the Ampere launch, whose tiles fit in shared memory; the fast path takes its table's
    launch for each N (descriptors made on the host where TMA runs without warp specialisation), float32 the same
    Ampere launch (its 128 x 128, 3-stage launch needs 450 KB in float32, found on the H200 by tests/gpu/measure.py)."""
    from triton_course import device as course_device

    monkeypatch.setattr(course_device, "_CURRENT", hopper_device())
    monkeypatch.setattr("triton_course.attention._use_tma_scratch", lambda: None)
    for (d, causal), entry in HOPPER_CONFIGS.items():
        for n in (1024, 2048, 4096, 16384):
            q = torch.empty(1, 1, n, d, dtype=torch.float16)
            assert launch_config(q, causal) == POINTER_CONFIGS[(d, causal)], (d, causal, n)
            config = fast_launch_config(q, q, q, causal, HOPPER_CONFIGS)
            assert config == for_length(entry, n), (d, causal, n)
            args = config.launch_for(q, q, q, q)
            assert ("q_desc" in args) == (config.tma and not config.warp_spec), (d, causal, n, config)
            q32 = q.float()
            for small in (launch_config(q32, causal), fast_launch_config(q32, q32, q32, causal, HOPPER_CONFIGS)):
                assert small == AMPERE_CONFIGS[d], (d, causal, n)
                tiles = small.block_m * d + 2 * small.num_stages * small.block_n * d   # q, and k and v per stage
                assert tiles * 4 <= 200 * 1024, small   # float32: well inside the H200's 227 KB per program
    assert set(launch_config(q, False).launch) == {"BLOCK_M", "BLOCK_N", "num_warps", "num_stages"}


def student_gpu(name: str, cc: tuple[int, int]):
    """This process's device, described as a student's GPU (only the launch rules read it; no kernel runs)."""
    from triton_course import device as course_device

    return course_device.Device(False, torch.device("cpu"), name, cc, 40, 300.0, None)


@pytest.mark.parametrize("name, cc", [("NVIDIA A10", (8, 6)), ("NVIDIA L4", (8, 9))])
def test_launch_config_shrinks_a_launch_that_does_not_fit_the_gpus_shared_memory(monkeypatch, name, cc):
    """float32 at D = 128 with the Ampere launch needs 112 KB (compiled for sm_86, tests/test_gpu_limits.py), an
    A10 or L4 has 99 KB: the rule drops a pipeline stage there, keeps the 16-bit launch as it is, and keeps the
    float32 one whole on a GPU with room (an A100's 163 KB)."""
    from triton_course import device as course_device

    monkeypatch.setattr(course_device, "_CURRENT", student_gpu(name, cc))
    limit = shared_memory_limit()
    assert limit == 99 * 1024
    q16, q32 = torch.empty(1, 1, 256, 128, dtype=torch.float16), torch.empty(1, 1, 256, 128)
    assert launch_config(q16, True) == AMPERE_CONFIGS[128]
    small = launch_config(q32, True)
    assert small == AttentionConfig(64, 64, 4, 1), small
    assert fast_launch_config(q32, q32, q32, True, HOPPER_CONFIGS) == small
    assert estimated_shared_bytes(small, 128, 4) <= limit < estimated_shared_bytes(AMPERE_CONFIGS[128], 128, 4)
    monkeypatch.setattr(course_device, "_CURRENT", student_gpu("NVIDIA A100", (8, 0)))
    assert launch_config(q32, True) == AMPERE_CONFIGS[128]


def test_a_launch_is_shrunk_stages_first_then_key_blocks_then_query_blocks():
    """Each step keeps BLOCK_N dividing BLOCK_M (the causal stages need it); nothing fits in too little memory."""
    start = AttentionConfig(128, 64, 8, 3)
    assert fit_shared_memory(start, 64, 2, None) == start
    assert fit_shared_memory(start, 64, 2, 2 * 64 * (128 + 2 * 2 * 64)) == AttentionConfig(128, 64, 8, 2)
    assert fit_shared_memory(start, 64, 2, 2 * 64 * (128 + 2 * 32)) == AttentionConfig(128, 32, 8, 1)
    tiny = fit_shared_memory(start, 128, 4, 4 * 128 * (32 + 2 * 16))
    assert tiny == AttentionConfig(32, 16, 8, 1) and tiny.block_m % tiny.block_n == 0
    with pytest.raises(ValueError, match="no attention launch at head dim 128 fits in 1,000 bytes"):
        fit_shared_memory(start, 128, 4, 1000)


def test_the_turing_launch_fits_a_t4_at_every_head_dim(monkeypatch):
    """The T4's launch is left as it is (tests/test_gpu_limits.py finds float32 at D = 128 at 64 KB exactly)."""
    from triton_course import device as course_device

    monkeypatch.setattr(course_device, "_CURRENT", student_gpu("Tesla T4", (7, 5)))
    for d in (16, 32, 64, 128):
        for dtype in (torch.float16, torch.float32):
            q = torch.empty(1, 1, 256, d, dtype=dtype)
            assert launch_config(q, False) == TURING_CONFIG, (d, dtype)
            assert fast_launch_config(q, q, q, False, HOPPER_CONFIGS) == TURING_CONFIG, (d, dtype)


def test_a_table_entry_by_length_needs_a_last_launch_for_every_n():
    short, long = AttentionConfig(64, 64, 4, 3, up_to_n=2048), AttentionConfig(128, 128, 8, 3)
    assert [for_length((short, long), n) for n in (1, 2048, 2049)] == [short, short, long]
    assert for_length(long, 10**6) is long
    with pytest.raises(ValueError, match="no launch"):
        for_length((short,), 4096)


def test_host_descriptors_are_what_the_fast_kernel_reads_with_tma(monkeypatch):
    """A TMA launch of the fast path without warp specialisation hands its kernel four descriptors made on the host
    (whose 4-D coordinates the kernel must get right: a wrong head shows as a wrong answer here); a warp-specialised
    one none, so its programs make their own."""
    from triton_course.checks import check_all

    made = []
    original = AttentionConfig.launch_for

    def counting(self, *tensors):
        args = original(self, *tensors)
        made.append(sum(k.endswith("_desc") for k in args))
        return args

    monkeypatch.setattr(AttentionConfig, "launch_for", counting)
    torch.manual_seed(0)
    cases = [(*(torch.randn(2, 3, 48, 16) for _ in range(3)), causal) for causal in (False, True)]
    for config, descriptors in ((AttentionConfig(32, 16, 4, 1, tma=True), 4),
                                (AttentionConfig(32, 16, 4, 1, tma=True, warp_spec=True), 0)):
        made.clear()
        with pinned_config(config):
            check_all(fast_attention, cases[:1], attention_reference, tolerances=attention_tolerance,
                      hints=ATTENTION_HINTS, quiet=True)
        assert made == [descriptors], (config, made)


def test_the_launch_rules_fall_back_where_tma_cannot_run():
    """The interpreter and non-Hopper GPUs get pointer loads; the exercise's kernel never takes TMA, even pinned; a
    pinned TMA configuration keeps TMA in the fast path on the CPU only for layouts a descriptor can address, and
    warp specialisation only without a causal mask and with N a multiple of BLOCK_N."""
    q = torch.randn(2, 3, 64, 16)
    assert launch_config(q, False) == fast_launch_config(q, q, q, False, HOPPER_CONFIGS) == INTERPRETER_CONFIG
    hopper = AttentionConfig(64, 32, 4, 2, tma=True, warp_spec=True)
    with pinned_config(hopper):
        assert launch_config(q, False) == AttentionConfig(64, 32, 4, 2)
        assert fast_launch_config(q, q, q, False, HOPPER_CONFIGS) == hopper
        assert fast_launch_config(q, q, q, True, HOPPER_CONFIGS).warp_spec is False
        ragged = torch.randn(2, 3, 60, 16)
        assert fast_launch_config(ragged, ragged, ragged, False, HOPPER_CONFIGS).warp_spec is False
        odd = torch.randn(2, 3, 64, 17)[..., :16]          # rows 17 floats apart: not 16-byte aligned
        assert fast_launch_config(odd, odd, odd, False, HOPPER_CONFIGS).tma is False
    assert launch_config(q, False) == INTERPRETER_CONFIG   # the pin is gone


def test_the_gluon_path_stands_aside_off_hopper_and_where_the_sweeps_time_the_table():
    """The fast path's Gluon kernel (Hopper, D = 128, N a multiple of 128) is never taken for CPU tensors or under
    the interpreter, nor inside pinned_config or table_launches_only, which the sweeps of lab/ use to time the
    Triton kernel as the table launches it; through_launch_table holds each call of a function to the table, and
    lets go after. Nothing about it depends on whether the grader records a call: nothing graded takes it. Its
    kernels are defined wherever Triton ships Gluon in their form (tests/test_packaging.py compiles them for sm_90
    with every Triton of the range)."""
    from triton_course import attention_fast
    from triton_course.attention import gluon_path_allowed, table_launches_only, through_launch_table
    from triton_course.integrity import KernelLaunches
    from triton_course.relaunch import LaunchRecord

    q = torch.randn(1, 2, 256, 128)
    assert attention_fast.GLUON_BLOCK == 128 and attention_fast.gluon_path(q, q, q) is False
    assert gluon_path_allowed()
    with table_launches_only():
        assert not gluon_path_allowed()
    with pinned_config(AttentionConfig(32, 16, 4, 1)):
        assert not gluon_path_allowed()
    seen = []
    through_launch_table(lambda: seen.append(gluon_path_allowed()))()
    assert seen == [False] and gluon_path_allowed()
    with KernelLaunches(record=LaunchRecord([])):
        assert gluon_path_allowed()
    if attention_fast.GLUON:
        assert type(attention_fast.attention_gluon_kernel).__name__ == "GluonJITFunction"


def test_a_causal_launch_whose_key_blocks_do_not_divide_its_query_blocks_is_refused_not_wrong(ns):
    """The unmasked stage of a causal program runs whole key blocks up to start_m (a multiple of BLOCK_M): with
    BLOCK_N = 2 * BLOCK_M its last block reaches past the diagonal without a mask, and the kernel is wrong (on the
    H200 a 64 x 128 causal launch was 0.64 off, solutions/09_attention/records/09_attention_d128_launches.json).
    launch_config refuses such a launch with a message; the same launch without the mask, and every launch the
    chapter uses, run."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 64, 16) for _ in range(3))
    wide = AttentionConfig(16, 32, 4, 1)
    with pinned_config(wide):
        with pytest.raises(ValueError, match="BLOCK_N to divide BLOCK_M"):
            ns["attention"](q, k, v, True)
        assert torch.allclose(ns["attention"](q, k, v, False), attention_reference(q, k, v, False), atol=1e-4)
    # the kernel itself, launched at those blocks past the check, does go wrong: the refusal is needed
    out = torch.empty_like(q)
    ns["attention_kernel"][(4, 2)](q, k, v, out, *q.stride(), *k.stride(), *v.stride(), *out.stride(), 2, 64,
                                   ns["LOG2E"] / 4, CAUSAL=True, HEAD_DIM=16, BLOCK_M=16, BLOCK_N=32)
    assert (out - attention_reference(q, k, v, True)).abs().max() > 0.1
    for blocks in (*GPU_BLOCKS, *((c.block_m, c.block_n) for c in (INTERPRETER_CONFIG, *HOPPER_PATHS))):
        assert blocks[0] % blocks[1] == 0, blocks


#: Warp-specialised and TMA configurations the focused sweep (lab/sweeps/attention_sweep.py --focus) times on
#: the H200: the fast path's single unmasked loop and the output through the tensor descriptor (store_tile),
#: emulated here.
SWEEP_PATHS = [AttentionConfig(128, 64, 4, 3, tma=True, warp_spec=True),
               AttentionConfig(128, 128, 4, 2, tma=True, warp_spec=True),
               AttentionConfig(64, 32, 4, 3, tma=True)]


@pytest.mark.parametrize("config", SWEEP_PATHS, ids=AttentionConfig.describe)
def test_sweep_paths_match_float64_and_write_only_their_rows(config):
    """N = 256 takes the warp-specialised single loop (a multiple of every BLOCK_N); N = 200 the two stages, with a
    ragged last block whose rows past N the descriptor store must drop (check_all's guards see any write past a
    head's end, and its poison any row left unwritten)."""
    from triton_course.checks import check_all

    torch.manual_seed(0)
    cases = [(*(torch.randn(2, 2, n, 16) for _ in range(3)), causal)
             for n, causal in ((256, False), (200, False), (200, True))]
    with pinned_config(config):
        used = [fast_launch_config(*case[:3], case[3], HOPPER_CONFIGS).warp_spec for case in cases]
        check_all(fast_attention, cases, attention_reference, tolerances=attention_tolerance,
                  hints=ATTENTION_HINTS, quiet=True)
    assert used == [config.warp_spec and 256 % config.block_n == 0, False, False]


@functools.cache
def executed_with(student: str) -> tuple[dict, dict[str, str]]:
    """The solution notebook with ``student``'s answers, run in this process as nbval would (every code cell
    before the hidden tests; a failing self-check is the student's business); returns the namespace and the
    hidden attention tests' sources by grade_id."""
    from grader.examples import answer_source, parse_answers
    from grader.notebook_code import exec_cell

    answers = parse_answers((example_submissions(CHAPTER) / f"{student}.py").read_text())
    nb = nbformat.read(solution_notebook(CHAPTER), as_version=4)
    ns: dict = {"__name__": f"nb09_{student}"}
    tests: dict[str, str] = {}
    for i, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code":
            continue
        if meta.get("grade"):
            if meta["grade_id"] in ATTENTION_TESTS:
                tests[meta["grade_id"]] = cell.source
            continue
        if tests:  # the benchmark after the tests
            break
        source = answer_source(answers[meta["grade_id"]], cell.source, meta["grade_id"]) \
            if meta.get("solution") and meta.get("grade_id") in answers else cell.source
        try:
            exec_cell(source, f"<nb09 {student} cell {i}>", ns)
        except CheckFailed:
            pass
    return ns, tests


def outcomes_at_blocks(ns: dict, tests: dict[str, str], block_m: int, block_n: int,
                       only: list[str], config: AttentionConfig | None = None) -> dict[str, str]:
    """Run hidden attention tests with the kernel pinned to one GPU configuration (in the interpreter)."""
    outcomes = {}
    with pinned_config(config or AttentionConfig(block_m, block_n, 4, 1)):
        for gid in only:
            source = tests[gid]
            torch.manual_seed(zlib.crc32(gid.encode()))
            try:
                exec(compile(source, f"<{gid}>", "exec"), dict(ns))
                outcomes[gid] = "passed"
            except CheckFailed as exc:
                outcomes[gid] = f"failed: {exc}"
    return outcomes


def test_the_new_mistakes_lose_their_tests():
    """Through the judge, at the interpreter's block sizes. (The solution keeps every test: graded by nbgrader
    with this Triton in tests/test_autograde.py, and through the judge with the range's ends by the range check.)"""
    no_rescale = run_with_answers(CHAPTER, "gil_no_rescale")
    for test in LONG_TESTS:
        assert no_rescale[test].startswith("CheckFailed"), (test, no_rescale[test])
    block_units = run_with_answers(CHAPTER, "hal_causal_block_units")
    assert block_units["test_attention_causal"].startswith("CheckFailed")
    assert "not per block" in block_units["test_attention_causal"]
    for test in ("test_attention_one_batch", "test_attention_batches_and_heads"):
        assert block_units[test] == "passed"
    for outcomes in (no_rescale, block_units):
        assert all(outcomes[t] == "passed" for t in ("test_split_program_id", "test_row_offset_batched",
                                                     "test_base_offset_layouts", "test_contiguous_heads"))


@pytest.mark.parametrize("block_m,block_n", GPU_BLOCKS)
def test_mistakes_lose_points_at_gpu_block_sizes(block_m, block_n):
    """The kernel pinned to each GPU configuration: the tests still tell the correct kernel from a kernel that
    never rescales (their long N spans several key blocks) and from a causal bound in whole blocks."""
    ns, tests = executed_with("ada_correct")
    outcomes = outcomes_at_blocks(ns, tests, block_m, block_n, ATTENTION_TESTS)
    assert set(outcomes.values()) == {"passed"}, outcomes
    ns, tests = executed_with("gil_no_rescale")
    for test, outcome in outcomes_at_blocks(ns, tests, block_m, block_n, LONG_TESTS).items():
        assert outcome.startswith("failed") and "rescaled by alpha" in outcome, (test, outcome[:2000])
    ns, tests = executed_with("hal_causal_block_units")
    outcome = outcomes_at_blocks(ns, tests, block_m, block_n, ["test_attention_causal"])["test_attention_causal"]
    assert outcome.startswith("failed") and "not per block" in outcome, outcome[:2000]


@pytest.mark.parametrize("config", HOPPER_PATHS, ids=AttentionConfig.describe)
def test_the_fast_path_passes_every_attention_test_at_each_launch_of_its_table(config):
    """The fast path beyond the exercise (triton_course.attention_fast) at each launch of its Hopper table, TMA
    descriptors and the warp-specialised single loop included (the interpreter emulates both): it passes every
    hidden attention test, as the model answer does, so that what the measurements time as the course's fastest
    attention is right."""
    ns, tests = executed_with("ada_correct")
    outcomes = outcomes_at_blocks({**ns, "attention": fast_attention}, tests, config.block_m, config.block_n,
                                  ATTENTION_TESTS, config)
    assert set(outcomes.values()) == {"passed"}, outcomes


# ---------------------------------------------------------------------------------------------------
# Each named hint fires on its own symptom only
# ---------------------------------------------------------------------------------------------------

@functools.cache
def kernels_of(student: str, corpus: str = "examples") -> dict:
    """The setup, import, judge and solution cells of the notebook with ``student``'s answers (from
    solutions/09_attention/submissions/<corpus>), run in this process (no self-checks, plots or benchmarks): the student's
    functions, quickly."""
    from grader.examples import answer_source, parse_answers
    from grader.notebook_code import exec_cell

    answers = parse_answers((answers_folder(CHAPTER, corpus) / f"{student}.py").read_text())
    nb = nbformat.read(solution_notebook(CHAPTER), as_version=4)
    ns: dict = {"__name__": f"nb09_kernels_{student}"}
    for i, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        wanted = (i <= 2 or meta.get("solution") or "judge" in cell.metadata.get("tags", [])) and not meta.get("grade")
        if cell.cell_type != "code" or not wanted:
            continue
        gid = meta.get("grade_id")
        source = answer_source(answers[gid], cell.source, gid) if meta.get("solution") and gid in answers \
            else cell.source
        exec_cell(source, f"<nb09 {student} cell {i}>", ns)
    return ns


def _projection(z, n, h, d):
    qkv = torch.randn(z, n, 3, h, d)
    return tuple(qkv[:, :, i].transpose(1, 2) for i in range(3))


#: Inputs, by name; each hint below is tried on one of them.
HINT_CASES = {
    "Z2 H3 N37": lambda: tuple(torch.randn(2, 3, 37, 16) for _ in range(3)),
    "causal Z2 H3 N37": lambda: (*(torch.randn(2, 3, 37, 16) for _ in range(3)), True),
    "projected heads": lambda: (*_projection(2, 37, 3, 16), False),
    "explicit scale": lambda: (*(torch.randn(2, 2, 29, 32) for _ in range(3)), False, 1.0),
}

#: (a phrase of the hint, the mistake it names: fires, another mistake that also fails the case: silent, case)
HINT_PAIRS = [
    ("look at how off_z enters", "cy_row_offset_z1", "gil_no_rescale", "Z2 H3 N37"),
    ("Head 0 of every batch is right", "kim_no_head_offset", "cy_row_offset_z1", "Z2 H3 N37"),
    ("from the tensor's own strides", "dan_contiguous_heads", "gil_no_rescale", "projected heads"),
    ("its own position included", "eli_causal_off_by_one", "hal_causal_block_units", "causal Z2 H3 N37"),
    ("not per block", "hal_causal_block_units", "eli_causal_off_by_one", "causal Z2 H3 N37"),
    ("rescaled by alpha", "gil_no_rescale", "jo_keys_past_n_kept", "Z2 H3 N37"),
    ("use sm_scale, and fall back", "fay_ignores_sm_scale", "lou_exp2_without_log2e", "explicit scale"),
    ("off by a factor ln 2", "lou_exp2_without_log2e", "fay_ignores_sm_scale", "explicit scale"),
    ("keys past N took part", "jo_keys_past_n_kept", "gil_no_rescale", "Z2 H3 N37"),
]


def attention_report(student: str, case: str) -> str:
    torch.manual_seed(zlib.crc32(case.encode()))
    with pytest.raises(CheckFailed) as failure:
        check(kernels_of(student)["attention"], HINT_CASES[case](), attention_reference, atol=1e-2, rtol=1e-2,
              hints=ATTENTION_HINTS)
    return str(failure.value)


def test_every_attention_hint_is_paired_with_a_mistake():
    assert len(HINT_PAIRS) == len(ATTENTION_HINTS)
    for hint in ATTENTION_HINTS:
        assert sum(phrase in hint.message for phrase, *_ in HINT_PAIRS) == 1, hint.message


@pytest.mark.parametrize("phrase,fires,silent,case", HINT_PAIRS, ids=[p[1] for p in HINT_PAIRS])
def test_a_hint_fires_on_its_mistake_and_not_on_another(phrase, fires, silent, case):
    assert phrase in attention_report(fires, case)
    assert phrase not in attention_report(silent, case)   # this case fails too, for another reason


@pytest.mark.parametrize("phrase,fires,silent", [
    ("rows past N were stored", "mo_copy_store_unmasked", "cy_row_offset_z1"),
    ("look at how off_z enters", "cy_row_offset_z1", "mo_copy_store_unmasked"),
])
def test_copy_hints_fire_on_their_mistake_only(phrase, fires, silent):
    def report(student):
        torch.manual_seed(3)
        with pytest.raises(CheckFailed) as failure:
            check(kernels_of(student)["contiguous_heads"], (torch.randn(2, 3, 37, 8),), copy_reference,
                  atol=0.0, rtol=0.0, hints=COPY_HINTS)
        return str(failure.value)

    assert phrase in report(fires)
    assert phrase not in report(silent)


def test_the_correct_kernel_passes_the_hint_cases():
    ns = kernels_of("ada_correct")
    for name, make in HINT_CASES.items():
        torch.manual_seed(zlib.crc32(name.encode()))
        check(ns["attention"], make(), attention_reference, atol=1e-2, rtol=1e-2, hints=ATTENTION_HINTS)


# ---------------------------------------------------------------------------------------------------
# The experiment: key blocks visited with and without causal skipping
# ---------------------------------------------------------------------------------------------------

def test_the_sweep_counts_the_key_blocks_the_kernel_visits():
    """Counted from the kernel's own tl.dot calls; a kernel without causal skipping visits every block."""
    ns = kernels_of("ada_correct")
    rows = causal_block_sweep(ns["attention"], ns["attention_kernel"], [(32, 16), (64, 64)], 128, 16,
                              torch.float32, "cpu")
    assert [(r.tiles_full, r.tiles_causal) for r in rows] == [(32, 20), (4, 3)]
    assert all(r.counted and r.tiles_causal == tiles_visited(128, r.block_m, r.block_n, True) for r in rows)
    q = torch.randn(1, 1, 16, 16)
    assert launch_config(q, False) == INTERPRETER_CONFIG   # the pin is gone
    ns = kernels_of("hal_causal_block_units")   # same loop bounds: same counts, even though it is wrong
    with pytest.raises(CheckFailed, match="wrong at BLOCK_M=32"):
        causal_block_sweep(ns["attention"], ns["attention_kernel"], [(32, 16)], 128, 16, torch.float32, "cpu")


def test_the_experiment_leaves_out_a_shape_the_gpu_cannot_hold_and_says_why(ns, monkeypatch, capsys):
    """On a T4 (64 KB) the 128 x 128 shape (96 KB at D = 64 in float16) is skipped with a printed reason before
    anything runs; a shape Triton refuses for its resources (OutOfResources) is skipped the same way."""
    from triton.runtime.errors import OutOfResources

    from triton_course import device as course_device

    def never(*args):
        raise AssertionError("a skipped shape must not run")

    with monkeypatch.context() as m:
        m.setattr(course_device, "_CURRENT", student_gpu("Tesla T4", (7, 5)))
        rows = causal_block_sweep(never, None, [(128, 128)], 4096, 64, torch.float16, "cpu")
    assert rows == []
    said = capsys.readouterr().out
    assert "BLOCK_M=128, BLOCK_N=128 skipped" in said and "65,536" in said and "D = 64" in said

    def refused(*args):
        raise OutOfResources(98304, 65536, "shared memory")

    rows = causal_block_sweep(refused, None, [(32, 16)], 64, 16, torch.float32, "cpu")
    assert rows == [] and "skipped: this GPU refused the launch" in capsys.readouterr().out


def test_recorded_causal_ratios_come_from_the_results_file():
    ratios, source = recorded_causal_ratios(4096, 64)
    assert ratios and "solutions/09_attention/records/09_attention.json" in source
    for (bm, bn, _, _), (full, causal) in ratios.items():
        assert 0.4 < causal / full < 0.8 and bm % bn == 0


def test_the_benchmark_plot_names_the_roof_of_each_part():
    """On a GPU the plot draws the matmuls under the fp16 tensor-core roof and the exponentials under the
    special-function units, each line saying which; under the interpreter it draws no roof at all."""
    import matplotlib

    matplotlib.use("Agg")
    from triton_course.attention import exp_ceiling_tflops, plot_tflops
    from triton_course.bench import Sweep
    from triton_course.roofline import datasheet_roof

    tensor, sfu = datasheet_roof("H200", "fp16_tensor"), datasheet_roof("H200", "sfu")
    gpu = Sweep([1024, 4096], "N", {"Triton attention": [300.0, 420.0]}, interpreted=False, unit="TFLOP/s")
    labels = [line.get_label() for line in plot_tflops(gpu, "t", tensor, sfu, 64).get_lines()]
    assert any("fp16 tensor cores" in label for label in labels)
    assert any("special-function units" in label and "256 FLOPs" in label for label in labels)
    assert exp_ceiling_tflops(sfu.peak_tflops, 64) == pytest.approx(sfu.peak_tflops * 256)
    cpu = Sweep([32], "N", {"Triton attention": [0.1]}, interpreted=True, unit="TFLOP/s")
    labels = [line.get_label() for line in plot_tflops(cpu, "t", tensor, sfu, 64).get_lines()]
    assert not any("roof" in label or "ceiling" in label for label in labels)


def test_the_fast_paths_table_is_the_focused_sweeps_choice_and_its_figures_are_printed():
    """The fast path's HOPPER_CONFIGS takes, for every (D, causal), the launch the focused sweep
    (solutions/09_attention/records/09_attention_focus.json) found best, and recorded_table_launches reports that
    launch's figures from the same file (the chapter's appendix cell prints them); the recorded SDPA backend is
    cuDNN's."""
    import json

    from triton_course.attention import recorded_sdpa_backend, recorded_table_launches

    focus = json.loads((ROOT / "solutions" / "09_attention" / "records" / "09_attention_focus.json").read_text())
    table = recorded_table_launches()
    assert set(table) == set(focus["winners"]) == {"D=64", "D=64, causal", "D=128", "D=128, causal"}
    for case, winner in focus["winners"].items():
        d, causal = int(case.split(",")[0][2:]), case.endswith("causal")
        chosen = winner["table"]
        assert chosen[-1]["up_to_n"] is None and all(c["up_to_n"] for c in chosen[:-1]), case
        for n in (1024, 2048, 4096, 8192, 16384):   # the sweep's N: each takes the launch the sweep chose for it
            mine = for_length(HOPPER_CONFIGS[(d, causal)], n)
            want = next(c for c in chosen if c["up_to_n"] is None or n <= c["up_to_n"])["config"]
            assert {k: getattr(mine, k) for k in want if k != "up_to_n"} == {
                k: v for k, v in want.items() if k != "up_to_n"}, (case, n)
        assert table[case]["launch"].startswith(chosen[0]["launch"]) and 0 < table[case]["tflops"] < 1000, table[case]
        ratios = [r["ratio_to_sdpa"] for r in focus["rows"] if r["dtype"] == "float16" and r["D"] == d
                  and r["causal"] == causal]
        assert table[case]["worst"] == min(ratio[next(c["launch"] for c in chosen if c["up_to_n"] is None
                                                      or n <= c["up_to_n"])]
                                           for ratio, n in zip(ratios, (1024, 2048, 4096, 8192, 16384)))
    assert recorded_sdpa_backend().startswith("cuDNN attention")


def test_the_pointer_launches_are_the_sweeps_and_the_chapter_quotes_their_figures():
    """The exercise's launches on Hopper (POINTER_CONFIGS) are launches the launch sweep timed through pointers on the
    H200 (its "ptr" rows), each the best of the pointer launches timed for its case by the geometric mean over N or
    within 0.02 of it; recorded_pointer_launches reads their figures, which the chapter quotes (its appendix) and
    its speed tests' comments use (the ratio at the timed shape, N = 4096, D = 64)."""
    import json

    from triton_course.attention import recorded_pointer_launches

    focus = json.loads((ROOT / "solutions" / "09_attention" / "records" / "09_attention_focus.json").read_text())
    recorded = recorded_pointer_launches()
    assert set(recorded) == {"D=64", "D=64, causal", "D=128", "D=128, causal"}
    spans = {}
    for (d, causal), config in POINTER_CONFIGS.items():
        row = recorded[f"D={d}" + (", causal" if causal else "")]
        assert row["launch"] == f"ptr {config.block_m}x{config.block_n} w{config.num_warps} s{config.num_stages}"
        assert row["n"] == [1024, 2048, 4096, 8192, 16384]
        rows = [r for r in focus["rows"] if r["dtype"] == "float16" and r["D"] == d and r["causal"] == causal]
        geomeans = {name: math.exp(sum(math.log(r["ratio_to_sdpa"][name]) for r in rows) / len(rows))
                    for name in rows[0]["ratio_to_sdpa"] if name.startswith("ptr ")}
        assert row["geomean"] >= max(geomeans.values()) - 0.02, (d, causal, geomeans)
        ratios = [r["ratio_to_sdpa"][row["launch"]] for r in rows]
        spans.setdefault(d, []).extend(ratios)
        if d == 64:   # the speed tests' shape: N = 4096
            quoted = f"ran at {round(rows[2]['ratio_to_sdpa'][row['launch']], 2)} of SDPA"
            assert quoted in solution_cell(CHAPTER, "test_attention_causal_speed" if causal else "test_attention_speed")
    text = "\n".join(c.source for c in nbformat.read(solution_notebook(CHAPTER), as_version=4).cells)
    for d, quoted in ((64, "0.91-1.04"), (128, "0.73-0.82")):
        assert f"{min(spans[d]):.2f}-{max(spans[d]):.2f}" == quoted and quoted in text, (d, spans[d])


def test_sdpa_backend_is_named_from_the_profilers_kernels_with_cudnn_before_flash():
    """cuDNN's attention kernels carry "flash" in their names too; naming them FlashAttention-2 was a real
    mislabel in a recorded run, made by the measurement scripts, which now both name it with this function."""
    from triton_course.attention import sdpa_backend_of

    cudnn = ["Memset (Device)", "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64"]
    assert sdpa_backend_of(cudnn) == "cuDNN attention"
    assert sdpa_backend_of(["void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>"]).startswith(
        "FlashAttention-2")
    assert sdpa_backend_of(["fmha_cutlassF_f16_aligned_64x64_rf_sm80"]).startswith("memory-efficient")
    assert sdpa_backend_of(["ampere_fp16_s16816gemm_fp16_128x128", "softmax_warp_forward"]).startswith("math")


def _tf32(x: torch.Tensor) -> torch.Tensor:
    """fp32 values as a tensor core takes them for TF32: the low 13 of 23 mantissa bits dropped (float64 out)."""
    bits = x.to(torch.float32).view(torch.int32) & ~0x1FFF
    return bits.view(torch.float32).double()


def _tf32_attention(q, k, v, sm_scale):
    """Attention with both products taken as TF32 (q, k, then P and v truncated), the rest exact."""
    s = _tf32(q) @ _tf32(k).transpose(-1, -2) * sm_scale
    p = torch.exp(s - s.amax(-1, keepdim=True))
    return (_tf32(p) @ _tf32(v)) / p.sum(-1, keepdim=True)


# ---------------------------------------------------------------------------------------------------
# Past correctness: sequences of 4,096 keys and more (GPU), fusion (any device), speed against SDPA (GPU)
# ---------------------------------------------------------------------------------------------------

#: The hidden tests past correctness, and their points (the 17 points of correctness come first).
BEYOND_CORRECTNESS = {"test_attention_long_sequences": 3, "test_attention_fused": 2, "test_attention_speed": 2,
                      "test_attention_causal_speed": 2}
SPEED_TESTS = ["test_attention_speed", "test_attention_causal_speed"]


def judge_session(student: str, exchange, corpus: str = "examples", before=None):
    """(a judge session, the notebook's namespace) for ``student``'s answers from solutions/09_attention/submissions/<corpus>: the
    student notebook's setup, judge and solution cells run in this process (no self-checks or benchmarks), the
    judge in this process too, with its re-runs (grader.judge.InProcessTransport), as tests.conftest.run_with_answers
    has it. ``before(ns)`` runs after the notebook's cells, before any graded call (work a self-check would do)."""
    from grader.examples import apply_answers, parse_answers
    from grader.execute import graded_functions, is_judge_cell, is_test, submitted_kernels
    from grader.judge import InProcessTransport, JudgeSession
    from grader.notebook_code import exec_cell
    from grader.relauncher import notebook_kernel_shapes

    nb = apply_answers(CHAPTER, parse_answers((answers_folder(CHAPTER, corpus) / f"{student}.py").read_text()))
    source = nbformat.read(solution_notebook(CHAPTER), as_version=4)
    ns: dict = {"__name__": "__main__"}
    for i, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and not is_test(cell) and (i <= 2 or meta.get("solution") or is_judge_cell(cell)):
            exec_cell(cell.source, f"<{CHAPTER} {student} cell {i}>", ns)
    if before is not None:
        before(ns)
    session = JudgeSession(InProcessTransport(ns, exchange), allowed_kernels=notebook_kernel_shapes(nb))
    problems = session.build_namespace([c.source for c in source.cells if is_judge_cell(c)], graded_functions(source),
                                       submitted_kernels(nb))
    assert not problems, problems
    return session, ns


def judged(student: str, grade_ids: list[str], exchange, corpus: str = "examples", before=None) -> dict:
    """The hidden tests ``grade_ids`` of the solution notebook, in notebook order, run by the judge against
    ``student``'s notebook (:func:`judge_session`): grade_id -> grader.judge.TestOutcome (its score, what it
    printed, its error)."""
    from grader.execute import is_test
    from grader.judge import run_test_cell

    session, _ = judge_session(student, exchange, corpus, before)
    cells = [c for c in nbformat.read(solution_notebook(CHAPTER), as_version=4).cells
             if is_test(c) and c.metadata["nbgrader"]["grade_id"] in grade_ids]
    return {c.metadata["nbgrader"]["grade_id"]: run_test_cell(c.source, session.namespace_for(
        c.metadata["nbgrader"]["grade_id"]), c.metadata["nbgrader"]["grade_id"]) for c in cells}


def test_the_chapter_grades_long_sequences_fusion_and_speed_beside_its_17_points_of_correctness():
    """The correctness tests keep their 17 points; sequences of 4,096 keys and more add 3 (at_gpu_sizes, with the
    cell's own points), fusion 2, each speed check 2 (throughput_points against SDPA, causal and not): 26 in all.
    The timed cells are named *_speed, as the margins sweep (lab/sweeps/hidden_test_margins.py) expects."""
    from tests.gpu_sizes import ends_with_at_gpu_sizes

    points = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
              for c in nbformat.read(solution_notebook(CHAPTER), as_version=4).cells
              if c.metadata.get("nbgrader", {}).get("grade")}
    assert {gid: points[gid] for gid in BEYOND_CORRECTNESS} == BEYOND_CORRECTNESS
    assert sum(p for gid, p in points.items() if gid not in BEYOND_CORRECTNESS) == 17 and sum(points.values()) == 26
    assert list(points)[-4:] == list(BEYOND_CORRECTNESS)
    assert ends_with_at_gpu_sizes(CHAPTER, "test_attention_long_sequences")
    for gid in SPEED_TESTS:
        source = solution_cell(CHAPTER, gid)
        assert "throughput_points(attention, sdpa," in source and "fraction=0.5, points=2" in source
        # the margin the comment quotes is the model answer's, recorded (solutions/09_attention/records/09_attention.json)
        recorded = json.loads((ROOT / "solutions" / CHAPTER / "records" / f"{CHAPTER}.json").read_text())["speed_check"]
        assert f"The model answer itself ran at {min(r['ratio_to_sdpa'] for r in recorded.values()):.2f} of SDPA" in source


def test_the_long_sequence_test_is_not_graded_under_the_interpreter_and_spans_every_head_dimension():
    """NOT GRADED and 0 here (the grader reports not_graded, never passed). On a GPU it checks, at every head
    dimension attention accepts (powers of two from 1 to 128), sequences of 4,096 keys and more: a whole number of
    every BLOCK_N without a mask (the unmasked stage alone), ragged without a mask and ragged
    causal, on Z = H = 2; all of it within a T4."""
    from tests.gpu_sizes import MAX_INPUT_BYTES, run_cell

    printed, score, ns = run_cell(CHAPTER, "test_attention_long_sequences")
    assert score == 0 and printed.startswith("NOT GRADED"), printed
    cases = ns["long_cases"]()
    seen = {(c[0].shape[-1], c[3], c[0].shape[2] % 128 == 0) for c in cases}
    assert seen == {(d, causal, whole) for d in (1, 2, 4, 8, 16, 32, 64, 128)
                    for causal, whole in ((False, True), (False, False), (True, False))}
    assert min(c[0].shape[2] for c in cases) >= 4096 and all(c[0].shape[:2] == (2, 2) for c in cases)
    assert {c[0].dtype for c in cases} == {torch.float16, torch.float32}
    assert sum(3 * c[0].numel() * c[0].element_size() for c in cases) < MAX_INPUT_BYTES


def test_an_attention_wrong_past_2048_keys_loses_the_long_sequence_points_and_is_told_the_size(monkeypatch):
    """solutions/09_attention/submissions/attacks/lin_right_only_up_to_2048_keys (its key loop stops at key 2,048). With at_gpu_sizes
    told it runs on a GPU, the long-sequence cell runs its check (here on one sequence, launched in 128 x 64 blocks to
    keep the interpreter quick): right at 2,048 keys, it earns the 3 points there; at 2,109 keys it loses them, the
    failure naming the size, while the model answer keeps them. (Every hidden test of up to 3 * 128 + 45 keys it
    passes: test_examples_fail_for_the_right_reason grades it for real.)"""
    import types

    import triton_course.grading as grading
    from tests.gpu_sizes import run_cell

    monkeypatch.setattr(grading, "current", lambda: types.SimpleNamespace(interpreted=False))
    lin = kernels_of("lin_right_only_up_to_2048_keys", "attacks")["attention"]
    ada = kernels_of("ada_correct")["attention"]
    torch.manual_seed(0)
    short, long = ([(*(torch.randn(1, 1, n, 16) for _ in range(3)), False)] for n in (2048, 2109))
    with pinned_config(AttentionConfig(128, 64, 4, 1)):
        for fn, cases in ((lin, short), (ada, long)):
            printed, score, _ = run_cell(CHAPTER, "test_attention_long_sequences",
                                         {"attention": fn, "long_cases": lambda cases=cases: cases})
            assert score == 3 and "correct at every size" in printed, printed
        with pytest.raises(CheckFailed, match=r"attention\(float32\[1, 1, 2109, 16\].*\n.* wrong"):
            run_cell(CHAPTER, "test_attention_long_sequences", {"attention": lin, "long_cases": lambda: long})


#: The fusion test's first case, where every unfused example fails.
FUSED_CASE = (1, 1, 1024, 16)


def _fusion_failure(outcome) -> str:
    assert outcome.error is not None and outcome.error[0] == "CheckFailed", outcome
    message = outcome.error[1]
    q = torch.empty(FUSED_CASE)
    assert f"attention(float32{list(FUSED_CASE)}" in message and "is right, but not fused" in message
    assert f"a fused attention needs at most {fused_allowance(q):,} here" in message
    return message


def test_fusion_is_read_from_the_judges_rerun_and_scores_through_memory_earn_no_fusion_points(tmp_path):
    """The judge reads what its re-run of each call's launch record held besides q, k, v and the output. The model
    answer holds nothing more and earns the 2 points; the three-kernel attention (solutions/09_attention/submissions/attacks/
    tom_three_kernels) holds S and P, N x N floats each with the grader's guard regions around them, and earns none;
    so does the same attention that keeps its buffers from a call before any record (kip_keeps_its_buffers: the
    judge counts a storage in every call that uses it, and its earlier calls still pass), and the one that hides
    them in the output's storage (ola_scores_in_the_output), each told the bytes found against the bytes allowed."""
    from triton_course.checks import DEFAULT_PAD

    ada = judged("ada_correct", ["test_attention_fused"], tmp_path / "ada")["test_attention_fused"]
    assert ada.error is None and ada.score == 2 and ada.stdout.count("fused, 0 bytes held") == 2, ada
    n = FUSED_CASE[2]
    tom = judged("tom_three_kernels", ["test_attention_fused"], tmp_path / "tom", "attacks")
    assert f"held {2 * (n * n + 2 * DEFAULT_PAD) * 4:,} bytes" in _fusion_failure(tom["test_attention_fused"])

    def keep_a_buffer_before_any_record(ns):   # what the notebook's own self-checks do first
        ns["attention"](*(torch.randn(1, 1, 40, 16) for _ in range(3)))

    kip = judged("kip_keeps_its_buffers", ["test_attention_sm_scale", "test_attention_fused"], tmp_path / "kip",
                 "attacks", before=keep_a_buffer_before_any_record)
    assert kip["test_attention_sm_scale"].error is None, kip["test_attention_sm_scale"]
    assert f"held {(1 << 23) * 4:,} bytes" in _fusion_failure(kip["test_attention_fused"])
    ola = judged("ola_scores_in_the_output", ["test_attention_fused"], tmp_path / "ola", "attacks")
    assert f"held {2 * n * n * 4:,} bytes" in _fusion_failure(ola["test_attention_fused"])


def test_the_students_fusion_self_check_counts_what_the_judge_counts():
    """triton_course.attention.check_fused without the grader (the notebook's self-check) records the call as the
    grader does and counts the same bytes: the three kernels' S and P at the fusion test's first size, the buffer
    kept from an earlier call, nothing for the model answer; the self-check cell uses it at an N far above D."""
    from triton_course.attention import check_fused
    from triton_course.checks import DEFAULT_PAD

    torch.manual_seed(0)
    case = [(*(torch.randn(*FUSED_CASE) for _ in range(3)), True)]
    reference = kernels_of("ada_correct")["reference"]
    check_fused(kernels_of("ada_correct")["attention"], case, reference, quiet=True)
    n = FUSED_CASE[2]
    with pytest.raises(CheckFailed, match=f"held {2 * (n * n + 2 * DEFAULT_PAD) * 4:,} bytes"):
        check_fused(kernels_of("tom_three_kernels", "attacks")["attention"], case, reference)
    kip = kernels_of("kip_keeps_its_buffers", "attacks")["attention"]
    kip(*(torch.randn(1, 1, 40, 16) for _ in range(3)))   # the buffer is made by an earlier call
    with pytest.raises(CheckFailed, match=f"held {(1 << 23) * 4:,} bytes"):
        check_fused(kip, case, reference)
    assert "check_fused(attention, [(*(rand(1, 2, 512, 16)" in solution_cell(CHAPTER, "self_check_attention")


def test_an_outputs_storage_counts_past_its_own_elements_after_it_and_between_its_rows():
    """Scores hidden in the output's storage count, whether after the output (ola_scores_in_the_output) or in gaps
    between its rows (a strided view of a larger storage); the grader's guard regions around an allocation and an
    output that fills its storage do not."""
    from triton_course.attention import beyond_outputs
    from triton_course.checks import DEFAULT_PAD

    n, d = 64, 16
    whole = torch.empty(2 * DEFAULT_PAD + n * (d + 2 * n))
    after = whole[DEFAULT_PAD:DEFAULT_PAD + n * d].view(1, 1, n, d)
    between = whole.as_strided((1, 1, n, d), (n * (d + 2 * n), n * (d + 2 * n), d + 2 * n, 1), DEFAULT_PAD)
    assert beyond_outputs(after) == beyond_outputs((between,)) == 2 * n * n * 4
    assert beyond_outputs(torch.empty(2 * DEFAULT_PAD + n * d)[DEFAULT_PAD:DEFAULT_PAD + n * d].view(1, 1, n, d)) == 0
    assert beyond_outputs([]) == 0

def test_the_speed_tests_are_not_graded_under_the_interpreter(tmp_path):
    """NOT GRADED and 0 here, nothing timed, for the model answer and for solutions/09_attention/submissions/attacks/
    sol_ten_times_slower alike (a correct fused attention that launches its kernel ten times on a GPU: on the H200 it
    would reach a tenth of SDPA, under the 0.5 target)."""
    for student, corpus in (("ada_correct", "examples"), ("sol_ten_times_slower", "attacks")):
        outcomes = judged(student, SPEED_TESTS, tmp_path / student, corpus)
        for gid in SPEED_TESTS:
            out = outcomes[gid]
            assert out.error is None and out.score == 0 and out.stdout.startswith("NOT GRADED"), (student, gid, out)
    assert "range(10 if q.is_cuda else 1)" in (attack_submissions(CHAPTER) / "sol_ten_times_slower.py").read_text()


def _speed(session, student_ns, **kwargs) -> float:
    """The speed check at a size the interpreter runs (Z = 1, H = 2, N = 64, D = 16, causal: four key blocks)."""
    from grader.judge import StudentFunction
    from triton_course.attention import attention_by_heads, sdpa
    from triton_course.grading import throughput_points

    return throughput_points(StudentFunction(session, "attention"), sdpa,
                             lambda: (*(torch.randn(1, 2, 64, 16) for _ in range(3)), True), 2 * 2 * 64 * 64 * 16,
                             fraction=0.5, points=2, what="attention at 1 x 2 x 64 x 16, causal", baseline_name="SDPA",
                             **kwargs)


def test_the_speed_check_times_sdpa_itself_and_verifies_every_timed_output_through_the_judge(tmp_path, monkeypatch,
                                                                                              capsys):
    """throughput_points through the judge, its protocol run under the interpreter (the numbers mean nothing, so the
    target is 0 there): without a reference for the timed outputs it refuses to grade; with one, the judge times
    SDPA itself and the student's attention in a verified round of fresh inputs, and prints both. An attention whose
    timed outputs are wrong (gil_no_rescale: four key blocks, never rescaled) earns nothing, whatever its speed."""
    from grader.judge_timing import TIME_ON_CPU_ENV
    from triton_course.attention import attention_by_heads

    checked = {"reference": attention_by_heads, "tolerances": attention_tolerance}
    session, ns = judge_session("ada_correct", tmp_path / "ada")
    capsys.readouterr()
    monkeypatch.delenv(TIME_ON_CPU_ENV, raising=False)
    assert _speed(session, ns, **checked) == 0.0 and session.calls == 0
    assert capsys.readouterr().out.startswith("NOT GRADED")
    monkeypatch.setenv(TIME_ON_CPU_ENV, "1")
    with pytest.raises(CheckFailed, match="no reference"):
        _speed(session, ns)
    assert _speed(session, ns, **checked) == 2.0
    out = capsys.readouterr().out
    assert "TFLOP/s" in out and "of SDPA" in out and out.rstrip().endswith("passed")
    assert session.timing_rounds and all(r["calls"] >= 4 for r in session.timing_rounds)
    wrong, wrong_ns = judge_session("gil_no_rescale", tmp_path / "gil")
    with pytest.raises(CheckFailed, match=r"timed call \d+ .* is wrong"):
        _speed(wrong, wrong_ns, **checked)


def test_the_speed_checks_reference_goes_through_the_heads_in_groups(monkeypatch):
    """Every timed output is checked in float64; at the speed check's size that is 17 GB of scores in one piece, so
    the reference takes the heads a group at a time, with the same result, and still runs on the meta device (where
    the judge reads the outputs' sizes)."""
    import triton_course.attention as course_attention

    monkeypatch.setattr(course_attention, "REFERENCE_SCORES", 2 * 40 * 40)   # two heads at a time
    q, k, v = (torch.randn(2, 3, 40, 8, dtype=torch.float64) for _ in range(3))
    for causal in (False, True):
        torch.testing.assert_close(course_attention.attention_by_heads(q, k, v, causal),
                                   attention_reference(q, k, v, causal), rtol=0, atol=0)
    assert course_attention.attention_by_heads(*(t.to("meta") for t in (q, k, v))).shape == q.shape


# ---------------------------------------------------------------------------------------------------
# Honest about platforms (issue 45): the roofs a T4 or an A10 draws, the benchmark's lengths, the appendix's size
# ---------------------------------------------------------------------------------------------------

def _fake_device_roof(compute="fp16_tensor"):
    """device_roof without a GPU: a roof that says which units it was asked for (nothing is measured)."""
    from triton_course.roofline import Roof

    return Roof(300.0, {"fp16_tensor": 60.0, "fp32": 7.0, "sfu": 0.5}[compute], f"measured {compute}", compute)


@pytest.mark.parametrize("name, cc, matmul_units, sfu_tops", [("Tesla T4", (7, 5), "fp32", 8.1 / 2 * 16 / 64),
                                                               ("NVIDIA A10", (8, 6), "fp16_tensor", 31.2 / 2 * 16 / 128),
                                                               ("NVIDIA H200", (9, 0), "fp16_tensor", 67 / 2 * 16 / 128)])
def test_the_roofs_are_the_units_tl_dot_runs_on_and_the_datasheets_special_function_rate(monkeypatch, name, cc,
                                                                                          matmul_units, sfu_tops):
    """On a T4 tl.dot runs on the FP32 units, so the matmuls' roof is the FP32 one; from an A10 on it is the fp16
    tensor cores. The exponentials' roof is 16 special-function ops per clock per SM from the GPU's datasheet, not
    scaled by how well cuBLAS's SGEMM does (the review's E9.3)."""
    from triton_course import attention as course_attention
    from triton_course import device as course_device
    from triton_course import roofline

    monkeypatch.setattr(course_device, "_CURRENT", student_gpu(name, cc))
    monkeypatch.setattr(roofline, "device_roof", _fake_device_roof)
    matmuls, sfu = course_attention.attention_roofs()
    assert matmuls.compute == matmul_units and sfu.compute == "sfu"
    assert sfu.peak_tflops == pytest.approx(sfu_tops) and "datasheet" in sfu.source


def test_a_t4_times_the_benchmark_up_to_4096_and_its_plot_names_the_fp32_units(monkeypatch):
    """One call at N = 16384 is 8.8 TFLOP, over a second on a T4's FP32 units: the benchmark stops at 4096 there,
    and its plot names the FP32 units as the matmuls' roof."""
    import matplotlib

    matplotlib.use("Agg")
    from triton_course import device as course_device
    from triton_course.attention import FMA_LONGEST_N, benchmark_lengths, plot_tflops
    from triton_course.bench import Sweep
    from triton_course.roofline import datasheet_roof

    lengths = [512, 1024, 2048, 4096, 8192, 16384]
    assert 4 * 4 * 2048 * 16384**2 / 8.1e12 > 1 and FMA_LONGEST_N == 4096
    with monkeypatch.context() as m:
        m.setattr(course_device, "_CURRENT", student_gpu("Tesla T4", (7, 5)))
        assert benchmark_lengths(lengths) == [512, 1024, 2048, 4096]
        m.setattr(course_device, "_CURRENT", student_gpu("NVIDIA A10", (8, 6)))
        assert benchmark_lengths(lengths) == lengths
    assert benchmark_lengths([32, 64]) == [32, 64]   # the interpreter
    gpu = Sweep([1024], "N", {"Triton attention": [3.0]}, interpreted=False, unit="TFLOP/s")
    labels = [line.get_label() for line in plot_tflops(gpu, "t", datasheet_roof("T4", "fp32"),
                                                       datasheet_roof("T4", "sfu"), 64).get_lines()]
    assert any(label.startswith("roof of the matmuls: FP32 units") for label in labels), labels
    cell = next(c.source for c in nbformat.read(solution_notebook(CHAPTER), as_version=4).cells
                if "tflops_sweep({" in c.source and "bench_n =" in c.source)
    assert "bench_n = benchmark_lengths(" in cell and "matmul_roof, sfu_roof" in cell


def test_counting_the_kernels_dots_says_so_when_the_interpreter_moves_its_api(monkeypatch):
    """The experiment counts tl.dot calls through an internal API of Triton's interpreter: a Triton without it
    fails loudly, never with a silent count of zero."""
    from triton.runtime import interpreter

    from triton_course.attention import _counting_dots

    monkeypatch.delattr(interpreter.InterpreterBuilder, "create_dot")
    with pytest.raises(RuntimeError, match="InterpreterBuilder.create_dot"):
        with _counting_dots():
            pass


def _markdown(nb) -> tuple[str, str]:
    """(the main path, the appendix): the markdown before "## Appendix", and from it on."""
    md = [c.source for c in nb.cells if c.cell_type == "markdown"]
    start = next(i for i, s in enumerate(md) if s.startswith("## Appendix"))
    return "\n".join(md[:start]), "\n".join(md[start:])


def test_the_appendix_is_at_most_1000_words_and_says_what_other_gpus_show():
    """Issue 45: the appendix stays a student's reading (at most 1,000 words; the lab's record of designs lives in
    lab/notes/09_attention.md), says what a T4, an A10 and the CPU show where it quotes the H200, describes the Gluon
    kernel as what it is (FlashAttention-3's overlap within a warpgroup, without its ping-pong), cites
    FlashAttention-4's lazy rescaling as code, and names what the chapter leaves out (the backward pass)."""
    main, appendix = _markdown(nbformat.read(solution_notebook(CHAPTER), as_version=4))
    assert len(appendix.split()) <= 1000, len(appendix.split())
    for phrase in ("On a T4 `tl.dot` has no tensor cores", "on an A10 the datasheets", "the CPU checks correctness",
                   "overlap within a warpgroup, not its whole schedule", "ping-pong", "rescale_threshold",
                   "The backward pass", "lab/notes/09_attention.md"):
        assert phrase in appendix, phrase
    for phrase in ("on a T4 Triton runs `tl.dot` on the FP32 units", "the datasheets predict a quarter on an A10",
                   "**Elsewhere.** A T4", "(128 × 128 on a T4) is skipped"):
        assert phrase in main, phrase
    notes = (ROOT / "lab" / "notes" / "09_attention.md").read_text()
    assert "ping-pong" in notes and "setmaxnreg" in notes and "rescale_threshold" in notes


def test_the_platform_predictions_are_the_datasheets():
    """The main path's predictions (exponentials against matmuls per head at D = 64: about 1 on the H200, a quarter
    on an A10, a thirtieth on a T4 whose matmuls run on FP32 units) and the appendix's eighth (A10 against H200
    tensor cores) come from triton_course.gpus.GPU_SPECS."""
    from triton_course.gpus import GPU_SPECS
    from triton_course.roofline import sfu_tops

    def exp_over_matmul(name, matmul_tflops):
        spec = GPU_SPECS[name]
        return matmul_tflops / (4 * 64 * sfu_tops(spec.fp32_tflops, spec.compute_capability))

    assert exp_over_matmul("H200", GPU_SPECS["H200"].fp16_tensor_tflops) == pytest.approx(0.92, abs=0.01)
    assert exp_over_matmul("A10", GPU_SPECS["A10"].fp16_tensor_tflops) == pytest.approx(1 / 4, abs=0.01)
    assert exp_over_matmul("T4", GPU_SPECS["T4"].fp32_tflops) == pytest.approx(1 / 30, abs=0.005)
    assert GPU_SPECS["A10"].fp16_tensor_tflops / GPU_SPECS["H200"].fp16_tensor_tflops == pytest.approx(1 / 8, abs=0.01)
    assert (GPU_SPECS["T4"].fp32_tflops, GPU_SPECS["T4"].fp16_tensor_tflops) == (8.1, 65)


def test_the_lab_notes_quote_their_records():
    """lab/notes/09_attention.md quotes the hand-pipelined loop's cost from its record (the appendix's other
    figures, which the notes repeat, are held to their records by tests/test_results.py)."""
    import json

    r = json.loads((ROOT / "solutions" / "09_attention" / "records" / "09_attention_pipelined.json").read_text())
    slower = [round(100 * (1 - row["pipelined_over_as_is"])) for row in r["rows"]]
    notes = (ROOT / "lab" / "notes" / "09_attention.md").read_text()
    assert f"{min(slower)}-{max(slower)}% slower" in notes, (min(slower), max(slower))
    _, appendix = _markdown(nbformat.read(solution_notebook(CHAPTER), as_version=4))
    for quoted in ("11-18% slower", "62-65% slower", "5-8% slower", "0.54-0.76", "0.60-0.84", "0.62-0.82",
                   "0.85 against 0.87", "0.91-0.97", "0.95-0.98", "0.81-0.93", "0.87-0.92", "0.74-0.83",
                   "4.0 µs once and 1.86 µs per key block", "88% of cuDNN's pace"):
        assert quoted in notes and quoted in appendix, quoted
