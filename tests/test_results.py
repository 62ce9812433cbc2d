"""GPU claims are files: each results/*.json names its device, versions and reproducing command, the
summary page is generated from them, and the claims the issues make hold in the recorded numbers."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

RESULTS = sorted((ROOT / "results").glob("*.json"))


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.name)
def test_every_result_names_how_it_was_measured(path):
    r = json.loads(path.read_text())
    # a file holds one measurement, or several under "runs" (those not measured say so and why)
    runs = [run for run in r["runs"].values() if run.get("measured", True)] if "runs" in r else [r]
    assert runs, f"{path.name} records no measurement"
    for run in runs:
        for key in ("command", "device", "torch", "triton", "date"):
            assert run.get(key), f"{path.name} lacks {key}"
        assert "NVIDIA" in run["device"], "GPU claims come from a GPU"
    if "runs" in r:
        for name, run in r["runs"].items():
            assert run.get("measured", True) or run.get("note"), f"{path.name}: {name} is unmeasured without a note"


def test_results_page_is_generated_from_the_files():
    proc = subprocess.run([sys.executable, str(ROOT / "results" / "summarize.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_vector_add_meets_its_bandwidth_target_on_the_h200():
    r = json.loads((ROOT / "results" / "03_vector_add.json").read_text())
    check = r["bandwidth_check"]
    assert "H200" in r["device"] and check["passes"]
    assert check["achieved_gbps"] / r["copy_gbps"] >= check["target_fraction"]


def test_vector_add_solution_earned_full_points_when_graded_on_the_h200():
    rows = json.loads((ROOT / "results" / "gpu_autograde_03_vector_add.json").read_text())
    ada = [r for r in rows["grades"] if r["student"] == "ada_correct"]
    assert ada and all(r["status"] == "passed" and r["points"] == r["max_points"] for r in ada)
    assert any(r["grade_id"] == "test_add_bandwidth" for r in ada)
    broken = [r for r in rows["grades"] if r["student"] in ("cleo_no_mask", "dev_floor_grid")
              and r["grade_id"] == "test_add_bandwidth"]
    assert broken and all(r["points"] == 0 for r in broken), "bandwidth points need a correct kernel"
