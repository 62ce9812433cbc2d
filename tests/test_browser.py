"""A student's path, in the tools a student uses: JupyterLab in a real browser, and the setup cell.

* :func:`test_student_notebook_runs_in_jupyterlab` starts ``jupyter lab`` on this machine, opens the
  student notebook of chapter 03 (with the reference solution pasted into its TODO cell, the way a
  student would type it) in headless Chromium -- Debian's ``chromium`` package, driven by Playwright --
  runs every cell from JupyterLab's *Run* menu, and checks in the page that the self-check printed its
  ``ok`` lines, that no cell failed and that the bandwidth plot rendered. Screenshots land in
  ``test-artefacts/browser/`` (the GitHub workflow uploads that folder).
* :func:`test_chinese_notebook_renders_and_its_setup_cell_runs` opens a chapter of the Chinese edition
  (``notebooks/zh/``) the same way and checks that Chinese is drawn with a CJK font (not as empty boxes), that
  its math is typeset and its tables rendered, and that its setup cell runs and answers in Chinese.
* :func:`test_setup_cell_finds_the_helpers` runs :data:`triton_course.bootstrap.SETUP_CELL` in a fresh kernel
  started outside this checkout, with the course helpers reachable in each of the three ways the cell
  knows: installed, found by walking up from the notebook's folder, and cloned from GitHub as on Colab
  and ModelScope (the clone is pointed at a local copy of this checkout: no network is used).

The browser test never downloads a browser (``playwright install`` would, and fails without network):
it needs ``/usr/bin/chromium`` (override with ``COURSE_CHROMIUM``), which ``make test`` installs. A
missing browser is a failure, not a skip.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
import torch
from nbclient import NotebookClient

from grader.examples import apply_answers
from tests.conftest import ROOT
from triton_course.bootstrap import SETUP_CELL
from triton_course.device import Device
from triton_course.links import GITHUB_REPO
from triton_course.versions import check_versions

CHAPTER = "03_vector_add"
CJK = re.compile(r"[\u4e00-\u9fff]")
CHROMIUM = os.environ.get("COURSE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
ARTEFACTS = ROOT / "test-artefacts" / "browser"
RUN_TIMEOUT_S = 150  # the whole notebook takes ~10 s under the interpreter; JupyterLab adds its start-up

# JupyterLab settings for the test: every cell stays in the DOM (no virtual scrolling), no news, no update
# checks (there is no network), no announcement pop-up over the notebook.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                        "checkForUpdates": False},
}


# ---------------------------------------------------------------------------------------------------
# JupyterLab in headless Chromium
# ---------------------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _require_browser():
    """Playwright's sync API and the path of Debian's Chromium, or a failure that says how to get them."""
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.fail(f"The browser test needs Chromium at {CHROMIUM}, and it is missing. Install Debian's "
                    "package (`apt-get install chromium`; `make test` does it), or point COURSE_CHROMIUM "
                    "at a Chromium binary. Do not run `playwright install`: it downloads its own browser.",
                    pytrace=False)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        pytest.fail(f"The browser test needs Playwright ({exc}); it is pinned in requirements/*.txt.",
                    pytrace=False)
    return sync_playwright


def _cell_indices(nb: nbformat.NotebookNode) -> tuple[int, int, list[int]]:
    """(self-check cell, plot cell, code cells that have source) as indices into ``nb.cells``."""
    self_check = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id")
                      == "self_check")
    plot = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "plot_sweep(" in c.source)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip()]
    return self_check, plot, code


class JupyterLab:
    """``jupyter lab`` serving one folder on 127.0.0.1, with a token, settings of its own and a log."""

    def __init__(self, folder: Path, state: Path, log: Path):
        self.folder, self.port, self.token = folder, _free_port(), os.urandom(16).hex()
        settings = state / "settings"
        for name, values in LAB_SETTINGS.items():
            path = settings / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        env = {k: v for k, v in os.environ.items() if k not in ("MPLBACKEND", "JUPYTER_PATH")}
        env.update(JUPYTER_CONFIG_DIR=str(state / "config"), JUPYTER_RUNTIME_DIR=str(state / "runtime"),
                   IPYTHONDIR=str(state / "ipython"), PYTHONPATH=str(ROOT))  # the kernel draws inline PNGs
        self.log = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
             "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}", "--allow-root",
             f"--ServerApp.root_dir={folder}", f"--LabApp.user_settings_dir={settings}",
             f"--LabApp.workspaces_dir={state / 'workspaces'}", "--LabApp.news_url=",
             "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
            cwd=folder, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def api(self, path: str):
        url = f"http://127.0.0.1:{self.port}/api/{path}?token={self.token}"
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read())

    def wait_until_up(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.proc.returncode}; see {self.log.name}")
            try:
                self.api("status")
                return
            except OSError:
                time.sleep(0.3)
        raise TimeoutError(f"jupyter lab did not answer within {timeout:.0f} s; see {self.log.name}")

    def kernels_idle(self) -> bool:
        kernels = self.api("kernels")
        return bool(kernels) and all(k["execution_state"] == "idle" for k in kernels)

    def url(self, notebook: str) -> str:
        return f"http://127.0.0.1:{self.port}/lab/tree/{notebook}?token={self.token}"

    def stop(self) -> None:
        """Stop the server and the kernels it started (they share its process group)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        try:  # kernels left behind after the server went (they are in its process group)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.log.close()


