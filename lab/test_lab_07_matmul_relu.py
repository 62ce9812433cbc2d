"""The probes of chapter 07's fast path (lab/sweeps), run under Triton's interpreter: moved out of the chapter's
tests (solutions/07_matmul_relu/test_07_matmul_relu.py), whose helpers and fixtures they share."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import chapter_tests

globals().update({name: value for name, value in vars(chapter_tests("07_matmul_relu")).items()
                  if not name.startswith(("test_", "__"))})   # the chapter tests' imports, helpers and fixtures


def test_the_fast_namespace_gives_the_probes_the_fast_path_under_the_old_names(ns, mf):
    """lab/sweeps/matmul_*.py read the names the solution notebook held when the fast path was its code:
    fast_namespace gives them, matmul_relu the fast path around the notebook's kernel, model_answer the notebook's
    own launcher."""
    probe = mf.fast_namespace(ns)
    assert isinstance(probe["matmul_relu"], mf.FastMatmulRelu) and probe["model_answer"] is ns["matmul_relu"]
    fast = probe["matmul_relu"]
    assert probe["LAUNCHES"] is fast.launches and probe["matmul_relu_tuned"] is fast.tuned
    for name in ("tma_plan", "tma_args", "tma_launch", "hopper_case", "choose_tile", "GPU_TMA_TILES", "HOPPER_CHOICE",
                 "realigned", "copy_rows", "padded_rows", "b_transposed", "tile_at", "tile_sums", "TensorDescriptor",
                 "add_pieces_kernel", "ADD_ROWS", "MAX_SPLIT", "COPY_TILE", "ROW_BOUNDARY", "copy_rows_kernel",
                 "cpu_tile", "CONFIGS", "SMALL_CONFIG", "SMALL", "tma_fits", "device", "matmul_relu_kernel"):
        assert name in probe, name
    a, b = make(48, 40, 32)
    assert torch.equal(probe["matmul_relu"](a, b), probe["model_answer"](a, b))


def _dry_run(script: str, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    """lab/sweeps/<script> run with ``args`` under Triton's interpreter; fails the test on a non-zero exit."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, str(ROOT / "lab" / "sweeps" / script), *args], capture_output=True,
                          text=True, env=env, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_the_sweep_script_runs_its_plan_under_the_interpreter(tmp_path):
    """`lab/sweeps/matmul_sweep.py --dry-run` builds every variant it would time and checks each one's
    output under the interpreter at small sizes, and prints the plan (no figures)."""
    proc = _dry_run("matmul_sweep.py", "--dry-run", "--out", str(tmp_path / "sweep.json"))
    assert not (tmp_path / "sweep.json").exists(), "a dry run records nothing"
    out = proc.stdout
    for shape in ("1024^3", "3000^3", "4096^3", "8192^3", "4000x3000x5000", "512x16384x4096", "4096^3 B^T"):
        assert shape in out, shape
    for variant in ("reference", "no hints", "hints 128x256x64", "tma 128x256x64", "torch"):
        assert variant in out, variant
    assert "correct" in out and "WRONG" not in out


def test_the_tail_probe_runs_its_variants_under_the_interpreter(tmp_path):
    """`lab/sweeps/matmul_tail.py --dry-run`: the fast path's kernel with the last wave cut along K, and the
    probe's own kernels (the last wave in narrower tiles; b through pointers; the pieces added up by the program
    that counts a tile's last one), each correct twice in a row against float64, so that a count buffer left
    dirty would show."""
    proc = _dry_run("matmul_tail.py", "--dry-run", "--out", str(tmp_path / "tail.json"), timeout=600)
    assert not (tmp_path / "tail.json").exists(), "a dry run records nothing"
    for variant in ("reference", "split 2 (the plan)", "split 2, added by the last piece", "narrow x2",
                    "b by pointers, unaligned b", "torch"):
        assert f"{variant}" in proc.stdout, variant
    assert proc.stdout.count(" correct (max error") >= 7 and "WRONG" not in proc.stdout


def test_the_stream_k_probe_is_correct_under_the_interpreter(tmp_path):
    """`lab/sweeps/matmul_streamk.py --dry-run`: with 4 programs at these sizes most tiles are shared by two
    or three programs' runs of K-steps, so a finishing program that left out another's slot, or a count or flag
    left set for the next call, would give a WRONG line."""
    proc = _dry_run("matmul_streamk.py", "--dry-run", "--out", str(tmp_path / "sk.json"), timeout=600)
    assert not (tmp_path / "sk.json").exists(), "a dry run records nothing"
    for variant in ("sk tail", "sk tail+1", "sk all, kernel alone", "72x40x136 B^T", "100x80x304"):
        assert variant in proc.stdout, variant
    assert proc.stdout.count(" correct (max error") >= 20 and "WRONG" not in proc.stdout


