"""Class throughput on one or more GPUs, several submissions per GPU: sandboxed, every check kept, recorded.

    python tests/gpu/gpu_class_throughput.py 03      [--copies 24] [--workers 8] [--ray] [--feedback]
    python tests/gpu/gpu_class_throughput.py 09      [--copies 20] [--workers 10] [--ray]
    python tests/gpu/gpu_class_throughput.py course  [--students 3] [--workers 9] [--ray]
    python tests/gpu/gpu_class_throughput.py 03 --dry-run --out DIR   (no GPU: a small part of the class, on the CPU)

Each part is one run of :func:`grader.autograde.grade_all`, exactly as ``python -m grader autograde`` grades
a class: real nbgrader, every submission in its bubblewrap sandbox, the hidden tests in the judge, the GPU
copy bandwidth calibrated once, the bandwidth and TFLOP/s checks timed on verified work, the grader's own
per-cell time limit (``--cell-timeout``, 300 s unless given).

**The class is a real one**: ``--copies`` honest copies of ``solutions/<chapter>/submissions/examples/ada_correct`` (03: 24,
09: 20; ``course``: ``--students`` students handing in every chapter's) graded together with submissions from
the corpus (:data:`CORPUS`): a hang (an infinite loop that runs into the cell's time limit), a crash (a process
that kills itself in the middle of a call), cheats, typical mistakes and an untouched notebook.

**The rate counts every submission**: the steady-state rate is the class size over the time from the first result
to the last one (issue 16's definition; also the stricter (class size - 1) over the same time), over every
submission graded, the slow, the broken and the hostile included. It is the only figure compared with the
target (03: 6 s and 09: 30 s per submission; ``course``: 120 s per student's whole course, i.e. per as many
submissions as there are chapters), and only for a class of at least 20 honest submissions and 5 from the
corpus, a hang and a crash among them (``class_complete``), graded with the grader's own cell limit; a smaller
or honest-only class (``--corpus none``, ``--honest-only``: a scaling measurement) or a shorter cell limit (a
cheaper hang) gets no verdict. The honest copies' own rate is kept as a labelled
breakdown (``honest_only_breakdown``), never compared with the target.

**Where the time goes**, per submission and summed over the class (``phases``), from the records the grader
keeps in each autograded notebook (``course_grader``): sandbox start (the sandboxed Jupyter kernel, each
restart after a crash included), the student's cells, the judge's calls into the kernel, the re-runs of their
launches in the second sandbox, the timed rounds and yardsticks (GPU lock and drain included), the judge's
own checks, its set-up (imports, namespace, sandboxes), and nbgrader around it (its process, the gradebook,
the feedback page). The first-result latency is the time from the start of grading to the first record.

``--workers N`` submissions run at once on this machine (``--workers`` above the number of GPUs: several per
GPU, each timed loop alone with the others frozen). ``--ray`` grades the same class through a Ray head
started here on 127.0.0.1 (``ray start --head``, dashboard off), each job asking for 1/N of a GPU. Every GPU
that CUDA sees is used, and every core the process may run on: ``CUDA_VISIBLE_DEVICES=0 taskset -c 0-15``
grades on one GPU and 16 cores of a larger machine, and the recorded command says so.

Writes ``tests/gpu/records/gpu_class_throughput_<name>.json`` (rewritten after every result, so a run cut short keeps
what it graded): the device, versions, workers per GPU, the class (honest copies, every corpus case with its
source and what it stands for), the rate, the phases, the wall time, the first and last result,
per-submission seconds, every student's points (whether every honest copy got full marks, whether every corpus
case lost points as its kind says), the timed rounds of every honest copy (both clocks), and what the GPU lock
did. ``--dry-run`` builds the whole class but grades a small part of it (``--copies`` honest copies, 2 unless
given, and the corpus's hang and crash) under Triton's interpreter with a 20 s cell limit, and writes its record
under ``--out`` (a temporary folder unless given: a dry run is never a GPU result). Needs bubblewrap and a CUDA
GPU (except ``--dry-run``); ``--ray`` needs the ``ray`` package.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

TARGETS_S = {"03": 6.0, "09": 30.0, "course": 120.0}   # issue 16: per submission (03, 09), per student (course)
CHAPTERS = {"03": "03_vector_add", "09": "09_attention"}
#: the issue's class: at least this many honest submissions and corpus submissions, a hang and a crash among them
MIN_HONEST, MIN_CORPUS, MUST_HAVE = 20, 5, ("hang", "crash")
DRY_RUN_CELL_TIMEOUT_S = 20


@dataclass(frozen=True)
class Case:
    """A submission of the corpus graded with the honest copies: its answer file and what it stands for."""
    chapter: str
    student: str
    kind: str     # "hang", "crash", "cheat", "mistake", "untouched" or "background GPU thread"
    root: str     # "attacks" or "examples": solutions/<chapter>/submissions/<root>/

    @property
    def source(self) -> str:
        return f"solutions/{self.chapter}/submissions/{self.root}/{self.student}.py"


def _cases(chapter: str, *rows: tuple[str, str, str]) -> tuple[Case, ...]:
    return tuple(Case(chapter, student, kind, root) for student, kind, root in rows)


CORPUS: dict[str, tuple[Case, ...]] = {
    "03_vector_add": _cases("03_vector_add", ("ivy_infinite_loop", "hang", "attacks"),
                            ("lea_crash_in_test", "crash", "attacks"), ("wes_kills_and_fakes", "crash", "attacks"),
                            ("yan_background_gpu_thread", "background GPU thread", "attacks"),
                            ("abe_patched_launcher", "cheat", "attacks"), ("cleo_no_mask", "mistake", "examples"),
                            ("ben_untouched", "untouched", "examples")),
    "09_attention": _cases("09_attention", ("ivy_infinite_loop", "hang", "attacks"),
                           ("lea_crash_in_test", "crash", "attacks"), ("tom_three_kernels", "cheat", "attacks"),
                           ("eli_causal_off_by_one", "mistake", "examples"),
                           ("gil_no_rescale", "mistake", "examples"), ("ben_untouched", "untouched", "examples"),
                           ("lin_right_only_up_to_2048_keys", "cheat", "attacks"),
                           ("sol_ten_times_slower", "cheat", "attacks"), ("ola_scores_in_the_output", "cheat", "attacks"),
                           ("kip_keeps_its_buffers", "cheat", "attacks"), ("pat_calls_the_fast_path", "cheat", "attacks"),
                           # keeps nearly all free GPU memory in a global: the GPU lock reclaims it (killed, restarted),
                           # so it loses the tests it is stopped in; the honest copies beside it must keep every point
                           ("max_holds_the_gpu_memory", "GPU memory hog", "attacks")),
    # Graded only when named (--corpus): the course's class takes its hangs and crashes, these on request.
    "05_softmax": _cases("05_softmax", ("kim_online_sum_not_rescaled", "cheat", "attacks")),
    "06_rmsnorm": _cases("06_rmsnorm", ("lou_sum_of_squares_of_last_block", "cheat", "attacks")),
    "07_matmul_relu": _cases("07_matmul_relu", ("pat_calls_the_fast_path", "cheat", "attacks")),
    "08_fusion": _cases("08_fusion", ("jon_row_loop_stops_after_first_block", "cheat", "attacks")),
}


def corpus_for(part: str, chapters: list[str], names: str | None) -> list[Case]:
    """The corpus cases of a class: a chapter's whole corpus (03, 09); for the course, the hangs and crashes of
    03 and 09 among the chapters graded. ``names``: "none", or student names (comma-separated) to keep."""
    if part == "course":
        cases = [c for a in chapters for c in CORPUS.get(a, ()) if c.kind in MUST_HAVE]
    else:
        cases = list(CORPUS[chapters[0]])
    if names is None:
        return cases
    wanted = {n for n in names.split(",") if n and n != "none"}
    unknown = wanted - {c.student for a in chapters for c in CORPUS.get(a, ())}
    if unknown:
        raise SystemExit(f"--corpus: no such corpus case of {', '.join(chapters)}: {', '.join(sorted(unknown))} "
                         f"(known: {', '.join(c.student for a in chapters for c in CORPUS.get(a, ()))})")
    return [c for a in chapters for c in CORPUS.get(a, ()) if c.student in wanted]


@dataclass
class ClassPlan:
    """The submissions of a class, which of them are honest copies and which corpus cases (by "chapter/student")."""
    subs: list = field(default_factory=list)
    honest: list[str] = field(default_factory=list)
    corpus: dict[str, Case] = field(default_factory=dict)
    chapters: list[str] = field(default_factory=list)


def _write_answer(chapter: str, answer_file: Path, dest: Path) -> None:
    """The notebook a student with this answer file hands in (grader.examples), at ``dest``."""
    import nbformat

    from grader.examples import apply_answers, parse_answers

    nb = apply_answers(chapter, parse_answers(answer_file.read_text()))
    dest.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, dest)


def build_class(part: str, work: Path, copies: int, students: int, only: list[str] | None = None,
                corpus_names: str | None = None) -> ClassPlan:
    """Write the class under ``work/submitted``: the honest copies and the corpus cases of every chapter."""
    from grader.autograde import find_submissions
    from grader.course import assignments, example_submissions

    plan = ClassPlan(chapters=[CHAPTERS[part]] if part in CHAPTERS else list(only or assignments()))
    cases = corpus_for(part, plan.chapters, corpus_names)
    for a in plan.chapters:
        submitted = work / "submitted" / a
        names = [f"student_{i + 1:02d}" for i in range(students)] if part == "course" else \
            [f"ada_correct_{i + 1:02d}" for i in range(copies)]
        for name in names:
            _write_answer(a, example_submissions(a) / "ada_correct.py", submitted / name / a / f"{a}.ipynb")
        mine = [c for c in cases if c.chapter == a]
        for case in mine:
            _write_answer(a, ROOT / case.source, submitted / case.student / a / f"{a}.ipynb")
        plan.subs += find_submissions(submitted, a)
        plan.honest += [f"{a}/{n}" for n in names]
        plan.corpus.update({f"{a}/{c.student}": c for c in mine})
    return plan


def dry_run_part(plan: ClassPlan, copies: int) -> ClassPlan:
    """What a dry run grades of a class: ``copies`` honest copies per chapter and its first hang and first crash."""
    keep_honest = [k for a in plan.chapters for k in [h for h in plan.honest if h.startswith(a + "/")][:copies]]
    keep_corpus: dict[str, Case] = {}
    for a in plan.chapters:
        for kind in MUST_HAVE:
            key = next((k for k, c in plan.corpus.items() if c.chapter == a and c.kind == kind), None)
            if key is not None:
                keep_corpus[key] = plan.corpus[key]
    keys = set(keep_honest) | set(keep_corpus)
    return ClassPlan([s for s in plan.subs if f"{s.assignment}/{s.student}" in keys], keep_honest, keep_corpus,
                     plan.chapters)


#: The phases of a submission's grading, in the order they are reported, and what each one counts.
PHASES = {
    "sandbox_start": "starting the sandboxed Jupyter kernel (bubblewrap, Python, the kernel's first reply), "
                     "each restart after a crash included",
    "student_cells": "the student's own cells in the sandbox (imports, compiling, self-checks), and their replay "
                     "after a crash",
    "judge_calls": "the judge's calls into the student's kernel (grader.phases 'calls'), waiting behind another "
                   "submission's timed loop included; a call that hangs runs here until the cell's time limit",
    "reruns": "each call's Triton launches re-run alone in the second sandbox ('reruns'), its process start "
              "included",
    "timing": "the timed rounds and the judge's yardsticks ('timing'), waiting for the GPU lock and for the GPU "
              "to drain included",
    "judge_checks": "the rest of the hidden-test cells: references, comparisons, the judge's own checks",
    "judge_setup": "the judge's set-up and wind-down around the cells (PyTorch imported, namespace, sandboxes "
                   "made and closed)",
    "nbgrader": "nbgrader around the judge (its process, its other preprocessors, the gradebook) and, when on, "
                "the feedback page; the grader reading the scores",
}


def phases_of(meta: dict, seconds: float | None) -> dict[str, float] | None:
    """Seconds per phase (:data:`PHASES`) of one submission, from its autograded notebook's ``course_grader``
    metadata and the record's wall time; None when the grader kept no such record (no autograded notebook, or
    one graded before the judge kept its phases)."""
    cells, judged = meta.get("seconds"), (meta.get("phases") or {}).get("seconds")
    execute = meta.get("execute_s")
    if not isinstance(cells, list) or not isinstance(judged, dict) or execute is None or seconds is None:
        return None
    by_kind: dict[str, float] = {}
    for entry in cells:
        if isinstance(entry, list) and len(entry) == 3:
            by_kind[str(entry[1])] = by_kind.get(str(entry[1]), 0.0) + float(entry[2])
    calls, reruns, timing = (float(judged.get(k, 0.0)) for k in ("calls", "reruns", "timing"))
    out = {"sandbox_start": by_kind.get("kernel start", 0.0),
           "student_cells": by_kind.get("student", 0.0) + by_kind.get("replay", 0.0),
           "judge_calls": calls, "reruns": reruns, "timing": timing,
           "judge_checks": max(0.0, by_kind.get("judge", 0.0) - calls - reruns - timing),
           "judge_setup": max(0.0, float(execute) - sum(by_kind.values())),
           "nbgrader": max(0.0, float(seconds) - float(execute))}
    return {k: round(v, 2) for k, v in out.items()}


def class_phases(per_submission: dict[str, dict[str, float] | None], seconds: dict[str, float | None]) -> dict:
    """The class's time per phase: summed over every submission broken down, its share of their graded seconds,
    and the median submission's; the submissions the grader kept no breakdown for are named, with their seconds."""
    known = {k: v for k, v in per_submission.items() if v is not None}
    total = {p: round(sum(v[p] for v in known.values()), 1) for p in PHASES}
    graded = sum(float(seconds[k] or 0.0) for k in known)
    missing = {k: seconds.get(k) for k, v in per_submission.items() if v is None}
    return {
        "what": PHASES,
        "submissions_broken_down": len(known),
        "total_s": total,
        "share_of_graded_seconds": {p: round(total[p] / graded, 3) if graded else None for p in PHASES},
        "median_s": {p: round(statistics.median(v[p] for v in known.values()), 2) if known else None for p in PHASES},
        "graded_seconds": round(graded, 1),
        "not_broken_down": missing,
    }


