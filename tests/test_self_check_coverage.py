"""The self-check covers what the grade checks, where the student's machine can check it (issue 45).

:data:`TABLE` pairs every hidden test cell of every chapter of the course (``grader.course.assignments()``, so a
chapter added later must be added here) with the rules it grades, and each rule with the
self-check that covers it (:class:`Covered`: a code cell the student runs, named by its ``grade_id`` or by a line
only it holds, whose source must still hold the named evidence), or with the reason the student's machine cannot
check it (:class:`Elsewhere`: the grading GPU's speed, sizes the interpreter cannot run, bfloat16 on a GPU that has
it), or as a :class:`Gap`: a rule a CPU could check and no self-check does. Gaps are listed by name in :data:`GAPS`;
they count as not covered, the last test prints them, and no chapter may have one (:data:`NO_GAPS` is every chapter).

The table is read against the notebooks: a hidden cell missing from it fails, and so does a row that lacks a rule
its cell applies (a function graded by ``check_all`` must be covered by a self-check of the same function, whose
check applies the grader's "your kernel's work" rule in a notebook; ``check_masked_loads``, ``at_gpu_sizes``,
``bandwidth_points`` and ``throughput_points`` each need their own row).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import nbformat
import pytest

from grader.course import assignments, solution_notebook

#: the course's chapters, from its registry: a chapter added later fails until its rows are in :data:`TABLE`
CHAPTERS = assignments()
#: chapters whose self-checks must leave no gap: every one
NO_GAPS = tuple(CHAPTERS)


@dataclass(frozen=True)
class Covered:
    """A cell the student runs covers the rule: ``cell`` is a ``grade_id`` (``self_check...``) or, for an
    ungraded cell, a line only it holds; ``evidence`` must appear in its source."""

    cell: str
    evidence: str


@dataclass(frozen=True)
class Elsewhere:
    """The student's machine cannot check the rule: ``why`` is one of :data:`REASONS`."""

    why: str


@dataclass(frozen=True)
class Gap:
    """A rule a CPU could check that no self-check does: not covered, listed in :data:`GAPS`."""

    what: str


REASONS = {
    "speed": "needs the grading GPU's speed (timed against its own copy or SDPA/cuBLAS)",
    "gpu sizes": "sizes the interpreter cannot run in reasonable time (NOT GRADED there, 0 points)",
    "gpu": "needs a CUDA GPU (events, synchronisation) and the grader's own clock",
}

# Rule kinds a hidden cell's source implies (see test_every_rule_a_hidden_cell_applies_has_its_row).
KERNEL, MASKS, SPEED, GPU_SIZES = "kernel's work", "masked loads", "speed", "gpu sizes"

