"""``python -m grader new-chapter ID TITLE``: a new chapter folder that already releases, grades and passes CI.

The folder ``solutions/<ID>/`` gets every part a chapter has (``grader.course`` lists them): a source notebook in
the course's shape (CONTRIBUTING.md) whose exercise is an elementwise ReLU, to be replaced by the chapter's own;
its tests; a correct and an untouched example submission; one attack (a result computed by PyTorch); and a
measuring script. ``course.toml`` gets the chapter's line. Then ``python -m grader config --apply`` writes its
links, setup cell and README row, and ``python -m grader release ID`` its student notebook. No GPU record is
needed: until one is measured the chapter says so, and nothing fails.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from triton_course.bootstrap import setup_cell
from triton_course.links import CONFIG, CONFIG_NAME, CourseConfig, badges, read_config

#: The exercise's function and kernel names, and its title words: what a maintainer replaces first.
_HEADER = """# {number} · {title}

{badges}

**Goals.** By the end of this notebook you can
1. write an elementwise Triton kernel with a masked last block;
2. count the bytes it must move and compare its GB/s with a copy's.
"""

_IMPORTS = """import torch
import triton
import triton.language as tl

from triton_course.bench import bandwidth_sweep
from triton_course.inputs import expect
from triton_course.plots import plot_sweep"""

_BUDGET = """## The traffic budget

ReLU reads each element once and writes it once: 2n elements of traffic for n elements, and one comparison
each. It is memory bound; its yardstick is the copy bandwidth."""

_JUDGE_DEFS = """# The float64 reference and the inputs, shared by the self-check below and by the grader's hidden tests.
from triton_course.checks import check_all, tolerance_for
from triton_course.static import check_masked_loads


def reference(x):
    return torch.relu(x)


def random_input(n, dtype=torch.float32):
    \"\"\"One random vector of ``n`` elements on this session's device.\"\"\"
    return (torch.randn(n, device=device.torch_device, dtype=dtype),)"""

_TODO = """## TODO: write the kernel and its launcher

`relu_kernel` computes `out[i] = max(x[i], 0)` for the block of program `tl.program_id(0)`, with a mask on the
last block. `relu` allocates the output, launches one program per block and returns the output."""

_SOLUTION = """BLOCK = 1024  # elements per program


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    ### BEGIN SOLUTION
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = idx < n_elements
    x = tl.load(x_ptr + idx, mask=inside)
    tl.store(out_ptr + idx, tl.maximum(x, 0.0), mask=inside)
    ### END SOLUTION


def relu(x: torch.Tensor) -> torch.Tensor:
    \"\"\"max(x, 0) elementwise for a contiguous float32 or float16 vector, by relu_kernel.\"\"\"
    expect("x", x)
    x = x.contiguous()
    out = torch.empty_like(x)
    ### BEGIN SOLUTION
    relu_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, out, x.numel(), BLOCK=BLOCK)
    ### END SOLUTION
    return out"""

_SELF_CHECK_MD = """## Self-check

It compares your `relu` with a float64 reference on sizes that end in a partial block, and reads your kernel's
loads for masks."""

_SELF_CHECK = """check_all(relu, [random_input(1000), random_input(3000, torch.float16)], reference, tolerances=tolerance_for)
check_masked_loads(relu_kernel, launched_by=relu)"""

_TEST_CORRECT = """### BEGIN HIDDEN TESTS
check_all(relu, [random_input(n) for n in (1, 31, 1023, 1024, 1025, 70001)], reference, tolerances=tolerance_for)
check_masked_loads(relu_kernel, launched_by=relu)
### END HIDDEN TESTS"""

_TEST_GPU_SIZES = """### BEGIN HIDDEN TESTS
# On a GPU: many blocks and a ragged last one; NOT GRADED (0 points) on the CPU.
from triton_course.grading import at_gpu_sizes

at_gpu_sizes(lambda: check_all(relu, (random_input(n) for n in (65537, 2**20 + 3, 2**24 + 1)), reference,
                               tolerances=tolerance_for),
             points=1, what="relu at 65,537 to 2^24 + 1 elements")
### END HIDDEN TESTS"""

_TEST_BANDWIDTH = """### BEGIN HIDDEN TESTS
from triton_course.grading import bandwidth_points

N = 2**26
bandwidth_points(relu, lambda: random_input(N), 2 * N * 4, fraction=0.7, points=1,
                 what="relu on 2^26 float32 elements", reference=reference, tolerances=tolerance_for)
### END HIDDEN TESTS"""

_BENCHMARK = """sizes = device.pick(gpu=[2**k for k in range(12, 27, 2)], cpu=[2**k for k in range(8, 13, 2)])
sweep = bandwidth_sweep({"Triton relu": relu, "torch.relu": torch.relu}, lambda n: random_input(n),
                        lambda n: 2 * n * 4, sizes, xlabel="elements (float32)")
print(sweep.table())
plot_sweep(sweep, "ReLU: bandwidth against size", peak_gbps=device.peak_gbps);"""

_TAKE_AWAY = """## What to take away

* One program per block, a mask on the last one.
* An elementwise kernel moves its bytes once: its best time is its bytes over the copy bandwidth."""

_TEST_FILE = '''"""Chapter {chapter}: the model answer earns every point a CPU can grade, the untouched notebook none, and the
attack of its corpus nothing."""

from __future__ import annotations

import pytest

from tests.conftest import run_with_answers

CHAPTER = "{chapter}"
GPU_ONLY = {{"test_relu_gpu_sizes", "test_relu_bandwidth"}}


def test_the_model_answer_passes_every_test_a_cpu_grades():
    outcomes = run_with_answers(CHAPTER, "ada_correct")
    assert all(o == "passed" for gid, o in outcomes.items() if gid not in GPU_ONLY), outcomes


@pytest.mark.parametrize("student, kind", [("ben_untouched", "examples"), ("fay_torch_result", "attacks")])
def test_no_kernel_earns_no_correctness_point(student, kind):
    outcomes = run_with_answers(CHAPTER, student, kind)
    assert outcomes["test_relu_correct"] != "passed", outcomes
'''

