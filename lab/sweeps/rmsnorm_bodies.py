"""Chapter 06's RMSNorm kernel body against Liger-Kernel's at the same launch: is the gap at 4096 x 4096 float16
the launch or the body?

    python lab/sweeps/rmsnorm_bodies.py [--out solutions/06_rmsnorm/records/06_rmsnorm_bodies.json]
        (on one H200 with Liger-Kernel 0.8.5 importable: about 2 minutes)
    python lab/sweeps/rmsnorm_bodies.py --dry-run
        (anywhere; without a GPU under Triton's interpreter: every body against float64 at a few rows)

lab/records/norms_gaps_short_rows.json found Liger's RMSNorm at 3,700 GB/s on 4096 x 4096 float16 where the
notebook's kernel, launched as Liger launches (one row a program, 8 warps), reached 3,459: the same launch, 7%
apart. The bodies differ in small ways: Liger computes 1/sqrt with rsqrt, multiplies by the weight in the input's
dtype after casting x * rstd down (its "llama" casting), and stores each row's rstd. Each difference is a copy
of the notebook's ``rmsnorm_kernel`` with one line changed (the text is the notebook's, substituted):

* ``ours``: the notebook's kernel as it is; ``rsqrt``: 1 / sqrt becomes ``tl.math.rsqrt``; ``llama``: the weight
  stays in the input's dtype and multiplies ``(x * rstd).to(dtype)``; ``rsqrt+llama``: both;
* each at the notebook's launch (``launch_config``) and at Liger's (one row a program, Liger's
  ``calculate_settings`` warps; 16 rows a program with 4 warps where Liger takes its block kernel);
* ``reference``: the notebook's launcher as students call it; ``Liger``: LigerRMSNorm; ``same-size copy``.

All side by side in ``triton_course.bench.steady_rounds`` (medians of 7 interleaved rounds, rotating fresh inputs);
GB/s counts x read once, y written once and the weight once.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "lab" / "sweeps"))

import torch  # noqa: E402
import triton  # noqa: E402

import norms_gaps  # noqa: E402
from grader.notebook_code import exec_cell  # noqa: E402
from records import provenance  # noqa: E402

OUT = ROOT / "solutions" / "06_rmsnorm" / "records" / "06_rmsnorm_bodies.json"
GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
EPS = norms_gaps.EPS

RSQRT = ("rstd = 1.0 / tl.sqrt(mean_sq + eps)", "rstd = tl.math.rsqrt(mean_sq + eps)")
LLAMA_W = ("w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)",
           "w = tl.load(w_ptr + cols, mask=col_ok, other=0.0)")
LLAMA_Y = ("y = x * rstd[:, None] * w[None, :]", "y = (x * rstd[:, None]).to(w.dtype) * w[None, :]")
BODIES = {"ours": (), "rsqrt": (RSQRT,), "llama": (LLAMA_W, LLAMA_Y), "rsqrt+llama": (RSQRT, LLAMA_W, LLAMA_Y)}

SHAPES = [(4096, 4096, torch.float16), (8192, 5120, torch.float16), (8192, 5120, torch.bfloat16),
          (8192, 5120, torch.float32), (4096, 8192, torch.float16), (32768, 1000, torch.float16),
          (262144, 64, torch.float16), (262144, 64, torch.float32)]
DRY_SHAPES = [(13, 64, torch.float32), (9, 1000, torch.float16), (5, 4096, torch.float16)]   # no bfloat16 there


def kernel_source(ns: dict) -> str:
    """The notebook's rmsnorm_kernel, decorator to the end of its body, as written in the solution notebook."""
    import inspect
    return inspect.getsource(ns["rmsnorm_kernel"].fn)


def body_kernels(ns: dict) -> dict:
    """{body: a jitted copy of the notebook's kernel with that body's substitutions}."""
    source = kernel_source(ns)
    if not source.lstrip().startswith("@triton.jit"):
        source = "@triton.jit\n" + source
    out = {}
    for body, subs in BODIES.items():
        text = source.replace("def rmsnorm_kernel(", f"def rmsnorm_kernel_{body.replace('+', '_')}(")
        for old, new in subs:
            if old not in text:
                raise SystemExit(f"the notebook's rmsnorm_kernel no longer has {old!r}: update this probe")
            text = text.replace(old, new)
        exec_cell(text, f"<rmsnorm body {body}>", ns)
        out[body] = ns[f"rmsnorm_kernel_{body.replace('+', '_')}"]
    return out


def liger_launch(m: int, n: int) -> tuple[int, int]:
    """(rows a program, warps) as Liger-Kernel 0.8.5's rms_norm_forward launches [m, n]."""
    block = triton.next_power_of_2(n)
    warps = 32 if block >= 32768 else 16 if block >= 8192 else 8 if block >= 2048 else 4
    return (16, warps) if block <= 256 and m >= 4096 * 8 else (1, warps)


