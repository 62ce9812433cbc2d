"""Chapter 03 (vector add): each hint names only its own mistake, the example mistakes fail with it, every load
whose mask does not mask (tests/mask_corpus.py) loses the mask test alone, the chapter's PTX and launch-sweep
cells read what solutions/03_vector_add/measure.py records, and the recorded H200 figures back the notebook's
claims.

The example corpus of this chapter is also graded by tests/test_autograde.py (real nbgrader) and
tests/test_grader_safety.py (the cheats); here the answer files run through the judge in this process.
"""

from __future__ import annotations

import functools
import importlib.util
import json

import nbformat
import pytest
import torch

from grader.course import solution_notebook
from tests.conftest import ROOT, main_path, run_with_answers
from tests.conftest import judge_defs as shared_judge_defs
from tests.mask_corpus import DODGES, self_check
from triton_course.checks import CheckFailed, check, tolerance_for

CHAPTER = "03_vector_add"
TESTS = {"test_add_ragged", "test_add_fp16", "test_add_2d", "test_add_writes_exactly_n", "test_add_gpu_sizes",
         "test_add_bandwidth"}
MASK_TEST = "test_add_writes_exactly_n"


@functools.lru_cache(maxsize=None)
def outcomes(student: str) -> dict[str, str]:
    return run_with_answers(CHAPTER, student)


def judge_defs() -> dict:
    """The notebook's judge cell (reference, inputs, hints), executed here as the grader does."""
    return shared_judge_defs(CHAPTER)


# --- the example submissions, through the judge --------------------------------------------------------

@pytest.mark.notebook
@pytest.mark.parametrize("student, grade_id, words", [
    ("dev_floor_grid", "test_add_ragged", "the programs stop short of the end"),
    ("dev_floor_grid", "test_add_writes_exactly_n", "the programs stop short of the end"),
    ("lia_loads_x_twice", "test_add_ragged", "your output equals one input (or twice one input)"),
    ("lia_loads_x_twice", "test_add_fp16", "your output equals one input (or twice one input)"),
])
def test_mistakes_fail_with_the_hint_that_names_them(student, grade_id, words):
    message = outcomes(student)[grade_id]
    assert message.startswith("CheckFailed"), message
    assert words in message, message


@pytest.mark.notebook
def test_correct_kernel_passes_and_mistakes_name_no_other_trap():
    assert set(outcomes("ada_correct")) == TESTS
    assert all(v == "passed" for v in outcomes("ada_correct").values())
    for message in outcomes("dev_floor_grid").values():
        assert "equals one input" not in message and "not one element" not in message
    for message in outcomes("lia_loads_x_twice").values():
        assert "stop short" not in message and "not one element" not in message


# --- a mask that does not mask: every class loses the mask test, and only it ------------------------------

@pytest.mark.notebook
@pytest.mark.parametrize("student, why", DODGES.items())
def test_a_mask_that_cannot_be_false_loses_the_mask_test_naming_the_load(student, why):
    """mask=None (keyword or positional), a constant or always-true mask, and an unmasked second kernel that add
    launches beside its masked add_kernel: the values are right, so only the source tells. The notebook's own
    self-check says the same, so a student who passes it keeps the point."""
    got = run_with_answers(CHAPTER, student, kind="attacks")
    message = got[MASK_TEST]
    assert message.startswith("CheckFailed") and why in message, message
    kernel = "add_tail_kernel" if "second_kernel" in student else "add_kernel"
    assert f"of {kernel}: tl.load(x_ptr + idx" in message and f"of {kernel}: tl.load(y_ptr + idx" in message, message
    assert all(v == "passed" for gid, v in got.items() if gid != MASK_TEST), got
    checked = self_check(CHAPTER, student)
    assert why in checked and f"of {kernel}: tl.load(x_ptr + idx" in checked, checked


@pytest.mark.notebook
def test_the_honest_student_graded_after_the_dodges_keeps_every_point_and_passes_the_self_check():
    got = run_with_answers(CHAPTER, "ada_correct")      # not the cached run: graded after every dodge above
    assert set(got) == TESTS and all(v == "passed" for v in got.values()), got
    assert self_check(CHAPTER, "ada_correct", "examples") == "passed"