def class_complete(plan: ClassPlan) -> bool:
    """Whether the class is the issue's: at least 20 honest submissions and 5 from the corpus, a hang and a
    crash among them. Only such a class's rate is held to the target."""
    kinds = {c.kind for c in plan.corpus.values()}
    return len(plan.honest) >= MIN_HONEST and len(plan.corpus) >= MIN_CORPUS and all(k in kinds for k in MUST_HAVE)


def class_rate(part: str, plan: ClassPlan, finished: dict[str, float], dry_run: bool,
               cell_timeout_s: float | None = None) -> dict:
    """The class's one headline rate, over every submission graded (honest and corpus alike), and its verdict.

    The steady state runs from the first result to the last (the cluster's shutdown after it is not grading);
    ``course`` counts a student's whole course as one submission per chapter graded. A cell limit below the
    grader's own (``cell_timeout_s``) makes a hang cheap: such a run gets no verdict."""
    from grader.settings import CELL_TIMEOUT_S

    n = len(plan.subs)
    first = min(finished.values(), default=None)
    last = max(finished.values(), default=None)
    steady = (last - first) if first is not None and len(finished) == n else None
    per_sub = round(steady / n, 2) if steady else None
    per_student = round(steady / n * len(plan.chapters), 1) if steady and part == "course" else None
    headline = per_student if part == "course" else per_sub
    complete = class_complete(plan)
    short_cells = cell_timeout_s is not None and cell_timeout_s < CELL_TIMEOUT_S
    verdict = headline <= TARGETS_S[part] if headline is not None and complete and not (dry_run or short_cells) \
        else None
    why = None if verdict is not None else (
        "a dry run under the interpreter" if dry_run else "run cut short" if steady is None else
        f"a cell limit of {cell_timeout_s:g} s, below the grader's {CELL_TIMEOUT_S} s, makes a hang cheap"
        if short_cells else
        f"the class is not the issue's ({MIN_HONEST}+ honest, {MIN_CORPUS}+ from the corpus, a hang and a crash)")
    honest = [t for k, t in finished.items() if k in plan.honest]
    return {
        "counts": f"every submission of the class: {len(plan.honest)} honest, {len(plan.corpus)} from the corpus",
        "class_size": n,
        "s_per_submission": per_sub,
        "s_per_submission_strict": round(steady / (n - 1), 2) if steady and n > 1 else None,
        "s_per_student": per_student,
        "target_s": TARGETS_S[part],
        "target_per": "student's whole course" if part == "course" else "submission",
        "class_complete": complete,
        "meets_target": verdict,
        "no_verdict_because": why,
        "first_result_s": round(first, 1) if first is not None else None,
        "last_result_s": round(last, 1) if last is not None else None,
        "honest_only_breakdown": {
            "s_per_honest_submission": round((max(honest) - first) / len(honest), 2)
            if first is not None and honest and len(honest) == len(plan.honest) else None,
            "note": "the honest copies alone: (last honest result - first result) / honest copies. A breakdown "
                    "of the class rate above, never compared with the target: a real class includes the slow, "
                    "the broken and the hostile"},
    }


