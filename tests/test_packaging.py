"""The pins, the tested range, environment.yml and the install commands agree with each other; the two
wheels build, install and work as a new student or instructor meets them (nothing reaches the internet)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import tomllib
import zipfile
from pathlib import Path

import nbformat
import pytest
import yaml

from grader.course import example_submissions
from tests.conftest import CHAPTERS, ROOT
from triton_course.i18n import EDITIONS
from triton_course.links import read_config
from triton_course.versions import TESTED_RANGES, check_versions, repair_interpreter_scalars, version_tuple

CONFIG = read_config(ROOT / "course.toml")
#: Kept in the checkout's pins as exact versions (environment.yml pins them too); torch and triton take the range.
RANGED_IN_ENVIRONMENT_YML = ("torch", "triton")


def _pins(path):
    pins = {}
    for line in (ROOT / path).read_text().splitlines():
        line = line.split("#")[0].strip()
        m = re.match(r"^([A-Za-z0-9_.\-\[\]]+)==([^;\s]+)", line)
        if m:
            pins[m.group(1).split("[")[0].lower().replace("_", "-")] = m.group(2)
    return pins


def _project():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_pyproject_range_is_the_tested_range():
    deps = {re.split(r"[<>=; ]", d)[0]: d for d in _project()["dependencies"]}
    for pkg, (low, high) in TESTED_RANGES.items():
        assert f">={low},<{high}" in deps[pkg], f"pyproject.toml's {pkg} range differs from utils/versions.py"


def test_every_pin_file_pins_inside_the_tested_range():
    for name in ("requirements/cpu.txt", "requirements/gpu.txt"):
        pins = _pins(name)
        verdicts = check_versions({k: v for k, v in pins.items() if k in TESTED_RANGES})
        assert len(verdicts) == len(TESTED_RANGES), f"{name} must pin {', '.join(TESTED_RANGES)}"
        assert all(v.tested for v in verdicts), [v.describe() for v in verdicts]


def test_gpu_pins_are_colabs_pairing():
    pins = _pins("requirements/gpu.txt")
    assert (pins["torch"], pins["triton"]) == ("2.11.0", "3.6.0")


def test_cpu_and_gpu_pins_agree_on_everything_but_torch_and_triton():
    cpu, gpu = _pins("requirements/cpu.txt"), _pins("requirements/gpu.txt")
    shared = (set(cpu) & set(gpu)) - {"torch", "triton", "numpy"}  # numpy: the pairing each triton is tested with
    assert shared, "the two pin files should share the course's other pins"
    assert {k: cpu[k] for k in shared} == {k: gpu[k] for k in shared}


def test_environment_yml_agrees_with_the_pins():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert any(str(d).startswith("python=3.11") for d in env["dependencies"])
    listed = {}
    for line in pip_section:
        m = re.match(r"^([A-Za-z0-9_.\-]+)\s*(.*)$", line)
        if m and not line.startswith("-"):
            listed[m.group(1).lower()] = m.group(2).replace(" ", "")
    cpu = _pins("requirements/cpu.txt")
    for pkg, spec in listed.items():
        if pkg in RANGED_IN_ENVIRONMENT_YML:
            low, high = TESTED_RANGES[pkg]
            assert spec == f">={low},<{high}", f"environment.yml: {pkg}{spec} is not the tested range"
        else:
            assert spec == f"=={cpu[pkg]}", f"environment.yml pins {pkg}{spec}, requirements/cpu.txt {cpu[pkg]}"
    assert {"nbgrader", "nbval", "matplotlib", "torch", "triton"} <= set(listed)


def test_version_tuple_ignores_local_tags():
    assert version_tuple("2.11.0+cu130") == (2, 11, 0)
    assert version_tuple("3.6.0") < version_tuple("3.10")


def test_an_untested_version_is_named():
    (v,) = check_versions({"triton": "3.2.0"})
    assert not v.tested and "outside the tested range" in v.describe()


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in readme and "make demo" in readme
    assert re.search(r"^\s*(exec\s+)?make test\b", ci, re.M), ".ci/run must run the README's test command"
    workflow = (ROOT / ".github" / "workflows" / "ci.yml").read_text()
    assert "make test" in workflow


def test_each_pin_file_pairs_triton_and_numpy_as_make_test_range_does():
    """Each pin file's (triton, numpy) is the newest pairing (the whole suite) or one `make test-range` runs."""
    checked = set(re.findall(r"(\d+\.\d+\.\d+):(\d+\.\d+\.\d+)", (ROOT / "Makefile").read_text()))
    for name in ("requirements/cpu.txt", "requirements/gpu.txt"):
        pins = _pins(name)
        pair = (pins["triton"], pins["numpy"])
        assert name.endswith("cpu.txt") or pair in checked, f"{name} pins triton {pair[0]} with numpy {pair[1]}, " \
            f"a pairing `make test-range` does not run ({sorted(checked)})"
    lows = {p: min((version_tuple(v) for v in vs), default=None) for p, vs in
            (("triton", [t for t, _ in checked]), ("numpy", [n for _, n in checked]))}
    for package in ("triton", "numpy"):
        assert lows[package][:2] == version_tuple(TESTED_RANGES[package][0])[:2], \
            f"the range check's oldest {package} is not the tested range's lowest ({TESTED_RANGES[package][0]})"