# Wait in the page until nothing is queued and either every code cell that has source shows an execution
# count, or a cell failed (JupyterLab then drops the rest of the queue).
_ALL_RAN_JS = """(indices) => {
  const cells = document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell');
  if (cells.length === 0) return false;
  for (const c of cells) {
    const p = c.querySelector('.jp-InputPrompt');
    if (p && p.textContent.includes('*')) return false;
  }
  if (document.querySelector('.jp-Notebook [data-mime-type="application/vnd.jupyter.stderr"]')) return true;
  return indices.every(i => cells[i] && /\\[\\d+\\]/.test(cells[i].querySelector('.jp-InputPrompt').textContent));
}"""


@pytest.mark.browser
@pytest.mark.timeout(300)
def test_student_notebook_runs_in_jupyterlab(tmp_path):
    sync_playwright = _require_browser()
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    for old in ARTEFACTS.glob(f"{CHAPTER}-*"):
        old.unlink()

    # The student's notebook, named as handed out, with the reference solution typed into its TODO cell.
    work = tmp_path / "student"
    work.mkdir()
    nb = apply_answers(CHAPTER, {"add": None})
    nb_path = work / f"{CHAPTER}.ipynb"
    nbformat.write(nb, nb_path)
    self_check, plot, code_cells = _cell_indices(nb)

    with _lab_page(sync_playwright, work, tmp_path / "lab", CHAPTER) as (lab, page):
        _run_notebook_in_page(page, lab, nb_path.name, code_cells)
        _check_page(page, self_check, plot)
    saved = nbformat.read(nb_path, as_version=4)  # what the student would download and hand in

    errors = [(i, o.get("ename"), o.get("evalue")) for i, c in enumerate(saved.cells) if c.cell_type == "code"
              for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, f"the saved notebook holds error outputs: {errors}"
    ran = [i for i in code_cells if saved.cells[i].get("execution_count")]
    assert ran == code_cells, "the saved notebook should hold an execution count for every code cell"
    assert any("image/png" in o.get("data", {}) for o in saved.cells[plot].outputs), "the plot was not saved"


@contextlib.contextmanager
def _lab_page(sync_playwright, folder: Path, state: Path, artefact: str):
    """(JupyterLab serving ``folder``, a page of headless Chromium); the page's screenshot lands in
    ``ARTEFACTS/<artefact>-page.png`` and the server's log beside it, whatever happens; both are stopped after."""
    lab = JupyterLab(folder, state, ARTEFACTS / f"{artefact}-jupyterlab.log")
    try:
        lab.wait_until_up()
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                try:
                    yield lab, page
                finally:
                    page.screenshot(path=str(ARTEFACTS / f"{artefact}-page.png"))
            finally:
                browser.close()
    finally:
        lab.stop()


def _run_notebook_in_page(page, lab: JupyterLab, name: str, code_cells: list[int]) -> None:
    """Open the notebook, wait for its kernel, Run > Run All Cells, wait until all ran, save it."""
    page.goto(lab.url(name))
    page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell", timeout=90_000)
    _wait(lambda: lab.kernels_idle(), 60, "the notebook's kernel did not start and go idle")

    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()

    page.wait_for_function(_ALL_RAN_JS, arg=code_cells, timeout=RUN_TIMEOUT_S * 1000, polling=500)
    _wait(lambda: lab.kernels_idle(), 30, "the kernel stayed busy after every cell had run")

    page.locator(".jp-NotebookPanel .jp-Notebook").first.click(position={"x": 5, "y": 5})
    page.keyboard.press("Control+s")  # File > Save Notebook
    _wait(lambda: any(c.get("execution_count") for c in nbformat.read(lab.folder / name, 4).cells
                      if c.cell_type == "code"), 30, "the notebook was not saved after Ctrl+S")


def _check_page(page, self_check: int, plot: int) -> None:
    cells = page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell")

    check_cell = cells.nth(self_check)
    check_cell.screenshot(path=str(ARTEFACTS / f"{CHAPTER}-self-check.png"))

    failed = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    texts = failed.all_text_contents()
    errors = [t[-3000:] for t in texts if "Error" in t or "Traceback" in t]
    assert not errors, "a cell failed in JupyterLab:\n" + "\n".join(errors)
    assert not check_cell.locator("[data-mime-type='application/vnd.jupyter.stderr']").count(), texts
    check_lines = [ln for t in check_cell.locator(".jp-OutputArea-output").all_text_contents()
                   for ln in t.splitlines() if ln.strip()]
    assert check_lines and all(ln.startswith("ok  ") for ln in check_lines) and \
        sum(ln.startswith("ok  add(") for ln in check_lines) >= 3 and check_lines[-1].startswith("ok  every load"), \
        f"the self-check should print only its `ok  ...` lines (add's calls, then the masked loads): {check_lines}"

    plot_cell = cells.nth(plot)
    img = plot_cell.locator(".jp-OutputArea-output img")
    assert img.count() == 1, "the plot cell should show one image"
    plot_cell.screenshot(path=str(ARTEFACTS / f"{CHAPTER}-plot.png"))
    src, width = img.evaluate("i => [i.getAttribute('src'), i.naturalWidth]")
    assert src.startswith("data:image/png") and width > 100, f"plot image: {src[:40]!r}, {width} px wide"


def _wait(condition, timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except (OSError, ValueError, json.JSONDecodeError):
            pass
        time.sleep(0.5)
    raise TimeoutError(message)


# ---------------------------------------------------------------------------------------------------
# The setup cell in a fresh kernel, outside this checkout
# ---------------------------------------------------------------------------------------------------

#: Started as the kernel: hides the editable install of the course (and this checkout on sys.path), so
#: that ``import triton_course`` fails until the setup cell has found the helpers by itself.
_HIDDEN_KERNEL = '''\
import sys
root = {root!r}
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
sys.path_hooks[:] = [h for h in sys.path_hooks if "__editable__" not in getattr(h, "__module__", "")]
sys.path[:] = [p for p in sys.path if p.rstrip("/") != root]
sys.path_importer_cache.clear()
from ipykernel import kernelapp
kernelapp.launch_new_instance()
'''

_WHERE = textwrap.dedent("""\
    import importlib.util, sys
    spec = importlib.util.find_spec("triton_course")
    print("BEFORE", spec.origin if spec else None)
""")


def _tree_copy(dest: Path) -> None:
    """The files of this checkout a clone would hold (tracked and not ignored), as they are now."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file() and not rel.endswith(".ipynb"):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _git(*args: str, cwd: Path, env: dict[str, str]) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def _run_setup_cell(cwd: Path, env: dict[str, str], hidden: bool, state: Path) -> str:
    """Run a probe, SETUP_CELL and a report in a fresh kernel started in ``cwd`` with ``env``; return
    what they printed. The kernel is found in ``state`` (JUPYTER_PATH, set by the caller)."""
    kernels = state / "kernels" / "course-test"
    kernels.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    if hidden:
        launcher = state / "hidden_kernel.py"
        launcher.write_text(_HIDDEN_KERNEL.format(root=str(ROOT)))
        argv = [sys.executable, str(launcher), "-f", "{connection_file}"]
    (kernels / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "test", "language": "python"}))
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(_WHERE), nbformat.v4.new_code_cell(SETUP_CELL),
                nbformat.v4.new_code_cell('print("AFTER", triton_course.__file__, device.interpreted)')]
    client = NotebookClient(nb, timeout=180, kernel_name="course-test", resources={"metadata": {"path": str(cwd)}})
    client.execute(env=env)
    out = "".join(o.get("text", "") for c in nb.cells for o in c.outputs if o.get("output_type") == "stream")
    return out


@pytest.mark.parametrize("how", ["installed", "checkout", "clone"])
@pytest.mark.timeout(300)
def test_setup_cell_finds_the_helpers(how, tmp_path, monkeypatch):
    """SETUP_CELL, run where a student runs it, finds ``triton_course`` and prints the environment summary."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "TRITON_INTERPRET", "MPLBACKEND", "JUPYTER_PATH", "GIT_DIR")}
    home = tmp_path / "home"
    home.mkdir()
    env.update(HOME=str(home), IPYTHONDIR=str(tmp_path / "ipython"), GIT_CONFIG_NOSYSTEM="1",
               GIT_TERMINAL_PROMPT="0", GIT_ALLOW_PROTOCOL="file")  # git can reach no network
    state = tmp_path / "jupyter"
    monkeypatch.setenv("JUPYTER_PATH", str(state))  # where the test's kernel spec is found
    env["JUPYTER_RUNTIME_DIR"] = str(state / "runtime")
    # a stranger's `triton_course` on the path (many projects have one): the cell must not mistake it for ours
    decoy = tmp_path / "decoy"
    (decoy / "triton_course").mkdir(parents=True)
    (decoy / "triton_course" / "__init__.py").write_text("")

    if how == "installed":
        # a folder far from any checkout; the course is importable as installed (make install: pip install -e .)
        cwd = tmp_path / "anywhere"
        cwd.mkdir()
        out = _run_setup_cell(cwd, env, hidden=False, state=state)
        expect_root = ROOT
    elif how == "checkout":
        # the student cloned the course and opened notebooks/<id>/<id>.ipynb; nothing is installed
        checkout = tmp_path / "course"
        _tree_copy(checkout)
        cwd = checkout / "notebooks" / CHAPTER
        cwd.mkdir(parents=True, exist_ok=True)
        env["PYTHONPATH"] = str(decoy)
        out = _run_setup_cell(cwd, env, hidden=True, state=state)
        expect_root = checkout
    else:
        # Colab or ModelScope: a bare runtime in /content; the cell clones github.com/<repo> into $HOME,
        # here redirected to a local repository made from this checkout
        source = tmp_path / "source"
        _tree_copy(source)
        git_env = dict(env, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
                       GIT_COMMITTER_EMAIL="t@t")
        _git("init", "-q", "-b", "main", cwd=source, env=git_env)
        _git("add", "-A", cwd=source, env=git_env)
        _git("commit", "-q", "-m", "snapshot", cwd=source, env=git_env)
        _git("config", "--global", f"url.file://{source}.insteadOf", f"https://github.com/{GITHUB_REPO}",
             cwd=home, env=env)
        cwd = tmp_path / "content"
        cwd.mkdir()
        env["PYTHONPATH"] = str(decoy)
        out = _run_setup_cell(cwd, env, hidden=True, state=state)
        expect_root = home / GITHUB_REPO.split("/")[1]
        assert "Downloading the course helpers" in out, out
        assert (expect_root / ".git" / "shallow").exists(), "the clone should be shallow (--depth=1)"
        again = _run_setup_cell(cwd, env, hidden=True, state=state)  # a second chapter, same runtime
        assert "Downloading" not in again and f"AFTER {expect_root / 'utils' / '__init__.py'}" in again, again

    lines = out.splitlines()
    before = lines[0]
    if how == "installed":
        assert before.startswith("BEFORE ") and before != "BEFORE None", out
    else:
        assert before in ("BEFORE None", f"BEFORE {decoy / 'triton_course' / '__init__.py'}"), \
            f"the course helpers should be hidden before the setup cell runs: {before}"
    assert f"AFTER {expect_root / 'utils' / '__init__.py'} True" in out, out
    for row in ("device", "torch", "triton", "mode", "Triton interpreter (CPU)"):
        assert row in out, f"the environment summary lacks {row!r}:\n{out}"
    assert "NOTE: No CUDA GPU" in out, out


@pytest.mark.parametrize("platform", ["colab_t4", "modelscope_a10", "laptop_cpu", "gpu_forced_interpreter"])
def test_setup_summary_warns_about_known_limits(platform, monkeypatch):
    """What the setup cell prints on each platform a student uses: the known limits are named."""
    cuda = torch.device("cuda")
    device = {
        "colab_t4": Device(False, cuda, "Tesla T4", (7, 5), 40, 320.0, None),
        "modelscope_a10": Device(False, cuda, "NVIDIA A10", (8, 6), 72, 600.0, None),
        "laptop_cpu": Device(True, torch.device("cpu"), "CPU (x86_64)", None, None, None, None),
        "gpu_forced_interpreter": Device(True, torch.device("cpu"), "CPU (x86_64)", None, None, None, None),
    }[platform]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: platform == "gpu_forced_interpreter")
    notes = "\n".join(line for line in device.summary().splitlines() if line.startswith("NOTE: "))
    expected = {"colab_t4": ["without tensor cores", "bfloat16 is not available"],
                "modelscope_a10": [],
                "laptop_cpu": ["No CUDA GPU", "scaled down", "timings are skipped", "not graded"],
                "gpu_forced_interpreter": ["TRITON_INTERPRET=1", "Unset it"]}[platform]
    for phrase in expected:
        assert phrase in notes, f"{platform}: the summary should say {phrase!r}:\n{notes}"
    if not expected:
        assert not notes, f"{platform}: nothing to warn about, yet:\n{notes}"


# ---------------------------------------------------------------------------------------------------
# docs/students.md quotes what students see: keep the quotes true
# ---------------------------------------------------------------------------------------------------

def test_students_guide_quotes_the_setup_cell(monkeypatch):
    text = (ROOT / "docs" / "students.md").read_text()
    blocks = re.findall(r"```\n(device .*?)\n```", text, re.S)
    assert len(blocks) == 2, "docs/students.md should show the setup cell's output on a T4 and on a CPU"
    t4, cpu = blocks
    rows = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in t4.splitlines() if not line.startswith("NOTE"))
    monkeypatch.setattr(torch, "__version__", rows["torch"])
    monkeypatch.setattr("triton_course.device._triton_version", lambda: rows["triton"])
    monkeypatch.setattr("platform.python_version", lambda: rows["python"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    versions = check_versions({"torch": rows["torch"], "triton": rows["triton"]})
    device = Device(False, torch.device("cuda"), rows["device"], (7, 5), int(rows["SMs"]),
                    float(rows["peak memory bandwidth"].split()[0]), None, versions)
    assert device.summary() == t4
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cpu_device = Device(True, torch.device("cpu"), "CPU (x86_64)", None, None, None, None, [])
    for line in cpu.splitlines():
        if line.startswith(("NOTE", "mode")):
            assert line in cpu_device.summary(), f"docs/students.md quotes {line!r}, which the cell no longer prints"


def test_students_guide_quotes_the_self_check():
    guide = " ".join((ROOT / "docs" / "students.md").read_text().split())
    source = re.sub(r"\"\s*f?\"", "", " ".join((ROOT / "utils" / "checks.py").read_text().split()))
    for phrase in ("output elements are wrong (tolerance", "elements were never written (they still hold the "
                   "poison value)", "Out-of-bounds stores:", "Wrong values at", "expected a tensor (did you "
                   "forget `return out`?)", "is still a TODO stub", "Triton could not compile the kernel:",
                   "was modified", "at your code, line", "Hint: ", "returned without launching a Triton kernel",
                   "where the reference is finite"):
        assert phrase.replace("`", "") in guide.replace("`", ""), f"docs/students.md does not explain {phrase!r}"
        assert phrase in source, f"utils/checks.py no longer says {phrase!r}: update docs/students.md"


# ---------------------------------------------------------------------------------------------------
# The Chinese edition in JupyterLab
# ---------------------------------------------------------------------------------------------------

ZH_CHAPTER = "05_softmax"   # a chapter with math, tables and a code block in its prose

# Draws one character at the font of the page's prose, three times: two different CJK characters and an
# unassigned code point. Without a CJK font Chromium draws the same empty box ("tofu") for all three.
_GLYPHS_JS = """() => {
  const prose = document.querySelector('.jp-RenderedMarkdown p');
  const style = getComputedStyle(prose);
  const canvas = document.createElement('canvas');
  canvas.width = canvas.height = 64;
  const g = canvas.getContext('2d');
  g.font = `48px ${style.fontFamily}`;
  const draw = ch => { g.clearRect(0, 0, 64, 64); g.fillText(ch, 4, 52);
                       return Array.from(g.getImageData(0, 0, 64, 64).data).join(','); };
  return {family: style.fontFamily, zhong: draw('中'), ding: draw('丁'), tofu: draw('\\u0378')};
}"""


@pytest.mark.browser
@pytest.mark.timeout(300)
def test_chinese_notebook_renders_and_its_setup_cell_runs(tmp_path):
    """The Chinese notebook in JupyterLab: Chinese glyphs drawn (not boxes), math typeset, tables rendered,
    and its setup cell runs and answers in Chinese."""
    sync_playwright = _require_browser()
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    work = tmp_path / "student"
    work.mkdir()
    name = f"{ZH_CHAPTER}.ipynb"
    shutil.copy2(ROOT / "notebooks" / "zh" / ZH_CHAPTER / name, work / name)
    with _lab_page(sync_playwright, work, tmp_path / "lab", f"zh-{ZH_CHAPTER}") as (lab, page):
        page.goto(lab.url(name))
        page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell", timeout=90_000)
        _wait(lambda: lab.kernels_idle(), 60, "the notebook's kernel did not start and go idle")
        page.wait_for_selector(".jp-RenderedMarkdown mjx-container", timeout=60_000)
        glyphs = page.evaluate(_GLYPHS_JS)
        assert glyphs["zhong"] != glyphs["ding"] and glyphs["zhong"] != glyphs["tofu"], \
            f"Chinese is drawn as empty boxes in {glyphs['family']}: no CJK font (make browser installs one)"
        tables = page.locator(".jp-RenderedMarkdown table").count()
        assert tables >= 2, f"{tables} rendered tables (the prose's and the glossary's)"
        heading = page.locator(".jp-RenderedMarkdown h1").first.text_content()
        assert CJK.search(heading), f"the first heading is not Chinese: {heading!r}"

        setup = page.locator(".jp-NotebookPanel .jp-Notebook .jp-CodeCell").first
        setup.locator(".jp-InputArea-editor").click()
        page.keyboard.press("Control+Enter")   # run the selected cell
        page.wait_for_function(
            "c => /\\[\\d+\\]/.test(c.querySelector('.jp-InputPrompt').textContent)",
            arg=setup.element_handle(), timeout=RUN_TIMEOUT_S * 1000, polling=500)
        out = "\n".join(setup.locator(".jp-OutputArea-output").all_text_contents())
        assert "Traceback" not in out and "Error" not in out, out[-3000:]
        assert CJK.search(out) and "triton_course" in out, f"the setup cell's output: {out!r}"