def corpus_outcomes(plan: ClassPlan, done: dict, seconds: dict[str, float | None]) -> dict:
    """Each corpus case graded: its source, kind, points, seconds, and whether it came out as its kind says (a
    hang: a test timed out; a crash: a test reports the crash; any other: points lost on a graded test)."""
    out = {}
    for key, case in plan.corpus.items():
        if key not in done:
            continue
        recs = done[key][1]
        graded = [r for r in recs if r.status != "not_graded"]
        if case.kind == "hang":
            as_labelled = any(r.status == "timeout" for r in recs)
        elif case.kind == "crash":
            as_labelled = any("crashed" in r.message for r in recs)
        else:
            as_labelled = any(r.points < r.max_points for r in graded)
        out[key] = {"kind": case.kind, "source": case.source, "seconds": seconds.get(key),
                    "points": f"{sum(r.points for r in recs):g} / {sum(r.max_points for r in recs):g}",
                    "statuses": sorted({r.status for r in recs}), "as_labelled": as_labelled,
                    "lost": {r.grade_id: r.message[:300] for r in graded if r.points < r.max_points}}
    return out


def read_graded(work: Path, done: dict) -> tuple[dict[str, dict], dict[str, dict], dict[str, str]]:
    """(record file, autograded notebook's ``course_grader`` metadata, autograde log) of every submission graded."""
    recs, metas, logs = {}, {}, {}
    for key in done:
        a, s = key.split("/")
        f = work / "out" / "records" / a / f"{s}.json"
        if f.is_file():
            recs[key] = json.loads(f.read_text())
        nb = work / "out" / "work" / a / s / f"{a}.ipynb"
        if nb.is_file():
            metas[key] = json.loads(nb.read_text()).get("metadata", {}).get("course_grader", {})
        log = work / "out" / "work" / a / s / "autograde.log"
        if log.is_file():
            logs[key] = log.read_text(errors="replace")
    return recs, metas, logs


