"""Chapter 06 (RMSNorm): the example submissions earn and lose points for the right reasons.

Each answer file runs against the hidden tests through the judge in this process, and one (float16
accumulation) also goes through real nbgrader autograde. Accumulating in float16, ignoring or fixing
eps, and addressing rows as if they were back to back each lose their test, with feedback that names
the trap. The straightforward one-row-per-program kernel and the twice-the-bytes kernel (a second kernel
applies the weight) compute the right values; on the H200 the first passes the bandwidth check and a
twice-the-bytes kernel fails it (solutions/06_rmsnorm/records/06_rmsnorm.json). Applying the weight in PyTorch instead earns
nothing: the grader awards points only for results a Triton kernel computes.
"""

from __future__ import annotations

import json

import pytest

from grader.autograde import find_submissions, grade_all
from grader.examples import build_submissions
from tests.conftest import ROOT, run_with_answers
from tests.gpu_sizes import (GRID_AXIS_LIMIT, cell_source, ends_with_at_gpu_sizes, largest_rows_per_program,
                             row_launches, run_cell, solution_cell, spans_many_programs)

pytestmark = pytest.mark.notebook

CHAPTER = "06_rmsnorm"


@pytest.mark.parametrize("student", ["ada_correct", "carl_one_row_per_program", "hugo_weight_second_kernel"])
def test_right_values_pass_every_test_here(student):
    outcomes = run_with_answers(CHAPTER, student)
    assert set(outcomes) >= {"test_rmsnorm_shapes", "test_rmsnorm_strided", "test_rmsnorm_fp16",
                             "test_rmsnorm_eps", "test_rmsnorm_rstd", "test_rmsnorm_gpu_sizes", "test_rmsnorm_bf16",
                             "test_rmsnorm_bandwidth"}
    assert all(v == "passed" for v in outcomes.values()), outcomes


def test_weight_applied_by_pytorch_earns_nothing():
    """Right values, but the last multiplication is PyTorch's: every correctness test fails and says why."""
    outcomes = run_with_answers(CHAPTER, "gail_weight_in_torch")
    for grade_id in ("test_rmsnorm_shapes", "test_rmsnorm_strided", "test_rmsnorm_fp16", "test_rmsnorm_eps"):
        assert "computed with PyTorch outside its kernel (aten.mul)" in outcomes[grade_id], outcomes[grade_id]


@pytest.mark.parametrize("student", ["dev_no_eps", "eve_fixed_eps"])
def test_eps_mistakes_are_named(student):
    outcomes = run_with_answers(CHAPTER, student)
    assert outcomes["test_rmsnorm_strided"] == "passed"
    assert "eps: rows of zeros" in outcomes["test_rmsnorm_eps"]
    if outcomes["test_rmsnorm_shapes"] != "passed":  # a one-element row of a small value notices eps too
        assert "eps: rows of zeros" in outcomes["test_rmsnorm_shapes"]


def test_row_stride_is_named():
    outcomes = run_with_answers(CHAPTER, "finn_row_stride_n")
    assert outcomes["test_rmsnorm_shapes"] == "passed"
    assert "rows are not back to back" in outcomes["test_rmsnorm_strided"]


def test_float16_accumulation_is_named_by_real_autograde(tmp_path):
    outcomes = run_with_answers(CHAPTER, "cleo_fp16_accumulate")
    assert outcomes["test_rmsnorm_shapes"] == "passed"
    assert "float16 overflow" in outcomes["test_rmsnorm_fp16"]
    build_submissions(CHAPTER, tmp_path / "submitted")
    subs = [s for s in find_submissions(tmp_path / "submitted", CHAPTER) if s.student == "cleo_fp16_accumulate"]
    records = {r.grade_id: r for r in grade_all(subs, tmp_path / "out", feedback=False)}
    fp16 = records["test_rmsnorm_fp16"]
    assert fp16.status == "failed" and fp16.points == 0 and "float16 overflow" in fp16.message
    assert records["test_rmsnorm_shapes"].status == "passed"
    # bfloat16 needs a GPU that has it: here it is not graded, and says why (it costs no gradable point)
    bf16 = records["test_rmsnorm_bf16"]
    assert bf16.status == "not_graded" and bf16.points == 0 and "bfloat16 skipped" in bf16.message


def test_h200_figures_show_the_target_separates_straightforward_from_twice_the_bytes():
    figures = json.loads((ROOT / "solutions" / CHAPTER / "records" / f"{CHAPTER}.json").read_text())["bandwidth_check"]
    assert figures["one_row_per_program"]["passes"] and figures["reference"]["passes"]
    assert not figures["twice_the_bytes"]["passes"]