def test_the_pinned_pytest_lets_xdist_keep_a_group_on_one_worker(request):
    """`make test` runs `pytest -n 2 --dist loadgroup`: pytest-xdist puts the tests of one xdist_group (the
    graded safety class, the Ray cluster) on one worker by appending `@group` to each test's `_nodeid`. pytest
    9.2 derives a test's id from a structured id instead, so the suffix is lost, the groups are spread over
    both workers and their module fixtures (a class graded by real autograde, a cluster) run twice."""
    item = request.node
    saved = item._nodeid
    try:
        item._nodeid = f"{saved}@probe"
        assert item.nodeid == f"{saved}@probe", "this pytest ignores the group xdist gives a test's id"
    finally:
        item._nodeid = saved


# ---------------------------------------------------------------------------------------------------
# The range check: run in the whole suite (newest Triton) and by `make test-range` (`-k range_check`)
# in a virtual environment with the oldest Triton of the range and the NumPy it meets.
# ---------------------------------------------------------------------------------------------------

def test_range_check_a_loop_bounded_by_a_kernel_argument_runs_under_the_interpreter():
    """Triton 3.5/3.6 with NumPy >= 2.4 broke `for k in range(0, K, BLOCK)` under the interpreter: the helpers
    repair it (triton_course.versions.repair_interpreter_scalars) when they choose the interpreter."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def row_sums(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        acc = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n, BLOCK):
            acc += tl.load(x_ptr + start + offs, mask=start + offs < n, other=0.0)
        tl.store(out_ptr + offs, acc)

    x = torch.arange(100, dtype=torch.float32)
    out = torch.empty(16)
    row_sums[(1,)](x, out, 100, BLOCK=16)
    assert float(out.sum()) == float(x.sum())
    assert repair_interpreter_scalars() is False, "a second repair must do nothing"


def test_range_check_device_function_calls_reuse_the_launchs_interpreted_language(monkeypatch, tmp_path):
    """Triton's interpreter re-binds every builtin of triton.language at each call of one @triton.jit function
    from another (tl.max and tl.sum are such functions too); the helpers skip the repeat inside a launch
    (triton_course.versions.skip_repeated_interpreter_patching). So the binding done per launch does not grow
    with the number of calls (it did: chapter 09's hidden tests took 70 s instead of 44), and the results stay
    right."""
    import importlib.util

    import torch
    from triton.runtime import interpreter

    from triton_course.versions import skip_repeated_interpreter_patching

    (tmp_path / "softmax_rounds.py").write_text(
        "import triton\nimport triton.language as tl\n\n\n"
        "@triton.jit\ndef shifted(x):\n    return x - tl.max(x, axis=0)\n\n\n"
        "@triton.jit\ndef softmax_rounds(x_ptr, out_ptr, ROUNDS: tl.constexpr, BLOCK: tl.constexpr):\n"
        "    offs = tl.arange(0, BLOCK)\n    x = tl.load(x_ptr + offs)\n"
        "    for _ in tl.static_range(ROUNDS):\n        e = tl.exp(shifted(x))\n        x = e / tl.sum(e, axis=0)\n"
        "    tl.store(out_ptr + offs, x)\n")
    spec = importlib.util.spec_from_file_location("softmax_rounds", tmp_path / "softmax_rounds.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    softmax_rounds = module.softmax_rounds

    skip_repeated_interpreter_patching()  # installed already where the helpers chose the interpreter
    bound = []
    real = interpreter._patch_builtin
    monkeypatch.setattr(interpreter, "_patch_builtin", lambda *a, **k: (bound.append(a[0]), real(*a, **k))[1])
    x = torch.randn(16)
    per_launch = {}
    for rounds in (2, 1, 8):   # the first launch binds less in Triton 3.5/3.6: tl.max meets tl only later
        bound.clear()
        out = torch.empty(16)
        softmax_rounds[(2,)](x, out, ROUNDS=rounds, BLOCK=16)
        per_launch[rounds] = len(bound)
        want = x
        for _ in range(rounds):
            want = torch.softmax(want, 0)
        torch.testing.assert_close(out, want)
    assert per_launch[8] == per_launch[1] <= 12, per_launch
    assert skip_repeated_interpreter_patching() is False, "a second install must do nothing"


def test_range_check_the_interpreter_skips_overflow_checks_it_would_discard(monkeypatch):
    """Under the interpreter, every 32-bit integer +, - and * was also checked for overflow in 64 bits, and the
    verdict dropped (device_assert does nothing without debug). The helpers skip those checks
    (triton_course.versions.skip_discarded_overflow_checks): the results are the same (32-bit wrap-around,
    as on a GPU built without debug), no comparison is computed, and with debug on the checks stay and report."""
    import dataclasses

    import torch
    import triton
    import triton.language as tl
    from triton.runtime import interpreter

    from triton_course.versions import skip_discarded_overflow_checks

    builder = interpreter.interpreter_builder
    assert builder.options.sanitize_overflow is False and builder.options.debug is False, builder.options
    assert skip_discarded_overflow_checks() is False, "a second install must do nothing"

    @triton.jit
    def scaled_index(out_ptr, scale, N: tl.constexpr):
        i = tl.arange(0, N)
        tl.store(out_ptr + i, i * scale + 1)

    compares = []
    real = builder.create_icmpSLE
    monkeypatch.setattr(builder, "create_icmpSLE", lambda *args: compares.append(1) or real(*args))

    def run(options):
        monkeypatch.setattr(builder, "options", options)
        compares.clear()
        out = torch.zeros(4, dtype=torch.int32)
        scaled_index[(1,)](out, 2**30, N=4)
        return out.tolist(), len(compares)

    wrapped = [1, 2**30 + 1, -2**31 + 1, -2**30 + 1]   # i * 2^30 + 1 in 32 bits
    skipped, checked = run(builder.options), run(dataclasses.replace(builder.options, sanitize_overflow=True))
    assert skipped == (wrapped, 0), skipped
    assert checked[0] == wrapped and checked[1] >= 2, checked   # computed, then thrown away

    debug = dataclasses.replace(builder.options, sanitize_overflow=True, debug=True)
    monkeypatch.setattr(builder, "options", debug)
    assert skip_discarded_overflow_checks() is False and builder.options is debug, "with debug the checks are read"
    with pytest.raises(Exception, match="overflow"):
        scaled_index[(1,)](torch.zeros(4, dtype=torch.int32), 2**30, N=4)


@pytest.mark.notebook
@pytest.mark.skipif(os.environ.get("COURSE_RANGE_CHECK") != "1",
                    reason="run by `make test-range` (packaging/check_range.py); with the newest Triton the chapters' "
                           "own tests grade the reference answers")
@pytest.mark.parametrize("chapter", [c for c in CHAPTERS if (example_submissions(c) / "ada_correct.py").exists()])
def test_range_check_the_reference_passes_every_hidden_test(chapter):
    """Every chapter's reference answer against its hidden tests, through the judge, with the Triton and
    NumPy of this environment."""
    import numpy
    import triton

    from tests.conftest import run_with_answers

    outcomes = run_with_answers(chapter, "ada_correct")
    failed = {k: v for k, v in outcomes.items() if v != "passed"}
    assert outcomes and not failed, f"triton {triton.__version__}, numpy {numpy.__version__}: {failed}"


# ---------------------------------------------------------------------------------------------------
# The wheels, as a new user meets them: built with `python -m build`, installed into fresh virtual
# environments outside the checkout. The environments get torch, triton, Jupyter... from this one
# through a .pth file naming its site-packages, where the checkout's editable install has its own name
# (<student>-dev) and its finder is inactive, so that pip and Python see no course package but the
# wheels. pip reads no configuration (PIP_CONFIG_FILE=/dev/null) and git may clone only local paths:
# nothing reaches the internet.
# ---------------------------------------------------------------------------------------------------

SELF_CHECK_RUNNER = textwrap.dedent('''\
    import sys, nbformat
    from nbclient import NotebookClient
    nb = nbformat.read(sys.argv[1], as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3").execute()
    print("\\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs))
''')


def _offline_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV", "COURSE_"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONNOUSERSITE="1",
               HOME=str(home), GIT_ALLOW_PROTOCOL="file", GIT_TERMINAL_PROMPT="0", MPLBACKEND="Agg",
               JUPYTER_PLATFORM_DIRS="1", PATH=os.environ.get("PATH", ""), **extra)
    return env


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    """Both wheels, built by `python -m build` from this checkout (no isolation: no download of setuptools)."""
    out = tmp_path_factory.mktemp("dist")
    for kind in ("student", "instructor"):
        _run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", str(out),
              str(ROOT / "packaging" / kind)])
    found = {kind: next(out.glob(f"{name.replace('-', '_')}-{CONFIG.version}-py3-none-any.whl"))
             for kind, name in (("student", CONFIG.student_package), ("instructor", CONFIG.instructor_package))}
    return found


@pytest.fixture(scope="module")
def dependencies() -> Path:
    """This environment's site-packages, to be seen by the fresh ones through a .pth file. Only an editable
    install of the checkout lies there (as `<name>-dev`, its finder never runs from a .pth), never a course
    package under the wheels' names: pip would think it installed."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    for name in (CONFIG.student_package, CONFIG.instructor_package):
        stale = list(purelib.glob(f"{name.replace('-', '_')}-*.dist-info"))
        assert not stale, f"{stale[0]} is installed in {purelib}: `pip uninstall {name}` (make install does)"
    return purelib


def _fresh_venv(where: Path, dependencies: Path) -> Path:
    """A virtual environment seeing ``dependencies`` (pip among them); returns its python. Without a pip of its
    own: the venv's bundled setuptools would shadow the newer one torch requires."""
    _run([sys.executable, "-m", "venv", "--without-pip", str(where)])
    python = where / "bin" / "python"
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    (Path(purelib) / "course_dependencies.pth").write_text(f"{dependencies}\n")
    # the dependencies' console scripts (nbgrader runs `alembic`), as pip would have written them for this venv
    ours = Path(sys.executable).parent
    for script in ours.iterdir():
        target = where / "bin" / script.name
        if target.exists() or not script.is_file() or script.is_symlink():
            continue
        with script.open("rb") as f:
            first = f.readline()
        if first.startswith(b"#!") and first.strip().endswith(str(ours / "python").encode()):
            target.write_bytes(f"#!{python}\n".encode() + script.read_bytes().split(b"\n", 1)[1])
            target.chmod(0o755)
    return python


def _notebook_to_first_self_check(python: Path, folder: Path, chapter: str = "03_vector_add") -> Path:
    """The chapter's student notebook as the installed wheel ships it, its answer cells filled with the
    reference answer, cut after its first self-check, written into ``folder``."""
    from grader.examples import apply_answers, parse_answers

    shipped = _run([str(python), "-c", "import importlib.util, sys; "
                    f"print(importlib.util.find_spec({CONFIG.import_name!r}).submodule_search_locations[0])"],
                   env=_offline_env(folder), cwd=folder).stdout.strip()
    nb = nbformat.read(Path(shipped) / "notebooks" / chapter / f"{chapter}.ipynb", as_version=4)
    answered = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in apply_answers(
        chapter, parse_answers((example_submissions(chapter) / "ada_correct.py").read_text())).cells}
    cells = []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            cell.source = answered[meta["grade_id"]]
        cells.append(cell)
        if cell.cell_type == "code" and "self_check" in meta.get("grade_id", ""):
            break
    else:
        raise AssertionError(f"{chapter} has no self-check cell")
    cells.append(nbformat.v4.new_code_cell(f"import sys, {CONFIG.import_name} as course\n"
                                           "print('EVIDENCE', sys.executable, course.__file__)"))
    nb.cells = cells
    path = folder / f"{chapter}.ipynb"
    nbformat.write(nb, path)
    return path