def lock_summary(metas: dict[str, dict], logs: dict[str, str]) -> tuple[dict, dict]:
    """(what the GPU lock did over the class, every submission's holds), from the judge's own record of each
    timed hold (``course_grader.gpu_lock``), or from the log lines of runs made before the metadata had it."""
    lock, holds, history = [], [], {}
    for key in set(metas) | set(logs):
        meta = metas.get(key, {})
        history[key] = meta.get("gpu_lock", [])
        for hold in meta.get("gpu_lock", []):
            if "quieted" in hold:   # its own sandboxes frozen while it timed its yardstick: no new hold
                continue
            holds.append((len(hold.get("frozen", [])), int(hold.get("registered", 0))))
            if hold.get("frozen"):
                lock.append((len(hold["frozen"]), hold.get("drain_ms")))
        if key in logs and "gpu_lock" not in meta:
            lock += _lock_lines(logs[key])
            holds += _holds(logs[key])
    drains = [d for _, d in lock if d is not None]
    return {"timed_holds": len(holds),
            "timed_holds_with_others_registered": sum(1 for _, n in holds if n),
            "timed_loops_that_froze_others": len(lock),
            "submissions_frozen_median": statistics.median([f for f, _ in lock]) if lock else None,
            "drain_ms_median": statistics.median(drains) if drains else None,
            "drain_ms_max": max(drains, default=None),
            "drain_not_checked": sum(d is None for _, d in lock)}, history