# ---------------------------------------------------------------------------------------------------
# The hints of the judge cell, each beside the mistake it names (fires) and the others (silent)
# ---------------------------------------------------------------------------------------------------

_HINT_PHRASES = {"float16": "float16 overflow", "eps": "eps: rows of zeros", "stride": "rows are not back to back",
                 "unwritten": "some rows were never written"}


def _judge_namespace() -> dict:
    import nbformat
    import torch

    from grader.course import solution_notebook
    from grader.execute import is_judge_cell
    from triton_course.device import current

    ns = {"torch": torch, "device": current()}
    for cell in nbformat.read(solution_notebook(CHAPTER), as_version=4).cells:
        if is_judge_cell(cell):
            exec(cell.source, ns)
    return ns


def _mistakes():
    import torch

    def right(x, w, eps=1e-6):
        return (x.double() / torch.sqrt((x.double() ** 2).mean(-1, keepdim=True) + eps) * w.double()).to(x.dtype)

    def float16_sum(x, w, eps=1e-6):
        return (x * torch.rsqrt((x * x).sum(-1, keepdim=True) / x.shape[-1] + eps) * w).to(x.dtype)

    def no_eps(x, w, eps=1e-6):
        return right(x, w, 0.0)

    def rows_n_apart(x, w, eps=1e-6):
        return right(x.as_strided(x.shape, (x.shape[1], 1)), w, eps)

    def last_row_unwritten(x, w, eps=1e-6):
        out = torch.empty_like(x)
        out[:-1] = right(x, w, eps)[:-1]
        return out

    def fixed_eps(x, w, eps=1e-6):
        return right(x, w)

    def scaled(x, w, eps=1e-6):
        return right(x, w, eps) * 1.01

    zeros = torch.randn(6, 256)
    zeros[1] = 0
    wide = torch.randn(40, 300)
    h = dict(dtype=torch.float16)
    return [
        (float16_sum, (torch.randn(4, 1024, **h) * 400, torch.randn(1024, **h)), "float16"),
        (no_eps, (zeros, torch.randn(256)), "eps"),
        (rows_n_apart, (wide[:, :200], torch.randn(200)), "stride"),
        (fixed_eps, (torch.randn(10, 128) * 0.1, torch.randn(128), 1e-2), "eps"),
        (last_row_unwritten, (torch.randn(7, 64), torch.randn(64)), "unwritten"),
        (scaled, (torch.randn(7, 64), torch.randn(64)), None),
        (scaled, (torch.randn(4, 1024, **h) * 400, torch.randn(1024, **h)), None),
        (scaled, (wide[:, :200], torch.randn(200)), None),
        (scaled, (torch.randn(10, 128), torch.randn(128), 0.5), None),
    ]


def test_each_hint_fires_on_its_mistake_and_stays_silent_on_the_others():
    import torch

    from triton_course.checks import CheckFailed, check

    torch.manual_seed(0)
    ns = _judge_namespace()
    assert len(ns["hints"]) == len(_HINT_PHRASES)
    for mistake, args, hint in _mistakes():
        atol, rtol = ns["tolerances"](args[0].dtype)
        with pytest.raises(CheckFailed) as info:
            check(mistake, list(args), ns["reference"], atol=atol, rtol=rtol, hints=ns["hints"], name="rmsnorm")
        fired = {name for name, phrase in _HINT_PHRASES.items() if phrase in str(info.value)}
        assert fired == ({hint} if hint else set()), (mistake.__name__, str(info.value))


# ---------------------------------------------------------------------------------------------------
# TODO 2, rmsnorm_with_rstd: graded, two outputs; each mistake loses that test alone, and says why
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("student, words", [
    ("ivy_rstd_unmasked", "Output `rstd`: Out-of-bounds stores"),
    ("jay_rstd_is_rms", "rstd holds the rms of each row"),
    ("kim_rstd_by_pytorch", "computed with PyTorch outside its kernel (aten.add, aten.mean, aten.pow, aten.rsqrt)"),
    ("lea_rstd_in_input_dtype", "output `rstd` has dtype float16, expected float32"),
])
def test_rstd_mistakes_lose_the_rstd_test_alone(student, words):
    outcomes = run_with_answers(CHAPTER, student)
    assert words in outcomes["test_rmsnorm_rstd"], outcomes["test_rmsnorm_rstd"]
    assert all(v == "passed" for k, v in outcomes.items() if k != "test_rmsnorm_rstd"), outcomes