def _run_notebook(python: Path, notebook: Path, env: dict[str, str], *, succeeds: bool = True) -> str:
    """Execute ``notebook`` in a Jupyter kernel of ``python`` (nbclient), from its folder; its outputs as text."""
    runner = notebook.parent / "run_notebook.py"
    runner.write_text(SELF_CHECK_RUNNER)
    proc = subprocess.run([str(python), str(runner), str(notebook)], capture_output=True, text=True,
                          cwd=notebook.parent, env=env, timeout=900)
    out = proc.stdout + proc.stderr
    assert (proc.returncode == 0) == succeeds, out[-4000:]
    return out


def test_the_student_wheel_holds_helpers_and_student_notebooks_only(wheels):
    names = zipfile.ZipFile(wheels["student"]).namelist()
    package = CONFIG.import_name
    assert f"{package}/__init__.py" in names and f"{package}/course.toml" in names
    notebooks = [n for n in names if n.endswith(".ipynb")]
    assert len(notebooks) == len(list((ROOT / "notebooks").rglob("*.ipynb"))) == len(EDITIONS) * len(CHAPTERS)
    # both editions, and the compiled catalogue of the helpers' messages of each translated one
    assert {f"{package}/notebooks/{c}/{c}.ipynb" for c in CHAPTERS} | \
        {f"{package}/notebooks/zh/{c}/{c}.ipynb" for c in CHAPTERS} == set(notebooks)
    assert f"{package}/locale/zh_CN/LC_MESSAGES/triton_course.mo" in names
    assert not [n for n in names if n.startswith(("grader/", "solutions/", "tests/", "lab/"))]
    # nothing else of a chapter's folder: its tests, answer files, measuring script, records
    chapter_files = {p.name for c in CHAPTERS for p in (ROOT / "solutions" / c).rglob("*")
                     if p.is_file() and p.suffix != ".ipynb" and p.name != "README.md"}
    assert chapter_files and not [n for n in names if n.rsplit("/", 1)[-1] in chapter_files], \
        [n for n in names if n.rsplit("/", 1)[-1] in chapter_files]
    for name in notebooks:
        text = zipfile.ZipFile(wheels["student"]).read(name).decode()
        assert "### BEGIN HIDDEN TESTS" not in text and "### BEGIN SOLUTION" not in text, name
        assert f"{package!r}, {CONFIG.version!r}" in text, f"{name} does not serve version {CONFIG.version}"
    metadata = zipfile.ZipFile(wheels["student"]).read(
        next(n for n in names if n.endswith("METADATA"))).decode()
    assert f"Version: {CONFIG.version}" in metadata
    declared = {re.split(r"[<>=;]", line.split(": ", 1)[1])[0]: line for line in metadata.splitlines()
                if line.startswith("Requires-Dist: ")}
    for pkg, (low, high) in TESTED_RANGES.items():
        assert f">={low}" in declared[pkg] and f"<{high}" in declared[pkg], declared[pkg]


