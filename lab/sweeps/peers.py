"""Cross-chapter peers: each memory-bound reference kernel against torch, torch.compile and Liger-Kernel.

    python lab/sweeps/peers.py [softmax] [rmsnorm] [gelu] [add_rmsnorm] [--launcher 08=NAME ...]
                                   [--timing graphs|steady] [--out solutions/06_rmsnorm/records/06_rmsnorm_peers_graphs.json]
        (on a GPU, about 1-4 minutes on an H200; writes lab/records/peers.json)

The references are the solution notebooks' own launchers, loaded the way tests/gpu/measure.py loads them:
softmax (05), rmsnorm (06), gelu (04) and the fused add + RMSNorm of chapter 08, which writes both x + residual
and the normed output. Their names are read at run time (chapter 08's is being renamed: the first of
``LAUNCHERS["add_rmsnorm"]`` the notebook defines, or ``--launcher 08=NAME``); a missing one stops the run
with a message that names what was looked for.

Peers: torch eager (torch.softmax, F.rms_norm, F.gelu(approximate="tanh"), x + r then F.rms_norm),
torch.compile of the eager formula, and Liger-Kernel 0.8.5 (LigerSoftmax, LigerRMSNorm,
LigerFusedAddRMSNorm; Liger has no GELU module, so GELU has none) when it is installed. Liger-Kernel is a
benchmark-only dependency of the lab, never of students: bring it with
``pip download --no-deps liger-kernel==0.8.5`` (a pure-Python wheel; it needs torch and triton, which the GPU
image has) and ``pip install --no-deps liger_kernel-0.8.5-py3-none-any.whl`` there.

At every shape (non-power-of-two widths 1000 and 5120, many short rows, fp32/fp16/bf16) the reference, the
peers and a copy of the same bytes are timed in turn on the same inputs, medians of 7 interleaved rounds: replayed
from CUDA graphs (graph_timing.graph_rounds, the default: no host in the timed region, one compiled launch within
0.6% of itself; solutions/06_rmsnorm/records/06_rmsnorm_peers_graphs.json), or with triton_course.bench.steady_rounds (``--timing steady``, as
lab/records/peers.json of 2026-11-24 was timed; it put two timings of one launch up to 20% apart). In a CUDA graph
clone's cudaMemcpy is a memcpy node, which ran 1 GiB copies at 2,710 GB/s on the H200 against 4,250 for an
elementwise kernel moving the same bytes: there the same-size copy is the faster of ``x.clone()`` and ``x * 1``.
Recorded per shape: GB/s of each (bytes that must move: inputs read once, outputs written once), the reference's
fraction of the same-size copy (the prediction for a memory-bound kernel: its bytes at the copy's rate) and its
ratio to the best peer. Flagged: every shape where the reference
is more than 2% behind the best peer, and every one under 90% of the same-size copy at 64 MiB of traffic or
more. Beside GELU it also times chapter 04's ``gelu_hw_tanh`` (the same formula with one special-function
operation per element instead of two; not a peer, and too coarse to be checked): a GELU shape whose only flag is
"under 90% of a copy" and whose one-SFU-op variant reaches 97% of the copy in the same rounds is arithmetic-bound,
and is listed under ``explained`` instead of ``flagged``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from grader.course import solution_notebook  # noqa: E402
from grader.notebook_code import exec_cells_starting_with, load_namespace  # noqa: E402
from triton_course.bench import METHOD, copy_bandwidth, gbps, steady_rounds  # noqa: E402

sys.path.insert(0, str(ROOT / "lab" / "sweeps"))
import graph_timing  # noqa: E402
from records import provenance  # noqa: E402

ROUNDS = 7
OUT = ROOT / "lab" / "records" / "peers.json"
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16

#: Chapter and the launcher names each kernel may have in its solution notebook (the first one found is used).
CHAPTERS = {"softmax": "05_softmax", "rmsnorm": "06_rmsnorm", "gelu": "04_gelu", "add_rmsnorm": "08_fusion"}
LAUNCHERS = {"softmax": ["softmax"], "rmsnorm": ["rmsnorm"], "gelu": ["gelu"],
             "add_rmsnorm": ["add_rmsnorm", "fused_add_rmsnorm", "add_rms_norm", "residual_rmsnorm"]}
#: (rows, width, dtype) per kernel: widths 1000 and 5120 (not powers of two), many short rows, three dtypes.
SHAPES = {
    "softmax": [(4096, 4096, F32), (4096, 4096, F16), (4096, 4096, BF16), (32768, 1000, F32), (32768, 1000, F16),
                (32768, 1000, BF16), (8192, 5120, F16), (8192, 5120, BF16), (262144, 64, F32), (65536, 256, F16)],
    "rmsnorm": [(8192, 5120, F16), (8192, 5120, BF16), (8192, 5120, F32), (4096, 4096, F16), (32768, 1000, F16),
                (32768, 1000, BF16), (262144, 64, F16), (65536, 256, BF16), (524288, 32, F16)],
    "gelu": [(1 << 14, 1 << 14, F32), (1 << 14, 1 << 14, F16), (1 << 14, 1 << 14, BF16), (8192, 5120, F16),
             (32768, 1000, F32), (32768, 1000, BF16)],
    "add_rmsnorm": [(8192, 5120, F16), (8192, 5120, BF16), (4096, 4096, F16), (32768, 1000, F16),
                    (32768, 1000, BF16), (262144, 64, F16)],
}
EPS = 1e-6
BIG = 64 * 2**20   # traffic from which a memory-bound kernel must reach 90% of a same-size copy


def _liger():
    try:
        import liger_kernel.transformers as lt
    except Exception:  # noqa: BLE001 - not installed, or broken
        return None
    return lt


def reference_launcher(kind: str, ns: dict, override: str | None):
    names = [override] if override else LAUNCHERS[kind]
    for name in names:
        if callable(ns.get(name)):
            return name, ns[name]
    raise SystemExit(f"{CHAPTERS[kind]}'s solution notebook defines none of {names} (the {kind} launcher); "
                     f"name it with --launcher {CHAPTERS[kind][:2]}=NAME")


def inputs(kind, m, n, dtype):
    def make():
        x = torch.randn(m, n, device="cuda", dtype=dtype)
        if kind == "softmax" or kind == "gelu":
            return (x,)
        w = torch.randn(n, device="cuda", dtype=dtype)
        if kind == "rmsnorm":
            return (x, w)
        return (x, torch.randn(m, n, device="cuda", dtype=dtype), w)
    return make


def traffic(kind, m, n, element):
    return {"softmax": 2 * m * n, "gelu": 2 * m * n, "rmsnorm": 2 * m * n + n,
            "add_rmsnorm": 4 * m * n + n}[kind] * element


def expected(kind, args):
    a = [t.double() for t in args]
    if kind == "softmax":
        return (torch.softmax(a[0], -1),)
    if kind == "gelu":
        return (F.gelu(a[0], approximate="tanh"),)
    if kind == "rmsnorm":
        return (F.rms_norm(a[0], (a[0].shape[-1],), a[1], EPS),)
    s = a[0] + a[1]
    return (F.rms_norm(s, (s.shape[-1],), a[2], EPS), s)


def outputs(result):
    return result if isinstance(result, (tuple, list)) else (result,)


def peers(kind, n, dtype, lt):
    """{name: fn(*inputs)} of the peers of ``kind`` (Liger's modules built for width n)."""
    if kind == "softmax":
        def eager(x):
            e = torch.exp(x - x.max(dim=1, keepdim=True).values)
            return e / e.sum(dim=1, keepdim=True)
        out = {"torch eager": lambda x: torch.softmax(x, dim=-1), "torch.compile": torch.compile(eager, dynamic=False)}
        if lt is not None and hasattr(lt, "LigerSoftmax"):
            mod = lt.LigerSoftmax()
            out["Liger"] = lambda x: mod(x)
        return out
    if kind == "gelu":
        def eager(x):
            return 0.5 * x * (1 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
        return {"torch eager (F.gelu tanh)": lambda x: F.gelu(x, approximate="tanh"),
                "torch.compile": torch.compile(eager, dynamic=False)}   # Liger-Kernel has no GELU module
    if kind == "rmsnorm":
        def eager(x, w):
            xf = x.float()
            return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()).to(x.dtype)
        out = {"torch eager (F.rms_norm)": lambda x, w: F.rms_norm(x, (x.shape[-1],), w, EPS),
               "torch.compile": torch.compile(eager, dynamic=False)}
        if lt is not None and hasattr(lt, "LigerRMSNorm"):
            mod = lt.LigerRMSNorm(n, eps=EPS).to("cuda", dtype)

            def liger(x, w):
                mod.weight.data = w
                return mod(x)
            out["Liger"] = liger
        return out

    def eager(x, r, w):
        s = x + r
        sf = s.float()
        return (sf * torch.rsqrt(sf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()).to(x.dtype), s
    out = {"torch eager (add, F.rms_norm)": lambda x, r, w: (F.rms_norm(x + r, (x.shape[-1],), w, EPS),),
           "torch.compile": torch.compile(eager, dynamic=False)}
    fused = getattr(lt, "LigerFusedAddRMSNorm", None) if lt is not None else None
    if fused is not None:
        mod = fused(n, eps=EPS).to("cuda", dtype)

        def liger(x, r, w):
            mod.weight.data = w
            return mod(x, r)
        out["Liger"] = liger
    return out


def check(fn, kind, make) -> str | None:
    args = make()
    want = expected(kind, args)
    try:
        got = outputs(fn(*args))
    except Exception as exc:  # noqa: BLE001
        return f"failed: {type(exc).__name__}: {str(exc)[:200]}"
    tol = 1e-4 if args[0].dtype == F32 else (2e-2 if args[0].dtype == F16 else 6e-2)
    for g, w in zip(got, want):
        err = float(((g.double() - w).abs() / (1 + w.abs())).max())
        if not err < tol:
            return f"wrong: max error {err:.3g}"
    return None


#: Timed beside GELU, not a peer and not checked (its tanh is accurate to about 2^-11 only): the reference's
#: formula with one special-function operation per element instead of two (chapter 04's ``gelu_hw_tanh``).
ARITHMETIC_PROBE = "gelu with one SFU op (hw tanh)"


def measure(kind: str, ns: dict, name: str, ref, lt, timing: str = "graphs") -> list[dict]:
    rows = []
    for m, n, dtype in SHAPES[kind]:
        element = torch.empty(0, dtype=dtype).element_size()
        nbytes = traffic(kind, m, n, element)
        make = inputs(kind, m, n, dtype)
        fns = {"reference": ref, **peers(kind, n, dtype, lt)}
        problems = {k: p for k, fn in fns.items() if (p := check(fn, kind, make)) is not None}
        usable = {k: fn for k, fn in fns.items() if k not in problems}
        if kind == "gelu":
            usable[ARITHMETIC_PROBE] = ns["gelu_hw_tanh"]
        # a copy of the same bytes: x itself (one read, one write), or x and r into one tensor (add + RMSNorm)
        usable["same-size copy"] = (lambda x, r, w: torch.stack((x, r))) if kind == "add_rmsnorm" else \
            (lambda x, *rest: x.clone())
        if timing == "graphs" and kind != "add_rmsnorm":
            # in a CUDA graph clone's cudaMemcpy becomes a memcpy node, which the copy engines may run slower than
            # the SMs copy: time an elementwise kernel that moves the same bytes too, and take the faster
            usable["same-size copy (x * 1)"] = lambda x, *rest: torch.mul(x, 1)
        copy_bytes = (4 if kind == "add_rmsnorm" else 2) * m * n * element
        if timing == "graphs":
            times = graph_timing.graph_rounds(usable, make, rounds=ROUNDS, failed=problems)
        else:
            times = steady_rounds(usable, make, rounds=ROUNDS)
        rate = {k: round(gbps(nbytes if not k.startswith("same-size copy") else copy_bytes, statistics.median(t)), 1)
                for k, t in times.items()}
        if "same-size copy (x * 1)" in rate:
            rate["same-size copy (clone)"] = rate["same-size copy"]
            rate["same-size copy"] = max(rate.pop("same-size copy (x * 1)"), rate["same-size copy"])
        peer_rates = {k: v for k, v in rate.items()
                      if k not in ("reference", ARITHMETIC_PROBE) and not k.startswith("same-size copy")}
        best_peer = max(peer_rates, key=peer_rates.get) if peer_rates else None
        row = {"kernel": kind, "chapter": CHAPTERS[kind], "launcher": name, "rows": m, "width": n,
               "dtype": str(dtype)[6:], "traffic_bytes": nbytes, "gbps": rate, "not_usable": problems,
               "best_peer": best_peer}
        if "reference" in rate:
            row["fraction_of_same_size_copy"] = round(rate["reference"] / rate["same-size copy"], 3)
            row["predicted_gbps"] = rate["same-size copy"]   # bytes at a copy's rate: the memory-bound floor
            if best_peer:
                row["ratio_to_best_peer"] = round(rate["reference"] / rate[best_peer], 3)
            row["flags"] = [f for f, bad in (
                ("more than 2% behind the best peer", best_peer and rate["reference"] < 0.98 * rate[best_peer]),
                ("under 90% of a same-size copy at >= 64 MiB", nbytes >= BIG and
                 rate["reference"] < 0.9 * rate["same-size copy"])) if bad]
            probe = rate.get(ARITHMETIC_PROBE, 0.0) / rate["same-size copy"]
            if row["flags"] == ["under 90% of a same-size copy at >= 64 MiB"] and probe >= 0.97:
                row["explained"] = (f"arithmetic-bound: the same formula with one special-function operation per "
                                    f"element instead of two reaches {probe:.3f} of the copy in the same rounds")
        else:
            row["flags"] = ["reference not usable"]
        rows.append(row)
        print(f"{kind:12} {m:>6}x{n:<5} {row['dtype']:8} reference {rate.get('reference', float('nan')):7.0f} GB/s "
              f"({row.get('fraction_of_same_size_copy', float('nan')):.2f} of copy), best peer {best_peer} "
              f"{rate.get(best_peer, float('nan')):7.0f} ({row.get('ratio_to_best_peer', float('nan')):.3f})"
              f"{'  FLAG: ' + '; '.join(row['flags']) if row['flags'] else ''}", flush=True)
        torch.cuda.empty_cache()
    return rows


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kernels", nargs="*", help=f"any of {', '.join(CHAPTERS)} (default: all)")
    p.add_argument("--launcher", action="append", default=[], help="CHAPTER=NAME, e.g. 08=add_rmsnorm")
    p.add_argument("--timing", choices=("graphs", "steady"), default="graphs",
                   help="graphs: calls replayed from CUDA graphs (graph_timing.py), no host in the timed region; "
                        "steady: triton_course.bench.steady_rounds, as lab/records/peers.json of 2026-11-24 was timed")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("peers.py needs a CUDA GPU", file=sys.stderr)
        return 2
    unknown = [k for k in args.kernels if k not in CHAPTERS]
    if unknown:
        p.error(f"unknown kernels {unknown}; choose from {list(CHAPTERS)}")
    overrides = dict(item.split("=", 1) for item in args.launcher)
    lt = _liger()
    if lt is None:
        print("Liger-Kernel is not installed: the Liger column is left out. Bring it with "
              "`pip download --no-deps liger-kernel==0.8.5` and install that wheel with --no-deps.", flush=True)
    rows, launchers = [], {}
    for kind in args.kernels or list(CHAPTERS):
        ns = load_namespace(solution_notebook(CHAPTERS[kind]))
        if kind == "gelu":   # the experiment's cell, after the exercise: the one-SFU-op variant
            exec_cells_starting_with(solution_notebook("04_gelu"), ns, ("@triton.jit\ndef gelu_hw_tanh_kernel",))
        name, ref = reference_launcher(kind, ns, overrides.get(CHAPTERS[kind][:2]))
        launchers[kind] = f"{CHAPTERS[kind]}: {name}"
        rows += measure(kind, ns, name, ref, lt, args.timing)
    flagged = [r for r in rows if r["flags"] and "explained" not in r]
    explained = [r for r in rows if "explained" in r]
    record = {**provenance("peers of the memory-bound references", "python lab/sweeps/peers.py " + " ".join(argv)),
              "liger_kernel": getattr(lt, "__version__", None) if lt is not None else None,
              "copy_gbps": round(copy_bandwidth(), 1),
              "method": graph_timing.METHOD if args.timing == "graphs" else METHOD, "rounds": ROUNDS, "launchers": launchers,
              "gelu_peers_note": "Liger-Kernel has no GELU module (it fuses GELU only into its GEGLU MLP)",
              "rows": rows, "flagged": [f"{r['kernel']} {r['rows']}x{r['width']} {r['dtype']}: "
                                        f"{'; '.join(r['flags'])}" for r in flagged],
              "explained": [f"{r['kernel']} {r['rows']}x{r['width']} {r['dtype']}: {'; '.join(r['flags'])}: "
                            f"{r['explained']}" for r in explained]}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"\n{len(flagged)} of {len(rows)} shapes flagged:")
    for line in record["flagged"]:
        print("  " + line)
    print(f"{len(explained)} flagged and explained by a measurement in the same rounds:")
    for line in record["explained"]:
        print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
