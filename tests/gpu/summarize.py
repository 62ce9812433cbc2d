"""Render the README.md of every folder of GPU records from its JSON files (never edit the numbers by hand):
each chapter's ``solutions/<id>/records/`` and the grader's acceptance runs in ``tests/gpu/records/``, or the
folders given (the lab's: ``lab/records``).

    python tests/gpu/summarize.py                      # rewrite the course's README.md files
    python tests/gpu/summarize.py --check              # exit 1 if one is out of date (the test suite does this)
    python tests/gpu/summarize.py [--check] lab/records  # the lab's (make test-lab checks it)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def record_folders() -> list[Path]:
    """The course's folders of records: every chapter's ``records/`` and ``tests/gpu/records/``."""
    return [*sorted(p for p in (ROOT / "solutions").glob("*/records") if p.is_dir()), HERE / "records"]


HEAD = """# Measured on GPUs

Every figure here was measured on a real GPU by the command in its row and is stored in the JSON file
next to this page; this page is generated from those files by `python tests/gpu/summarize.py`.
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
        elif isinstance(v, dict) and v and all(isinstance(x, (int, float, str, bool)) for x in v.values()):
            out.append(f"{k}: " + ", ".join(f"{a}={b}" for a, b in v.items()))
        elif isinstance(v, dict) and v and all(isinstance(x, dict) for x in v.values()):   # one line per named part
            out += [f"{k}, {a}: " + ", ".join(f"{c}={d}" for c, d in b.items()
                                             if isinstance(d, (int, float, str, bool))) for a, b in v.items()]
    return out


def render(folder: Path) -> str:
    parts = [HEAD]
    for path in sorted(folder.glob("*.json")):
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
        lines = [lines] if isinstance(lines, str) else lines   # a one-line summary
        parts += [f"- {line}" for line in lines]
        parts.append(f"- full figures: [{path.name}]({path.name})\n")
    return "\n".join(parts).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true")
    p.add_argument("folders", nargs="*", type=Path, help="folders of records (default: the course's)")
    args = p.parse_args(argv)
    stale = []
    for folder in [f if f.is_absolute() else Path.cwd() / f for f in args.folders] or record_folders():
        folder = folder.resolve()
        text, readme = render(folder), folder / "README.md"
        if args.check:
            if not readme.exists() or readme.read_text() != text:
                stale.append(str(readme.relative_to(ROOT)))
        else:
            readme.write_text(text)
    if stale:
        print(f"out of date: {', '.join(stale)}: run python tests/gpu/summarize.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
