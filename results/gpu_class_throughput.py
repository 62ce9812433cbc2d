"""Class throughput on one or more GPUs, several submissions per GPU: sandboxed, every check kept, recorded.

    python results/gpu_class_throughput.py 03      [--copies 24] [--workers 8] [--ray] [--feedback]
    python results/gpu_class_throughput.py 09      [--copies 20] [--workers 10] [--ray]
    python results/gpu_class_throughput.py course  [--students 3] [--workers 9] [--ray]
    python results/gpu_class_throughput.py 03 --dry-run          (no GPU: 2 copies, the interpreter, a check)

Each part is one run of :func:`grader.autograde.grade_all`, exactly as ``python -m grader autograde`` grades
a class: real nbgrader, every submission in its bubblewrap sandbox, the hidden tests in the judge, the GPU
copy bandwidth calibrated once, the bandwidth and TFLOP/s checks timed on verified work.

* ``03``: ``--copies`` copies of ``tests/submissions/03_vector_add/ada_correct`` and the case
  ``tests/safety/03_vector_add/yan_background_gpu_thread`` (a thread that keeps launching kernels after its
  cell returned), graded together: every honest copy must keep every point, bandwidth included, although
  yan's queued work shares their GPU (the timer freezes it and waits for the GPU to drain); ``--honest-only``
  leaves yan out (a class rate without its slow tail);
* ``09``: ``--copies`` copies of ``tests/submissions/09_attention/ada_correct``;
* ``course``: ``--students`` students, each handing in every chapter's ``ada_correct``.

``--workers N`` submissions run at once on this machine (``--workers`` above the number of GPUs: several per
GPU, each timed loop alone with the others frozen). ``--ray`` grades the same class through a Ray head
started here on 127.0.0.1 (``ray start --head``, dashboard off), each job asking for 1/N of a GPU. Every GPU
that CUDA sees is used, and every core the process may run on: ``CUDA_VISIBLE_DEVICES=0 taskset -c 0-15``
grades on one GPU and 16 cores of a larger machine, and the recorded command says so.

Writes ``results/gpu_class_throughput_<name>.json`` (rewritten after every result, so a run cut short keeps
what it graded): the device, versions, workers per GPU, the wall time, the time of the first result, the
steady-state rate (class size over the wall time after the first result, up to the last one, as issue 16
defines it, and the stricter (class size - 1) over the same time), per-submission seconds, every student's
points (and whether every honest copy got full marks), the timed rounds of every honest copy (both clocks),
and what the GPU lock did (how many other submissions each timed loop froze, how long the GPU took to drain).
Needs bubblewrap and a CUDA GPU (except ``--dry-run``); ``--ray`` needs the ``ray`` package.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGETS_S = {"03": 6.0, "09": 30.0, "course": 120.0}   # issue 16: per submission (03, 09), per student (course)
BACKGROUND = "yan_background_gpu_thread"


def build_class(part: str, work: Path, copies: int, students: int, only: list[str] | None = None,
                honest_only: bool = False) -> tuple[list, list[str], list[str]]:
    """(submissions, honest student names, other student names)."""
    from grader.autograde import find_submissions
    from grader.course import assignments
    from grader.examples import build_submissions
    from tests.safety.transforms import SAFETY_ANSWERS

    subs, honest, others = [], [], []
    chapters = {"03": ["03_vector_add"], "09": ["09_attention"], "course": only or assignments()}[part]
    for a in chapters:
        built = work / "built" / a
        build_submissions(a, built)
        submitted = work / "submitted" / a
        names = [f"student_{i + 1:02d}" for i in range(students)] if part == "course" else \
            [f"ada_correct_{i + 1:02d}" for i in range(copies)]
        for name in names:
            shutil.copytree(built / "ada_correct", submitted / name)
        extra = []
        if part == "03" and not honest_only:
            build_submissions(a, built, root=SAFETY_ANSWERS)
            shutil.copytree(built / BACKGROUND, submitted / BACKGROUND)
            extra = [BACKGROUND]
        subs += find_submissions(submitted, a)
        honest += [f"{a}/{n}" for n in names]
        others += [f"{a}/{n}" for n in extra]
    return subs, honest, others


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


def _honest_rate(done: dict, honest: list[str], first: float | None) -> float | None:
    """Seconds per honest submission after the first result: (last honest result - first result) / honest."""
    times = [t for k, (t, _) in done.items() if k in honest]
    if first is None or len(times) != len(honest) or not times:
        return None
    return round((max(times) - first) / len(times), 2)


def _holds(log: str) -> list[tuple[int, int]]:
    """(submissions frozen, submissions registered on the GPU) of every timed hold of the GPU lock."""
    return [(int(m.group(1)), int(m.group(2))) for m in
            re.finditer(r"course-gpu-lock: GPU \S+: froze (\d+) other submission\(s\) of (\d+) registered", log)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("part", choices=["03", "09", "course"])
    p.add_argument("--chapters", default="", help="course: only these chapters (ids, comma-separated)")
    p.add_argument("--copies", type=int, default=None, help="honest copies (03: 24, 09: 20)")
    p.add_argument("--students", type=int, default=3, help="course: students handing in every chapter")
    p.add_argument("--workers", type=int, default=None,
                   help="submissions at once per GPU (03: 8, 09: 10, course: 9: whole waves, under 9 minutes)")
    p.add_argument("--honest-only", action="store_true",
                   help="03: leave out the background-GPU-thread case (a class rate without its slow tail)")
    p.add_argument("--ray", action="store_true", help="grade through a Ray head started on 127.0.0.1")
    p.add_argument("--feedback", action="store_true", help="also generate each student's feedback page")
    p.add_argument("--name", help="JSON name suffix (default: the part, _ray with --ray)")
    p.add_argument("--out", default=str(ROOT / "results"))
    p.add_argument("--dry-run", action="store_true", help="no GPU needed: 2 copies, the interpreter, a check")
    args = p.parse_args(argv)
    import torch
    import triton

    from grader.autograde import calibrate_gpus, grade_all
    from grader.cluster import JobResources
    from grader.course import assignments

    gpus = torch.cuda.device_count()
    cores = len(os.sched_getaffinity(0))   # `taskset -c 0-15` gives a 32-core machine the cores of a 16-core one
    if not gpus and not args.dry_run:
        print("this measures grading on a GPU: it needs a CUDA GPU (or --dry-run)", file=sys.stderr)
        return 2
    copies = args.copies or (2 if args.dry_run else {"03": 24, "09": 20, "course": 0}[args.part])
    args.workers = args.workers or {"03": 8, "09": 10, "course": 9}[args.part]
    students = 1 if args.dry_run and args.part == "course" else args.students
    work = Path(tempfile.mkdtemp(prefix="gpu-throughput-"))
    subs, honest, others = build_class(args.part, work, copies, students,
                                       [c for c in args.chapters.split(",") if c] or None, args.honest_only)
    name = args.name or (args.part + ("_ray" if args.ray else "") + ("_dry_run" if args.dry_run else ""))
    out_file = Path(args.out) / f"gpu_class_throughput_{name}.json"
    command = recorded_command(argv if argv is not None else sys.argv[1:], sorted(os.sched_getaffinity(0)),
                               os.cpu_count() or cores, os.environ.get("CUDA_VISIBLE_DEVICES"))
    workers = args.workers * gpus if gpus else min(args.workers, 2)
    gbps = calibrate_gpus() if gpus else []  # what grade_all will hold every submission to (measured again there)
    done: dict[str, tuple[float, list]] = {}
    res = JobResources(cpus=max(1.0, cores / max(1, workers)), per_gpu=args.workers, memory_gb=8.0)
    # Ray's memory resource, given rather than read from the machine: a virtual machine whose memory grows as
    # it is used (the 2-GPU H200's reads 31 GiB at the start of 256) would otherwise offer Ray far too little
    cluster = LocalRay(work, gpus, cores, workers * res.memory_bytes + (4 << 30)) if args.ray else None
    start = time.perf_counter()

    def write() -> dict:
        recs = {}
        for key in done:
            a, s = key.split("/")
            f = work / "out" / "records" / a / f"{s}.json"
            if f.is_file():
                recs[key] = json.loads(f.read_text())
        wall = time.perf_counter() - start
        first = min((t for t, _ in done.values()), default=None)
        n = len(subs)
        full = {k: all(r.points == r.max_points or (args.dry_run and r.status == "not_graded") for r in v[1])
                for k, v in done.items() if k in honest}
        timing, lock, holds, history = {}, [], [], {}
        for key in done:
            a, s = key.split("/")
            nb = work / "out" / "work" / a / s / f"{a}.ipynb"
            log = work / "out" / "work" / a / s / "autograde.log"
            if nb.is_file():
                meta = json.loads(nb.read_text()).get("metadata", {}).get("course_grader", {})
                history[key] = meta.get("gpu_lock", [])
                for hold in meta.get("gpu_lock", []):  # the judge's own record of each timed hold
                    if "quieted" in hold:   # its own sandboxes frozen while it timed its yardstick: no new hold
                        continue
                    holds.append((len(hold.get("frozen", [])), int(hold.get("registered", 0))))
                    if hold.get("frozen"):
                        lock.append((len(hold["frozen"]), hold.get("drain_ms")))
                timing[key] = [{k: r.get(k) for k in ("what", "round", "calls", "graph", "reported_ms", "judged_ms")}
                               for r in meta.get("timing", [])]
            if log.is_file() and not (nb.is_file() and "gpu_lock" in meta):  # runs before the metadata had it
                lock += _lock_lines(log.read_text())
                holds += _holds(log.read_text())
        drains = [d for _, d in lock if d is not None]
        per_unit = students if args.part == "course" else n
        last = max((t for t, _ in done.values()), default=None)
        # after the first result and up to the last (the cluster's shutdown after it is not grading)
        steady = (last - first) if first is not None and len(done) == n else None
        record = {
            "what": f"class throughput, part {args.part}: {len(honest)} honest submission(s)"
                    + (f" and {', '.join(others)}" if others else "") + f", {args.workers} at once per GPU, "
                    + ("through a Ray head on 127.0.0.1" if args.ray else "through the local pool")
                    + ", sandboxed, every correctness and speed check kept"
                    + ("" if args.feedback else ", feedback pages off"),
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
            "class_size": n,
            "graded": len(done),
            "wall_s": round(wall, 1),
            "first_result_s": round(first, 1) if first is not None else None,
            "last_result_s": round(last, 1) if last is not None else None,
            "steady_s_per_submission": round(steady / n, 2) if steady else None,
            "steady_s_per_submission_strict": round(steady / (n - 1), 2) if steady and n > 1 else None,
            # the honest class alone: the cheat graded with it (yan, whose own timed rounds it slows six times
            # over) finishes last and would stand for the class's rate
            "steady_s_per_honest_submission": _honest_rate(done, honest, first),
            "steady_s_per_student": round(steady / per_unit, 1) if steady and args.part == "course" else None,
            "target_s": TARGETS_S[args.part],
            "target_per": "student's whole course" if args.part == "course" else "submission",
            "every_honest_copy_full_marks": bool(full) and all(full.values()) and len(full) == len(honest),
            "seconds_per_submission": {k: recs[k].get("seconds") for k in recs},
            "finished_at_s": {k: round(t, 1) for k, (t, _) in done.items()},
            "points": {k: f"{sum(r.points for r in v[1]):g} / {sum(r.max_points for r in v[1]):g}"
                       for k, v in done.items()},
            "not_full_marks": {k: [f"{r.grade_id}: {r.status} {r.message[:300]}" for r in v[1]
                                   if r.points < r.max_points] for k, v in done.items()
                               if any(r.points < r.max_points for r in v[1])},
            "timed_rounds": timing,
            "holds": history,   # per submission, every hold of its judge: froze whom, drained how long
            "gpu_lock": {"timed_holds": len(holds),
                         "timed_holds_with_others_registered": sum(1 for _, n in holds if n),
                         "timed_loops_that_froze_others": len(lock),
                         "submissions_frozen_median": statistics.median([f for f, _ in lock]) if lock else None,
                         "drain_ms_median": statistics.median(drains) if drains else None,
                         "drain_ms_max": max(drains, default=None),
                         "drain_not_checked": sum(d is None for _, d in lock)},
            "run": next(iter(recs.values()))["run"] if recs else {},
        }
        if args.part == "course":
            record["per_chapter_median_s"] = {
                a: statistics.median([recs[k]["seconds"] for k in recs if k.startswith(a + "/")])
                for a in assignments() if any(k.startswith(a + "/") for k in recs)}
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
        if cluster is not None:
            grade_all(subs, work / "out", feedback=args.feedback, on_done=on_done, ray_address=cluster.address,
                      resources=res)
        else:
            grade_all(subs, work / "out", workers=workers, feedback=args.feedback, on_done=on_done)
    finally:
        if cluster is not None:
            cluster.stop()
    record = write()
    shutil.rmtree(work, ignore_errors=True)
    unit = "student" if args.part == "course" else "submission"
    steady = record["steady_s_per_student"] if args.part == "course" else record["steady_s_per_submission"]
    print(f"\n{'part':<8}{'through':<12}{'per GPU':>8}{'class':>7}{'wall s':>9}{'first s':>9}"
          f"{'s/' + unit:>14}{'target':>8}  full marks")
    print(f"{args.part:<8}{record['through']:<12}{args.workers:>8}{record['class_size']:>7}{record['wall_s']:>9}"
          f"{record['first_result_s']!s:>9}{steady!s:>14}{record['target_s']:>8}  "
          f"{record['every_honest_copy_full_marks']}")
    print(f"GPU lock: {record['gpu_lock']}")
    print(f"wrote {out_file}")
    return 0 if record["every_honest_copy_full_marks"] else 1


def recorded_command(given: list[str], affinity: list[int], machine_cores: int, visible: str | None) -> str:
    """The command that reproduces a run: its arguments without ``--out`` (where the file went), after the
    confinement it ran under (``CUDA_VISIBLE_DEVICES``, ``taskset`` when it could use fewer cores than the
    machine has)."""
    given = list(given)
    if "--out" in given:
        del given[given.index("--out"):given.index("--out") + 2]
    command = "python results/gpu_class_throughput.py " + " ".join(a for a in given if not a.startswith("--out="))
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
