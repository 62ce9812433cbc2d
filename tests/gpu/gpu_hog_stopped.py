"""A submission that keeps the GPU busy while frozen is killed, and another's timed loop runs on an idle GPU.

Run on the GPU machine, from the repository root:

    . tests/gpu/device_setup.sh && python tests/gpu/gpu_hog_stopped.py --out tests/gpu/records/gpu_hog_stopped.json

Two real sandboxes of the grader (:class:`grader.sandbox.Sandbox`, bubblewrap, registered with a GPU lock
folder) hold CUDA contexts on GPU 0: an *innocent* one that runs a small kernel and synchronises every 50 ms,
as correctness work does, and a *hog* that does what the dishonest submission
``solutions/07_matmul_relu/submissions/attacks/cy_slows_the_baseline.py`` does: a thread queues a kernel that sleeps 0.1 s on the
GPU every 20 ms and never synchronises, so its queue grows by four seconds of GPU work each second.

A timer in another process (another submission's judge) then times loops of 200 copies of 1 GiB three ways:
alone before the sandboxes start (the reference), beside the hog without the lock (what a timer that could
not stop the hog would see), and inside :meth:`grader.gpu_lock.GpuLock.exclusive`, which freezes both, waits
:data:`grader.gpu_lock.DRAIN_TIMEOUT_S` for the GPU to drain, finds the hog's queue still running, kills the
process NVML names, and times. Recorded: what the hold killed and waited, whether the innocent sandbox
survived and resumed, the note left for the hog's grader, and the three copy bandwidths.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

HOG = """
import threading, time, torch
def spin():
    side = torch.cuda.Stream()
    while True:
        with torch.cuda.stream(side):
            torch.cuda._sleep({cycles})
        time.sleep(0.02)
threading.Thread(target=spin, daemon=True).start()
while True:
    time.sleep(1)
"""
INNOCENT = """
import time, torch
x = torch.ones(1 << 20, device='cuda')
n = 0
while True:
    x.mul_(1.0); torch.cuda.synchronize(); n += 1
    open({tick!r} + '.tmp', 'w').write(str(n)); __import__('os').replace({tick!r} + '.tmp', {tick!r})
    time.sleep(0.05)
"""
COPY_BYTES = 1 << 30


def copy_gbps(loops: int = 5, copies: int = 200) -> float:
    """1 GiB copies (512 MiB read, 512 MiB written), ``copies`` back to back as a judge's timed loop queues
    them (about 50 ms on an H200), timed with CUDA events; the best of ``loops`` such loops."""
    import torch

    src = torch.randn(COPY_BYTES // 8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(loops):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(copies):
            dst.copy_(src)
        b.record()
        b.synchronize()
        best = min(best, a.elapsed_time(b) / copies)
    return COPY_BYTES / (best * 1e-3) / 1e9


def timer(folder: str, mode: str, out: str) -> None:
    """Another submission's judge: times the copy, without the lock or inside an exclusive hold."""
    from grader.gpu_lock import GpuLock

    lock = GpuLock(Path(folder))
    t0 = time.perf_counter()
    if mode == "hold":
        with lock.exclusive():
            gbps = copy_gbps()
        hold = lock.history[-1]
    else:
        gbps, hold = copy_gbps(), {}
    Path(out).write_text(json.dumps({"gbps": round(gbps, 1), "hold": hold,
                                     "seconds": round(time.perf_counter() - t0, 1)}))


def in_process(target, *args) -> None:
    p = mp.get_context("spawn").Process(target=target, args=args)
    p.start()
    p.join(600)
    assert p.exitcode == 0, f"{target.__name__}{args} exited {p.exitcode}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cycles", type=int, default=200_000_000,
                    help="GPU clock cycles each queued kernel sleeps (2e8: about 0.1 s, as the cheat's)")
    ap.add_argument("--queue-seconds", type=float, default=25.0, help="how long the hog queues before the hold")
    args = ap.parse_args()
    import torch

    from grader import gpu_lock
    from grader.sandbox import Sandbox

    work = Path(tempfile.mkdtemp(prefix="hog-"))
    os.chmod(work, 0o755)
    locks = work / "locks"
    os.environ[gpu_lock.LOCK_DIR_ENV] = str(locks)
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    result = work / "timer.json"
    in_process(timer, str(locks), "alone", str(result))
    alone = json.loads(result.read_text())

    boxes = {name: Sandbox(slot=slot, staging=work / name, gpu=True) for name, slot in (("hog", 11), ("innocent", 12))}
    tick = boxes["innocent"].exchange / "tick"
    procs = {"hog": subprocess.Popen(boxes["hog"].wrap([sys.executable, "-c", HOG.format(cycles=args.cycles)])),
             "innocent": subprocess.Popen(boxes["innocent"].wrap([sys.executable, "-c",
                                                                  INNOCENT.format(tick=str(tick))]))}
    try:
        deadline = time.monotonic() + 120
        while not (tick.exists() and tick.read_text()):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs.values()), "no sandbox started"
            time.sleep(0.1)
        time.sleep(args.queue_seconds)
        in_process(timer, str(locks), "beside", str(result))
        beside = json.loads(result.read_text())
        in_process(timer, str(locks), "hold", str(result))
        held = json.loads(result.read_text())
        before = int(tick.read_text())
        time.sleep(1.0)
        innocent_resumed = int(tick.read_text()) > before
        note = gpu_lock.kill_note(boxes["hog"].staging)
        record = {
            "what": "loops of 200 copies of 1 GiB (best of 5) timed by another submission's judge: alone, beside a sandbox that "
                    "keeps queueing 0.1 s GPU kernels without synchronising (the cheat cy_slows_the_baseline), "
                    "and inside the GPU lock's exclusive hold, which freezes both sandboxes, waits for the drain, "
                    "and kills the process NVML names as still running kernels",
            "command": (f"python tests/gpu/gpu_hog_stopped.py --cycles {args.cycles} --queue-seconds {args.queue_seconds:g} "
                        f"--out tests/gpu/records/{args.out.name}"),
            "date": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
            "device": torch.cuda.get_device_name(0),
            "torch": torch.__version__,
            "triton": __import__("triton").__version__,
            "drain_timeout_s": gpu_lock.DRAIN_TIMEOUT_S,
            "queue_seconds": args.queue_seconds,
            "cycles_per_queued_kernel": args.cycles,
            "copy_gbps": {"alone": alone["gbps"], "beside_the_hog_unlocked": beside["gbps"],
                          "in_the_hold": held["gbps"]},
            "hold": held["hold"],
            "hold_seconds": held["seconds"],
            "hog_alive_after": procs["hog"].poll() is None,
            "innocent_alive_after": procs["innocent"].poll() is None,
            "innocent_resumed": innocent_resumed,
            "note_for_the_hogs_grader": note,
            "names": {name: box.name for name, box in boxes.items()},
        }
    finally:
        for p in procs.values():
            p.kill()
            p.wait(30)
        for box in boxes.values():
            box.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
