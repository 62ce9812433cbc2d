"""Launch-shape sweep for the row kernels of chapters 05 (softmax, 4096 float32 rows) and 06 (RMSNorm,
4096 float16 rows): it informs each solution's ``LAUNCH_TABLE``.

    python lab/sweeps/launch_sweep.py [softmax] [rmsnorm]
        (on a GPU; writes solutions/05_softmax/records/05_softmax_launch_sweep.json, solutions/06_rmsnorm/records/06_rmsnorm_launch_sweep.json)
    python lab/sweeps/launch_sweep.py softmax-gaps
        (on a GPU, about 4 minutes; writes solutions/05_softmax/records/05_softmax_gaps_sweep.json): the shapes where chapter 05's
        reference trailed a peer (32768 x 1000 fp32, 4096^2 fp16), non-power-of-two widths, many short rows
        and bf16, each with every launch shape, torch.softmax, torch.compile, Liger-Kernel's LigerSoftmax (when
        installed: pip install liger-kernel==0.8.5 --no-deps) and a same-size copy; it prints, per shape, the
        winner beside the reference and the best peer, with the bytes-based prediction (a same-size copy's
        rate), the launch the reference's rule (softmax_config) picks, timed in the final rounds too, and the
        launches the winners suggest.

At each row length N it times, with ``triton_course.bench.steady_rounds`` (back-to-back calls on rotating fresh
inputs):

* ``tile rowsR/wW``: the notebook's own kernel, one program per tile of R rows, W warps, for every R and
  W that give each thread 4 to 128 values;
* ``persistent rowsR/wW``: the same body in a loop over tiles, ``SMs x (warps per SM // W)`` programs:
  one full wave, sized from occupancy, each program loading what it can keep (the RMSNorm weight) once;
* ``cache hints rowsR/wW``: the tile kernel with evict-first loads and streaming stores.

Round 1 times every candidate for 3 rounds; round 2 times the 5 fastest against the reference as the
notebook launches it, the one-row-per-program baseline and a copy of the same bytes, in turn, for 15
rounds. Candidates within one spread of each other are a tie: the table should not chase noise.
"""
from __future__ import annotations

import datetime as dt
import importlib.util
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from grader.course import solution_notebook  # noqa: E402
from grader.notebook_code import load_namespace  # noqa: E402
from triton_course.bench import METHOD, copy_bandwidth, gbps, steady_rounds  # noqa: E402

sys.path.insert(0, str(ROOT / "lab" / "sweeps"))
import graph_timing  # noqa: E402
from triton_course.softmax import warps_per_sm  # noqa: E402

M = 4096
WIDTHS = {"softmax": (512, 1024, 2048, 4096, 8192, 16384), "rmsnorm": (1024, 2048, 4096, 8192, 16384)}
CHAPTER = {"softmax": "05_softmax", "rmsnorm": "06_rmsnorm"}
FIRST_ROUNDS, FINAL_ROUNDS, FINALISTS = 3, 15, 5