def test_the_instructor_wheel_holds_the_grader_and_needs_the_same_student_version(wheels):
    names = zipfile.ZipFile(wheels["instructor"]).namelist()
    assert "grader/__main__.py" in names and "grader/nbgrader_config.py" in names
    assert not [n for n in names if n.startswith((f"{CONFIG.import_name}/", "solutions/", "tests/"))]
    metadata = zipfile.ZipFile(wheels["instructor"]).read(
        next(n for n in names if n.endswith("METADATA"))).decode()
    assert f"Requires-Dist: {CONFIG.student_package}=={CONFIG.version}" in metadata
    assert "Requires-Dist: nbgrader" in metadata


def test_the_build_refuses_student_notebooks_of_another_version(tmp_path):
    """A checkout whose notebooks serve another version than course.toml's is not packaged."""
    shutil.copytree(ROOT / "packaging", tmp_path / "packaging", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("course.toml", "pyproject.toml"):
        shutil.copy2(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "utils", tmp_path / "utils",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    toml = tmp_path / "course.toml"
    toml.write_text(toml.read_text().replace(f'version = "{CONFIG.version}"', 'version = "9.9.9"'))
    proc = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir",
                           str(tmp_path / "dist"), str(tmp_path / "packaging" / "student")],
                          capture_output=True, text=True)
    assert proc.returncode != 0
    assert "serves version 0" in proc.stdout + proc.stderr and "course.toml says 9.9.9" in proc.stdout + proc.stderr
    assert "python -m grader config --apply" in proc.stdout + proc.stderr


