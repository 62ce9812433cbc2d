"""What every record the lab writes starts with, and how a record names its --out: shared by the scripts here.

A record is a JSON file that a script writes after measuring on a GPU. Its first keys say what was measured
(``chapter``), the command that measures it again (``command``), when (``date``, UTC) and with what (``device``,
``torch``, ``triton``): :func:`provenance`. A command names its ``--out`` as typed in the repository's root when
the file is inside the repository, so that the record does not carry the path of the machine that made it:
:func:`shown_path`.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def interpret_if_dry_run() -> None:
    """Under ``--dry-run``, choose Triton's interpreter. Call it before Triton is imported: Triton reads
    TRITON_INTERPRET then, and its own functions (``tl.max``) must be interpreted too."""
    if "--dry-run" in sys.argv:
        os.environ.setdefault("TRITON_INTERPRET", "1")


def provenance(chapter: str, command: str) -> dict[str, str]:
    """The first keys of a record made now on this process's GPU: chapter, command, date, device, torch, triton."""
    import torch
    import triton

    return {"chapter": chapter, "command": command,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}


def notebook_module(chapter: str, marker: str, first: str, end: str, name: str):
    """Part of a solution notebook as a module: in the code cell of ``solutions/<chapter>`` that holds ``marker``,
    the text from ``first`` up to ``end`` (not included), after ``import torch`` and ``import triton``. How the
    probes take the reference's Gluon kernels exactly as the notebook defines them, without a GPU or the notebook's
    set-up."""
    import importlib.util
    import json
    import tempfile

    cells = json.loads((ROOT / "solutions" / chapter / f"{chapter}.ipynb").read_text())["cells"]
    source = next("".join(c["source"]) for c in cells if marker in "".join(c["source"]))
    block = source[source.index(first):source.index(end)]
    path = Path(tempfile.mkdtemp(prefix=f"{name}_")) / f"{name}.py"   # one per process
    path.write_text("import torch\nimport triton\n\n" + block)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def notebook_gluon(chapter: str, kernel: str, end: str):
    """The Gluon part of a chapter's solution as a module (``notebook_module``: from its import of ``gluon_ready``
    up to ``end``, in the cell that defines ``kernel``): its kernels exactly as the notebook defines them. Exits
    with a message where this Triton's Gluon is not in the form the notebook needs (its ``GLUON`` is False)."""
    import triton

    module = notebook_module(chapter, f"def {kernel}", "from triton_course.versions import gluon_ready", end,
                             f"chapter{chapter[:2]}_gluon_path")
    if not module.GLUON:
        raise SystemExit(f"Gluon is not here in the form chapter {chapter[:2]} needs (triton {triton.__version__})")
    return module


def check_products(fns: dict, a, b, label: str, calls=None) -> tuple[dict, bool]:
    """Chapter 07's probes: each of ``fns`` (name -> fn(a, b)) against relu(a @ b) in float64 at the chapter's
    tolerance, the GPU's free memory first filled with NaN so that an element never written shows; ``calls(name)``
    calls in a row, the last one checked (1 unless given). Names starting "timing only: copy" are copies, timed but
    not checked. Returns (name -> verdict, whether every product is correct), each verdict printed."""
    import torch

    from triton_course.matmul import tolerance

    want = torch.relu(a.double() @ b.double())
    atol, rtol = tolerance(a.dtype)
    checks, ok = {}, True
    for name, fn in fns.items():
        if name.startswith("timing only: copy"):
            checks[name] = {"correct": True, "note": "not a product: timed only"}
            continue
        for _ in range(calls(name) if calls else 1):
            torch.full((want.numel(),), float("nan"), device=a.device, dtype=a.dtype)
            got = fn(a, b).double()
        good = bool(((got - want).abs() <= atol + rtol * want.abs()).all())
        checks[name] = {"max_abs_error": round(float((got - want).abs().max()), 4), "correct": good}
        print(label, name, "correct" if good else "WRONG", checks[name]["max_abs_error"], flush=True)
        ok &= good
    return checks, ok


def timed_rows(fns: dict, make, flops: float, label: str) -> dict:
    """Chapter 07's probes: ``fns`` (name -> fn(a, b), "torch" among them) timed side by side by
    ``triton_course.bench.steady_rounds`` (medians of interleaved rounds on fresh inputs from ``make``): name ->
    {"us", "tflops", "ratio_to_torch"}, each row printed."""
    import statistics

    from triton_course.bench import steady_rounds
    from triton_course.matmul import tflops

    times = steady_rounds(fns, make)
    rows = {name: {"us": round(statistics.median(t) * 1e3, 2),
                   "tflops": round(tflops(flops, statistics.median(t)), 1)} for name, t in times.items()}
    for name, row in rows.items():
        row["ratio_to_torch"] = round(row["tflops"] / rows["torch"]["tflops"], 3)
        print(f"{label} {name:<48} {row['us']:>8.2f} us  {row['ratio_to_torch']:.3f} of torch", flush=True)
    return rows


def write_with_summary(record: dict, lines: list[str], out: Path) -> None:
    """Chapter 07's probes: ``lines`` printed and kept as the record's "summary", and the record written to ``out``
    as JSON."""
    import json

    record["summary"] = lines
    print("\n".join(lines))
    out.write_text(json.dumps(record, indent=1) + "\n")
    print("wrote", out)


def cubin_usage(cubin: bytes) -> tuple[int | None, int | None]:
    """(registers per thread, spill stack bytes) of a compiled kernel, read by the cuobjdump that Triton ships;
    (None, None) where it does not ship one."""
    import re
    import subprocess
    import tempfile

    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not tool.exists():
        return None, None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        usage = subprocess.run([str(tool), "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    found = re.search(r"REG:(\d+)", usage), re.search(r"STACK:(\d+)", usage)
    regs, stack = (int(m.group(1)) if m else None for m in found)
    return regs, stack


def gluon_sm90_usage(kernel, args: list, meta: dict) -> dict:
    """Compile a Gluon kernel for sm_90 here, GPU or not: ``{"regs", "stack", "shared_bytes"}`` (registers per
    thread, spill stack bytes, shared memory). ``args``: its run-time arguments in order, each a value Triton can
    type (a host tensor descriptor) or a type name ("i32", "*fp16"); ``meta``: its constexprs, num_warps among
    them."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    names = list(kernel.arg_names)
    signature = dict(zip(names, [a if isinstance(a, str) else mangle_type(a) for a in args]))
    signature.update({k: "constexpr" for k in meta})
    src = GluonASTSource(kernel, signature, {(names.index(k),): v for k, v in meta.items()})
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": meta["num_warps"]})
    regs, stack = cubin_usage(compiled.asm["cubin"])
    return {"regs": regs, "stack": stack, "shared_bytes": int(compiled.metadata.shared)}


def shown_path(path: Path) -> str:
    """``path`` relative to the repository when it is inside it (as a command would name it)."""
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