@triton.jit
def softmax_persistent(x_ptr, out_ptr, n_rows, n_cols, x_row_stride, out_row_stride,
                       BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    for first in tl.range(tl.program_id(0) * ROWS, n_rows, tl.num_programs(0) * ROWS):
        rows = first + tl.arange(0, ROWS)
        safe = tl.minimum(rows, n_rows - 1).to(tl.int64)
        x = tl.load(x_ptr + safe[:, None] * x_row_stride + cols[None, :], mask=col_ok[None, :],
                    other=float("-inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=1)[:, None])
        tl.store(out_ptr + safe[:, None] * out_row_stride + cols[None, :],
                 (e / tl.sum(e, axis=1)[:, None]).to(out_ptr.dtype.element_ty),
                 mask=(rows < n_rows)[:, None] & col_ok[None, :])


@triton.jit
def softmax_hints(x_ptr, out_ptr, n_rows, n_cols, x_row_stride, out_row_stride,
                  BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    safe = tl.minimum(rows, n_rows - 1).to(tl.int64)
    x = tl.load(x_ptr + safe[:, None] * x_row_stride + cols[None, :], mask=col_ok[None, :],
                other=float("-inf"), eviction_policy="evict_first").to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=1)[:, None])
    tl.store(out_ptr + safe[:, None] * out_row_stride + cols[None, :],
             (e / tl.sum(e, axis=1)[:, None]).to(out_ptr.dtype.element_ty),
             mask=(rows < n_rows)[:, None] & col_ok[None, :], cache_modifier=".cs")


@triton.jit
def rmsnorm_persistent(x_ptr, w_ptr, out_ptr, M, N, stride_x, stride_out, eps,
                       BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < N
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    for first in tl.range(tl.program_id(0) * ROWS, M, tl.num_programs(0) * ROWS):
        rows = (first + tl.arange(0, ROWS)).to(tl.int64)
        ok = (rows < M)[:, None] & col_ok[None, :]
        x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=ok, other=0.0).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / N + eps)
        tl.store(out_ptr + rows[:, None] * stride_out + cols[None, :],
                 (x * rstd[:, None] * w[None, :]).to(out_ptr.dtype.element_ty), mask=ok)


@triton.jit
def rmsnorm_hints(x_ptr, w_ptr, out_ptr, M, N, stride_x, stride_out, eps,
                  BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    rows = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < N
    ok = (rows < M)[:, None] & col_ok[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=ok, other=0.0,
                eviction_policy="evict_first").to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / N + eps)
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows[:, None] * stride_out + cols[None, :],
             (x * rstd[:, None] * w[None, :]).to(out_ptr.dtype.element_ty), mask=ok, cache_modifier=".cs")