TABLE: dict[str, dict[str, list[tuple[str, object]]]] = {
    "01_gpu_model": {
        "test_occupancy_registers": [("register-limited occupancy (256-register units, quarters)",
                                      Covered("self_check_occupancy", "HINT_ROUNDING")),
                                     ("limits of H100, H200 and B200", Covered("self_check_occupancy", '"gpu": "B200"'))],
        "test_occupancy_warps_blocks": [("warp and block limits", Covered("self_check_occupancy", "HINT_BLOCK_LIMIT")),
                                        ("T4 and A10 limits", Covered("self_check_occupancy", '"gpu": "A10"'))],
        "test_occupancy_shared": [("shared memory with the 1 KB reservation",
                                   Covered("self_check_occupancy", "HINT_RESERVATION")),
                                  ("bad arguments raise ValueError",
                                   Covered("self_check_occupancy", "raises_value_error(occupancy"))],
        "test_waves": [("waves and last-wave use", Covered("self_check_waves", "last_wave_utilization")),
                       ("bad arguments raise ValueError", Covered("self_check_waves", "raises_value_error(f, *bad)"))],
        "test_sectors": [("sectors of a warp's accesses", Covered("self_check_access", "sectors_touched")),
                         ("misaligned accesses raise ValueError", Covered("self_check_access", "raises_value_error(sectors_touched"))],
        "test_bank_conflicts": [("bank conflicts", Covered("self_check_access", "bank_conflict_ways"))],
    },
    "02_benchmarking": {
        "test_benchmark_calls": [("warmup + trials calls", Covered("self_check_benchmark", "HINT_LOOPS")),
                                 ("defaults and ValueError for bad arguments",
                                  Covered("self_check_benchmark", "raises_value_error(benchmark"))],
        "test_benchmark_timing": [("median/mean/min of the timed calls, in ms",
                                   Covered("self_check_benchmark", "HINT_MEAN"))],
        "test_benchmark_gpu": [("CUDA events against the grader's clock", Elsewhere("gpu"))],
        "test_gelu_traffic": [("eager GELU's kernels and bytes", Covered("self_check_traffic", "eager_gelu_traffic"))],
    },
    "03_vector_add": {
        "test_add_ragged": [("values at ragged sizes", Covered("self_check", "random_pair(1000)")),
                            (KERNEL, Covered("self_check", "check_all(add,"))],
        "test_add_fp16": [("float16", Covered("self_check", "random_pair(3000, torch.float16)")),
                          (KERNEL, Covered("self_check", "check_all(add,"))],
        "test_add_2d": [("2-D and a transposed view", Covered("self_check", ".t(), torch.randn(24, 40")),
                        (KERNEL, Covered("self_check", "check_all(add,"))],
        "test_add_writes_exactly_n": [(MASKS, Covered("self_check", "check_masked_loads(add_kernel, launched_by=add)")),
                                      ("nothing stored outside, inputs untouched", Covered("self_check", "check_all(add,")),
                                      (KERNEL, Covered("self_check", "check_all(add,"))],
        "test_add_gpu_sizes": [(GPU_SIZES, Elsewhere("gpu sizes")), (KERNEL, Covered("self_check", "check_all(add,")),
                               (MASKS, Covered("self_check", "check_masked_loads(add_kernel"))],
        "test_add_bandwidth": [(SPEED, Elsewhere("speed")), (KERNEL, Covered("self_check", "check_all(add,"))],
    },
    "04_gelu": {
        "test_gelu_shapes": [(MASKS, Covered("self_check", "check_masked_loads(gelu_kernel, launched_by=gelu)")),
                             ("ragged sizes", Covered("self_check", "torch.randn(1000")),
                             ("3-D and a transposed view", Covered("self_check", ".transpose(1, 2)")),
                             (KERNEL, Covered("self_check", "check_all(gelu,"))],
        "test_gelu_fp16": [("float16 rounded once", Covered("self_check", "dtype=torch.float16")),
                           (KERNEL, Covered("self_check", "check_all(gelu,"))],
        "test_gelu_large_inputs": [("no NaN past x = 10.06", Covered("self_check", "torch.linspace(-20, 20")),
                                   (KERNEL, Covered("self_check", "check_all(gelu,"))],
        "test_gelu_bf16": [("bfloat16 where the GPU has it", Covered("self_check", "device.bf16")),
                           (KERNEL, Covered("self_check", "check_all(gelu,"))],
        "test_gelu_gpu_sizes": [(GPU_SIZES, Elsewhere("gpu sizes")), (KERNEL, Covered("self_check", "check_all(gelu,")),
                                (MASKS, Covered("self_check", "check_masked_loads(gelu_kernel"))],
        "test_gelu_bandwidth": [(SPEED, Elsewhere("speed")), (KERNEL, Covered("self_check", "check_all(gelu,"))],
    },
    "05_softmax": {
        "test_softmax_shapes": [("N not a power of two, short rows", Covered("self_check", "torch.randn(64, 128")),
                                ("rows longer than the largest tuned block (16384)",
                                 Covered("self_check", "torch.randn(1, 16385")),
                                (KERNEL, Covered("self_check", "check_all(softmax,"))],
        "test_softmax_large_values": [("exp would overflow", Covered("self_check", "* 40 + 200")),
                                      (KERNEL, Covered("self_check", "check_all(softmax,"))],
        "test_softmax_neg_inf": [("-inf entries", Covered("self_check", "with_neg_inf(")),
                                 (KERNEL, Covered("self_check", "check_all(softmax,"))],
        "test_softmax_fp16": [("float16 rounded once", Covered("self_check", "tolerance_rounded_once")),
                              ("bfloat16 where the GPU has it", Covered("self_check", "device.bf16")),
                              (KERNEL, Covered("self_check", "check_all(softmax,"))],
        "test_softmax_strided": [("strided rows", Covered("self_check", "strided_rows(")),
                                 (KERNEL, Covered("self_check", "check_all(softmax,"))],
        "test_softmax_input_untouched": [("inputs bit for bit", Covered("self_check", "check_all(softmax,")),
                                         (KERNEL, Covered("self_check", "check_all(softmax,"))],
        "test_softmax_gpu_sizes": [(GPU_SIZES, Elsewhere("gpu sizes")),
                                   (KERNEL, Covered("self_check", "check_all(softmax,"))],
        "test_softmax_bandwidth": [(SPEED, Elsewhere("speed")), (KERNEL, Covered("self_check", "check_all(softmax,"))],
        "test_softmax_long_sizes": [("several chunks and a partial one", Covered("self_check_long", "10000")),
                                    (KERNEL, Covered("self_check_long", "check_all(softmax_long,"))],
        "test_softmax_long_traps": [("float16 row sums past 65504", Covered("self_check_long", "torch.rand(1, 70000")),
                                    (KERNEL, Covered("self_check_long", "check_all(softmax_long,"))],
        "test_softmax_long_gpu_sizes": [(GPU_SIZES, Elsewhere("gpu sizes")),
                                        (KERNEL, Covered("self_check_long", "check_all(softmax_long,"))],
    },
    "06_rmsnorm": {
        "test_rmsnorm_shapes": [("shapes and dtypes", Covered("self_check", "torch.randn(3, 5, 100")),
                                ("a row of more than 65536 values", Covered("self_check", "torch.randn(1, 70001")),
                                (KERNEL, Covered("self_check", "check_all(rmsnorm,"))],
        "test_rmsnorm_strided": [("strided and sliced rows", Covered("self_check", "wide[::3, 40:240]")),
                                 (KERNEL, Covered("self_check", "check_all(rmsnorm,"))],
        "test_rmsnorm_fp16": [("float16 squares and sums past 65504", Covered("self_check", "* 300")),
                              (KERNEL, Covered("self_check", "check_all(rmsnorm,"))],
        "test_rmsnorm_eps": [("zero rows", Covered("self_check", "torch.zeros(1, 96")),
                             ("a call with its own eps", Covered("self_check", "torch.randn(128, device=dev), 0.5)")),
                             (KERNEL, Covered("self_check", "check_all(rmsnorm,"))],
        "test_rmsnorm_rstd": [("y and rstd", Covered("self_check_rstd", "check_all(rmsnorm_with_rstd")),
                              ("short rows stacked many to a program (an rstd store past M)",
                               Covered("self_check_rstd", "torch.randn(2500, 3")),
                              (KERNEL, Covered("self_check_rstd", "check_all(rmsnorm_with_rstd"))],
        "test_rmsnorm_gpu_sizes": [(GPU_SIZES, Elsewhere("gpu sizes")),
                                   (KERNEL, Covered("self_check", "check_all(rmsnorm,")),
                                   (KERNEL + ", rstd", Covered("self_check_rstd", "check_all(rmsnorm_with_rstd"))],
        "test_rmsnorm_bf16": [("bfloat16 where the GPU has it", Covered("check_all(rmsnorm, bf16_cases", "device.bf16")),
                              (KERNEL, Covered("self_check", "check_all(rmsnorm,")),
                              (KERNEL + ", rstd", Covered("self_check_rstd", "check_all(rmsnorm_with_rstd"))],
        "test_rmsnorm_bandwidth": [(SPEED, Elsewhere("speed")), (KERNEL, Covered("self_check", "check_all(rmsnorm,"))],
    },
    "07_matmul_relu": {
        "test_ragged_sizes": [("ragged last tiles", Covered("self_check", "make(67, 45, 129)")),
                              ("several of the interpreter's tiles each way, ragged, ALIGNED or not",
                               Covered("self_check", "make(200, 190, 150), make(168, 136, 136)")),
                              ("products larger than two of a GPU's largest tiles (on a GPU)", Elsewhere("gpu sizes")),
                              (KERNEL, Covered("self_check", "check_all(matmul_relu,"))],
        "test_single_row_and_column": [("M, N or K of 1", Covered("self_check", "make(50, 1, 77), make(1, 1, 1)")),
                                       (KERNEL, Covered("self_check", "check_all(matmul_relu,"))],
        "test_transposed_views": [("transposed a and b", Covered("self_check", "transpose_a=True")),
                                  (KERNEL, Covered("self_check", "check_all(matmul_relu,"))],
        "test_relu_zeros": [("negative products become exact zeros", Covered("self_check", "check_all(matmul_relu,")),
                            (KERNEL, Covered("self_check", "check_all(matmul_relu,"))],
        "test_long_k_float32_sum": [("K of 2050-3001 summed in float32", Covered("self_check", "make(30, 20, 3001)")),
                                    (KERNEL, Covered("self_check", "check_all(matmul_relu,"))],
        "test_bfloat16": [("bfloat16 where the GPU has it", Covered("self_check", "device.bf16")),
                          (KERNEL, Covered("self_check", "check_all(matmul_relu,"))],
        "test_matmul_relu_gpu_sizes": [(GPU_SIZES, Elsewhere("gpu sizes")),
                                       (KERNEL, Covered("self_check", "check_all(matmul_relu,"))],
        "test_matmul_relu_speed": [(SPEED, Elsewhere("speed")),
                                   (KERNEL, Covered("self_check", "check_all(matmul_relu,"))],
    },
    "08_fusion": {
        "test_softmax_bytes": [("softmax_bytes", Covered("self_check_traffic", "softmax_bytes("))],
        "test_norm_bytes": [("norm_bytes", Covered("self_check_traffic", "norm_bytes("))],
        "test_gemm_act": [("gemm_act_bytes and its intensity", Covered("self_check_traffic", "gemm_act_intensity("))],
        "test_reuse_bytes": [("reuse_bytes", Covered("self_check_traffic", "reuse_bytes("))],
        "test_roofline": [("roofline_ms and predicted_speedup", Covered("self_check_roofline", "predicted_speedup("))],
        "test_fused_fp32": [("several programs, ragged last one", Covered("self_check_fused", "(5, 300)")),
                            ("rows of up to 65535 values", Covered("self_check_fused", "(1, 65535)")),
                            (KERNEL, Covered("self_check_fused", "check_all(add_rmsnorm,"))],
        "test_fused_fp16": [("float16", Covered("self_check_fused", "cases(torch.float16")),
                            ("|h| about 300: h^2 past float16's range", Covered("self_check_fused", "200 * r")),
                            (KERNEL, Covered("self_check_fused", "check_all(add_rmsnorm,"))],
        "test_fused_inputs_untouched": [("inputs bit for bit", Covered("self_check_fused", "check_all(add_rmsnorm,")),
                                        ("transposed-view inputs",
                                         Covered("self_check_fused", "(x.t().contiguous().t(), r, w)")),
                                        (KERNEL, Covered("self_check_fused", "check_all(add_rmsnorm,"))],
        "test_fused_bf16": [("bfloat16 where the GPU has it", Covered("cases(torch.bfloat16", "check_all(add_rmsnorm")),
                            (KERNEL, Covered("self_check_fused", "check_all(add_rmsnorm,"))],
        "test_fused_gpu_sizes": [(GPU_SIZES, Elsewhere("gpu sizes")),
                                 (KERNEL, Covered("self_check_fused", "check_all(add_rmsnorm,"))],
        "test_fused_bandwidth": [(SPEED, Elsewhere("speed")),
                                 (KERNEL, Covered("self_check_fused", "check_all(add_rmsnorm,"))],
    },
    "09_attention": {
        "test_split_program_id": [("split_program_id", Covered("self_check_offsets", "check_split(split_program_id"))],
        "test_row_offset_one_batch": [("row_offset_2d, Z = 1", Covered("self_check_offsets", "Z=1, H=4, N=16"))],
        "test_row_offset_batched": [("row_offset_2d, Z > 1", Covered("self_check_offsets", "Z=3, H=5, N=7"))],
        "test_base_offset_layouts": [("base_offset of any layout", Covered("self_check_offsets", ".transpose(1, 2)"))],
        "test_contiguous_heads": [("copies of heads", Covered("self_check_copy", "check_all(contiguous_heads,")),
                                  (KERNEL, Covered("self_check_copy", "check_all(contiguous_heads,"))],
        "test_attention_one_batch": [("one batch, several key blocks", Covered("self_check_attention", "LONG_N")),
                                     (KERNEL, Covered("self_check_attention", "check_all(attention,"))],
        "test_attention_batches_and_heads": [("batches and heads", Covered("self_check_attention", "rand(2, 3, 37, 32)")),
                                             (KERNEL, Covered("self_check_attention", "check_all(attention,"))],
        "test_attention_causal": [("causal, ragged N", Covered("self_check_attention", "rand(2, 3, 37, 32), True)")),
                                  (KERNEL, Covered("self_check_attention", "check_all(attention,"))],
        "test_attention_strided_heads": [("heads from a projection", Covered("self_check_attention",
                                                                             "heads_from_projection(")),
                                         (KERNEL, Covered("self_check_attention", "check_all(attention,"))],
        "test_attention_sm_scale": [("sm_scale", Covered("self_check_attention", "False, 0.9)")),
                                    (KERNEL, Covered("self_check_attention", "check_all(attention,"))],
        "test_attention_fp16": [("float16", Covered("self_check_attention", "dtype=torch.float16")),
                                ("bfloat16 where the GPU has it", Covered("self_check_attention", "if device.bf16:")),
                                (KERNEL, Covered("self_check_attention", "check_all(attention,"))],
        "test_attention_long_sequences": [(GPU_SIZES, Elsewhere("gpu sizes")),
                                          (KERNEL, Covered("self_check_attention", "check_all(attention,"))],
        "test_attention_fused": [("fused: the bytes held besides q, k, v and o",
                                  Covered("self_check_attention", "check_fused(attention"))],
        "test_attention_speed": [(SPEED, Elsewhere("speed")),
                                 (KERNEL, Covered("self_check_attention", "check_all(attention,"))],
        "test_attention_causal_speed": [(SPEED, Elsewhere("speed")),
                                        (KERNEL, Covered("self_check_attention", "check_all(attention,"))],
    },
    "10_rowwise_backward": {
        "test_softmax_grads": [("a 1-D row and rows of one value", Covered("self_check_softmax", "pair(1), pair(5, 1)")),
                               ("ragged N, large values, 3-D, rows of 1000+",
                                Covered("self_check_softmax", "pair(4, 37, scale=3.0), pair(2, 3, 100), pair(9, 1000)")),
                               ("strided x", Covered("self_check_softmax", "(wide[:, :200], torch.randn(12, 200")),
                               ("strided dy", Covered("self_check_softmax", "wide[:6, 100:170])")),
                               ("float16", Covered("self_check_softmax", "pair(16, 64, dtype=torch.float16")),
                               ("through the autograd Function", Covered("self_check", "check_all(softmax_grads,")),
                               (KERNEL, Covered("self_check", "check_all(softmax_grads,"))],
        "test_rmsnorm_grads": [("a 1-D row, rows of one value, ragged last tile",
                                Covered("self_check_rmsnorm", "triple(1), triple(5, 1), triple(37, 7)")),
                               ("several programs sharing dw", Covered("self_check_rmsnorm", "triple(40, 300)")),
                               ("3-D x and rows longer than a tile",
                                Covered("self_check_rmsnorm", "triple(2, 3, 129), triple(3, 2000)")),
                               ("strided x", Covered("self_check_rmsnorm", "(wide[:, :200], torch.randn(200")),
                               ("strided dy", Covered("self_check_rmsnorm", "wide[:6, 100:170])")),
                               ("a call with its own eps", Covered("self_check_rmsnorm", "(*triple(10, 128), 0.5)")),
                               ("float16", Covered("self_check_rmsnorm", "triple(64, 96, dtype=torch.float16)")),
                               ("dw summed by partial rows", Covered("self_check_rmsnorm",
                                                                     "rmsnorm_backward_after_forward, rmsnorm_")),
                               (KERNEL, Covered("self_check", "for grads in (rmsnorm_grads, rmsnorm_grads_atomic)"))],
        "test_rmsnorm_grads_atomic": [("a 1-D row, rows of one value, ragged last tile",
                                       Covered("self_check_rmsnorm", "triple(1), triple(5, 1), triple(37, 7)")),
                                      ("several programs adding into dw", Covered("self_check_rmsnorm",
                                                                                  "triple(40, 300)")),
                                      ("3-D x and rows longer than a tile",
                                       Covered("self_check_rmsnorm", "triple(2, 3, 129), triple(3, 2000)")),
                                      ("strided x and dy", Covered("self_check_rmsnorm", "wide[:6, 100:170])")),
                                      ("a call with its own eps", Covered("self_check_rmsnorm", "(*triple(10, 128), 0.5)")),
                                      ("float16", Covered("self_check_rmsnorm", "triple(64, 96, dtype=torch.float16)")),
                                      ("dw summed by atomics", Covered("self_check_rmsnorm",
                                                                       "rmsnorm_backward_atomic_after_forward)")),
                                      (KERNEL, Covered("self_check", "for grads in (rmsnorm_grads, rmsnorm_grads_atomic)"))],
        "test_grads_gpu_sizes": [(GPU_SIZES, Elsewhere("gpu sizes")),
                                 ("more tiles than programs (each program summing several)",
                                  Covered("self_check_rmsnorm", "triple(40, 300)")),
                                 (KERNEL, Covered("self_check", "check_all(softmax_grads,")),
                                 (KERNEL + ", RMSNorm", Covered("self_check",
                                                                "for grads in (rmsnorm_grads, rmsnorm_grads_atomic)"))],
        "test_rmsnorm_backward_bandwidth": [(SPEED, Elsewhere("speed")),
                                            ("rmsnorm_backward correct on 4096 x 4096 float16", Elsewhere("gpu sizes")),
                                            ("rmsnorm_backward from a given rstd",
                                             Covered("self_check_rmsnorm", "rmsnorm_forward(x, weight, eps)[1], dy)")),
                                            (KERNEL, Covered("self_check",
                                                             "for grads in (rmsnorm_grads, rmsnorm_grads_atomic)"))],
    },
    "11_attention_backward": {
        "test_forward_lse": [("o and lse, Z > 1, ragged N", Covered("self_check_forward", "grad_case(2, 1, 37, 32)")),
                             ("causal and sm_scale", Covered("self_check_forward", "False, 0.6)")),
                             ("heads from a projection", Covered("self_check_forward", "(*projected(1, 21, 2, 16)[:3]")),
                             (KERNEL, Covered("self_check_forward", "check_all(attention_lse,"))],
        "test_grads": [("batches and heads, ragged N", Covered("self_check", "grad_case(2, 1, 37, 32, True)")),
                       ("sm_scale", Covered("self_check", "grad_case(1, 1, 33, 16, False, 0.5)")),
                       ("heads from a projection", Covered("self_check", "projected(1, 24, 2, 16, True)")),
                       (KERNEL, Covered("self_check", "check_all(attention_grads,"))],
        "test_grads_causal": [("causal, ragged N", Covered("self_check", "grad_case(2, 1, 37, 32, True)")),
                              ("one query row", Covered("self_check", "grad_case(1, 1, 1, 16, True)")),
                              (KERNEL, Covered("self_check", "check_all(attention_grads,"))],
        "test_grads_fp16": [("float16, D = 64, causal", Covered("self_check", "grad_case(1, 2, 40, 64, True, dtype=torch.float16)")),
                            ("float16, D = 128", Covered("self_check", "grad_case(1, 1, 20, 128, dtype=torch.float16)")),
                            (KERNEL, Covered("self_check", "check_all(attention_grads,"))],
        "test_grads_loss_scaled": [("dO scaled past float16's partial sums", Covered("self_check", "loss_scaled_inputs(")),
                                   (KERNEL, Covered("self_check", "check_all(attention_grads,"))],
        "test_grads_gpu_sizes": [(GPU_SIZES, Elsewhere("gpu sizes")),
                                 (KERNEL, Covered("self_check", "check_all(attention_grads,"))],
        "test_grads_speed": [(SPEED, Elsewhere("speed")),
                             (KERNEL, Covered("self_check", "check_all(attention_grads,"))],
    },
}

