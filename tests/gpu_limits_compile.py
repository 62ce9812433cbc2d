"""Compile notebook kernels for GPUs this machine does not have, and print what each launch needs.

Run as ``python tests/gpu_limits_compile.py JOBS.json`` in a process without ``TRITON_INTERPRET`` (tests/test_gpu_limits.py
does): each job names a solution notebook and the grade_id of the cell defining the kernel (or a module of the
course's helpers), the kernel, a compute capability, argument types and constexpr values, warps and stages. Prints
one JSON list: per job, the compiler's shared memory (bytes) and registers per thread (read by cuobjdump from the
cubin), or the error.
"""

from __future__ import annotations

import json
import linecache
import math
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_kernel(notebook: str, grade_id: str, kernel: str, cache: dict, module: str = ""):
    """The @triton.jit function ``kernel`` from the notebook cell ``grade_id``, or from the course helpers' module
    ``module`` where one is named (chapter 09's fast path), compiled (not interpreted)."""
    if module:
        if module not in cache:
            import importlib

            import triton  # noqa: F401  (first: Triton's own jit functions stay compiled ones)

            import triton_course  # noqa: F401  (sets TRITON_INTERPRET on a machine without a GPU: undone below)

            os.environ.pop("TRITON_INTERPRET", None)
            cache[module] = vars(importlib.import_module(module))
        return cache[module][kernel]
    key = (notebook, grade_id)
    if key not in cache:
        import nbformat
        import torch
        import triton
        import triton.language as tl

        import triton_course  # noqa: F401  (sets TRITON_INTERPRET on a machine without a GPU: undone below)
        from triton_course.attention import AttentionConfig

        os.environ.pop("TRITON_INTERPRET", None)
        cell = next(c for c in nbformat.read(notebook, as_version=4).cells
                    if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
        name = f"<{grade_id}>"
        linecache.cache[name] = (len(cell.source), None, cell.source.splitlines(True), name)
        ns = {"__name__": f"cell_{grade_id}", "math": math, "torch": torch, "triton": triton, "tl": tl,
              "AttentionConfig": AttentionConfig}
        exec(compile(cell.source, name, "exec"), ns)
        cache[key] = ns
    return cache[key][kernel]


def registers(cubin: bytes) -> int | None:
    """Registers per thread of the one kernel in ``cubin``, from Triton's bundled cuobjdump."""
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True).stdout
    found = re.search(r"REG:(\d+)", out)
    return int(found.group(1)) if found else None


def compile_job(job: dict, cache: dict) -> dict:
    """{"shared": bytes, "regs": per thread} of one job, or {"error": text}."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = load_kernel(job["notebook"], job["grade_id"], job["kernel"], cache, job.get("module", ""))
    names = fn.arg_names
    signature = {a: job["types"].get(a, "constexpr") for a in names}
    constexprs = {(i,): job["constexprs"][a] for i, a in enumerate(names) if a in job["constexprs"]}
    attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(names) if a in job["aligned"]}
    try:
        compiled = triton.compile(ASTSource(fn, signature, constexprs, attrs),
                                  target=GPUTarget("cuda", job["cc"], 32),
                                  options={"num_warps": job["num_warps"], "num_stages": job["num_stages"]})
    except Exception as exc:  # reported per job: the test names the launch that failed to compile
        return {"error": f"{type(exc).__name__}: {str(exc)[-600:]}"}
    return {"shared": int(compiled.metadata.shared), "regs": registers(compiled.asm["cubin"])}


def main() -> None:
    sys.path.insert(0, ROOT)
    with open(sys.argv[1]) as f:
        jobs = json.load(f)
    cache: dict = {}
    print(json.dumps([compile_job(job, cache) for job in jobs]))


if __name__ == "__main__":
    main()