_EXAMPLES = {
    "ada_correct.py": "# The model answer.\n#%% relu from-solution\n",
    "ben_untouched.py": "# A notebook handed in as released: no answer written.\n",
}

_ATTACKS = {
    "fay_torch_result.py": ("# PyTorch computes the result and no kernel is launched: no correctness point.\n"
                            "#%% relu from-solution\n#%%- replace\n"
                            "    relu_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, out, x.numel(), BLOCK=BLOCK)\n"
                            "#%%- with\n    out.copy_(torch.relu(x))\n"),
}

_MEASURE = '''"""What `python tests/gpu/measure.py {chapter}` records on a GPU: the chapter's relu beside torch.relu."""

from __future__ import annotations

import torch

from triton_course.bench import copy_bandwidth, measure_gbps


def measure(ns: dict) -> dict:
    """GB/s of the notebook's ``relu`` and of ``torch.relu`` at 2^26 float32 elements, and the copy's."""
    n = 2**26
    inputs = lambda: (torch.randn(n, device="cuda"),)  # noqa: E731
    return {{"n": n, "relu_gbps": round(measure_gbps(ns["relu"], inputs, 8 * n), 1),
            "torch_gbps": round(measure_gbps(torch.relu, inputs, 8 * n), 1), "copy_gbps": round(copy_bandwidth(), 1)}}
'''


def _cell(kind: str, source: str, grade_id: str | None = None, *, solution: bool = False, points: int = 0):
    """A notebook cell; with ``grade_id``, nbgrader's metadata (locked unless it is a solution cell)."""
    cell = nbformat.v4.new_code_cell(source) if kind == "code" else nbformat.v4.new_markdown_cell(source)
    if grade_id is not None:
        meta = {"grade": points > 0, "grade_id": grade_id, "locked": not solution, "schema_version": 3,
                "solution": solution}
        if points:
            meta["points"] = points
        cell.metadata["nbgrader"] = meta
    return cell


def chapter_notebook(chapter: str, title: str, config: CourseConfig = CONFIG) -> nbformat.NotebookNode:
    """The template chapter's source notebook, with the links and setup cell of ``config``'s course."""
    cells = [_cell("markdown", _HEADER.format(number=chapter[:2], title=title, badges=badges(chapter, config)),
                   "header"),
             _cell("code", setup_cell(config), "setup"), _cell("code", _IMPORTS), _cell("markdown", _BUDGET),
             _cell("code", _JUDGE_DEFS, "judge_defs"), _cell("markdown", _TODO),
             _cell("code", _SOLUTION, "relu", solution=True), _cell("markdown", _SELF_CHECK_MD),
             _cell("code", _SELF_CHECK, "self_check"),
             _cell("code", _TEST_CORRECT, "test_relu_correct", points=2),
             _cell("code", _TEST_GPU_SIZES, "test_relu_gpu_sizes", points=1),
             _cell("markdown", "## Benchmark: GB/s against size, next to PyTorch"), _cell("code", _BENCHMARK),
             _cell("code", _TEST_BANDWIDTH, "test_relu_bandwidth", points=1), _cell("markdown", _TAKE_AWAY)]
    cells[4].metadata["tags"] = ["judge"]   # judge_defs: the grader's hidden tests see this cell's definitions
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata = {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}}
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:02d}"
    return nb


def register(course_toml: Path, chapter: str, title: str) -> None:
    """Add ``chapter = "title"`` as the last line of ``course.toml``'s ``[chapters]`` table."""
    text = course_toml.read_text()
    table = re.search(r"^\[chapters\]\n(?:(?!\[).*\n?)*", text, re.M)
    if table is None:
        raise ValueError(f"{course_toml} has no [chapters] table")
    body = table.group(0).rstrip("\n")
    line = f'{chapter} = "{title}"'
    text = text[:table.start()] + body + "\n" + line + "\n" + text[table.end():].lstrip("\n")
    course_toml.write_text(text if text.endswith("\n") else text + "\n")


def create(root: Path, chapter: str, title: str) -> list[Path]:
    """Write the chapter folder ``root/solutions/<chapter>/`` and register it; return the files written."""
    if not re.fullmatch(r"\d\d_[a-z][a-z0-9_]*", chapter):
        raise ValueError(f"a chapter id looks like 10_layer_norm (two digits, an underscore, lower case), not {chapter!r}")
    config = read_config(root / CONFIG_NAME)
    if chapter in config.chapters:
        raise ValueError(f"{chapter} is already a chapter of {root / CONFIG_NAME}")
    folder = root / "solutions" / chapter
    if folder.exists():
        raise ValueError(f"{folder} exists already")
    files = {folder / f"{chapter}.ipynb": None, folder / f"test_{chapter}.py": _TEST_FILE.format(chapter=chapter),
             folder / "measure.py": _MEASURE.format(chapter=chapter)}
    files |= {folder / "submissions" / "examples" / name: text for name, text in _EXAMPLES.items()}
    files |= {folder / "submissions" / "attacks" / name: text for name, text in _ATTACKS.items()}
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            nbformat.write(chapter_notebook(chapter, title, config), path)
        else:
            path.write_text(text)
    register(root / CONFIG_NAME, chapter, title)
    return sorted(files)