def test_rstd_hints_fire_on_their_mistake_and_stay_silent_on_the_others():
    import torch

    from triton_course.checks import CheckFailed, check

    torch.manual_seed(0)
    ns = _judge_namespace()
    ref = ns["reference_with_rstd"]

    def right(x, w, eps=1e-6):
        y, rstd = ref(x.double(), w.double(), eps)
        return y.to(x.dtype), rstd.float()

    def rms_saved(x, w, eps=1e-6):
        y, rstd = right(x, w, eps)
        return y, 1 / rstd

    def rstd_past_the_end(x, w, eps=1e-6):
        y, rstd = right(x, w, eps)
        out = torch.empty(rstd.numel(), dtype=torch.float32)      # guarded by the check: 3 stores land past it
        out.as_strided((rstd.numel() + 3,), (1,)).copy_(torch.cat([rstd, rstd[:3]]))
        return y, out

    def rstd_scaled(x, w, eps=1e-6):
        y, rstd = right(x, w, eps)
        return y, rstd * 1.01

    def y_scaled(x, w, eps=1e-6):
        y, rstd = right(x, w, eps)
        return y * 1.01, rstd

    phrases = {"rms": "rstd holds the rms", "mask": "Mask the rstd store"}
    args = (torch.randn(7, 64), torch.randn(64))
    for mistake, hint in ((rms_saved, "rms"), (rstd_past_the_end, "mask"), (rstd_scaled, None), (y_scaled, None)):
        atol, rtol = zip(*ns["tolerances_with_rstd"](torch.float32))
        with pytest.raises(CheckFailed) as info:
            check(mistake, list(args), ref, atol=atol, rtol=rtol, hints=ns["rstd_hints"], name="rmsnorm_with_rstd",
                  **ns["RSTD_OUTPUTS"])
        fired = {name for name, phrase in phrases.items() if phrase in str(info.value)}
        assert fired == ({hint} if hint else set()), (mistake.__name__, str(info.value))


# ---------------------------------------------------------------------------------------------------
# bfloat16, the bandwidth target, the chapter's length
# ---------------------------------------------------------------------------------------------------

def test_bfloat16_is_refused_under_the_interpreter_with_the_reason():
    import torch

    from grader.course import solution_notebook
    from grader.notebook_code import load_namespace
    from triton_course.inputs import BadInputError

    ns = load_namespace(solution_notebook(CHAPTER))
    b = dict(dtype=torch.bfloat16)
    for fn in (ns["rmsnorm"], ns["rmsnorm_with_rstd"]):
        with pytest.raises(BadInputError, match="bfloat16 skipped: Triton's interpreter"):
            fn(torch.randn(4, 8, **b), torch.randn(8, **b))


def test_bfloat16_tolerance_fits_one_rounding_and_catches_bfloat16_arithmetic():
    """One bfloat16 rounding of the output (2^-8 relative at most) passes; squares summed in bfloat16 fail."""
    import torch

    from triton_course.checks import CheckFailed, check

    torch.manual_seed(1)
    ns = _judge_namespace()
    x, w = torch.randn(16, 4096).bfloat16(), torch.randn(4096).bfloat16()
    atol, rtol = ns["tolerances"](torch.bfloat16)

    def rounded_once(x, w, eps=1e-6):
        return ns["reference"](x.double(), w.double(), eps).to(torch.bfloat16)

    def bfloat16_sum(x, w, eps=1e-6):
        acc = torch.zeros(x.shape[0], dtype=torch.bfloat16)
        for j in range(x.shape[1]):   # a running sum in bfloat16, as a kernel without the upcast keeps it
            acc = acc + x[:, j] * x[:, j]
        return (x.float() * torch.rsqrt(acc.float() / x.shape[1] + eps)[:, None] * w.float()).to(torch.bfloat16)

    check(rounded_once, [x, w], ns["reference"], atol=atol, rtol=rtol)
    with pytest.raises(CheckFailed, match="output elements are wrong"):
        check(bfloat16_sum, [x, w], ns["reference"], atol=atol, rtol=rtol)


def test_bandwidth_target_leaves_the_model_answer_a_margin_and_fails_twice_the_bytes():
    """The hidden bandwidth test asks for measure.py's TARGET_FRACTION of a same-size copy: at least 15% under what the
    reference and the one-row kernel reached on the H200 under the grader's protocol (90% left 3%, too thin for
    timing noise), and above the twice-the-bytes kernel's."""
    import importlib.util
    import json

    import nbformat

    from grader.course import solution_notebook
    from grader.execute import is_test

    nb = nbformat.read(solution_notebook(CHAPTER), as_version=4)
    cell = next(c.source for c in nb.cells if is_test(c)
                and c.metadata["nbgrader"]["grade_id"] == "test_rmsnorm_bandwidth")
    folder = ROOT / "solutions" / CHAPTER
    spec = importlib.util.spec_from_file_location("measure_06", folder / "measure.py")
    measure = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(measure)
    target = measure.TARGET_FRACTION
    assert f"fraction={target:.2f}," in cell and 'against="same_size_copy"' in cell
    check = json.loads((folder / "records" / f"{CHAPTER}.json").read_text())["bandwidth_check"]
    assert check["target_fraction"] == target
    reached = {k: check[k]["fraction_of_same_size_copy"] for k in ("reference", "one_row_per_program", "twice_the_bytes")}
    assert 1 - target / reached["reference"] >= 0.15 and 1 - target / reached["one_row_per_program"] >= 0.15
    assert reached["twice_the_bytes"] < target
    assert f"a margin of {1 - target / reached['reference']:.0%}" in cell
    for name, fraction in reached.items():   # the record's verdicts stand against this target
        assert check[name]["passes"] == (fraction >= target), name