def test_the_overlap_probe_is_correct_under_the_interpreter(tmp_path):
    """`lab/sweeps/matmul_overlap.py --dry-run`: the copy of b done by one program while the others compute the
    last wave's pieces from b as given, and the copy woven into the pieces' loop (two launches there: the
    interpreter runs programs one after another, so a wait for a later one would never end), each correct three
    calls in a row against float64, with the output's memory poisoned first (a count left set, a share never
    copied or a piece never added up shows), for b row-major and b = w.t()."""
    proc = _dry_run("matmul_overlap.py", "--dry-run", "--out", str(tmp_path / "overlap.json"), timeout=600)
    assert not (tmp_path / "overlap.json").exists(), "a dry run records nothing"
    for variant in ("small overlap 1 copiers", "small copy in the pieces' loop", "small B^T overlap 1 copiers",
                    "small B^T copy in the pieces' loop"):
        assert variant in proc.stdout, variant
    assert proc.stdout.count(" correct (max error") == 8 and "WRONG" not in proc.stdout, proc.stdout[-2000:]


def test_the_fast_paths_gluon_kernel_compiles_for_hopper_without_spilling():
    """`lab/sweeps/matmul_gluon_square.py --dry-run` (no GPU, no interpreter): the fast path's
    matmul_relu_gluon_kernel (tiles of 192 x 192: three warpgroups and a loader warp) compiles for sm_90 at four,
    three and two stages and with b = w.t(), with no spill stack and within the 227 KB of shared memory a program
    may have; four stages take over 200 KB of it."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, str(ROOT / "lab" / "sweeps" / "matmul_gluon_square.py"), "--dry-run"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    reports = {r["launch"]: r for r in (ast.literal_eval(line) for line in proc.stdout.splitlines()
                                        if line.startswith("{'launch'"))}
    assert list(reports) == ["192x192 s4", "192x192 s3", "192x192 s2", "192x192 s4 B^T"], proc.stdout[-2000:]
    for r in reports.values():
        assert r["stack"] == 0 and r["shared_bytes"] <= 227 * 1024, r
    assert reports["192x192 s4"]["shared_bytes"] > 200 * 1024


def test_the_gluon_probe_compiles_for_hopper_without_spilling():
    """`lab/sweeps/matmul_gluon.py --dry-run` (no GPU, no interpreter): the Gluon launches (192 x 128: three
    warpgroups and a loader warp; 128 x 256: two; 192 x 128 with a copier warp) compile for sm_90 with no spill
    stack and within the 227 KB of shared memory a program may have."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, str(ROOT / "lab" / "sweeps" / "matmul_gluon.py"), "--dry-run"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    reports = [ast.literal_eval(line) for line in proc.stdout.splitlines() if line.startswith("{'launch'")]
    assert [r["launch"] for r in reports] == ["192x128 s4", "128x256 s3", "192x128 s3, b copied inside, 3 copy slots"], \
        proc.stdout[-2000:]
    for r in reports:
        assert r["stack"] == 0 and r["shared_bytes"] <= 227 * 1024, r


def test_the_odd_size_probe_runs_every_path_under_the_interpreter(tmp_path):
    """`lab/sweeps/matmul_odd_sizes.py --dry-run`: at K and N odd, the reference, the exercise's kernel and the
    copies with the Hopper kernel (a last wave cut along K included) agree with float64, and nothing is recorded."""
    proc = _dry_run("matmul_odd_sizes.py", "--dry-run", "--out", str(tmp_path / "odd.json"), timeout=600)
    assert not (tmp_path / "odd.json").exists(), "a dry run records nothing"
    assert proc.stdout.count("copies + Hopper kernel: ok") == 3 and "WRONG" not in proc.stdout, proc.stdout[-2000:]


def test_the_unaligned_copy_probe_checks_every_copy_under_the_interpreter(tmp_path):
    """`lab/sweeps/unaligned_copy.py --dry-run`: every copy it times (the fast path's, the row-by-row kernel at
    each tile, the flat walks, torch's) copies a 45 x 77 matrix exactly, into padded rows and out of them."""
    proc = _dry_run("unaligned_copy.py", "--dry-run", "--out", str(tmp_path / "copy.json"), timeout=600)
    assert not (tmp_path / "copy.json").exists(), "a dry run records nothing"
    assert proc.stdout.count("45x77:") == 2 and "WRONG" not in proc.stdout and "flat 4096 w4 ok" in proc.stdout


def test_the_focus_sweep_runs_its_plan_under_the_interpreter():
    """`--dry-run --focus` builds the reference and every Hopper-path candidate at each focus shape, checks
    their outputs, and says which case of the rule each shape is."""
    proc = _dry_run("matmul_sweep.py", "--dry-run", "--focus")
    out = proc.stdout
    for shape in ("3000^3", "4000x3000x5000", "4096^3 B^T", "3000^3 B^T", "4096^3", "8192^3"):
        assert shape in out, shape
    assert "case 'b = w.t()'" in out and "case 'a size not a multiple of 16'" in out and "split [4, 2]" in out
    assert "tma 128x256x64 s4w8 h, no split correct" in out and "WRONG" not in out
