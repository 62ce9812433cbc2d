"""Measure chapters' reference solutions on this GPU and record the numbers.

    python tests/gpu/measure.py CHAPTER [CHAPTER ...] [--out DIR]

For each chapter it executes the solution notebook's code (through its last solution cell), calls
``measure(ns)`` from ``solutions/<chapter>/measure.py`` and writes ``<DIR>/<chapter>.json`` (default DIR:
the chapter's ``solutions/<chapter>/records/``) with the device, the versions, the copy bandwidth measured in the same process, the
figures, and the command that reproduces them. It refuses to run without a CUDA GPU: these files are
GPU claims.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import triton_course  # noqa: E402
from grader.course import records_folder, solution_notebook  # noqa: E402
from grader.notebook_code import load_namespace  # noqa: E402
from triton_course.bench import METHOD, copy_bandwidth  # noqa: E402


def measure_chapter(chapter: str) -> dict[str, object]:
    spec = importlib.util.spec_from_file_location(f"measure_{chapter}", ROOT / "solutions" / chapter / "measure.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ns = load_namespace(solution_notebook(chapter))
    device = triton_course.current()
    record = {
        "chapter": chapter,
        "command": f"python tests/gpu/measure.py {chapter}",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "device": device.name,
        "compute_capability": list(device.compute_capability or ()),
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "copy_gbps": round(copy_bandwidth(), 1),
        "method": METHOD,
    }
    record.update(module.measure(ns))
    return record


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("chapters", nargs="+")
    p.add_argument("--out", default=None, help="folder for <chapter>.json (default: each chapter's records/)")
    args = p.parse_args(argv)
    if triton_course.current().interpreted:
        print("tests/gpu/measure.py needs a CUDA GPU: these numbers are GPU claims", file=sys.stderr)
        return 2
    for chapter in args.chapters:
        out = Path(args.out) if args.out else records_folder(chapter)
        out.mkdir(parents=True, exist_ok=True)
        record = measure_chapter(chapter)
        (out / f"{chapter}.json").write_text(json.dumps(record, indent=2) + "\n")
        print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