def test_a_new_student_with_the_wheel_installed_runs_a_chapter_outside_any_checkout(wheels, dependencies, tmp_path):
    python = _fresh_venv(tmp_path / "venv", dependencies)
    _run([str(python), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheels["student"].parent),
          f"{CONFIG.student_package}=={CONFIG.version}"], env=_offline_env(tmp_path))  # its dependencies: present
    work = tmp_path / "work"
    work.mkdir()
    out = _run_notebook(python, _notebook_to_first_self_check(python, work), _offline_env(tmp_path))
    assert f"Course helpers {CONFIG.import_name} {CONFIG.version}: the installed copy" in out, out[-3000:]
    assert f"EVIDENCE {python}" in out and str(tmp_path / "venv") in out.split("EVIDENCE", 1)[1], out[-3000:]
    assert re.search(r"^ok\s+add", out, re.M), f"the self-check did not pass:\n{out[-3000:]}"


def test_without_the_package_the_setup_cell_installs_it_from_the_configured_index(wheels, dependencies, tmp_path):
    """A local package index (file://) stands for PyPI or a mirror; the cell's pip finds the wheel there. A
    second venv, with no index at all, gets the one-line message naming the command to run."""
    index = tmp_path / "index" / "simple"
    project = index / CONFIG.student_package
    project.mkdir(parents=True)
    shutil.copy2(wheels["student"], project / wheels["student"].name)
    (project / "index.html").write_text(f'<a href="{wheels["student"].name}">{wheels["student"].name}</a>\n')
    (index / "index.html").write_text(f'<a href="{CONFIG.student_package}/">{CONFIG.student_package}</a>\n')
    python = _fresh_venv(tmp_path / "venv", dependencies)
    work = tmp_path / "work"
    work.mkdir()
    env = _offline_env(tmp_path, PIP_INDEX_URL=index.as_uri())
    # the package is not installed yet: the setup cell of the checkout's student notebook (the one the wheel ships)
    nb = nbformat.read(ROOT / "notebooks" / "03_vector_add" / "03_vector_add.ipynb", as_version=4)
    setup = next(c for c in nb.cells if c.cell_type == "code")
    nb.cells = [setup, nbformat.v4.new_code_cell(f"import sys, {CONFIG.import_name} as course\n"
                                                 "print('EVIDENCE', sys.executable, course.__file__)")]
    nbformat.write(nb, work / "setup_only.ipynb")
    out = _run_notebook(python, work / "setup_only.ipynb", env)
    assert f"Course helpers {CONFIG.import_name} {CONFIG.version}: pip install " \
           f"{CONFIG.student_package}=={CONFIG.version}" in out, out[-3000:]
    assert str(tmp_path / "venv") in out.split("EVIDENCE", 1)[-1], out[-3000:]
    # now the chapter's own notebook, from the wheel just installed, to its first self-check
    notebook = _notebook_to_first_self_check(python, work)
    out = _run_notebook(python, notebook, env)
    assert "the installed copy" in out and re.search(r"^ok\s+add", out, re.M), out[-3000:]

    # no index, no reachable repository: one message that says what to run; a stale partial clone is cleared
    bare = _fresh_venv(tmp_path / "bare", dependencies)
    home = tmp_path / "bare-home"
    (home / f"{CONFIG.clone_folder}.partial").mkdir(parents=True)
    out = _run_notebook(bare, work / "setup_only.ipynb",
                        _offline_env(home, PIP_INDEX_URL=(tmp_path / "empty").as_uri(), PIP_RETRIES="0"),
                        succeeds=False)
    assert f"pip install {CONFIG.student_package}=={CONFIG.version}" in out and CONFIG.mirror in out, out[-3000:]
    assert "Could not install or download the course helpers" in out, out[-3000:]
    assert not (home / CONFIG.clone_folder).exists() and not (home / f"{CONFIG.clone_folder}.partial").exists()