# ---------------------------------------------------------------------------------------------------------------
# The launch rule: the hidden tests reach every path it takes on a GPU; its constants are the sweep's; ALIGN
# turns 2-byte loads into 16-byte ones
# ---------------------------------------------------------------------------------------------------------------

class _Recorder:
    """Stands in for a kernel: records each launch's grid, arguments and meta-parameters, then launches it."""

    def __init__(self, kernel):
        self.kernel, self.launches = kernel, []

    def __getitem__(self, grid):
        launch = self.kernel[grid]

        def run(*args, **meta):
            self.launches.append((grid, args, meta))
            return launch(*args, **meta)
        return run


def launch_paths(chapter: str, kernels: dict[str, tuple[int, int]], grade_ids: tuple[str, ...]) -> tuple[dict, set]:
    """Run the hidden test cells ``grade_ids`` of ``chapter``'s solution with each kernel of ``kernels`` ({name:
    (index of the rows argument, index of the row length)}) recorded; return ({kernel: set of paths taken}, the
    paths the launch rule can take on a GPU with the notebook's constants)."""
    import contextlib
    import io

    import nbformat

    from grader.course import solution_notebook
    from grader.notebook_code import load_namespace

    with contextlib.redirect_stdout(io.StringIO()):
        ns = load_namespace(solution_notebook(chapter))
    recorders = {name: _Recorder(ns[name]) for name in kernels}
    ns.update(recorders)
    for cell in nbformat.read(solution_notebook(chapter), as_version=4).cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") in grade_ids:
            exec(cell.source, ns)
    paths = {}
    for name, (rows_at, cols_at) in kernels.items():
        taken = set()
        for _grid, args, meta in recorders[name].launches:
            m, n, rows = args[rows_at], args[cols_at], meta["ROWS"]
            taken.add("several rows, ragged last program" if rows > 1 and m % rows else
                      "several rows" if rows > 1 else "one row")
            taken.add("masked tail" if n < meta["BLOCK_N"] else "full block")
            if rows > 1 and m % rows and n < meta["BLOCK_N"]:
                taken.add("ragged rows and masked tail at once")
            if "STREAM" in meta:
                taken.add(f"STREAM={bool(meta['STREAM'])}")
            if "ALIGN" in meta:
                taken.add("ALIGN=1" if meta["ALIGN"] == 1 else "ALIGN>1")
                taken.add("ALIGN>1 on a row that is not a multiple of 16" if meta["ALIGN"] > 1 and n % 16 else "")
        paths[name] = taken - {""}
    return paths, rule_paths(ns)


EVERY_PATH = {"one row", "several rows, ragged last program", "masked tail", "full block",
              "ragged rows and masked tail at once", "STREAM=True", "STREAM=False", "ALIGN=1", "ALIGN>1",
              "ALIGN>1 on a row that is not a multiple of 16"}


def rule_paths(ns: dict) -> set:
    """The paths of EVERY_PATH that the launch rule can take with the notebook's constants (rows of 1 to 65536
    elements of 2 or 4 bytes): cache hints only if some row is short enough, several rows only if some is."""
    paths = set(EVERY_PATH)
    if ns["STREAM_ROW_BYTES"] < 2:
        paths.discard("STREAM=True")
    if ns["STREAM_ROW_BYTES"] >= 65536 * 4:
        paths.discard("STREAM=False")
    if max(ns["TILE_BYTES"], ns["SHORT_TILE_BYTES"]) < 4:
        paths -= {"several rows, ragged last program", "ragged rows and masked tail at once"}
    return paths


