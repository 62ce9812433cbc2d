"""Does an honest submission ever fail a hidden correctness test by chance? Each chapter's hidden tests, run many
times on fresh random inputs with the solution notebook's own kernels, and how close each came to its tolerance.

    python lab/sweeps/hidden_test_margins.py 09_attention --draws 300 --out /tmp/margins_09.json
    python lab/sweeps/hidden_test_margins.py \
        09_attention:150,06_rmsnorm,05_softmax,08_fusion,07_matmul_relu,04_gelu,03_vector_add \
        --seconds 30 --out lab/records/hidden_test_margins.json
        (needs a CUDA GPU; --dry-run runs two draws of one chapter through Triton's interpreter)

Every hidden test draws its inputs with ``torch.randn`` when it runs, so each grading is one draw from a
distribution of errors. A tolerance calibrated on a few draws can sit inside that distribution's tail: one
honest copy of chapter 09 lost a point so in a class of 40 (tests/gpu/records/gpu_class_throughput_09_ray_1gpu.json), on
fp32 inputs that the GPU multiplies as TF32. This runs each test cell again and again and records, per cell,
how many draws failed and the largest error of each draw as a fraction of the tolerance
(``|got - expected| / (atol + rtol * |expected|)``, over every output element of every call the cell checks).
A cell is safe when no draw failed and its largest fraction leaves a wide margin below 1. The exception is a
tolerance of one rounding by design (04's and 05's float16 and bfloat16 cells): half a unit in the last place
plus 5% for float32's own error, so a correct kernel sits near 0.93-0.95 in every draw and a kernel that rounds
more than once fails; its margin is the 5%, about 2.4e-5 of each value, a hundred times float32's error there.

The cells run as the grader runs them, but in this process, with the solution's functions called directly
(no sandbox: the numbers come out the same, and the draws are many). Timed checks (cells named ``*_bandwidth``
and ``*_speed``) have their own treatment of noise (grader/judge_timing.py) and are left out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from records import ROOT, interpret_if_dry_run, provenance, shown_path  # noqa: E402

interpret_if_dry_run()
sys.path.insert(0, str(ROOT))

TIMED = ("_bandwidth", "_speed")


def _cells(chapter: str, notebook: Path | None = None):
    """(setup cells, hidden test cells) of the solution notebook: every code cell that is not a hidden test or a
    self-check, up to the last hidden test; and the hidden tests that check values (not the timed ones), as
    (grade_id, source).
    ``notebook``: another copy of the chapter's solution notebook (a test's altered one)."""
    import nbformat

    from grader.course import solution_notebook

    nb = nbformat.read(notebook or solution_notebook(chapter), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    is_test = [("BEGIN HIDDEN TESTS" in c.source) for c in code]
    last = max(i for i, t in enumerate(is_test) if t)
    setup = [c.source for c, t in zip(code[:last], is_test)   # the students' self-checks are not needed here
             if not t and not c.metadata.get("nbgrader", {}).get("grade_id", "").startswith("self_check")]
    from triton_course.device import current

    gpu_only = current().interpreted   # at_gpu_sizes checks nothing under the interpreter: no margin to count
    tests = [(c.metadata["nbgrader"]["grade_id"], c.source) for c, t in zip(code, is_test)
             if t and not c.metadata["nbgrader"]["grade_id"].endswith(TIMED)
             and not (gpu_only and "at_gpu_sizes(" in c.source)]
    return setup, tests


class MarginRecorder:
    """Wraps ``triton_course.checks.compare``: the largest error / tolerance of every comparison made while a
    cell runs (``start`` before the cell, ``worst`` after it)."""

    def __init__(self) -> None:
        import triton_course.checks as checks

        self._checks, self._compare = checks, checks.compare
        self._worst = 0.0
        self._tolerances: set[tuple[str, float, float]] = set()
        checks.compare = self._measured

    def _measured(self, got, expected, *, atol, rtol, allocation=None):
        import torch

        self._tolerances.add((str(got.dtype).replace("torch.", ""), float(atol), float(rtol)))
        g = got.detach().to(torch.float64).reshape(-1).cpu()
        e = expected.detach().to(torch.float64).reshape(-1).cpu()
        finite = torch.isfinite(g) & torch.isfinite(e)
        if bool(finite.any()):
            ratio = self._checks.error_over_tolerance(g[finite], e[finite], atol, rtol).max()
            self._worst = max(self._worst, float(ratio))
        return self._compare(got, expected, atol=atol, rtol=rtol, allocation=allocation)

    def start(self) -> None:
        self._worst = 0.0
        self._tolerances = set()

    def tolerances(self) -> list[list]:
        """The (output dtype, atol, rtol) of every comparison since ``start``."""
        return [list(t) for t in sorted(self._tolerances)]

    def worst(self) -> float:
        return self._worst

    def close(self) -> None:
        self._checks.compare = self._compare


def _quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def margins(chapter: str, draws: int, seconds: float, notebook: Path | None = None) -> dict:
    """Run each hidden test cell of ``chapter`` up to ``draws`` times (and at most about ``seconds`` in all), with
    the kernels of its solution notebook (or of ``notebook``)."""
    import contextlib
    import io

    from grader.notebook_code import exec_cell

    setup, tests = _cells(chapter, notebook)
    ns: dict = {"__name__": f"margins_{chapter}"}
    setup_began = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        for i, source in enumerate(setup):
            exec_cell(source, f"<{chapter} setup {i}>", ns)
    setup_s = time.perf_counter() - setup_began
    recorder = MarginRecorder()
    worst: dict[str, list[float]] = {gid: [] for gid, _ in tests}
    failed: dict[str, list[str]] = {gid: [] for gid, _ in tests}
    tolerances: dict[str, list[list]] = {}
    began = time.perf_counter()
    done = 0
    try:
        while done < draws and (done == 0 or time.perf_counter() - began < seconds):
            for gid, source in tests:
                recorder.start()
                try:
                    with contextlib.redirect_stdout(io.StringIO()):
                        exec_cell(source, f"<{chapter} {gid} draw {done}>", ns)
                except Exception as exc:  # noqa: BLE001 - a failed draw is what this counts
                    failed[gid].append(f"{type(exc).__name__}: {exc}"[:600])
                worst[gid].append(recorder.worst())
                tolerances[gid] = recorder.tolerances()
            done += 1
    finally:
        recorder.close()
    cells = {}
    for gid, _ in tests:
        w = worst[gid]
        cells[gid] = {"draws": len(w), "failed": len(failed[gid]), "failures": failed[gid][:3],
                      "tolerances": tolerances.get(gid, []),
                      "max_error_over_tolerance": round(max(w), 4),
                      "p99_error_over_tolerance": round(_quantile(w, 0.99), 4),
                      "median_error_over_tolerance": round(_quantile(w, 0.5), 4)}
        print(f"{chapter:16} {gid:36} draws {len(w):4}  failed {len(failed[gid]):3}  "
              f"max {max(w):.3f}  p99 {_quantile(w, 0.99):.3f}  median {_quantile(w, 0.5):.3f}", flush=True)
    return {"draws": done, "setup_s": round(setup_s, 1), "seconds": round(time.perf_counter() - began, 1),
            "cells": cells}


def summary(record: dict) -> list[str]:
    """One line per chapter for tests/gpu/records/README.md: draws, failed draws, and the cell closest to its tolerance."""
    lines = []
    for chapter, run in record["chapters"].items():
        gid, cell = max(run["cells"].items(), key=lambda kv: kv[1]["max_error_over_tolerance"])
        failed = sum(c["failed"] for c in run["cells"].values())
        lines.append(f"{chapter}: {len(run['cells'])} hidden tests x {run['draws']} draws, {failed} failed; closest "
                     f"to its tolerance: {gid}, worst {cell['max_error_over_tolerance']} (p99 "
                     f"{cell['p99_error_over_tolerance']}, median {cell['median_error_over_tolerance']})")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("chapters", help="chapter ids, comma-separated; CHAPTER:SECONDS gives one chapter its own time")
    ap.add_argument("--draws", type=int, default=1000, help="at most this many draws of each cell")
    ap.add_argument("--seconds", type=float, default=120.0, help="and at most about this long per chapter")
    ap.add_argument("--total-seconds", type=float, default=1e9, help="start no chapter after this long")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--dry-run", action="store_true", help="no GPU needed: two draws through the interpreter")
    args = ap.parse_args()
    seconds = {c.split(":")[0]: float(c.split(":")[1]) if ":" in c else args.seconds for c in args.chapters.split(",")}
    chapters = list(seconds)
    if args.dry_run:
        for chapter in chapters[:1]:
            result = margins(chapter, 2, 1e9)
            assert result["draws"] == 2 and result["cells"], result
        print("dry run: ok")
        return
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("hidden_test_margins.py measures on a CUDA GPU; --dry-run checks the script without one")
    typed = [shown_path(Path(a)) if sys.argv[i - 1] == "--out" else a for i, a in enumerate(sys.argv) if i > 0]
    command = "python lab/sweeps/hidden_test_margins.py " + " ".join(typed)
    record = {**provenance("hidden correctness tests over many fresh draws: " + ", ".join(chapters), command),
              "method": " ".join(__doc__.split("\n\n")[2].split()),
              "chapters": {}}
    began = time.perf_counter()
    for chapter in chapters:
        if time.perf_counter() - began > args.total_seconds:
            print(f"{chapter}: not run (past --total-seconds)", flush=True)
            continue
        record["chapters"][chapter] = margins(chapter, args.draws, seconds[chapter])
        record["summary"] = summary(record)
        if args.out:   # after every chapter, so that a run cut short keeps what it measured
            args.out.write_text(json.dumps(record, indent=1) + "\n")
    failed = {f"{ch}/{gid}": c["failed"] for ch, r in record["chapters"].items() for gid, c in r["cells"].items()
              if c["failed"]}
    print("failed draws:", failed or "none")


if __name__ == "__main__":
    main()
