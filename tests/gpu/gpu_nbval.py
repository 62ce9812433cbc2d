"""Run every chapter's solution notebook under nbval on this GPU, as a student runs it, and record it.

    python tests/gpu/gpu_nbval.py [ID ...] [--out FILE]

For each chapter (default: all), runs ``python -m pytest --nbval-lax`` on ``solutions/<ID>/<ID>.ipynb``
in a Jupyter kernel (every cell, the benchmarks and plots included; ``--nbval-lax`` fails a cell that
raises, and does not compare outputs, which differ from GPU to GPU) and writes the outcome of each to
``tests/gpu/records/gpu_nbval.json``. CI runs the same notebooks on a CPU through Triton's interpreter; this is the
compiled path.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from grader.course import assignments  # noqa: E402

CELL_TIMEOUT_S = 300


def run_chapter(chapter: str) -> dict[str, object]:
    """nbval of one solution notebook: exit code, the pytest summary line, and the wall time."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "--nbval-lax", f"--nbval-cell-timeout={CELL_TIMEOUT_S}",
                           "-p", "no:cacheprovider", "-q", f"{chapter}.ipynb"],
                          cwd=ROOT / "solutions" / chapter, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if re.search(r"\d+ (passed|failed|error)", ln)]
    return {"exit_code": proc.returncode, "result": lines[-1].strip("= ") if lines else proc.stdout[-500:],
            "wall_s": round(time.perf_counter() - start, 1),
            "failures": proc.stdout[-3000:] if proc.returncode else ""}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("chapters", nargs="*")
    p.add_argument("--out", default=str(ROOT / "tests" / "gpu" / "records" / "gpu_nbval.json"))
    args = p.parse_args(argv)
    import torch
    import triton
    if not torch.cuda.is_available():
        print("this records the notebooks on a GPU: it needs a CUDA GPU", file=sys.stderr)
        return 2
    out = Path(args.out)
    # chapters run earlier keep their entries: each entry says when, on what and by which command it ran
    record: dict[str, object] = json.loads(out.read_text()) if out.is_file() else {}
    record.update({
        "chapter": "solution notebooks under nbval on a GPU",
        "command": "python tests/gpu/gpu_nbval.py [ID ...]  (each notebook's own command, date and versions are in its entry)",
        "method": f"pytest --nbval-lax --nbval-cell-timeout={CELL_TIMEOUT_S} in solutions/<ID>/, a Jupyter "
                  "kernel running every cell of the notebook",
    })
    notebooks: dict[str, dict] = record.setdefault("notebooks", {})
    ran: list[dict] = []
    for chapter in args.chapters or assignments():
        entry = run_chapter(chapter)
        entry.update({"command": f"python tests/gpu/gpu_nbval.py {chapter}",
                      "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                      "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
                      "commit": _commit()})
        notebooks[chapter] = entry
        ran.append(entry)
        record["date"] = entry["date"]
        record["device"], record["torch"], record["triton"] = entry["device"], entry["torch"], entry["triton"]
        record["summary"] = [f"{c}: {r['result']} ({r.get('date', '?')[:10]})" for c, r in sorted(notebooks.items())]
        out.write_text(json.dumps(record, indent=1) + "\n")
        print(chapter, entry["result"], flush=True)
    return 0 if all(r["exit_code"] == 0 for r in ran) else 1


def _commit() -> str:
    """The course commit the notebooks ran at ("+" when the tree differed from it)."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "solutions", "utils"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return (head or "unknown") + ("+" if dirty else "")


if __name__ == "__main__":
    sys.exit(main())