def test_hidden_tests_reach_every_launch_path_the_rule_takes_on_a_gpu():
    """The launch rule stacks short rows (a ragged last program), streams them (cache hints) and promises the
    compiler an alignment: under the interpreter the hidden tests take every one of those paths, so a kernel
    wrong on one of them loses points here as it would on a GPU."""
    paths, possible = launch_paths(CHAPTER, {"rmsnorm_kernel": (3, 4), "rmsnorm_rstd_kernel": (4, 5)},
                                   ("test_rmsnorm_shapes", "test_rmsnorm_strided", "test_rmsnorm_fp16",
                                    "test_rmsnorm_eps", "test_rmsnorm_rstd"))
    assert possible >= EVERY_PATH - {"STREAM=True", "STREAM=False"}, possible
    assert paths["rmsnorm_kernel"] >= possible, possible - paths["rmsnorm_kernel"]
    assert paths["rmsnorm_rstd_kernel"] >= {"one row", "several rows, ragged last program", "masked tail",
                                            "ragged rows and masked tail at once"}, paths["rmsnorm_rstd_kernel"]


RULE_CONSTANTS = ("TILE_BYTES", "SHORT_TILE_BYTES", "BYTES_PER_THREAD", "MIN_WARPS", "STREAM_ROW_BYTES")


def notebook_rule_constants(chapter: str) -> dict:
    """The launch rule's constants as the solution notebook assigns them, or imports them from the course's helpers
    (chapter 06 takes its fitted values from triton_course.softmax); the notebook is read, not executed."""
    import ast
    import importlib

    import nbformat

    from grader.course import solution_notebook

    found = {}
    for cell in nbformat.read(solution_notebook(chapter), as_version=4).cells:
        if cell.cell_type != "code":
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("triton_course"):
                for alias in node.names:
                    if (alias.asname or alias.name) in RULE_CONSTANTS:
                        found[alias.asname or alias.name] = getattr(importlib.import_module(node.module), alias.name)
            elif isinstance(node, ast.Assign):
                targets = node.targets[0].elts if isinstance(node.targets[0], ast.Tuple) else node.targets
                values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
                for target, value in zip(targets, values):
                    if getattr(target, "id", None) in RULE_CONSTANTS:
                        found[target.id] = ast.literal_eval(value)
    return found


@pytest.mark.parametrize("chapter, kind, record", [("06_rmsnorm", "rmsnorm", "06_rmsnorm_gaps_sweep.json"),
                                                   ("08_fusion", "add_rmsnorm", "08_fusion_gaps_sweep.json")])
def test_launch_rule_constants_are_the_ones_the_h200_sweep_fitted(chapter, kind, record):
    path = ROOT / "solutions" / chapter / "records" / record
    constants = notebook_rule_constants(chapter)
    assert set(constants) == set(RULE_CONSTANTS), constants
    if not path.exists():
        pytest.skip(f"solutions/{chapter}/records/{record} is not recorded yet: run python lab/sweeps/norms_gaps.py")
    fit = json.loads(path.read_text())["fitted_rule"][kind]
    fitted = fit["best"]
    if "SHORT_TILE_BYTES" not in fitted["constants"]:
        # fitted before the rule had the term: the notebook must keep that rule (short rows tiled as the others)
        assert constants.pop("SHORT_TILE_BYTES") == constants["TILE_BYTES"], chapter
    if fitted["shapes"] >= 3:
        assert constants == fitted["constants"] and fitted["body"] == "early", (
            f"{chapter}: the sweep fitted {fitted['constants']} (weight loaded {fitted['body']}); the notebook has "
            f"{constants}")
    else:  # the sweep ran out of time after too few shapes to pick constants: the notebook's own must score as well
        now = fit["notebook_now"]
        assert now["constants"] == constants, (chapter, now["constants"], constants)
        assert now["worst_ratio_to_best_peer"] >= fitted["worst_ratio_to_best_peer"] - 0.02, (chapter, now, fitted)


_PTX_SCRIPT = r"""
import functools, json, linecache, math, re, sys
import nbformat, torch, triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

notebook, grade_id, kernel = sys.argv[1:4]
cell = next(c for c in nbformat.read(notebook, as_version=4).cells
            if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
linecache.cache["<solution>"] = (len(cell.source), None, cell.source.splitlines(True), "<solution>")
ns = {"functools": functools, "math": math, "torch": torch, "triton": triton, "tl": tl}
exec(compile(cell.source, "<solution>", "exec"), ns)
jit = ns[kernel]
names = jit.arg_names
ints = {"M", "N", "stride_x", "stride_out", "n_rows", "n_cols", "x_row_stride", "out_row_stride"}
signature = {a: ("i32" if a in ints else "fp32" if a == "eps" else "constexpr" if a.isupper() else "*fp16")
             for a in names}
# pointers 16-byte aligned and 32768 rows (multiples of 16, as Triton specialises them); N = 1000 is not
aligned = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(names) if a.endswith("_ptr") or a in ("M", "n_rows")}
ops = {}
for align in (1, 8):
    constants = {"BLOCK_N": 1024, "ROWS": 1, "STREAM": False, "ALIGN": align}
    compiled = triton.compile(ASTSource(jit, signature, constants, aligned), target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": 4})
    ops[align] = sorted(set(re.findall(r"\b(?:ld|st)\.global[\w.:]*", compiled.asm["ptx"])))
print(json.dumps(ops))
"""


