"""Run the judge's GPU-only tests on this GPU and record which passed.

    python tests/gpu/gpu_judge_tests.py [--out DIR]

Runs ``pytest tests/test_judge.py -k on_a_gpu`` (the tests marked ``needs_gpu``, all named ``test_on_a_gpu_...``,
which skip on CI's CPU; the judge's other tests run on the CPU, with CPU tensors) with a JUnit report, and writes
``DIR/gpu_judge_tests.json``: the device, the versions, the commit, the names of the tests that passed, failed or
skipped, and pytest's summary line. tests/test_results.py requires a recorded
pass on an H200 for every ``needs_gpu`` test. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

WHAT = ("the judge's GPU-only tests (tests/test_judge.py, marked needs_gpu): the timed loop replays a CUDA graph "
        "of the watched calls; Python's per-call time is not counted; a function that synchronises is timed as "
        "called and leaves the process usable; PyTorch behind a launch is caught while captured; outputs made "
        "off the graph during the capture are refused as implausible; the separate relaunch process re-runs "
        "the launches on the GPU; two outputs are captured, timed and checked beside a same-size copy")


def outcomes(junit: Path) -> dict[str, list[str]]:
    """Test names by outcome (passed, failed, skipped) from a pytest JUnit XML report."""
    found: dict[str, list[str]] = {"passed": [], "failed": [], "skipped": []}
    for case in ET.parse(junit).getroot().iter("testcase"):
        kinds = {child.tag for child in case}
        kind = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
        found[kind].append(case.get("name", "?"))
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(ROOT / "tests" / "gpu" / "records"))
    args = p.parse_args(argv)
    import torch
    import triton

    if not torch.cuda.is_available():
        print("this records the judge's GPU tests: it needs a CUDA GPU", file=sys.stderr)
        return 2
    command = [sys.executable, "-m", "pytest", "-q", "tests/test_judge.py", "-k", "on_a_gpu", "-rA", "-p",
               "no:cacheprovider"]
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        run = subprocess.run([*command, f"--junitxml={junit}"], cwd=ROOT, capture_output=True, text=True)
        print(run.stdout[-6000:], run.stderr[-3000:], sep="\n")
        found = outcomes(junit) if junit.is_file() else {"passed": [], "failed": ["(no report)"], "skipped": []}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    record = {
        "what": WHAT,
        "command": "python tests/gpu/gpu_judge_tests.py",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "commit": commit.stdout.strip() or "unknown",
        **found,
        "summary": [line for line in run.stdout.splitlines() if " passed" in line or " failed" in line][-1:],
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_judge_tests.json").write_text(json.dumps(record, indent=1) + "\n")
    return 0 if found["passed"] and not found["failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