@pytest.mark.notebook   # a real class graded in sandboxes, from the installed wheel
def test_an_instructor_installs_the_grader_wheel_and_grades_the_example_class(wheels, dependencies, tmp_path):
    """The instructor wheel in a fresh venv, run in a course folder holding only solutions/ and three
    example submissions of chapter 03: `python -m grader demo` releases, grades, and the grades are right."""
    python = _fresh_venv(tmp_path / "venv", dependencies)
    _run([str(python), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheels["student"].parent),
          f"{CONFIG.instructor_package}=={CONFIG.version}"], env=_offline_env(tmp_path))
    course = tmp_path / "course"
    chapter = "03_vector_add"
    examples = course / "solutions" / chapter / "submissions" / "examples"
    examples.mkdir(parents=True)
    shutil.copy2(ROOT / "solutions" / chapter / f"{chapter}.ipynb", course / "solutions" / chapter)
    for student in ("ada_correct", "ben_untouched", "cleo_no_mask"):
        shutil.copy2(example_submissions(chapter) / f"{student}.py", examples)
    proc = subprocess.run([str(python), "-m", "grader", "demo", "--assignment", chapter, "--out", str(tmp_path / "out"),
                           "--workers", "2"], capture_output=True, text=True, cwd=course, env=_offline_env(tmp_path),
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    grader_file = _run([str(python), "-c", "import grader; print(grader.__file__)"], cwd=course,
                       env=_offline_env(tmp_path)).stdout
    assert str(tmp_path / "venv") in grader_file, "the demo must run the installed grader, not the checkout's"
    grades = json.loads((tmp_path / "out" / "grades.json").read_text())
    totals: dict[str, list[float]] = {}
    for record in grades:
        points = totals.setdefault(record["student"], [0.0, 0.0])
        points[0] += record["points"]
        points[1] += record["max_points"]
    assert set(totals) == {"ada_correct", "ben_untouched", "cleo_no_mask"}
    assert totals["ada_correct"][0] > 0 and totals["ben_untouched"][0] == 0
    assert totals["cleo_no_mask"][0] < totals["ada_correct"][0], totals  # no mask: the ragged sizes fail
    assert (course / "notebooks" / chapter / f"{chapter}.ipynb").exists(), "demo releases into the course folder"


# ---------------------------------------------------------------------------------------------------
# One import name for the helpers, everywhere
# ---------------------------------------------------------------------------------------------------

def test_nothing_imports_the_helpers_by_their_folder_name():
    """The helpers live in utils/ and import as course.toml's import_name only: code that imported them as
    ``utils`` would fail in the student wheel, or load a second copy of them beside the first."""
    spec = importlib.util.spec_from_file_location("course_packaging", ROOT / "packaging" / "course_packaging.py")
    packaging = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(packaging)
    sources = [p for pattern in ("grader/**/*.py", "utils/**/*.py", "tests/**/*.py", "lab/**/*.py",
                                 "solutions/**/*.ipynb", "notebooks/**/*.ipynb", "packaging/**/*.py")
               for p in ROOT.glob(pattern) if "__pycache__" not in p.parts and p != Path(__file__).resolve()]
    assert len(sources) > 50
    offenders = [str(p.relative_to(ROOT)) for p in sources if packaging.OLD_IMPORT.search(p.read_text())]
    assert offenders == []
    assert packaging.OLD_IMPORT.search('x = 1\nfrom utils.checks import CheckFailed\n')
    assert packaging.OLD_IMPORT.search('{"source": ["import utils\\n"]}')
    assert not packaging.OLD_IMPORT.search("import torch.utils.data\nfrom my_utils import x\n")


def test_a_grader_that_still_imports_utils_is_refused_by_name(tmp_path):
    """Staging the instructor package stops at a grader module that imports the helpers by their folder name,
    naming the file and the import name to use (it once failed there with a NameError instead)."""
    spec = importlib.util.spec_from_file_location("course_packaging", ROOT / "packaging" / "course_packaging.py")
    packaging = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(packaging)
    root = tmp_path / "course"
    shutil.copytree(ROOT / "grader", root / "grader", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("course.toml", "nbgrader_config.py", "pyproject.toml"):
        shutil.copy2(ROOT / name, root / name)
    (root / "grader" / "stale.py").write_text("from utils.checks import CheckFailed\n")
    with pytest.raises(packaging.PackagingError, match=r"stale\.py.*import them as 'triton_course'"):
        packaging.stage_instructor(root, tmp_path / "stage")