@pytest.mark.parametrize("chapter, grade_id, kernel", [("05_softmax", "softmax", "softmax_kernel"),
                                                       ("06_rmsnorm", "rmsnorm", "rmsnorm_kernel"),
                                                       ("08_fusion", "fused", "add_rmsnorm_kernel")])
def test_align_turns_two_byte_loads_into_sixteen_byte_ones(chapter, grade_id, kernel):
    """Compiled for an H100/H200 (sm_90; no GPU needed, in a process without the interpreter), the reference kernel
    on rows of 1000 float16 moves 2 bytes per global load and store without ALIGN and 16 with ALIGN=8: what the
    appendix says and the sweep records on the GPU."""
    import os
    import subprocess
    import sys

    from grader.course import solution_notebook

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", _PTX_SCRIPT, str(solution_notebook(chapter)), grade_id, kernel],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ops = json.loads(proc.stdout.strip().splitlines()[-1])
    unaligned, aligned = ops["1"], ops["8"]
    assert any(op.startswith("ld.global") and op.endswith(".b16") for op in unaligned), ops
    assert any(op.startswith("st.global") and op.endswith(".b16") for op in unaligned), ops
    assert not any(op.endswith(".b16") for op in aligned), ops
    assert any(op.startswith("ld.global") and ".v4." in op for op in aligned), ops
    assert any(op.startswith("st.global") and ".v4." in op for op in aligned), ops


def test_the_cheat_that_spins_the_gpu_after_its_timed_loops_is_otherwise_correct(monkeypatch):
    """solutions/06_rmsnorm/submissions/attacks/bob_slows_the_judges_copy: twice the bytes, and a hook on its own timing harness
    that leaves a GPU kernel spinning after each timed loop, to slow the judge's same-size copy. Correct, so it
    keeps its correctness points; its hook is in place (on a GPU it would spin). Its bandwidth check is graded
    on the H200 (tests/gpu/records/gpu_trusted_grading_06_quiet.json); the judge's defences are tested in
    tests/test_gpu_lock.py and tests/test_judge.py."""
    import triton_course.timing_harness as harness

    monkeypatch.setattr(harness, "_serve_timing", harness._serve_timing)   # the hook is undone after the test
    outcomes = run_with_answers("06_rmsnorm", "bob_slows_the_judges_copy", kind="attacks")
    assert harness._serve_timing.__qualname__.endswith("_spin_after_each_timed_loop.<locals>.serve")
    assert set(outcomes) >= {"test_rmsnorm_shapes", "test_rmsnorm_rstd", "test_rmsnorm_bandwidth"}
    assert all(outcome == "passed" for outcome in outcomes.values()), outcomes


# ---------------------------------------------------------------------------------------------------------------
# Rows of several blocks on the CPU, and correctness at GPU sizes (graded on a GPU, not graded under the interpreter)
# ---------------------------------------------------------------------------------------------------------------

def _launch_config():
    """The solution's launch_config, its cell run on its own with the constants the notebook imports beforehand."""
    import triton_course.softmax as helpers

    ns = solution_cell(CHAPTER, "rmsnorm")
    ns.update({name: getattr(helpers, name) for name in (*RULE_CONSTANTS, "WARP_BYTES", "MAX_WARPS")})
    return ns["launch_config"]


def test_the_test_at_gpu_sizes_is_not_graded_under_the_interpreter():
    printed, score, _ = run_cell(CHAPTER, "test_rmsnorm_gpu_sizes")
    assert score == 0 and printed.startswith("NOT GRADED"), printed
    assert ends_with_at_gpu_sizes(CHAPTER, "test_rmsnorm_gpu_sizes")