def killed_while_draining(metas: dict[str, dict], history: dict[str, list]) -> list[dict[str, str | None]]:
    """Each sandbox the GPU lock killed because its GPU work did not drain while a judge timed alone: whose timed hold
    it was, the sandbox, and the submission it belonged to (from each notebook's own sandboxes, ``course_grader.
    quiet_while_judge_times``; None where no graded notebook names it)."""
    owner = {name.split(":")[0]: key for key, meta in metas.items()
             for name in meta.get("quiet_while_judge_times", [])}
    return [{"hold_of": key, "sandbox": box, "submission": owner.get(box)}
            for key, holds in sorted(history.items()) for hold in holds or [] for box in hold.get("killed", [])]


def _full_marks(recs: list, dry_run: bool) -> bool:
    return all(r.points == r.max_points or (dry_run and r.status == "not_graded") for r in recs)


def points_section(plan: ClassPlan, done: dict, dry_run: bool) -> dict:
    """Every student's points, the tests below full marks, and the two verdicts on them."""
    full = {k: _full_marks(v[1], dry_run) for k, v in done.items() if k in plan.honest}
    return {
        "every_honest_copy_full_marks": bool(full) and all(full.values()) and len(full) == len(plan.honest),
        "points": {k: f"{sum(r.points for r in v[1]):g} / {sum(r.max_points for r in v[1]):g}"
                   for k, v in done.items()},
        "not_full_marks": {k: [f"{r.grade_id}: {r.status} {r.message[:300]}" for r in v[1]
                               if r.points < r.max_points and not (dry_run and r.status == "not_graded")]
                           for k, v in done.items() if not _full_marks(v[1], dry_run)},
    }


def run_section(args: argparse.Namespace, gpus: int, cores: int, command: str, gbps: list) -> dict:
    """Where and how the class was graded: the device, versions, confinement, workers and time limits."""
    import torch
    import triton

    from grader.settings import CELL_TIMEOUT_S

    return {
        "command": command,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(0) if gpus else "none (dry run, Triton interpreter)",
        "torch": torch.__version__, "triton": triton.__version__,
        "gpus": gpus,
        "cpu_cores": cores,   # the cores this run may use (taskset), of the machine's cpu_cores_machine
        "cpu_cores_machine": os.cpu_count(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
                     "ray": _version("ray")},
        "copy_gbps": gbps,
        "workers_per_gpu": args.workers,
        "through": "ray" if args.ray else "local pool",
        "cell_timeout_s": args.cell_timeout or CELL_TIMEOUT_S,
    }