def functions(ns: dict, kernels: dict, m: int, n: int, dtype: torch.dtype) -> dict:
    block = triton.next_power_of_2(n)
    element = torch.tensor([], dtype=dtype).element_size()
    _, rows_nb, warps_nb, _, _ = ns["launch_config"](m, n, element)
    align = ns["row_alignment"](n, element, n, n)
    rows_lg, warps_lg = liger_launch(m, n)
    fns = {"reference": ns["rmsnorm"]}
    for body, kernel in kernels.items():
        fns[f"{body} @notebook rows{rows_nb}/w{warps_nb}"] = norms_gaps.launcher(
            "rmsnorm", kernel, block, rows_nb, warps_nb, {"STREAM": False, "ALIGN": align})
        if (rows_lg, warps_lg) != (rows_nb, warps_nb):
            fns[f"{body} @Liger rows{rows_lg}/w{warps_lg}"] = norms_gaps.launcher(
                "rmsnorm", kernel, block, rows_lg, warps_lg, {"STREAM": False, "ALIGN": align})
    return fns


def expected(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xd = x.double()
    return xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + EPS) * w.double()


def check(fns: dict, x: torch.Tensor, w: torch.Tensor) -> list[str]:
    want = expected(x, w)
    tol = 1e-4 if x.dtype == torch.float32 else 2e-2
    bad = []
    for name, fn in fns.items():
        err = float((fn(x, w).double() - want).abs().max())
        if not err <= tol * (1 + float(want.abs().max())):
            bad.append(f"{name}: max error {err:.3g}")
    return bad


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args()
    ns = norms_gaps.notebook_code("rmsnorm")
    kernels = body_kernels(ns)
    dry = args.dry_run or not GPU
    dev = "cuda" if not dry else "cpu"
    if dry:
        bad = []
        for m, n, dtype in DRY_SHAPES:
            x, w = torch.randn(m, n, dtype=dtype), torch.randn(n, dtype=dtype)
            fns = functions(ns, kernels, m, n, dtype)
            wrong = check(fns, x, w)
            print(f"{m}x{n} {dtype}: {len(fns) - len(wrong)}/{len(fns)} correct", *wrong, sep="\n  ")
            bad += wrong
        return 1 if bad else 0
    from triton_course.bench import copy_bandwidth, steady_rounds
    lt = norms_gaps.peers_module()._liger()
    if lt is None:
        raise SystemExit("Liger-Kernel is not importable: this probe compares against it")
    rows, wrong_all = [], []
    for m, n, dtype in SHAPES:
        fns = functions(ns, kernels, m, n, dtype)
        mod = lt.LigerRMSNorm(n, eps=EPS).to(dev, dtype)
        with torch.no_grad():
            mod.weight.copy_(torch.randn(n, device=dev, dtype=dtype))

        def liger(x, w, _mod=mod):
            with torch.no_grad():
                return _mod(x)
        x0 = torch.randn(m, n, device=dev, dtype=dtype)
        wrong = check(fns, x0, mod.weight.detach())
        wrong_all += [f"{m}x{n} {dtype}: {w}" for w in wrong]
        for w in wrong:
            fns.pop(w.split(":")[0], None)
        fns["Liger"] = liger
        fns["same-size copy"] = lambda x, w: x.clone()
        element = x0.element_size()
        nbytes = 2 * m * n * element + n * element
        times = steady_rounds(fns, lambda: (torch.randn(m, n, device=dev, dtype=dtype),
                                            torch.randn(n, device=dev, dtype=dtype)), rounds=7)
        gbps = {k: round(nbytes / statistics.median(t) / 1e6, 1) for k, t in times.items()}
        row = {"rows": m, "width": n, "dtype": str(dtype).replace("torch.", ""), "gbps": gbps,
               "ratio_to_liger": {k: round(v / gbps["Liger"], 3) for k, v in gbps.items()},
               "round_spread": {k: round((max(t) - min(t)) / statistics.median(t), 3) for k, t in times.items()}}
        rows.append(row)
        print(f"{m}x{n} {row['dtype']}:", ", ".join(f"{k} {v:.0f}" for k, v in sorted(gbps.items(), key=lambda kv: -kv[1])),
              flush=True)
    record = {**provenance("06_rmsnorm: kernel bodies against Liger-Kernel's at the same launch",
                           "python lab/sweeps/rmsnorm_bodies.py"),
              "liger_kernel": getattr(lt, "__version__", None) or norms_gaps._version("liger-kernel"),
              "copy_gbps": round(copy_bandwidth(), 1),
              "method": "triton_course.bench.steady_rounds: medians of 7 interleaved rounds on rotating fresh inputs; "
                        "bytes: x read, y written, the weight read once",
              "wrong": wrong_all, "rows": rows}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print("wrote", args.out)
    return 1 if wrong_all else 0


if __name__ == "__main__":
    sys.exit(main())
