"""Backend choice, the environment summary, the datasheet table and the no-GPU behaviour."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import triton_course
from tests.conftest import ROOT
from triton_course.bench import bandwidth_sweep, copy_bandwidth, gbps, steady_ms, steady_rounds, tensor_bytes, time_ms
from triton_course.gpus import spec_for
from triton_course.grading import NOT_GRADED, bandwidth_points, quiet_stderr


def test_interpreter_is_chosen_without_a_gpu():
    assert not torch.cuda.is_available(), "this suite is meant for machines without a GPU"
    assert os.environ["TRITON_INTERPRET"] == "1"
    assert triton_course.current().interpreted and triton_course.current().torch_device.type == "cpu"


def test_interpreter_is_set_before_the_first_kernel_in_a_fresh_process():
    code = ("import triton_course, triton, triton.language as tl, torch\n"
            "@triton.jit\n"
            "def k(p):\n    tl.store(p + tl.arange(0, 4), tl.arange(0, 4).to(tl.float32))\n"
            "t = torch.zeros(4); k[(1,)](t); print(t.tolist())")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[0.0, 1.0, 2.0, 3.0]"


def test_summary_names_versions_and_mode():
    s = triton_course.current().summary()
    assert torch.__version__ in s and "Triton interpreter" in s and "NOTE" in s


@pytest.mark.parametrize("interpreted, cc, runs", [(True, None, False), (False, (7, 5), False), (False, (8, 6), True),
                                                   (False, (9, 0), True)])
def test_bf16_runs_only_on_gpus_that_have_it(interpreted, cc, runs):
    """bfloat16 is wrong in the interpreter and absent on a T4: both say why; an A10 or H200 runs it."""
    from triton_course.device import Device

    device = Device(interpreted, torch.device("cpu" if interpreted else "cuda"), "CPU" if interpreted else "Tesla T4",
                    cc, None, None, None)
    assert device.bf16 is runs
    assert (device.bf16_skipped() is None) is runs
    assert device.dtypes(torch.float32, torch.bfloat16) == ([torch.float32, torch.bfloat16] if runs else [torch.float32])
    if not runs:
        assert ("interpreter" if interpreted else "sm_75") in device.bf16_skipped()


def test_sizes_shrink_under_the_interpreter():
    assert triton_course.current().pick(gpu=2**26, cpu=2**10) == 2**10


@pytest.mark.parametrize("name, model", [("NVIDIA H200", "H200"), ("NVIDIA A100-SXM4-80GB", "A100"),
                                         ("NVIDIA A10", "A10"), ("Tesla T4", "T4"), ("NVIDIA GeForce RTX 3050", None),
                                         ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA H100 PCIe", None),
                                         ("NVIDIA H100 NVL", None), ("NVIDIA A100-PCIE-40GB", None)])
def test_datasheet_lookup(name, model):
    spec = spec_for(name)
    assert (spec.name if spec else None) == model


def test_timing_without_a_gpu_says_so():
    with pytest.raises(triton_course.NoGPUError, match="needs a CUDA GPU"):
        time_ms(lambda: None)
    with pytest.raises(triton_course.NoGPUError, match="needs a CUDA GPU"):
        steady_ms(torch.clone, lambda: (torch.randn(8),))
    with pytest.raises(triton_course.NoGPUError, match="needs a CUDA GPU"):
        steady_rounds({"a": torch.clone, "b": torch.clone}, lambda: (torch.randn(8),))
    copy_bandwidth.cache_clear()
    with pytest.raises(triton_course.NoGPUError):
        copy_bandwidth()


def test_copy_bandwidth_can_be_fixed_by_the_grader(monkeypatch):
    copy_bandwidth.cache_clear()
    monkeypatch.setenv("COURSE_COPY_GBPS", "1234.5")
    assert copy_bandwidth() == 1234.5
    copy_bandwidth.cache_clear()


def test_tensor_bytes_counts_every_tensor_in_an_input_set():
    # steady_rounds sizes its rotating input sets from this: a set it undercounts would fit in the L2
    x, w = torch.empty(4, 6, dtype=torch.float16), torch.empty(6)
    assert tensor_bytes((x, w, 1e-6, "name")) == 4 * 6 * 2 + 6 * 4
    assert tensor_bytes([x, [w]]) == 4 * 6 * 2 + 6 * 4
    assert tensor_bytes(None) == 0


def test_gbps_arithmetic():
    assert gbps(12e9, 1000.0) == pytest.approx(12.0)


def test_bandwidth_check_is_not_graded_without_a_gpu(capsys):
    score = bandwidth_points(lambda: None, lambda: (), 1, fraction=0.75, points=2, what="add")
    assert score == 0.0
    assert capsys.readouterr().out.startswith(NOT_GRADED)


def test_sweep_under_the_interpreter_is_labelled():
    sweep = bandwidth_sweep({"clone": torch.clone}, lambda n: (torch.randn(n),), lambda n: 8 * n, [64, 128])
    assert sweep.interpreted and len(sweep.series["clone"]) == 2
    assert "not GPU performance" in sweep.table()


def test_quiet_stderr_moves_writes_to_stdout(capfd):
    with quiet_stderr():
        print("from python", file=sys.stderr)
        os.write(2, b"from a C library\n")
    out, err = capfd.readouterr()
    assert "from python" in out and "from a C library" in out and err == ""


def test_bandwidth_points_are_only_for_a_correct_kernel(monkeypatch):
    """The gating logic, with the device reported as a GPU (the timing itself is proven on the H200:
    tests/gpu/records/gpu_autograde_03_vector_add.json)."""
    import dataclasses

    import triton_course.grading as grading
    from triton_course.checks import CheckFailed

    gpu = dataclasses.replace(triton_course.current(), interpreted=False)
    monkeypatch.setattr(grading, "current", lambda: gpu)
    monkeypatch.setattr(grading, "copy_bandwidth", lambda: 1000.0)
    monkeypatch.setattr(grading, "measure_gbps", lambda fn, make, nbytes: 900.0)

    def wrong():
        raise CheckFailed("104 elements were never written")
    with pytest.raises(CheckFailed, match="only for a correct kernel"):
        bandwidth_points(lambda: None, lambda: (), 1, fraction=0.75, points=2, what="add", correct_first=wrong)
    assert bandwidth_points(lambda: None, lambda: (), 1, fraction=0.75, points=2, what="add",
                            correct_first=lambda: None) == 2.0
    monkeypatch.setattr(grading, "measure_gbps", lambda fn, make, nbytes: 500.0)
    with pytest.raises(CheckFailed, match="500 GB/s; target 75%"):
        bandwidth_points(lambda: None, lambda: (), 1, fraction=0.75, points=2, what="add")


@pytest.mark.parametrize("cc, noted", [((7, 5), True), ((8, 6), False), ((9, 0), False)])
def test_the_setup_cell_tells_a_t4_what_runs_there(cc, noted):
    """Issue 45: the setup cell (its summary's notes) says on a T4 that Triton supports 8.0 and later, what runs
    there and which chapters teach less; an A10 or an H200 gets no such note."""
    from triton_course.device import Device

    device = Device(False, torch.device("cuda"), "Tesla T4" if noted else "GPU", cc, None, None, None)
    notes = " ".join(device.notices())
    assert ("compute capability 8.0 and later" in notes and "07, 09 and 11" in notes and "FMA" in notes) is noted
