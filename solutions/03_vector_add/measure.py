"""Vector add on the GPU: the solution's `add` against the copy bandwidth and torch, across sizes; the
launch-shape sweep the chapter's experiment compares with; what odd sizes cost; and the PTX listings the
chapter shows on a machine without a GPU.

    python tests/gpu/measure.py 03_vector_add        (on a GPU, about 1-2 minutes on an H200)

Sections, each its own key of the JSON file:

* ``sizes``: the reference and ``torch.add`` from 2^20 to 2^28 float32 elements (timed in the same rounds);
* ``bandwidth_check``: the notebook's target (75% of the copy on 2^26 float32) against the reference and
  a kernel that moves twice the bytes (it copies both inputs first);
* ``launch_sweep``: the notebook's ``add_kernel`` at 2^24 float32 elements for every BLOCK from 128 to
  16384 and num_warps from 1 to 32 that give each thread at least one element, all in the same rounds,
  with a same-size copy (``x.clone()`` of 8n bytes);
* ``divisibility``: the reference at n = 2^24 and 2^24 + 1: Triton specialises integer arguments divisible by
  16, and only then can it prove the mask constant over four lanes (16-byte loads);
* ``ptx``: the PTX of the notebook's ``add_kernel`` at BLOCK = 1024, compiled for n = 2^20 and n = 2^20 + 1,
  whole: what the notebook prints, labelled as recorded, where no GPU can compile one.
"""

from __future__ import annotations

import re
import statistics
import traceback
from collections import Counter

import torch
import triton

from triton_course.bench import copy_bandwidth, gbps, steady_rounds

TARGET_FRACTION = 0.75
ROUNDS = 7
SIZES = tuple(2**k for k in (20, 22, 24, 26, 28))
SWEEP_N = 2**24
SWEEP_BLOCKS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
SWEEP_WARPS = (1, 2, 4, 8, 16, 32)
PTX_N = (2**20, 2**20 + 1)


def pair(n: int):
    return lambda: (torch.randn(n, device="cuda"), torch.randn(n, device="cuda"))


def medians(impls: dict, make, nbytes: dict) -> dict[str, float]:
    """Median GB/s of each implementation, all timed in the same rounds on the same inputs."""
    rounds = steady_rounds(impls, make, rounds=ROUNDS)
    return {name: round(gbps(nbytes[name], statistics.median(t)), 1) for name, t in rounds.items()}


def launch(kernel, block: int, warps: int):
    def run(x, y):
        out = torch.empty_like(x)
        kernel[(triton.cdiv(x.numel(), block),)](x, y, out, x.numel(), BLOCK=block, num_warps=warps)
        return out
    return run


def global_memory_ops(ptx: str) -> str:
    ops = Counter(re.findall(r"(?:ld|st)\.global(?:\.[a-z0-9]+)+", ptx))
    return ", ".join(f"{n} x {op}" for op, n in sorted(ops.items()))


def measure(ns):
    add, add_kernel, block, traffic_bytes = ns["add"], ns["add_kernel"], ns["BLOCK"], ns["traffic_bytes"]
    ceiling = copy_bandwidth()
    out: dict[str, object] = {}
    errors: dict[str, str] = {}
    summary: list[str] = []

    def sizes():
        rows = []
        for n in SIZES:
            got = medians({"triton": add, "torch": torch.add}, pair(n), {"triton": traffic_bytes(n, 4),
                                                                           "torch": traffic_bytes(n, 4)})
            rows.append({"n": n, "triton_gbps": got["triton"], "torch_gbps": got["torch"],
                         "triton_fraction_of_copy": round(got["triton"] / ceiling, 3)})
            torch.cuda.empty_cache()
        out["sizes"] = rows
        summary.append("add, fraction of the copy by n: " + ", ".join(
            f"2^{r['n'].bit_length() - 1}: {r['triton_fraction_of_copy']}" for r in rows))

    def bandwidth_check():
        def twice_the_bytes(x, y):
            """A typical mistake: copy both inputs first (24n bytes moved, not 12n)."""
            return add(x.clone(), y.clone())

        n = 2**26
        got = medians({"reference": add, "twice_the_bytes": twice_the_bytes}, pair(n),
                      {"reference": traffic_bytes(n, 4), "twice_the_bytes": traffic_bytes(n, 4)})
        check = {"n": n, "achieved_gbps": got["reference"], "fraction_of_copy": round(got["reference"] / ceiling, 3),
                 "target_fraction": TARGET_FRACTION, "passes": got["reference"] >= TARGET_FRACTION * ceiling,
                 "twice_the_bytes": {"gbps": got["twice_the_bytes"],
                                     "fraction_of_copy": round(got["twice_the_bytes"] / ceiling, 3),
                                     "passes": got["twice_the_bytes"] >= TARGET_FRACTION * ceiling}}
        out["bandwidth_check"] = check
        summary.append(f"bandwidth check (75% of copy, 2^26): reference {check['fraction_of_copy']}, twice the "
                       f"bytes {check['twice_the_bytes']['fraction_of_copy']}")

    def launch_sweep():
        impls = {f"{b}/{w}": launch(add_kernel, b, w) for b in SWEEP_BLOCKS for w in SWEEP_WARPS if b >= 32 * w}
        x, y = pair(5000 + 3)()
        for name, fn in impls.items():
            assert torch.equal(fn(x, y), x + y), name
        nbytes = {name: traffic_bytes(SWEEP_N, 4) for name in impls}
        impls["copy"] = lambda x, y: x.clone()
        nbytes["copy"] = 2 * SWEEP_N * 4
        got = medians(impls, pair(SWEEP_N), nbytes)
        copy = got.pop("copy")
        best, worst = max(got, key=got.get), min(got, key=got.get)
        out["launch_sweep"] = {"n": SWEEP_N, "dtype": "float32", "key": "BLOCK/num_warps", "gbps": got,
                               "same_size_copy_gbps": copy}
        summary.append(f"launch sweep at 2^24: fastest BLOCK/num_warps {best} {got[best]:.0f} GB/s, slowest {worst} "
                       f"{got[worst]:.0f}, the notebook's {block}/4 {got.get(f'{block}/4', 0):.0f}, same-size copy {copy:.0f}")

    def divisibility():
        rates = {}
        for n in (SWEEP_N, SWEEP_N + 1):
            rates[str(n)] = medians({"add": add}, pair(n), {"add": traffic_bytes(n, 4)})["add"]
        out["divisibility"] = {"gbps": rates, "note": "n divisible by 16 against n odd (scalar loads)"}
        summary.append(f"add at n=2^24 and 2^24+1: {rates}")

    def ptx():
        listings = []
        for n in PTX_N:
            x, y = pair(n)()
            compiled = add_kernel[(triton.cdiv(n, block),)](x, y, torch.empty_like(x), n, BLOCK=block)
            text = compiled.asm["ptx"]
            listings.append({"n": n, "BLOCK": block, "num_warps": int(compiled.metadata.num_warps),
                             "memory_ops": global_memory_ops(text), "ptx": text})
        out["ptx"] = {"kernel": "add_kernel of solutions/03_vector_add", "listings": listings}
        summary.append("PTX global memory ops per thread: " + "; ".join(f"n={p['n']}: {p['memory_ops']}"
                                                                         for p in listings))

    for section in (ptx, bandwidth_check, sizes, divisibility, launch_sweep):
        try:
            section()
        except Exception as exc:  # keep the other sections' figures
            errors[section.__name__] = repr(exc)[:500]
            traceback.print_exc()
        print(summary[-1] if summary else "", flush=True)
    if errors:
        out["errors"] = errors
    out["summary"] = summary
    return out