def build_record(args: argparse.Namespace, plan: ClassPlan, built: ClassPlan, done: dict, work: Path,
                 wall: float, run: dict) -> dict:
    """The whole record of a class's run so far (rewritten after every result)."""
    recs, metas, logs = read_graded(work, done)
    seconds = {k: recs[k].get("seconds") if k in recs else None for k in done}
    rate = class_rate(args.part, plan, {k: t for k, (t, _) in done.items()}, args.dry_run, run["cell_timeout_s"])
    lock, history = lock_summary(metas, logs)
    phases = {k: phases_of(metas.get(k, {}), seconds[k]) for k in done}
    record = {
        "what": f"class throughput, part {args.part}: {len(plan.honest)} honest submission(s) and "
                f"{len(plan.corpus)} from the corpus ({', '.join(sorted({c.kind for c in plan.corpus.values()}))}), "
                f"{args.workers} at once per GPU, "
                + ("through a Ray head on 127.0.0.1" if args.ray else "through the local pool")
                + ", sandboxed, every correctness and speed check kept"
                + ("" if args.feedback else ", feedback pages off")
                + (f"; a dry run grading {len(plan.subs)} of the {len(built.subs)} built" if args.dry_run else ""),
        **run,
        "class": {"honest": len(plan.honest), "corpus": {k: {"kind": c.kind, "source": c.source}
                                                         for k, c in plan.corpus.items()},
                  "built": {"honest": len(built.honest), "corpus": len(built.corpus), "size": len(built.subs)}},
        "rate": rate,
        "phases": class_phases(phases, seconds),
        "class_size": len(plan.subs),
        "graded": len(done),
        "wall_s": round(wall, 1),
        "first_result_s": rate["first_result_s"],
        "last_result_s": rate["last_result_s"],
        "steady_s_per_submission": rate["s_per_submission"],
        "steady_s_per_student": rate["s_per_student"],
        "target_s": TARGETS_S[args.part],
        "corpus_outcomes": corpus_outcomes(plan, done, seconds),
        **points_section(plan, done, args.dry_run),
        "seconds_per_submission": seconds,
        "finished_at_s": {k: round(t, 1) for k, (t, _) in done.items()},
        "phases_per_submission": phases,
        # the longest single call of the judge into each submission's kernel: what a limit per call would cut
        "longest_call_s": {k: m.get("longest_call_s") for k, m in metas.items()},
        "timed_rounds": {k: [{f: r.get(f) for f in ("what", "round", "calls", "graph", "reported_ms", "judged_ms")}
                             for r in m.get("timing", [])] for k, m in metas.items()},
        "holds": history,   # per submission, every hold of its judge: froze whom, drained how long
        "killed_while_draining": killed_while_draining(metas, history),
        "gpu_lock": lock,
        "run": next(iter(recs.values()))["run"] if recs else {},
    }
    if args.part == "course":
        record["per_chapter_median_s"] = {
            a: statistics.median([v for k, v in seconds.items() if k.startswith(a + "/") and v is not None])
            for a in plan.chapters if any(k.startswith(a + "/") and v is not None for k, v in seconds.items())}
    return record


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _agent_ports() -> list[str]:
    """Fixed ports for the node's agents (the raylet gives agents that pick their own ports only 15 s)."""
    return ["--dashboard-agent-grpc-port", str(_free_port()), "--dashboard-agent-listen-port", str(_free_port()),
            "--metrics-export-port", str(_free_port()), "--runtime-env-agent-port", str(_free_port())]


class LocalRay:
    """A Ray head on 127.0.0.1 for this run, stopped (its own processes, by id) at the end."""

    def __init__(self, work: Path, gpus: int, cpus: int, memory_bytes: int):
        port = _free_port()
        self.temp = tempfile.mkdtemp(prefix="rt", dir="/tmp")
        self.env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_raylet_start_wait_time_s": "300",
                    "RAY_task_oom_retries": "2",
                    "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
        ray_cli = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
        if ray_cli is None:
            raise SystemExit("--ray needs the ray package (requirements/gpu.txt pins it)")
        with open(work / "ray-start.log", "w") as log:
            subprocess.run([ray_cli, "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port),
                            "--num-cpus", str(cpus), "--num-gpus", str(gpus), "--memory", str(memory_bytes),
                            "--include-dashboard=false",
                            "--disable-usage-stats", "--temp-dir", self.temp, *_agent_ports()], env=self.env, stdout=log,
                           stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=True, timeout=400)
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # the driver (this process) is on 127.0.0.1 too
        self.address = f"127.0.0.1:{port}"

    def stop(self) -> None:
        import psutil

        procs = {}
        for p in psutil.process_iter(["cmdline"]):
            try:
                if p.pid != os.getpid() and any(self.temp in a for a in (p.info["cmdline"] or [])):
                    procs[p.pid] = p
                    procs.update({c.pid: c for c in p.children(recursive=True)})
            except psutil.Error:
                pass
        for p in procs.values():
            try:
                p.terminate()
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(list(procs.values()), timeout=15)
        for p in alive:
            try:
                p.kill()
            except psutil.Error:
                pass
        shutil.rmtree(self.temp, ignore_errors=True)


