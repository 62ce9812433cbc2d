"""What every record in results/ starts with, and how a record names its --out: shared by the scripts here.

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