# --- the hints, each beside the mistake it names and beside the others ----------------------------------

def _first_part_only(x, y):
    out = torch.empty_like(x)
    k = (x.numel() // 1024) * 1024 or x.numel() // 2
    out.view(-1)[:k] = (x + y).view(-1)[:k]
    return out


def _fresh_tensor_returned(x, y):
    return torch.empty_like(x)


def _x_twice(x, y):
    return x + x


def _y_only(x, y):
    return y.clone()


def _slightly_off(x, y):
    return (x + y) * 1.01


def _writes_past_the_end(x, y):
    """An unmasked store: 8 elements past the end (into the check's guard region)."""
    out = torch.empty_like(x)
    n = x.numel()
    out.as_strided((n + 8,), (1,)).copy_(torch.cat([(x + y).reshape(-1), torch.zeros(8, dtype=x.dtype)]))
    return out


def _middle_gap(x, y):
    out = (x + y).clone()
    out.view(-1)[100:200] = float("nan")
    return out


_HINT_PHRASES = {"stops_short": "the programs stop short of the end", "nothing_written": "not one element",
                 "one_input": "your output equals one input"}

_MISTAKES = [  # (mistake, input size and dtype, the one hint it must name; None: no hint fits)
    (_first_part_only, (3000, torch.float32), "stops_short"),
    (_first_part_only, (700, torch.float16), "stops_short"),
    (_fresh_tensor_returned, (3000, torch.float32), "nothing_written"),
    (_x_twice, (3000, torch.float32), "one_input"),
    (_y_only, (777, torch.float16), "one_input"),
    (_slightly_off, (3000, torch.float32), None),
    (_middle_gap, (3000, torch.float32), None),
    (_writes_past_the_end, (3000, torch.float32), None),
]


@pytest.mark.parametrize("mistake, shape, hint", _MISTAKES, ids=[f"{m.__name__}-{h}" for m, _, h in _MISTAKES])
def test_each_hint_fires_on_its_mistake_and_stays_silent_on_the_others(mistake, shape, hint):
    ns = judge_defs()
    torch.manual_seed(0)
    n, dtype = shape
    args = (torch.randn(n, dtype=dtype), torch.randn(n, dtype=dtype))
    atol, rtol = tolerance_for(dtype)
    with pytest.raises(CheckFailed) as info:
        check(mistake, args, ns["reference"], atol=atol, rtol=rtol, hints=ns["hints"], name="add",
              require_kernel=False)
    fired = {name for name, phrase in _HINT_PHRASES.items() if phrase in str(info.value)}
    assert fired == ({hint} if hint else set()), str(info.value)


def _floor_grid(x, y):
    """What a grid of n // 1024 programs writes: whole blocks only (none at all when n < 1024)."""
    out = torch.empty_like(x)
    whole = x.numel() // 1024 * 1024
    out.view(-1)[:whole] = (x + y).view(-1)[:whole]
    return out


def test_a_grid_of_no_programs_is_named_when_nothing_was_written():
    """The self-check's first case (1000 elements) under a floor grid with BLOCK = 1024 launches no program: the
    output is untouched, and the hint for that symptom names the grid beside the store and the return value."""
    ns = judge_defs()
    args = (torch.randn(1000), torch.randn(1000))
    with pytest.raises(CheckFailed) as info:
        check(_floor_grid, args, ns["reference"], atol=1e-6, rtol=1e-6, hints=ns["hints"], name="add",
              require_kernel=False)
    assert "not one element" in str(info.value) and "triton.cdiv(n, BLOCK)" in str(info.value), str(info.value)


def test_every_hint_has_a_mistake_here():
    hints = judge_defs()["hints"]
    assert len(_HINT_PHRASES) == len(hints)
    assert set(_HINT_PHRASES) == {hint for _, _, hint in _MISTAKES if hint}
    for hint in hints:
        assert sum(phrase in hint.message for phrase in _HINT_PHRASES.values()) == 1, hint.message


# --- the PTX the chapter describes -----------------------------------------------------------------------

def test_ptx_of_the_add_kernel_has_the_loads_and_predicates_the_chapter_names():
    """Compiled for an H100/H200 (sm_90) without a GPU, as Triton's compiler can: with n divisible by 16,
    predicated 16-byte loads (two per input at BLOCK 1024 and 4 warps); with n odd, 4-byte loads, each
    under its own predicate. This is what the chapter's PTX cell tells the student to look for."""
    from grader.notebook_code import load_namespace

    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource, compile as triton_compile
    except ImportError as exc:  # a Triton without the CUDA backend cannot compile for a GPU
        pytest.skip(f"this Triton cannot compile for CUDA: {exc}")
    ns = load_namespace(solution_notebook(CHAPTER))
    kernel = ns["add_kernel"]
    kernel = getattr(kernel, "fn", kernel)      # under the interpreter: the Python function
    import triton

    jit = triton.runtime.jit.JITFunction(kernel) if not isinstance(kernel, triton.runtime.jit.JITFunction) else kernel
    signature = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n_elements": "i32", "BLOCK": "constexpr"}
    aligned = {(i,): [["tt.divisibility", 16]] for i in range(3)}
    listings = {}
    for name, attrs in (("divisible", {**aligned, (3,): [["tt.divisibility", 16]]}), ("odd", aligned)):
        source = ASTSource(jit, signature, constexprs={"BLOCK": ns["BLOCK"]}, attrs=attrs)
        listings[name] = triton_compile(source, target=GPUTarget("cuda", 90, 32)).asm["ptx"]
    m = _measurement_module()
    assert m.global_memory_ops(listings["divisible"]) == "4 x ld.global.v4.b32, 2 x st.global.v4.b32"
    assert m.global_memory_ops(listings["odd"]) == "16 x ld.global.b32, 8 x st.global.b32"
    lines = _ptx_of_interest()(listings["divisible"]).splitlines()
    assert any(line.startswith("@%p") and "ld.global.v4.b32" in line for line in lines)
    assert any(line.startswith("setp.lt.s32") for line in lines) and any("add.f32" in line for line in lines)


def _ptx_of_interest():
    """The notebook's ptx_of_interest (in a cell after the exercises, so load_namespace does not run it),
    its definition alone."""
    import ast
    import re

    nb = nbformat.read(solution_notebook(CHAPTER), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and "def ptx_of_interest" in cell.source:
            node = next(n for n in ast.parse(cell.source).body
                        if isinstance(n, ast.FunctionDef) and n.name == "ptx_of_interest")
            ns: dict = {"re": re}
            exec(compile(ast.Module([node], []), "<ptx_of_interest>", "exec"), ns)
            return ns["ptx_of_interest"]
    raise AssertionError("the notebook has no ptx_of_interest")


# --- the measurement script ------------------------------------------------------------------------------

def _measurement_module():
    spec = importlib.util.spec_from_file_location("measure_03", ROOT / "solutions" / CHAPTER / "measure.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _experiment_shapes() -> list[tuple[int, int]]:
    import ast

    nb = nbformat.read(solution_notebook(CHAPTER), as_version=4)
    for cell in nb.cells:
        for line in cell.source.splitlines() if cell.cell_type == "code" else ():
            if line.startswith("SHAPES = "):
                return ast.literal_eval(line.split("=", 1)[1].strip())
    raise AssertionError("the experiment's SHAPES are not in the notebook")


def test_the_recorded_sweep_covers_every_shape_the_experiment_runs():
    m = _measurement_module()
    recorded = {(b, w) for b in m.SWEEP_BLOCKS for w in m.SWEEP_WARPS if b >= 32 * w}
    shapes = _experiment_shapes()
    assert set(shapes) <= recorded, set(shapes) - recorded
    assert len(recorded) == 42   # the count the appendix names


@pytest.mark.notebook
def test_sweep_launcher_of_the_script_adds_under_the_interpreter():
    from grader.notebook_code import load_namespace

    ns = load_namespace(solution_notebook(CHAPTER))
    m = _measurement_module()
    x, y = torch.randn(5003), torch.randn(5003)
    for block, warps in ((128, 4), (1024, 1), (16384, 32)):
        assert torch.equal(m.launch(ns["add_kernel"], block, warps)(x, y), x + y)


# --- the chapter's shape and length ----------------------------------------------------------------------

def test_main_path_is_at_most_1800_words_and_keeps_the_chapter_shape():
    cells, appendix = main_path(CHAPTER)
    main = "\n".join(cells)
    assert appendix and len(main.split()) <= 1800, len(main.split())
    order = ["**Goals.**", "## Background", "budget", "## TODO", "## Self-check", "## Reading the PTX",
             "## Experiment", "## Benchmark", "## What to take away"]
    positions = [main.find(heading) for heading in order]
    assert all(p >= 0 for p in positions) and positions == sorted(positions), dict(zip(order, positions))
    assert "Sources:" in appendix[0] and "01-vector-add" in appendix[0]


# --- the recorded H200 figures back the notebook's claims -----------------------------------------------

def _record() -> dict:
    return json.loads((ROOT / "solutions" / CHAPTER / "records" / f"{CHAPTER}.json").read_text())


def _section(name: str):
    record = _record()
    if name not in record:
        pytest.skip(f"solutions/{CHAPTER}/records/{CHAPTER}.json has no {name!r} yet: run python tests/gpu/measure.py {CHAPTER} on a GPU")
    return record[name]


def test_h200_small_vectors_are_launch_bound_and_large_ones_reach_the_copy():
    """The plot's reading: a few MB reach a fraction of the copy; tens of MB and more reach it."""
    rows = {r["n"]: r for r in _record()["sizes"]}
    assert rows[2**20]["triton_fraction_of_copy"] < 0.75
    assert all(r["triton_fraction_of_copy"] >= 0.95 for n, r in rows.items() if n >= 2**24)


def test_h200_target_separates_the_kernel_from_twice_the_bytes():
    check = _record()["bandwidth_check"]
    assert check["passes"]
    if "twice_the_bytes" not in check:
        pytest.skip(f"solutions/{CHAPTER}/records/{CHAPTER}.json has no twice-the-bytes figure yet: run python tests/gpu/measure.py {CHAPTER}")
    assert not check["twice_the_bytes"]["passes"]


def test_h200_ptx_listing_shows_what_the_chapter_names():
    listings = {p["n"]: p for p in _section("ptx")["listings"]}
    assert "ld.global.v4.b32" in listings[2**20]["memory_ops"]
    assert "ld.global.v4" not in listings[2**20 + 1]["memory_ops"]
    assert "setp.lt.s32" in listings[2**20]["ptx"]


def test_h200_sweep_has_every_shape_of_the_experiment():
    sweep = _section("launch_sweep")
    assert all(f"{b}/{w}" in sweep["gbps"] for b, w in _experiment_shapes())
    assert sweep["gbps"]["1024/4"] >= 0.9 * max(sweep["gbps"].values()), "the course's BLOCK should be near the best"


# --- the self-check gives the grader's verdict on whose work the result is (issue 45) -------------------------

@pytest.fixture
def in_a_notebook(monkeypatch):
    """The self-check as a notebook runs it: an IPython shell is running, COURSE_REQUIRE_KERNEL is unset."""
    import sys
    import types

    from triton_course import integrity

    monkeypatch.delenv(integrity.REQUIRE_KERNEL_ENV, raising=False)
    fake = types.ModuleType("IPython")
    fake.get_ipython = lambda: object()
    monkeypatch.setitem(sys.modules, "IPython", fake)


def test_in_a_notebook_the_self_check_fails_pytorchs_sum_as_the_grader_does(in_a_notebook):
    """fay_torch_result returns PyTorch's x + y: right values, no launch, 0 points from the grader. The self-check
    now says so, naming the symptoms it has (no launch, aten.add, an output no launch received) and no value hint."""
    message = self_check(CHAPTER, "fay_torch_result", "examples")
    assert "without launching a Triton kernel" in message and "aten.add" in message, message
    assert "no Triton kernel launch received" in message and "Hint:" not in message, message
    assert self_check(CHAPTER, "ada_correct", "examples") == "passed"


# --- constexpr, powers of two and the debugging exercise (issue 45) -------------------------------------------

def _cell(marker: str) -> str:
    nb = nbformat.read(solution_notebook(CHAPTER), as_version=4)
    return next(c.source for c in nb.cells if c.cell_type == "code" and marker in c.source)


def _run(source: str) -> str:
    import contextlib
    import io

    from grader.notebook_code import exec_cell
    from triton_course.device import setup

    ns = {"torch": torch, "triton": __import__("triton"), "tl": __import__("triton.language").language,
          "device": setup(quiet=True)}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec_cell(source, "<03 cell>", ns)
    return out.getvalue()


def test_the_power_of_two_cell_accepts_64_and_128_and_refuses_96_with_the_reason():
    printed = _run(_cell("def iota_kernel"))
    assert "BLOCK =  64: accepted, out[-1] = 63" in printed and "BLOCK = 128: accepted, out[-1] = 127" in printed
    assert "BLOCK =  96: refused" in printed and "arange's range must be a power of 2" in printed, printed


COMPILE_FOR_A_T4 = """
import importlib.util, json, sys
try:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile as triton_compile
    from triton.compiler.errors import CompilationError
except ImportError as exc:
    print(f"this Triton cannot compile for CUDA: {exc}")
    sys.exit(3)
spec = importlib.util.spec_from_file_location("kernels", sys.argv[1])
kernels = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kernels)
t4 = GPUTarget("cuda", 75, 32)
try:
    triton_compile(ASTSource(kernels.iota_kernel, {"out_ptr": "*i32", "BLOCK": "constexpr"}, constexprs={"BLOCK": 96}),
                   target=t4)
    refused = ""
except CompilationError as exc:
    refused = str(exc)
signature = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n_elements": "i32", "BLOCK": "constexpr"}
compiled = triton_compile(ASTSource(kernels.shifted_copy_kernel, signature, constexprs={"BLOCK": 4}), target=t4,
                          options={"num_warps": 1})
sys.stdout.flush()
print(json.dumps({"refused_96": refused, "vprintf": "vprintf" in compiled.asm["ptx"]}))
"""


def test_compiled_for_a_t4_96_is_a_compilation_error_and_static_print_shows_the_block_type(tmp_path):
    """What the two new cells say of a GPU, checked without one: Triton's compiler refuses tl.arange(0, 96) for
    sm_75 with the same reason, tl.static_print prints while compiling, and tl.device_print becomes a printf."""
    import json
    import os
    import subprocess
    import sys

    kernels = tmp_path / "kernels.py"
    kernels.write_text("import triton\nimport triton.language as tl\n\n" + "\n\n\n".join(
        _cell(marker).split("\n\n\n")[0] for marker in ("def iota_kernel", "def shifted_copy_kernel")))
    # In a process of its own, without TRITON_INTERPRET: a test of this process that ran the interpreter first
    # leaves triton.language patched, and the compiler then fails on the patched builtins.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "cache")   # compiled afresh: static_print prints only then
    proc = subprocess.run([sys.executable, "-c", COMPILE_FOR_A_T4, str(kernels)], env=env, capture_output=True,
                          text=True, timeout=300)
    if proc.returncode == 3:
        pytest.skip(proc.stdout.strip())
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "power of 2" in got["refused_96"], got
    assert "compiling with BLOCK = 4" in proc.stdout + proc.stderr and got["vprintf"], (proc.stdout, proc.stderr)


def test_the_debugging_exercise_shows_its_bug_and_leaves_no_breakpoint_active():
    """Program 1 prints offsets 1..4 (not 4..7) and elements 6..9 stay -1: what the exercise asks the student to
    see. No code cell calls breakpoint() (nbval and the grader have nobody to type at it)."""
    printed = _run(_cell("def shifted_copy_kernel"))
    assert "program 1, offsets" in printed and "[1 2 3 4]" in printed, printed
    assert "out: [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, -1.0, -1.0, -1.0, -1.0]" in printed, printed
    nb = nbformat.read(solution_notebook(CHAPTER), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            active = [line for line in cell.source.splitlines() if "breakpoint()" in line.split("#")[0]]
            assert not active, active