def _lock_lines(log: str) -> list[tuple[int, float | None]]:
    """(submissions frozen, drain ms or None when NVML could not tell) of every timed loop that froze others."""
    return [(int(m.group(1)), float(m.group(2)) if m.group(2) else None) for m in
            re.finditer(r"course-gpu-lock: GPU \S+: froze ([1-9]\d*) other submission\(s\) .*?; GPU "
                        r"(?:drained in (\d+) ms|not checked)", log)]


def _holds(log: str) -> list[tuple[int, int]]:
    """(submissions frozen, submissions registered on the GPU) of every timed hold of the GPU lock."""
    return [(int(m.group(1)), int(m.group(2))) for m in
            re.finditer(r"course-gpu-lock: GPU \S+: froze (\d+) other submission\(s\) of (\d+) registered", log)]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("part", choices=["03", "09", "course"])
    p.add_argument("--chapters", default="", help="course: only these chapters (ids, comma-separated)")
    p.add_argument("--copies", type=int, default=None,
                   help="honest copies (03: 24, 09: 20; a dry run grades 2 of them unless given)")
    p.add_argument("--students", type=int, default=3, help="course: students handing in every chapter")
    p.add_argument("--corpus", default=None,
                   help="corpus cases graded with the honest copies: 'none', or student names (comma-separated); "
                        "default: the whole corpus of the part (CORPUS)")
    p.add_argument("--honest-only", action="store_true", help="the same as --corpus none (no verdict on the target)")
    p.add_argument("--workers", type=int, default=None,
                   help="submissions at once per GPU (03: 8, 09: 10, course: 9: whole waves, under 9 minutes)")
    p.add_argument("--cell-timeout", type=float, default=None,
                   help="seconds per cell before the grader interrupts it (the grader's 300 unless given; a dry "
                        f"run: {DRY_RUN_CELL_TIMEOUT_S})")
    p.add_argument("--ray", action="store_true", help="grade through a Ray head started on 127.0.0.1")
    p.add_argument("--feedback", action="store_true", help="also generate each student's feedback page")
    p.add_argument("--name", help="JSON name suffix (default: the part, _ray with --ray)")
    p.add_argument("--out", default=None, help="folder of the JSON (tests/gpu/records/; a dry run: a temporary folder)")
    p.add_argument("--dry-run", action="store_true",
                   help="no GPU needed: build the class, grade a small part of it under the interpreter")
    args = p.parse_args(argv)
    if args.honest_only:
        args.corpus = "none"
    args.workers = args.workers or {"03": 8, "09": 10, "course": 9}[args.part]
    if args.dry_run:
        args.cell_timeout = args.cell_timeout or DRY_RUN_CELL_TIMEOUT_S
        args.out = args.out or tempfile.mkdtemp(prefix="gpu-throughput-dry-run-")
    args.out = args.out or str(ROOT / "tests" / "gpu" / "records")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from grader.autograde import calibrate_gpus, grade_all
    from grader.cluster import JobResources

    gpus = torch.cuda.device_count()
    cores = len(os.sched_getaffinity(0))   # `taskset -c 0-15` gives a 32-core machine the cores of a 16-core one
    if not gpus and not args.dry_run:
        print("this measures grading on a GPU: it needs a CUDA GPU (or --dry-run)", file=sys.stderr)
        return 2
    copies = {"03": 24, "09": 20, "course": 0}[args.part] if args.copies is None or args.dry_run else args.copies
    work = Path(tempfile.mkdtemp(prefix="gpu-throughput-"))
    built = build_class(args.part, work, copies, args.students, [c for c in args.chapters.split(",") if c] or None,
                        args.corpus)
    plan = dry_run_part(built, args.copies or (1 if args.part == "course" else 2)) if args.dry_run else built
    name = args.name or (args.part + ("_ray" if args.ray else "") + ("_dry_run" if args.dry_run else ""))
    out_file = Path(args.out) / f"gpu_class_throughput_{name}.json"
    command = recorded_command(argv if argv is not None else sys.argv[1:], sorted(os.sched_getaffinity(0)),
                               os.cpu_count() or cores, os.environ.get("CUDA_VISIBLE_DEVICES"))
    workers = args.workers * gpus if gpus else min(args.workers, 2)
    gbps = calibrate_gpus() if gpus else []  # what grade_all will hold every submission to (measured again there)
    run = run_section(args, gpus, cores, command, gbps)
    done: dict[str, tuple[float, list]] = {}
    res = JobResources(cpus=max(1.0, cores / max(1, workers)), per_gpu=args.workers, memory_gb=8.0)
    # Ray's memory resource, given rather than read from the machine: a virtual machine whose memory grows as
    # it is used (the 2-GPU H200's reads 31 GiB at the start of 256) would otherwise offer Ray far too little
    cluster = LocalRay(work, gpus, cores, workers * res.memory_bytes + (4 << 30)) if args.ray else None
    start = time.perf_counter()

    def write() -> dict:
        record = build_record(args, plan, built, done, work, time.perf_counter() - start, run)
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_text(json.dumps(record, indent=2) + "\n")
        return record

    def on_done(sub, recs) -> None:
        done[f"{sub.assignment}/{sub.student}"] = (time.perf_counter() - start, recs)
        print(f"{time.perf_counter() - start:7.1f} s  {sub.assignment}/{sub.student:<28} "
              f"{sum(r.points for r in recs):g} / {sum(r.max_points for r in recs):g}", flush=True)
        for r in recs:
            if r.points < r.max_points and not (args.dry_run and r.status == "not_graded"):
                print(f"      {r.grade_id}: {r.status} {r.message[:200]!r}", flush=True)
        write()

    try:
        common = dict(feedback=args.feedback, on_done=on_done, cell_timeout_s=args.cell_timeout)
        if cluster is not None:
            grade_all(plan.subs, work / "out", ray_address=cluster.address, resources=res, **common)
        else:
            grade_all(plan.subs, work / "out", workers=workers, **common)
    finally:
        if cluster is not None:
            cluster.stop()
    record = write()
    shutil.rmtree(work, ignore_errors=True)
    report(record, out_file)
    return 0 if succeeded(record) else 1


