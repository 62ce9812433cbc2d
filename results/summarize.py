"""Render results/README.md from the measured JSON files (never edit the numbers by hand).

    python results/summarize.py            # rewrite results/README.md
    python results/summarize.py --check    # exit 1 if README.md is out of date (the test suite does this)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

HEAD = """# Measured on GPUs

Every figure here was measured on a real GPU by the command in its row and is stored in the JSON file
next to this page; this page is generated from those files by `python results/summarize.py`.
GB/s count the bytes that must move (each input read once, each output written once); "copy" is a
device-to-device copy measured in the same process, the ceiling every bandwidth target refers to.
"""


def _scalars(record: dict, skip=("chapter", "command", "date", "device", "compute_capability", "torch",
                                  "triton", "copy_gbps", "method", "summary")) -> list[str]:
    out = []
    for k, v in record.items():
        if k in skip:
            continue
        if isinstance(v, (int, float, str, bool)):
            out.append(f"{k}: {v}")
        elif isinstance(v, dict) and all(isinstance(x, (int, float, str, bool)) for x in v.values()):
            out.append(f"{k}: " + ", ".join(f"{a}={b}" for a, b in v.items()))
    return out


def render() -> str:
    parts = [HEAD]
    for path in sorted(HERE.glob("*.json")):
        r = json.loads(path.read_text())
        if "runs" in r:
            parts.append(f"## {path.stem}\n")
            parts.append(f"{r.get('what', '')}\n")
            parts += [f"- {line}" for line in r.get("summary", [])]
            for name, run in r["runs"].items():
                if not run.get("measured", True):
                    parts.append(f"- {name}: not measured. {run.get('note', '')}")
                    continue
                parts.append(f"- {name}: {run.get('device', '?')}, torch {run.get('torch', '?')}, triton "
                             f"{run.get('triton', '?')}, {run.get('date', '?')}; reproduce: `{run.get('command', '?')}`")
                for part, p in run.get("parts", {}).items():
                    parts.append(f"  - {part}: {p.get('submissions')} submissions in {p.get('wall_s')} s "
                                 f"({p.get('s_per_submission_overall')} s each)")
                for chapter, c in run.get("chapters", {}).items():
                    parts.append(f"  - {chapter}: {c.get('result')}, {c.get('job_s')} s")
                if run.get("note"):
                    parts.append(f"  - note: {run['note']}")
            parts.append(f"- full figures: [{path.name}]({path.name})\n")
            continue
        title = r.get("chapter") or path.stem
        parts.append(f"## {title}\n")
        meta = [f"device: {r.get('device', '?')}", f"torch {r.get('torch', '?')}, triton {r.get('triton', '?')}",
                f"date: {r.get('date', '?')}"]
        if "copy_gbps" in r:
            meta.append(f"copy bandwidth: {r['copy_gbps']} GB/s")
        parts.append("- " + "; ".join(meta))
        parts.append(f"- reproduce: `{r.get('command', '?')}`")
        lines = r.get("summary") or _scalars(r)
        parts += [f"- {line}" for line in lines]
        parts.append(f"- full figures: [{path.name}]({path.name})\n")
    return "\n".join(parts).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true")
    args = p.parse_args(argv)
    text = render()
    readme = HERE / "README.md"
    if args.check:
        if not readme.exists() or readme.read_text() != text:
            print("results/README.md is out of date: run python results/summarize.py", file=sys.stderr)
            return 1
        return 0
    readme.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