#: Every gap, by name: rules a CPU could check that no self-check does (not counted as covered). The lead assigns
#: each to the chapter's owner; a gap closed there is removed here, with its row turned into a Covered.
GAPS = sorted({coverage.what for rows in TABLE.values() for rules in rows.values() for _, coverage in rules
               if isinstance(coverage, Gap)})


def _cells(chapter: str) -> list:
    return nbformat.read(solution_notebook(chapter), as_version=4).cells


def _meta(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def _hidden(chapter: str) -> dict[str, str]:
    return {_meta(c)["grade_id"]: c.source for c in _cells(chapter)
            if _meta(c).get("grade") and not _meta(c).get("solution")}


def _student_cell(chapter: str, name: str) -> str:
    """The source of the cell the student runs that ``name`` names: its grade_id, or a line only it holds."""
    found = [c.source for c in _cells(chapter) if c.cell_type == "code" and not _meta(c).get("grade") and
             (_meta(c).get("grade_id") == name or (not name.startswith("self_check") and name in c.source))]
    assert len(found) == 1, f"{chapter}: {len(found)} cells the student runs are named {name!r}"
    return found[0]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_hidden_test_cell_is_in_the_table(chapter):
    assert set(TABLE[chapter]) == set(_hidden(chapter)), (
        f"{chapter}: hidden cells not in the table {set(_hidden(chapter)) - set(TABLE[chapter])}, "
        f"rows without a hidden cell {set(TABLE[chapter]) - set(_hidden(chapter))}")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_each_covering_cell_exists_and_still_holds_its_evidence(chapter):
    for gid, rules in TABLE[chapter].items():
        assert rules, f"{chapter} {gid}: no rule"
        for rule, coverage in rules:
            assert isinstance(coverage, (Covered, Elsewhere, Gap)), (gid, rule)
            if isinstance(coverage, Covered):
                assert coverage.evidence in _student_cell(chapter, coverage.cell), (chapter, gid, rule, coverage)
            elif isinstance(coverage, Elsewhere):
                assert coverage.why in REASONS, (gid, rule)


def _graded_functions(source: str) -> set[str]:
    """The functions a cell checks with check/check_all, a loop's variable (``for fn in (f, g):``) read as each
    function it takes."""
    named = set(re.findall(r"(?<![\w.])check(?:_all)?\((\w+)\s*,", source))
    for var, names in re.findall(r"for (\w+) in \(([\w\s,]+)\):", source):
        if var in named:
            named = (named - {var}) | set(re.findall(r"\w+", names))
    return named


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_rule_a_hidden_cell_applies_has_its_row(chapter):
    """Read from each hidden cell's source: a function checked by check/check_all is graded by the judge's rule
    that its result is its kernel's work (a row of that kind, covered by a self-check of the same function);
    check_masked_loads, at_gpu_sizes and bandwidth_points/throughput_points each need a row of their kind."""
    for gid, source in _hidden(chapter).items():
        rows = dict(TABLE[chapter][gid])
        kernel_rows = [c for rule, c in TABLE[chapter][gid] if rule.startswith(KERNEL)]
        for fn in _graded_functions(source):
            assert any(isinstance(c, Covered) and fn in _graded_functions(_student_cell(chapter, c.cell))
                       for c in kernel_rows), f"{chapter} {gid} grades {fn}: no {KERNEL!r} row covers it"
        for marker, kind in (("check_masked_loads(", MASKS), ("at_gpu_sizes(", GPU_SIZES),
                             ("bandwidth_points(", SPEED), ("throughput_points(", SPEED)):
            if marker in source:
                assert kind in rows, f"{chapter} {gid} calls {marker}: the table needs a {kind!r} row"
        if MASKS in rows:
            assert "check_masked_loads(" in _student_cell(chapter, rows[MASKS].cell), (chapter, gid)


def test_in_a_notebook_every_check_applies_the_kernels_work_rule(monkeypatch):
    """What the KERNEL rows rest on: check() in a notebook (an IPython shell) judges the result's origin as the
    grader does, and outside one (this process) only when asked."""
    import sys
    import types

    from triton_course import integrity
    from triton_course.checks import judged_here

    monkeypatch.delenv(integrity.REQUIRE_KERNEL_ENV, raising=False)
    assert not judged_here()
    fake = types.ModuleType("IPython")
    fake.get_ipython = lambda: object()
    monkeypatch.setitem(sys.modules, "IPython", fake)
    assert judged_here() and not judged_here(False)


def test_every_chapter_of_the_course_is_in_the_table():
    assert CHAPTERS and set(TABLE) == set(CHAPTERS), (set(CHAPTERS) ^ set(TABLE))


@pytest.mark.parametrize("chapter", NO_GAPS)
def test_no_chapter_leaves_a_gap(chapter):
    gaps = [(gid, rule) for gid, rules in TABLE[chapter].items() for rule, c in rules if isinstance(c, Gap)]
    assert not gaps, gaps


def test_the_gap_list_is_named_and_printed(capsys):
    """The gaps, by name (none of them counted as covered): printed for the lead; there must be none."""
    assert all(re.match(r"\d\d: ", g) for g in GAPS) and not any(g.startswith(c[:2]) for c in NO_GAPS for g in GAPS)
    covered = sum(isinstance(c, Covered) for rows in TABLE.values() for rules in rows.values() for _, c in rules)
    with capsys.disabled():
        print(f"\nself-check coverage: {covered} rules covered, {len(GAPS)} gaps a CPU could check:")
        for gap in GAPS:
            print(f"  GAP {gap}")
    assert not GAPS, GAPS