def succeeded(record: dict) -> bool:
    """Every submission graded, every honest copy at full marks, every corpus case as its kind says."""
    return (record["graded"] == record["class_size"] and record["every_honest_copy_full_marks"]
            and all(c["as_labelled"] for c in record["corpus_outcomes"].values()))


def report(record: dict, out_file: Path) -> None:
    """The run's summary on stdout: the class rate over every submission, its verdict, where the time went."""
    rate, phases = record["rate"], record["phases"]
    unit = "student" if rate["s_per_student"] is not None else "submission"
    headline = rate["s_per_student"] if unit == "student" else rate["s_per_submission"]
    print(f"\nclass: {rate['counts']} ({record['class']['built']['size']} built)")
    print(f"steady state: {headline} s per {unit}, over every submission graded; target {rate['target_s']} s: "
          + ("met" if rate["meets_target"] else "MISSED" if rate["meets_target"] is False
             else f"no verdict ({rate['no_verdict_because']})"))
    print(f"first result {rate['first_result_s']} s, last {rate['last_result_s']} s, wall {record['wall_s']} s; "
          f"honest copies alone (a breakdown, not the rate): "
          f"{rate['honest_only_breakdown']['s_per_honest_submission']} s per submission")
    print(f"{'phase':<15}{'total s':>10}{'share':>8}{'median s':>10}")
    for p in PHASES:
        share = phases["share_of_graded_seconds"][p]
        print(f"{p:<15}{phases['total_s'][p]:>10}{'' if share is None else f'{share:.0%}':>8}"
              f"{phases['median_s'][p]!s:>10}")
    if phases["not_broken_down"]:
        print(f"not broken down (no autograded notebook): {phases['not_broken_down']}")
    for key, case in record["corpus_outcomes"].items():
        print(f"corpus {key:<44} {case['kind']:<22} {case['points']:>9}  {case['seconds']} s  "
              f"{'as labelled' if case['as_labelled'] else 'NOT AS LABELLED'}")
    print(f"full marks for every honest copy: {record['every_honest_copy_full_marks']}; GPU lock: {record['gpu_lock']}")
    print(f"wrote {out_file}")


def recorded_command(given: list[str], affinity: list[int], machine_cores: int, visible: str | None) -> str:
    """The command that reproduces a run: its arguments without ``--out`` (where the file went), after the
    confinement it ran under (``CUDA_VISIBLE_DEVICES``, ``taskset`` when it could use fewer cores than the
    machine has)."""
    given = list(given)
    if "--out" in given:
        del given[given.index("--out"):given.index("--out") + 2]
    command = "python tests/gpu/gpu_class_throughput.py " + " ".join(a for a in given if not a.startswith("--out="))
    if len(affinity) < machine_cores:
        command = f"taskset -c {_ranges(affinity)} {command}"
    if visible is not None:
        command = f"CUDA_VISIBLE_DEVICES={visible} {command}"
    return command


def _ranges(cpus: list[int]) -> str:
    """taskset's list for these cores: [0, 1, 2, 5] -> '0-2,5'."""
    out, start = [], None
    for i, c in enumerate(cpus):
        start = c if start is None else start
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            out.append(f"{start}-{c}" if c > start else f"{c}")
            start = None
    return ",".join(out)


def _version(pkg: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(pkg)
    except PackageNotFoundError:
        return "absent"


if __name__ == "__main__":
    sys.exit(main())