def test_the_test_at_gpu_sizes_spans_many_programs_of_the_launch_rule_and_rows_of_many_blocks():
    """Both functions, launched by the solution's rule as on a GPU: the largest stack of short rows it ever takes
    (1024 rows of one float16 value) at several program counts, stacked rows at more, each with a ragged last
    program; more rows than a grid's second axis holds; rows wider than 64 KB in both dtypes and than 65536 values,
    of odd length (a ragged last block for any block a kernel may loop over); the bandwidth check's 4096 x 4096
    float16. All within a T4."""
    import torch

    source, _ = cell_source(CHAPTER, "test_rmsnorm_gpu_sizes")
    assert "check_all(rmsnorm, " in source and "check_all(rmsnorm_with_rstd, " in source
    _, _, ns = run_cell(CHAPTER, "test_rmsnorm_gpu_sizes")
    config = _launch_config()
    rows = lambda m, n, size: config(m, n, size)[1]  # noqa: E731
    launches = row_launches(ns["GPU_SIZES"], rows)
    largest = largest_rows_per_program(rows, 65536)
    assert largest == 1024
    assert not spans_many_programs(launches, largest), spans_many_programs(launches, largest)
    for size in (2, 4):
        assert any(x.element_size == size and x.n * size > 65536 and x.n % 2 for x in launches), size
    assert any(x.n > 65536 and x.n % 2 for x in launches)
    bandwidth, _ = cell_source(CHAPTER, "test_rmsnorm_bandwidth")
    assert "M = N = 4096" in bandwidth and "dtype=torch.float16" in bandwidth
    assert ((4096, 4096), torch.float16) in ns["GPU_SIZES"]


def test_a_norm_wrong_past_some_size_loses_the_point_at_gpu_sizes_and_is_told_the_size(monkeypatch):
    """With at_gpu_sizes told it runs on a GPU, the test's checks run at its sizes (a PyTorch stand-in for the kernel,
    outside the grader, which would refuse it): an rmsnorm right on the first 65535 rows and wrong past them loses
    the point, and the failure names the size (solutions/05_softmax/test_05_softmax.py shows a function right everywhere earning
    its point)."""
    import types

    import torch

    import triton_course.grading as grading
    from triton_course import integrity
    from triton_course.checks import CheckFailed

    monkeypatch.setattr(grading, "current", lambda: types.SimpleNamespace(interpreted=False))
    monkeypatch.setenv(integrity.REQUIRE_KERNEL_ENV, "0")

    def right(x, w, eps=1e-6):
        xd = x.double()
        return (xd * torch.rsqrt((xd * xd).mean(-1, keepdim=True) + eps) * w.double()).to(x.dtype)

    def wrong_past_the_grid_axis(x, w, eps=1e-6):
        out = torch.empty_like(x)            # the rows a grid's second axis cannot reach are never written
        out[:GRID_AXIS_LIMIT] = right(x[:GRID_AXIS_LIMIT], w, eps)
        return out

    with pytest.raises(CheckFailed, match=r"(?s)\(float32\[70001, 5\], float32\[5\]\):\n.*never written"):
        run_cell(CHAPTER, "test_rmsnorm_gpu_sizes", {"rmsnorm": wrong_past_the_grid_axis})


def test_a_sum_of_squares_of_the_last_block_only_loses_the_tests_of_wide_rows_here():
    """solutions/06_rmsnorm/submissions/attacks/lou_sum_of_squares_of_last_block caps its block at 64 KB of a row and keeps only the
    last block's squares: right on rows of one block, wrong on rows of several. Both functions lose their tests of
    such rows on the CPU, the float16 test by its row of 40000 values (80 KB); the tests of narrow rows pass, and the
    test at GPU sizes is not graded here."""

    got = run_with_answers(CHAPTER, "lou_sum_of_squares_of_last_block", kind="attacks")
    lost = {"test_rmsnorm_shapes": "rmsnorm(float32[2, 17000]", "test_rmsnorm_fp16": "rmsnorm(float16[2, 40000]",
            "test_rmsnorm_rstd": "rmsnorm_with_rstd(float32[2, 17000]"}
    for grade_id, call in lost.items():
        assert got[grade_id].startswith(f"CheckFailed: {call}"), got[grade_id]
    assert all(v == "passed" for k, v in got.items() if k not in lost), got
    assert {"test_rmsnorm_gpu_sizes", "test_rmsnorm_bandwidth", "test_rmsnorm_bf16"} <= set(got)


# ---------------------------------------------------------------------------------------------------------------
# The prose holds to its records; the student's cell holds the rule, not one GPU's constants
# ---------------------------------------------------------------------------------------------------------------

def _gbps(value: float) -> str:
    return f"{value:,.0f}"


