"""A hidden test that fails only because the shared grading GPU was out of memory is tried again; nothing else is.

Ten submissions graded at once on one H200 ran seven honest copies of chapter 09 out of memory
(tests/gpu/records/gpu_class_throughput_09_class_oom.json). These tests drive
:func:`grader.judge.run_test_cell_on_a_shared_gpu` with test cells that fail as those did; the GPU lock's reclaiming of
memory before each new try stands in here as a counter (it is tested for real in tests/test_gpu_memory_share.py).
"""

from grader.judge import OUT_OF_MEMORY_WAITS_S, run_test_cell_on_a_shared_gpu

FAILS_UNTIL = """
state["tries"] += 1
if state["tries"] <= state["failing"]:
    raise state["error"]
score = 3
score
"""


class Waits(list):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def _run(error: Exception, failing: int):
    import torch

    state = {"tries": 0, "failing": failing, "error": error}
    waits, reclaims = Waits(), []
    outcome = run_test_cell_on_a_shared_gpu(FAILS_UNTIL, {"state": state, "torch": torch}, "test_x", sleep=waits,
                                            reclaim=lambda: reclaims.append(state["tries"]) or [])
    assert reclaims == list(range(1, len(waits) + 1)), "memory is reclaimed once before each new try, and only then"
    return outcome, state["tries"], waits


def test_a_test_that_ran_out_of_gpu_memory_once_is_tried_again_and_keeps_its_points():
    import torch

    outcome, tries, waits = _run(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), 1)
    assert outcome.error is None and outcome.score == 3 and tries == 2
    assert waits == [OUT_OF_MEMORY_WAITS_S[0]]
    assert outcome.notes == ["tried 2 times: the GPU ran out of memory before"]


def test_the_students_call_running_out_of_memory_counts_too():
    """The judge's message for a student's call that raised: a CheckFailed quoting the student's OutOfMemoryError."""
    from triton_course.checks import CheckFailed

    error = CheckFailed("attention at Z, H, N, D = (4, 32, 4096, 64), float16 raised OutOfMemoryError: CUDA out of "
                        "memory. Tried to allocate 64.00 MiB.")
    outcome, tries, _ = _run(error, 2)
    assert outcome.error is None and tries == 3
    triton = RuntimeError("Triton Error [CUDA]: out of memory")   # a launch that could not get its memory
    assert _run(triton, 1)[0].error is None


def test_a_library_that_could_not_allocate_its_workspace_counts_too():
    """cuBLAS's handle for the judge's reference failed beside a hoarder on an H100, and an honest 09 lost ten points
    (tests/gpu/records/gpu_class_throughput_09_memory_hog.json): the libraries' allocation failures are tried again."""
    for message in ("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
                    "cuDNN error: CUDNN_STATUS_ALLOC_FAILED", "CUDA error: out of memory"):
        outcome, tries, _ = _run(RuntimeError(message), 1)
        assert outcome.error is None and tries == 2, message
    outcome, tries, _ = _run(RuntimeError("CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx`"), 1)
    assert outcome.error is not None and tries == 1, "a library's other failures are final at once"


def test_a_kernel_that_always_runs_out_of_memory_fails_after_the_last_try_and_says_so():
    import torch

    outcome, tries, waits = _run(torch.cuda.OutOfMemoryError("CUDA out of memory."), 99)
    assert outcome.error is not None and outcome.error[0] == "OutOfMemoryError"
    assert tries == 1 + len(OUT_OF_MEMORY_WAITS_S) and waits == list(OUT_OF_MEMORY_WAITS_S)
    assert outcome.notes == [f"tried {tries} times: the GPU ran out of memory every time"]


def test_any_other_failure_is_final_at_once():
    from triton_course.checks import CheckFailed

    outcome, tries, waits = _run(CheckFailed("3 of 16 output elements are wrong"), 1)
    assert outcome.error == ("CheckFailed", "3 of 16 output elements are wrong")
    assert tries == 1 and waits == [] and outcome.notes == []
