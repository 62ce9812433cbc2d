"""An A/A test of ``triton_course.bench.steady_rounds``: the same function under several names, at several places
in the round's order, in one call. Identical functions should time alike; how far apart they come out is the
resolution of every side-by-side comparison in the records (issue 15 counts a reference within 2% of a peer as a
match).

    python lab/sweeps/timing_position.py [--out solutions/06_rmsnorm/records/06_rmsnorm_timing_position.json]      (on a GPU: about 1 minute)

At chapter 06's RMSNorm on 4096 x 4096 and 32768 x 1000 float16 (shapes where solutions/06_rmsnorm/records/06_rmsnorm_bodies.json saw
the reference 2% and 7% faster than the same launch of the same kernel under another name) and a same-size copy:
the notebook's ``rmsnorm`` three times (``reference#1..3``), the same launch through the sweeps' launcher (a
second compiled copy of the kernel, ``launcher``), and the copy twice, in one order and then reversed.

``--sleep-probe``: why the reference's rounds scatter. The notebook's launcher checks its inputs in Python (about
20 us of host time a call, against 18 us of GPU time), so steady_rounds queues its calls behind a longer GPU sleep
than the lean launcher's. Timed side by side at 4096 x 4096 float16: the lean launcher, the same launcher made to
spend 20 us of host time a call (``launcher+20us host``), the notebook's ``rmsnorm`` and a copy; once as
steady_rounds plans the sleeps (each function's own, from its host time) and once with every function queued
behind the same sleep, the longest of those plans (a copy of steady_rounds' loop with that one change).

``--graphs``: the notebook's launcher twice, the lean one, a copy and Liger-Kernel's RMSNorm (when importable) with
no host in the timed region at all (graph_timing.graph_rounds: calls replayed from CUDA graphs); at 4096 x 4096
float16 and 262144 x 64 float32.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import time
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "lab" / "sweeps"))

import torch  # noqa: E402
import triton  # noqa: E402

import norms_gaps  # noqa: E402
import records  # noqa: E402
from graph_timing import graph_rounds  # noqa: E402
import rmsnorm_bodies  # noqa: E402

OUT = ROOT / "solutions" / "06_rmsnorm" / "records" / "06_rmsnorm_timing_position.json"
SHAPES = [(4096, 4096, torch.float16), (32768, 1000, torch.float16)]


def rounds_with_sleep(fns: dict, make_inputs, rounds: int, sleep_ms: float | None) -> tuple[dict, dict]:
    """steady_rounds' measurement with every function behind a GPU sleep of ``sleep_ms`` (None: each function's
    own plan, host time x calls x 1.5 + 1 ms, as steady_rounds does); ({name: [ms a call]}, {name: sleep ms})."""
    from triton_course import bench
    bench._spin_up()
    first = tuple(make_inputs())
    out_bytes = max(bench.tensor_bytes(fn(*first)) for fn in fns.values())
    sets = bench.rotating_sets(make_inputs, first, out_bytes)
    n_sets = len(sets)
    flush = torch.empty(bench.FLUSH_BYTES // 4, device="cuda")
    cycles_per_ms = bench.sleep_cycles_per_ms()
    plans = {}
    for name, fn in fns.items():
        calls, host_ms = bench.call_plan(fn, sets)
        plans[name] = [calls, host_ms * calls * 1.5 + 1.0]
    if sleep_ms is not None:
        for plan in plans.values():
            plan[1] = sleep_ms
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            calls, sleep = plans[name]
            kept = collections.deque(maxlen=n_sets)
            flush.sum()
            torch.cuda.synchronize()
            marks = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
            marks[0].record()
            flush.sum()
            marks[1].record()
            torch.cuda._sleep(int(sleep * cycles_per_ms))
            marks[2].record()
            for i in range(calls):
                kept.append(fn(*sets[i % n_sets]))
            flush.sum()
            marks[3].record()
            torch.cuda.synchronize()
            del kept
            times[name].append((marks[2].elapsed_time(marks[3]) - marks[0].elapsed_time(marks[1])) / calls)
    return times, {name: round(plan[1], 2) for name, plan in plans.items()}


def sleep_probe(ns: dict, ours, rounds: int) -> list[dict]:
    m, n, dtype = 4096, 4096, torch.float16
    block, r, w, _, _ = ns["launch_config"](m, n, 2)
    lean = norms_gaps.launcher("rmsnorm", ours, block, r, w, {"STREAM": False, "ALIGN": 8})

    def slow_host(x, wt):
        t = time.perf_counter()
        while time.perf_counter() - t < 20e-6:
            pass
        return lean(x, wt)
    fns = {"launcher": lean, "launcher+20us host": slow_host, "reference": ns["rmsnorm"],
           "copy": lambda x, wt: x.clone()}
    nbytes = 2 * m * n * 2 + n * 2
    make = lambda: (torch.randn(m, n, device="cuda", dtype=dtype), torch.randn(n, device="cuda", dtype=dtype))  # noqa: E731
    out = []
    own, planned = rounds_with_sleep(fns, make, rounds, None)
    longest = max(planned.values())
    same, _ = rounds_with_sleep(fns, make, rounds, longest)
    for label, times, sleeps in (("own sleeps", own, planned), ("same sleep", same, {k: longest for k in fns})):
        gbps = {k: round(nbytes / statistics.median(t) / 1e6, 1) for k, t in times.items()}
        spread = {k: round((max(t) - min(t)) / statistics.median(t), 3) for k, t in times.items()}
        out.append({"rows": m, "width": n, "dtype": "float16", "sleeps": label, "sleep_ms": sleeps, "gbps": gbps,
                    "round_spread": spread, "rounds_ms": {k: [round(x, 5) for x in t] for k, t in times.items()}})
        print(f"sleep probe, {label}:", ", ".join(f"{k} {gbps[k]:.0f} (spread {spread[k]:.1%}, sleep "
                                                  f"{sleeps[k]:.1f} ms)" for k in fns), flush=True)
    return out


#: graph_rounds' options compared by --graphs: (label, recapture each round behind a random pad, random order,
#: charge write-backs)
GRAPH_MODES = [("one capture, random order, no write-back charge (the default)", False, True, False),
               ("one capture, fixed order, no write-back charge", False, False, False),
               ("one capture, fixed order", False, False, True),
               ("one capture, random order", False, True, True),
               ("recaptured, random order", True, True, True)]


def graphs_probe(ns: dict, ours, rounds: int) -> list[dict]:
    lt = norms_gaps.peers_module()._liger()
    out = []
    for m, n, dtype in [(4096, 4096, torch.float16), (262144, 64, torch.float32)]:
        element = torch.tensor([], dtype=dtype).element_size()
        block, r, w, _, _ = ns["launch_config"](m, n, element)
        align = ns["row_alignment"](n, element, n, n)
        lean = norms_gaps.launcher("rmsnorm", ours, block, r, w, {"STREAM": False, "ALIGN": align})
        fns = {"reference": ns["rmsnorm"], "launcher": lean, "copy": lambda x, wt: x.clone()}
        if lt is not None:
            mod = lt.LigerRMSNorm(n, eps=rmsnorm_bodies.EPS).to("cuda", dtype)

            def liger(x, wt, _mod=mod):
                with torch.no_grad():
                    return _mod(x)
            fns["Liger"] = liger
        fns["reference#2"] = ns["rmsnorm"]
        nbytes = 2 * m * n * element + n * element
        for label, recapture, shuffle, charge in GRAPH_MODES:
            times = graph_rounds(fns, lambda: (torch.randn(m, n, device="cuda", dtype=dtype),
                                               torch.randn(n, device="cuda", dtype=dtype)), rounds=rounds,
                                 recapture=recapture, shuffle=shuffle, charge_writebacks=charge)
            gbps = {k: round(nbytes / statistics.median(t) / 1e6, 1) for k, t in times.items()}
            spread = {k: round((max(t) - min(t)) / statistics.median(t), 3) for k, t in times.items()}
            same = [gbps["reference"], gbps["reference#2"], gbps["launcher"]]
            out.append({"rows": m, "width": n, "dtype": str(dtype).replace("torch.", ""),
                        "timing": f"graph_rounds: {label}", "gbps": gbps, "round_spread": spread,
                        "same_kernel_spread": round((max(same) - min(same)) / statistics.median(same), 4),
                        "rounds_ms": {k: [round(x, 5) for x in t] for k, t in times.items()}})
            print(f"graphs {m}x{n} {dtype} [{label}]:", ", ".join(f"{k} {gbps[k]:.0f} ({spread[k]:.1%})" for k in fns),
                  f"| same kernel {out[-1]['same_kernel_spread']:.1%}", flush=True)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--sleep-probe", action="store_true")
    p.add_argument("--graphs", action="store_true")
    args = p.parse_args()
    from triton_course.bench import steady_rounds
    ns = norms_gaps.notebook_code("rmsnorm")
    ours = rmsnorm_bodies.body_kernels(ns)["ours"]
    rows = []
    if args.sleep_probe:
        rows = sleep_probe(ns, ours, args.rounds)
        SHAPES.clear()
    if args.graphs:
        rows += graphs_probe(ns, ours, args.rounds)
        SHAPES.clear()
    for m, n, dtype in SHAPES:
        element = torch.tensor([], dtype=dtype).element_size()
        block, r, w, _, _ = ns["launch_config"](m, n, element)
        align = ns["row_alignment"](n, element, n, n)
        via_launcher = norms_gaps.launcher("rmsnorm", ours, block, r, w, {"STREAM": False, "ALIGN": align})
        ref = ns["rmsnorm"]
        order = [("reference#1", ref), ("copy#1", lambda x, w: x.clone()), ("reference#2", ref),
                 ("launcher", via_launcher), ("reference#3", ref), ("copy#2", lambda x, w: x.clone())]
        nbytes = 2 * m * n * element + n * element
        for direction, seq in (("forward", order), ("reversed", order[::-1])):
            times = steady_rounds(dict(seq), lambda: (torch.randn(m, n, device="cuda", dtype=dtype),
                                                      torch.randn(n, device="cuda", dtype=dtype)),
                                  rounds=args.rounds)
            gbps = {k: round(nbytes / statistics.median(t) / 1e6, 1) for k, t in times.items()}
            refs = [gbps[f"reference#{i}"] for i in (1, 2, 3)]
            row = {"rows": m, "width": n, "dtype": str(dtype).replace("torch.", ""), "order": direction,
                   "names_in_order": [name for name, _ in seq], "gbps": gbps,
                   "reference_spread": round((max(refs) - min(refs)) / statistics.median(refs), 4),
                   "launcher_over_reference_median": round(gbps["launcher"] / statistics.median(refs), 4),
                   "copy_spread": round(abs(gbps["copy#1"] - gbps["copy#2"]) / gbps["copy#1"], 4),
                   "rounds_ms": {k: [round(x, 5) for x in t] for k, t in times.items()}}
            rows.append(row)
            print(f"{m}x{n} {row['dtype']} {direction}:", ", ".join(f"{k} {gbps[k]:.0f}" for k, _ in seq),
                  f"| references spread {row['reference_spread']:.1%}, launcher/ref "
                  f"{row['launcher_over_reference_median']:.3f}, copies {row['copy_spread']:.1%}", flush=True)
    record = {"what": "A/A test of steady_rounds: identical functions at different places in a round's order",
              "command": "python lab/sweeps/timing_position.py" + (" --sleep-probe" if args.sleep_probe else "")
                         + (" --graphs" if args.graphs else "") + (f" --rounds {args.rounds}" if args.rounds != 7 else "")
                         + (f" --out {records.shown_path(args.out)}" if args.out.resolve() != OUT else ""),
              "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
              "rounds": args.rounds, "rows": rows}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
