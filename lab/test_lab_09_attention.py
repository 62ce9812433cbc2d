"""The probes of chapter 09's fast path (lab/sweeps), run under Triton's interpreter: moved out of the chapter's
tests (solutions/09_attention/test_09_attention.py), whose helpers and fixtures they share."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import chapter_tests

globals().update({name: value for name, value in vars(chapter_tests("09_attention")).items()
                  if not name.startswith(("test_", "__"))})   # the chapter tests' imports, helpers and fixtures


_HOST_TMA_PROBE = r"""
import json, sys
sys.path[:0] = [sys.argv[1] + "/lab/sweeps", sys.argv[1]]
import torch
import attention_host_tma as probe
from triton_course.attention import attention_reference
torch.manual_seed(0)
errors = {}
for causal in (False, True):
    q, k, v = (torch.randn(2, 3, 64, 16) for _ in range(3))
    want = attention_reference(q.double(), k.double(), v.double(), causal)
    runs = {"4d": lambda: probe.host_desc4_attention(q, k, v, causal, 32, 16, 4, 1),
            "2d split": lambda: probe.host_desc_attention(q, k, v, causal, 32, 16, 4, 1, split=True),
            "2d": lambda: probe.host_desc_attention(q, k, v, causal, 32, 16, 4, 1)}
    for name, run in runs.items():
        errors[f"{name} causal={causal}"] = float((run().double() - want).abs().max())
print(json.dumps(errors))
"""


def test_host_descriptor_probe_kernels_compute_attention_in_the_interpreter():
    """The kernels lab/sweeps/attention_host_tma.py times on the H200 (host-made 2-D and 4-D tensor descriptors,
    the causal split into unmasked and masked blocks, and one loop masking every block) agree with float64 on
    2 x 3 heads of 64 rows, two query blocks and four key blocks each, in Triton's interpreter."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", _HOST_TMA_PROBE, str(ROOT)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    errors = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(errors) == 6 and all(err < 1e-5 for err in errors.values()), errors