def chapter_module(chapter: str):
    spec = importlib.util.spec_from_file_location(f"m{chapter}", ROOT / "solutions" / chapter / "measure.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def launcher(kind: str, kernel, programs: int, block: int, rows: int, warps: int):
    """fn(*inputs) -> output: one launch of ``kernel`` with this shape, allocating its output."""
    if kind == "softmax":
        def run(x):
            out = torch.empty_like(x)
            kernel[(programs,)](x, out, M, x.shape[1], x.stride(0), out.stride(0), BLOCK_N=block, ROWS=rows,
                                num_warps=warps)
            return out
    else:
        def run(x, w):
            out = torch.empty_like(x)
            kernel[(programs,)](x, w, out, M, x.shape[1], x.stride(0), out.stride(0), 1e-6, BLOCK_N=block,
                                ROWS=rows, num_warps=warps)
            return out
    return run


def candidates(kind: str, ns: dict, n: int) -> dict:
    block = triton.next_power_of_2(n)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    tile_kernel = ns["softmax_kernel"] if kind == "softmax" else ns["rmsnorm_kernel"]
    persistent = softmax_persistent if kind == "softmax" else rmsnorm_persistent
    hints = softmax_hints if kind == "softmax" else rmsnorm_hints
    shapes = {}
    for rows in (1, 2, 4, 8, 16):
        for warps in (1, 2, 4, 8, 16, 32):
            per_thread = rows * block // (32 * warps)
            if not 4 <= per_thread <= 128 or rows * block > 32768:
                continue
            tiles = triton.cdiv(M, rows)
            shapes[f"tile rows{rows}/w{warps}"] = launcher(kind, tile_kernel, tiles, block, rows, warps)
            if rows <= 2 and 8 <= per_thread <= 64:
                wave = min(tiles, sms * max(1, warps_per_sm() // warps))
                shapes[f"persistent rows{rows}/w{warps}"] = launcher(kind, persistent, wave, block, rows, warps)
                shapes[f"cache hints rows{rows}/w{warps}"] = launcher(kind, hints, tiles, block, rows, warps)
    return shapes


def make_inputs(kind: str, n: int):
    if kind == "softmax":
        return lambda: (torch.randn(M, n, device="cuda"),)
    return lambda: (torch.randn(M, n, device="cuda", dtype=torch.float16),
                    torch.randn(n, device="cuda", dtype=torch.float16))


def sweep(kind: str) -> dict:
    chapter = CHAPTER[kind]
    ns = load_namespace(solution_notebook(chapter))
    baselines = chapter_module(chapter)
    reference = ns[kind]
    one_row = baselines.one_row if kind == "softmax" else baselines.one_row_per_program
    element = 4 if kind == "softmax" else 2
    widths, summary = {}, []
    for n in WIDTHS[kind]:
        nbytes = 2 * M * n * element + (n * element if kind == "rmsnorm" else 0)
        make = make_inputs(kind, n)
        x, *rest = make()
        expected = reference(x, *rest)
        shapes = candidates(kind, ns, n)
        usable, failed = {}, {}
        for name, fn in shapes.items():
            try:
                got = fn(x, *rest)
                torch.cuda.synchronize()
                if torch.allclose(got.float(), expected.float(), atol=2e-2 if element == 2 else 1e-5):
                    usable[name] = fn
                else:
                    failed[name] = "wrong result"
            except Exception as exc:  # out of registers or shared memory for this shape
                failed[name] = f"failed: {type(exc).__name__}"
        del x, rest, expected
        first = {name: round(gbps(nbytes, statistics.median(t)), 1)
                 for name, t in steady_rounds(usable, make, rounds=FIRST_ROUNDS).items()}
        ranked = sorted(first, key=first.get, reverse=True)
        finalists = {name: usable[name] for name in ranked[:FINALISTS]}
        finalists["reference (as the notebook launches it)"] = reference
        finalists["one row per program (baseline)"] = one_row
        finalists["same-size copy"] = lambda x, *rest: x.clone()
        final = steady_rounds(finalists, make, rounds=FINAL_ROUNDS)
        copy_bytes = 2 * M * n * element

        def rate(name, ms):
            return gbps(copy_bytes if name == "same-size copy" else nbytes, ms)

        medians = {name: round(rate(name, statistics.median(t)), 1) for name, t in final.items()}
        quartiles = {name: [round(rate(name, q), 1) for q in statistics.quantiles(t, n=4)[::-1]]
                     for name, t in final.items()}
        ref_t, one_t = final["reference (as the notebook launches it)"], final["one row per program (baseline)"]
        widths[str(n)] = {"round1_gbps": first, "not_usable": failed, "round2_median_gbps": medians,
                          "round2_quartiles_gbps": quartiles,
                          "round2_rounds_reference_faster_than_one_row": sum(r < o for r, o in zip(ref_t, one_t))}
        best = max((v, k) for k, v in medians.items() if k in usable)
        line = (f"N={n}: best {best[1]} {best[0]:.0f} GB/s; reference {medians['reference (as the notebook launches it)']:.0f}; "
                f"one row per program {medians['one row per program (baseline)']:.0f}; same-size copy "
                f"{medians['same-size copy']:.0f}")
        summary.append(line)
        print(line, flush=True)
        torch.cuda.empty_cache()
    return {"chapter": f"{chapter} launch-shape sweep", "command": f"python lab/sweeps/launch_sweep.py {kind}",
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
            "copy_gbps": round(copy_bandwidth(), 1), "rows": M, "method": METHOD,
            "rounds": {"round1": FIRST_ROUNDS, "round2": FINAL_ROUNDS},
            "summary": summary, "widths": widths}


# ---------------------------------------------------------------------------------------------------
# softmax-gaps: the shapes where the reference trailed a peer
# ---------------------------------------------------------------------------------------------------

#: (rows, width, dtype): where 05 trailed (32768 x 1000 fp32, 4096^2 fp16), non-power-of-two widths, many
#: short rows, bf16.
GAP_SHAPES = [(32768, 1000, torch.float32), (4096, 4096, torch.float16), (4096, 4096, torch.bfloat16),
              (8192, 5120, torch.float16), (16384, 1000, torch.float16), (32768, 3000, torch.float32),
              (262144, 64, torch.float32), (65536, 256, torch.float16), (4096, 1000, torch.float32),
              # inputs of up to 32 MiB, where the rule adds cache hints (SMALL_INPUT_BYTES): chapter 05's own rows
              (4096, 512, torch.float32), (4096, 1024, torch.float32), (4096, 2048, torch.float32),
              (8192, 1024, torch.float16)]


def liger_softmax():
    """LigerSoftmax's forward as fn(x), or None when liger-kernel is not installed."""
    try:
        from liger_kernel.transformers import LigerSoftmax
    except Exception:  # noqa: BLE001 - not installed, or an import error of its own
        return None
    module = LigerSoftmax()
    return lambda x: module(x)


def gap_candidates(ns: dict, m: int, n: int, element: int) -> dict:
    """Tile launches (R rows, W warps, with and without cache hints) giving each thread 2 to 64 values."""
    block = triton.next_power_of_2(n)
    kernel = ns["softmax_kernel"]
    shapes = {}
    for rows in (1, 2, 4, 8, 16, 32, 64):
        for warps in (1, 2, 4, 8, 16):
            per_thread = rows * block // (32 * warps)
            if not 2 <= per_thread <= 64 or rows * block > 32768 or rows > max(1, 4096 // block):
                continue
            for stream in (False, True):
                def run(x, rows=rows, warps=warps, stream=stream):
                    out = torch.empty_like(x)
                    kernel[(triton.cdiv(x.shape[0], rows),)](x, out, x.shape[0], x.shape[1], x.stride(0),
                                                             out.stride(0), BLOCK_N=block, ROWS=rows,
                                                             STREAM=stream, num_warps=warps)
                    return out
                shapes[f"rows{rows}/w{warps}{' hints' if stream else ''}"] = run
    return shapes


def sweep_gaps(graphs: bool = False, only: list[str] | None = None) -> dict:
    """The softmax-gaps sweep; ``graphs``: timed by graph_timing.graph_rounds instead of steady_rounds; ``only``:
    the shapes named like "4096x4096 float16"."""
    timer = graph_timing.graph_rounds if graphs else steady_rounds
    ns = load_namespace(solution_notebook("05_softmax"))
    reference = ns["softmax"]

    def eager(x):
        e = torch.exp(x - x.max(dim=1, keepdim=True).values)
        return e / e.sum(dim=1, keepdim=True)

    peers = {"torch.softmax": lambda x: torch.softmax(x, dim=-1),
             "torch.compile": torch.compile(eager, dynamic=False)}
    liger = liger_softmax()
    if liger is not None:
        peers["Liger LigerSoftmax"] = liger
    else:
        print("liger-kernel is not installed: pip install --no-deps liger-kernel==0.8.5 (a pure-Python wheel)",
              flush=True)
    shapes_out, summary, suggestions = {}, [], {}
    for m, n, dtype in GAP_SHAPES:
        if only and f"{m}x{n} {str(dtype)[6:]}" not in only:
            continue
        element = torch.empty(0, dtype=dtype).element_size()
        nbytes = 2 * m * n * element
        make = lambda: (torch.randn(m, n, device="cuda", dtype=dtype),)  # noqa: E731
        x = make()[0]
        want = torch.softmax(x.double(), dim=-1)
        tol = 1e-5 if element == 4 else 1e-2
        usable, failed = {}, {}
        for name, fn in {**gap_candidates(ns, m, n, element), **peers, "reference": reference}.items():
            try:
                err = float((fn(x).double() - want).abs().max())
                torch.cuda.synchronize()
                (usable if err < tol else failed)[name] = fn if err < tol else f"wrong: {err:.3g}"
            except Exception as exc:  # noqa: BLE001
                failed[name] = f"failed: {type(exc).__name__}"
        del x, want
        tiles = {k: v for k, v in usable.items() if k.startswith("rows")}
        first = {name: gbps(nbytes, statistics.median(t)) for name, t in
                 timer(tiles, make, rounds=FIRST_ROUNDS).items()}
        top = sorted(first, key=first.get, reverse=True)[:FINALISTS]
        _, rows_, warps_, stream_ = ns["softmax_config"](m, n, element)
        rule = f"rows{rows_}/w{warps_}{' hints' if stream_ else ''}"   # the reference's own launch, as a candidate
        if rule in tiles and rule not in top:
            top.append(rule)
        final_fns = {name: tiles[name] for name in top}
        final_fns.update({k: v for k, v in usable.items() if not k.startswith("rows")})
        final_fns["same-size copy"] = lambda x: x.clone()
        final = timer(final_fns, make, rounds=7)
        medians = {name: round(gbps(nbytes, statistics.median(t)), 1) for name, t in final.items()}
        best_tile = max(top, key=lambda k: medians[k])
        peer_names = [k for k in peers if k in medians]
        best_peer = max(peer_names, key=lambda k: medians[k]) if peer_names else None
        key = f"{m}x{n} {str(dtype)[6:]}"
        shapes_out[key] = {"round1_gbps": {k: round(v, 1) for k, v in first.items()}, "round2_median_gbps": medians,
                           "not_usable": failed, "best_launch": best_tile, "best_peer": best_peer,
                           "reference_launch": rule}
        block = triton.next_power_of_2(n)
        suggestions[key] = {"BLOCK_N": block, "element_size": element, "rows": m, "launch": best_tile}
        line = (f"{key}: reference {medians['reference']:.0f} GB/s; best launch {best_tile} {medians[best_tile]:.0f}; "
                f"best peer {best_peer} {medians.get(best_peer, float('nan')):.0f}; "
                f"predicted (bytes at a same-size copy's rate) {medians['same-size copy']:.0f}; "
                f"reference/best peer {medians['reference'] / medians[best_peer]:.3f}" if best_peer else "")
        summary.append(line)
        print(line, flush=True)
        torch.cuda.empty_cache()
    return {"chapter": "05_softmax launch shapes where peers led",
            "command": "python lab/sweeps/launch_sweep.py softmax-gaps" + (" --graphs" if graphs else "")
                       + (" '--only=" + ",".join(only) + "'" if only else ""),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
            "liger_kernel": _version("liger-kernel"), "copy_gbps": round(copy_bandwidth(), 1),
            "method": graph_timing.METHOD if graphs else METHOD, "rounds": {"round1": FIRST_ROUNDS, "round2": 7}, "summary": summary, "shapes": shapes_out,
            "suggested_launches": suggestions}


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def main(argv: list[str]) -> int:
    graphs = "--graphs" in argv
    only = next((a.split("=", 1)[1].split(",") for a in argv if a.startswith("--only=")), None)
    out = next((Path(a.split("=", 1)[1]) for a in argv if a.startswith("--out=")), None)
    argv = [a for a in argv if not a.startswith("--")]
    for kind in argv or ["softmax", "rmsnorm"]:
        if kind == "softmax-gaps":
            record = sweep_gaps(graphs, only)
            if out:
                record["command"] += f" --out={out}"
            (out or ROOT / "solutions" / "05_softmax" / "records" / "05_softmax_gaps_sweep.json").write_text(json.dumps(record, indent=1) + "\n")
            print("\n".join(record["summary"]))
            continue
        record = sweep(kind)
        path = ROOT / "solutions" / CHAPTER[kind] / "records" / f"{CHAPTER[kind]}_launch_sweep.json"
        path.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