def test_the_prose_quotes_what_the_records_hold():
    """The bandwidth check's sizes (a 33.5 MB input, 67 MB of traffic), the one-row kernel's margin, the copies of the
    same size, rstd's cost, and the sweep's figures the appendix quotes, each against its record."""
    import nbformat

    from grader.course import solution_notebook
    from tests.conftest import main_path

    main, appendix = ("\n".join(part) for part in main_path(CHAPTER))
    records = ROOT / "solutions" / CHAPTER / "records"
    r = json.loads((records / f"{CHAPTER}.json").read_text())
    m, n = r["bandwidth_check"]["m"], r["bandwidth_check"]["n"]
    assert f"({m * n * 2 / 1e6:.1f} MB; {2 * m * n * 2 / 1e6:.0f} MB of traffic with the output)" in main
    assert "67 MB)" not in main and "yardstick at 67 MB" not in appendix
    one_row = r["bandwidth_check"]["one_row_per_program"]
    assert one_row["passes"] and f"passes with a margin ({one_row['fraction_of_same_size_copy']:.0%})" in main
    copies = json.loads((records / f"{CHAPTER}_copy_limit.json").read_text())["sizes"]
    best = {k: max(v for name, v in s["fraction_of_copy"].items() if "copy" in name or name == "torch clone")
            for k, s in copies.items()}
    assert f"reaches {best['4096x4096']:.0%} of it" in main
    assert (f"top out at {best['4096x4096']:.0%} of the 1 GiB copy, {best['8192x4096']:.0%} with twice the rows and "
            f"{best['16384x4096']:.0%} with four times") in appendix
    assert f"took {r['rmsnorm_with_rstd']['time_ratio_with_rstd']:.3f}× the time of `rmsnorm`" in appendix
    sweep = json.loads((records / f"{CHAPTER}_launch_sweep.json").read_text())["widths"]
    r1 = {int(w): s["round1_gbps"] for w, s in sweep.items()}
    assert f"{_gbps(r1[16384]['tile rows1/w4'])} GB/s at N = 16384 against {_gbps(r1[16384]['tile rows1/w32'])}" in appendix
    best = {(w, kind): max(v for k, v in r1[w].items() if k.startswith(kind)) for w in r1
            for kind in ("cache hints", "tile", "persistent")}
    without = {w: max(best[w, "tile"], best[w, "persistent"]) for w in r1}   # the persistent kernel has no hints
    assert (f"beat the best without at 1024 halves ({_gbps(best[1024, 'cache hints'])} against "
            f"{_gbps(without[1024])} GB/s) and tied at 2048 ({_gbps(best[2048, 'cache hints'])} against "
            f"{_gbps(without[2048])})") in appendix
    assert best[1024, "cache hints"] / without[1024] > 1.03 > abs(best[2048, "cache hints"] / without[2048]) > 0.97
    # rstd's kernel: "w-late, 3.4% slower here" and "no ALIGN (no effect at N = 4096)", at 4096 x 4096 float16
    gaps = json.loads((records / f"{CHAPTER}_gaps_sweep.json").read_text())["shapes"]
    shape = next(g for g in gaps if g["kernel"] == "rmsnorm" and (g["rows"], g["width"], g["dtype"]) ==
                 (4096, 4096, "float16"))
    med = shape["round2_median_gbps"]
    assert f"(`w-late`, {med['rows1/w4'] / med['rows1/w4 w-late'] - 1:.1%} slower here)" in appendix
    assert abs(med["rows1/w4 no-align"] / med["rows1/w4"] - 1) < 0.01 and "(no effect at N = 4096)" in appendix
    assert all(abs(best[w, "cache hints"] / best[w, "tile"] - 1) < 0.02 for w in r1 if w >= 4096)
    assert "within 2% either way from 4096 on" in appendix
    assert f"({_gbps(best[16384, 'persistent'])} against {_gbps(best[16384, 'tile'])} GB/s at N = 16384)" in appendix
    # rstd is kept for chapter 10, which the course lists
    nb = nbformat.read(solution_notebook(CHAPTER), as_version=4)
    todo2 = next(c.source for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("## TODO 2"))
    assert "Chapter 10 (`10_rowwise_backward`) writes that backward kernel and reads this `rstd`." in todo2
    assert "10_rowwise_backward" in (ROOT / "course.toml").read_text()


def test_the_student_cell_holds_the_rule_but_no_constant_fitted_on_one_gpu():
    """The constants fitted on the H200 come from triton_course.softmax in a given cell; the student's TODO cell opens
    with the kernel, and the TODO states the rule they encode."""
    import nbformat

    student = nbformat.read(ROOT / "notebooks" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    cell = next(c.source for c in student.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "rmsnorm")
    for name in (*RULE_CONSTANTS, "WARP_BYTES", "MAX_WARPS", "H200"):
        assert name not in cell, name
    assert cell.lstrip().startswith("@triton.jit")
    todo = next(c.source for c in student.cells if c.cell_type == "markdown" and c.source.startswith("## TODO:"))
    assert "`launch_config` is optional: one row per program at 4 warps is correct. The reference's rule:" in todo
    assert _launch_config()(4096, 4096, 2) == (4096, 1, 4, 4096, False)