def _probe_dry_run(script: str, *args: str, interpret: bool = True) -> str:
    """stdout of ``lab/sweeps/<script> --dry-run`` run in a child process, which must exit 0; with
    ``interpret=False`` TRITON_INTERPRET is left out of its environment (the script must set it itself)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update({"PYTHONPATH": str(ROOT), **({"TRITON_INTERPRET": "1"} if interpret else {})})
    proc = subprocess.run([sys.executable, str(ROOT / "lab" / "sweeps" / script), *args, "--dry-run"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_hand_pipelined_probe_runs_both_kernels_under_the_interpreter():
    """lab/sweeps/attention_pipelined.py --dry-run: the fast path's kernel and its copy with the unmasked loop
    pipelined by hand (block j + 1's scores before block j's softmax) agree with float64 for every launch and case
    the probe times, masked remainders included (N = 100 in blocks of 16)."""
    out = _probe_dry_run("attention_pipelined.py")
    assert out.count("pipelined  correct") == 5 and out.count("as is      correct") == 5
    assert "WRONG" not in out


def test_persistent_probe_runs_its_variants_under_the_interpreter_it_chooses_itself():
    """lab/sweeps/attention_persistent.py --dry-run: the persistent loops over query tiles (4-D descriptors, and
    2-D ones, with and without ``flatten``) agree with float64, causal or not. Started without TRITON_INTERPRET in
    its environment: the script sets it before importing Triton, or Triton's own functions (``tl.max``) would stay
    compiled ones that the interpreter cannot call."""
    out = _probe_dry_run("attention_persistent.py", interpret=False)
    assert out.count(" correct (max error") == 5 and "WRONG" not in out
    assert "pers2d flat 32x16" in out


def test_lazy_rescale_probe_runs_both_kernels_under_the_interpreter():
    """lab/sweeps/attention_lazy_rescale.py --dry-run: the fast path's kernel and its copy that rescales only when
    a row's maximum grows by more than 8 agree with float64 in every case, on keys that grow along the sequence too
    (where a rescale that forgot the row sums was 4 off)."""
    out = _probe_dry_run("attention_lazy_rescale.py")
    assert out.count("growing lazy     correct") == 4 and out.count("normal  lazy     correct") == 4
    assert "WRONG" not in out


@pytest.mark.parametrize("which", ["first", "wide"])
def test_d128_launch_probe_runs_its_launches_under_the_interpreter(which):
    """lab/sweeps/attention_d128_launches.py --dry-run: every launch of each set agrees with float64 under the
    interpreter (register caps are dropped there, and the float16-pair exponentials, inline PTX, run only on a GPU),
    but the causal 64 x 128 ones, which launch_config now refuses with its message instead of running them wrong."""
    out = _probe_dry_run("attention_d128_launches.py", "--set", which)
    refused = [line for line in out.splitlines() if "NOT USED" in line]
    if which == "first":
        assert len(refused) == 2 and all("64x128" in line and "BLOCK_N to divide BLOCK_M" in line for line in refused)
        assert out.count(" correct (max error") == 15
    else:
        assert refused == [] and out.count(" correct (max error") == 18


def test_graph_timing_probe_checks_what_it_times_under_the_interpreter():
    """lab/sweeps/attention_graphs.py --dry-run: the functions it replays from CUDA graphs on a GPU (the
    fast path's table twice, the 128 x 128 launch pinned at D = 128 without a mask) agree with float64 in all four
    cases."""
    out = _probe_dry_run("attention_graphs.py")
    assert out.count(" correct (max error") == 9 and "WRONG" not in out
    assert "tma 128x128 w8 s3      correct" in out


def test_fixed_cost_probe_checks_its_launch_under_the_interpreter():
    """lab/sweeps/attention_fixed_cost.py --dry-run: the 128 x 128 launch it times on a GPU agrees with
    float64 under the interpreter; its line fit recovers a line it is given."""
    import sys

    assert "128x128 w8 s3: correct" in _probe_dry_run("attention_fixed_cost.py")
    sys.path.insert(0, str(ROOT / "lab" / "sweeps"))
    try:
        from attention_fixed_cost import fit
    finally:
        sys.path.remove(str(ROOT / "lab" / "sweeps"))
    once, per = fit([2, 4, 8, 16], [4.0 + 1.5 * x for x in (2, 4, 8, 16)])
    assert math.isclose(once, 4.0) and math.isclose(per, 1.5)


def test_fp32_tolerance_covers_tf32_products_on_the_sm_scale_test():
    """A GPU multiplies fp32 q, k and v as TF32. On test_attention_sm_scale's first case (D = 32, sm_scale = 1.0,
    scores up to about 15) the error that leaves is largest, and under the old fp32 tolerance of 1e-2 it failed an
    honest copy once in a class of 40. Emulated here over 4000 draws: the current tolerance keeps every draw below
    0.75 of itself, the old one does not, and the emulation's median and 99th percentile agree with the H200's
    own over 1000 draws (lab/records/hidden_test_margins.json), so the emulation is the GPU's error and not a
    smaller one."""
    assert "rand(2, 2, 29, 32) for _ in range(3)), False, 1.0)" in solution_cell(CHAPTER, "test_attention_sm_scale")
    gen = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(4000, 2, 2, 29, 32, generator=gen).double() for _ in range(3))
    want, got = attention_reference(q, k, v, False, 1.0), _tf32_attention(q, k, v, 1.0)

    def worst(atol, rtol):
        return error_over_tolerance(got, want, atol, rtol).flatten(1).amax(1)

    now = worst(*attention_tolerance(torch.float32))
    assert float(now.max()) < 0.75, float(now.max())
    assert float(worst(1e-2, 1e-2).max()) > 1
    gpu = json.loads((ROOT / "lab" / "records" / "hidden_test_margins.json").read_text())
    gpu = gpu["chapters"][CHAPTER]["cells"]["test_attention_sm_scale"]
    assert abs(float(now.median()) / gpu["median_error_over_tolerance"] - 1) < 0.25, float(now.median())
    assert abs(float(now.quantile(0.99)) / gpu["p99_error_over_tolerance"] - 1) < 0.25, float(now.quantile(0.99))
