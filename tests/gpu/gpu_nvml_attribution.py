"""Can the grader tell, from NVML, which process keeps a GPU busy? Run on the GPU machine:

    . tests/gpu/device_setup.sh && python tests/gpu/gpu_nvml_attribution.py --out tests/gpu/records/gpu_nvml_attribution.json

Three child processes hold a CUDA context on GPU 0: one keeps queueing kernels that sleep on the GPU, one
only holds its context, and one queues sleeping kernels inside a bubblewrap sandbox with its own PID namespace
(as the grader's sandboxes do). This process makes no CUDA context: it reads NVML, as the GPU lock does, and
records which PIDs NVML names as running on the GPU (``nvmlDeviceGetComputeRunningProcesses``) and which it
gives SM utilisation to (``nvmlDeviceGetProcessUtilization``), against the PIDs the grader sees for each child.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

SPIN = ("import torch, time; s = torch.cuda.Stream(); t = time.time()\n"
        "while time.time() - t < {secs}:\n"
        "    with torch.cuda.stream(s): torch.cuda._sleep(50_000_000)\n"
        "    torch.cuda.synchronize()\n")
IDLE = "import torch, time; torch.zeros(1, device='cuda'); torch.cuda.synchronize(); time.sleep({secs})\n"


class ProcessInfo(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


class UtilSample(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong), ("smUtil", ctypes.c_uint),
                ("memUtil", ctypes.c_uint), ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


def descendants(root: int) -> list[int]:
    """``root`` and every process below it, from /proc."""
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += kids.get(pid, [])
    return out


def running(lib, dev) -> list[dict]:
    count = ctypes.c_uint(0)
    lib.nvmlDeviceGetComputeRunningProcesses_v3(dev, ctypes.byref(count), None)
    infos = (ProcessInfo * max(1, count.value + 8))()
    count = ctypes.c_uint(len(infos))
    rc = lib.nvmlDeviceGetComputeRunningProcesses_v3(dev, ctypes.byref(count), infos)
    return [{"rc": rc}] if rc else [{"pid": i.pid, "mib": i.usedGpuMemory // 2**20} for i in infos[:count.value]]


def utilisation(lib, dev, since: int) -> list[dict]:
    count = ctypes.c_uint(0)
    rc = lib.nvmlDeviceGetProcessUtilization(dev, None, ctypes.byref(count), ctypes.c_ulonglong(since))
    if count.value == 0:
        return [{"rc": rc}]
    samples = (UtilSample * count.value)()
    rc = lib.nvmlDeviceGetProcessUtilization(dev, samples, ctypes.byref(count), ctypes.c_ulonglong(since))
    return [{"rc": rc}] if rc else [{"pid": s.pid, "sm": s.smUtil, "t": s.timeStamp} for s in samples[:count.value]]


def device_name(lib, dev) -> str:
    buf = ctypes.create_string_buffer(96)
    return buf.value.decode() if lib.nvmlDeviceGetName(dev, buf, ctypes.c_uint(96)) == 0 else "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    assert lib.nvmlInit_v2() == 0
    dev = ctypes.c_void_p()
    assert lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(0), ctypes.byref(dev)) == 0
    secs = 12
    from importlib.metadata import version   # the children's stack (this process imports neither)
    versions = {name: version(name) for name in ("torch", "triton")}
    bwrap = shutil.which("bwrap")
    children = {
        "spinning": subprocess.Popen([sys.executable, "-c", SPIN.format(secs=secs)]),
        "idle_context": subprocess.Popen([sys.executable, "-c", IDLE.format(secs=secs)]),
    }
    if bwrap:
        children["spinning_in_bwrap"] = subprocess.Popen(
            [bwrap, "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
             "--unshare-pid", "--die-with-parent", sys.executable, "-c", SPIN.format(secs=secs)])
    time.sleep(6)   # every child has made its context and the spinning ones have run for seconds
    since = int((time.time() - 3) * 1e6)
    record = {
        "what": "which PIDs NVML names as running on GPU 0, and gives SM utilisation to, against the PIDs the "
                "grader sees for three children: one queueing sleeping kernels, one holding an idle context, one "
                "queueing sleeping kernels in a bubblewrap sandbox with its own PID namespace",
        "command": "python tests/gpu/gpu_nvml_attribution.py --out tests/gpu/records/gpu_nvml_attribution.json",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
        "device": device_name(lib, dev),
        "torch": versions.get("torch", "?"),
        "triton": versions.get("triton", "?"),
        "in_container_pid_namespace": Path("/proc/1/comm").read_text().strip(),
        "children": {name: descendants(p.pid) for name, p in children.items()},
        "running": running(lib, dev),
        "utilisation": utilisation(lib, dev, since),
    }
    for p in children.values():
        p.kill()
        p.wait()
    named = {s.get("pid") for s in record["running"]}
    busy = {s.get("pid") for s in record["utilisation"] if s.get("sm", 0) > 0}
    record["attributed"] = {name: {"running": bool(named & set(pids)), "busy": bool(busy & set(pids))}
                            for name, pids in record["children"].items()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record["attributed"]), json.dumps(record["running"]), json.dumps(record["utilisation"]))


if __name__ == "__main__":
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    main()
