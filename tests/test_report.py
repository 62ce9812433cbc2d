"""The instructor's page, ``python -m grader report DIR --html FILE``.

* A graded class: real ``nbgrader autograde`` of three chapter-03 submissions: the reference answer,
  ``fay_torch_result`` (PyTorch computes the sum: flagged) and a student whose id and error message are
  HTML with script in them. The judge's timed protocol runs under Triton's interpreter here
  (``COURSE_JUDGE_TIME_ON_CPU=1``, as tests/test_judge.py does) on a copy of the solution whose bandwidth
  test uses 2^12 elements instead of 2^26 (the interpreter would take hours), so the speed figures
  travel the whole way: the judge's printed verdict and the notebook's ``course_grader.timing``, the
  record file (``performance``, kept by autograde as the record is saved), the page. Their values mean
  nothing on a CPU, and the page says so.
* The page opened in the browser test's Chromium (Debian's, driven by Playwright as
  tests/test_browser.py does): it loads with no console error, shows every section, every plot decodes,
  and the hostile id and message are text, not markup.
* Fast checks on records the grader made on the H200 (``tests/gpu/records/gpu_trusted_grading_04_06_08.json``):
  figures below target read from their messages, and the cheats flagged with their evidence.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import pytest

import grader.autograde as autograde
from grader.__main__ import main
import grader.course
from grader.course import example_submissions, solution_notebook
from grader.examples import apply_answers, parse_answers
from grader.judge_timing import TIME_ON_CPU_ENV
from grader.report import (GradedSubmission, failure_reasons, flags, load_class, parse_verdict, performance_of,
                           render)
from grader.results import GradeRecord, write_json
from tests.conftest import ROOT
from triton_course.checks import CheckFailed
from triton_course.grading import bandwidth_verdict, same_size_copy_verdict

A = "03_vector_add"
HOSTILE_ID = "m<img src=x onerror=alert(9)>"  # short: the grader's socket paths hold the student id
HOSTILE_TEXT = "<script>document.title='pwned-message'</script><b id='injected'>bold</b>"
HOSTILE_ADD = f'''def add(x, y):
    raise RuntimeError("{HOSTILE_TEXT}")
'''


def _answers(name: str):
    return parse_answers((example_submissions(A) / f"{name}.py").read_text())


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    solutions = tmp / "solutions"
    source = solutions / A / f"{A}.ipynb"
    source.parent.mkdir(parents=True)
    shutil.copy2(solution_notebook(A), source)
    nb = nbformat.read(source, as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_add_bandwidth")
    assert "N = 2**26" in cell.source and "2^26" in cell.source
    cell.source = cell.source.replace("N = 2**26", "N = 2**12").replace("2^26", "2^12")
    nbformat.write(nb, source)
    submitted = tmp / "submitted"
    for student, answers in (("ada_correct", _answers("ada_correct")), ("fay_torch_result", _answers("fay_torch_result")),
                             (HOSTILE_ID, {"add": HOSTILE_ADD})):
        dest = submitted / student / A / f"{A}.ipynb"
        dest.parent.mkdir(parents=True)
        nbformat.write(apply_answers(A, answers), dest)
    out = tmp / "graded"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(TIME_ON_CPU_ENV, "1")
        mp.setattr(grader.course, "SOLUTIONS", solutions)  # the template is generated from the shrunk copy
        records = autograde.grade_all(autograde.find_submissions(submitted, A), out, workers=2, feedback=False)
    write_json(records, out / "grades.json")  # as `python -m grader autograde` does
    return {"tmp": tmp, "out": out, "records": records}


@pytest.mark.notebook
@pytest.mark.xdist_group("report_class")  # the graded class is made once per run
def test_records_keep_the_measured_speed_and_the_report_flags_the_cheat(graded_class, capsys):
    out = graded_class["out"]
    saved = json.loads((out / "records" / A / "ada_correct.json").read_text())
    (perf,) = saved["performance"]
    assert perf["grade_id"] == "test_add_bandwidth" and perf["state"] == "measured" and perf["unit"] == "GB/s"
    assert perf["what"] == "add on 2^12 float32 elements" and perf["passed"] is True
    assert perf["rounds"] and perf["best_ms_per_call"] > 0  # the timed rounds of course_grader.timing
    html_path = graded_class["tmp"] / "report.html"
    csv_path = graded_class["tmp"] / "totals.csv"
    assert main(["report", str(out), "--html", str(html_path), "--csv", str(csv_path)]) == 0
    printed = capsys.readouterr().out
    assert "ada_correct" in printed and "1 flagged for review" in printed  # the text totals are kept
    assert "ada_correct" in csv_path.read_text()
    subs = load_class([out])
    found = {f.student: f for f in flags(subs)}
    assert set(found) == {"fay_torch_result"}  # a kernel that raises is wrong, not suspicious
    assert "work not done by the kernel" in found["fay_torch_result"].kinds
    assert any("computed with PyTorch" in e for e in found["fay_torch_result"].evidence)
    reasons = dict(failure_reasons(subs))
    assert any(HOSTILE_TEXT in line and students == [HOSTILE_ID] for (_, line), students in reasons.items())
    page = html_path.read_text()
    assert HOSTILE_TEXT not in page and "<script" not in page and HOSTILE_ID not in page
    assert "m&lt;img src=x onerror=alert(9)&gt;" in page
    assert "Measured under Triton's interpreter" in page


@pytest.mark.notebook
@pytest.mark.browser
@pytest.mark.timeout(300)
@pytest.mark.xdist_group("report_class")  # the graded class is made once per run
def test_report_page_in_chromium(graded_class):
    from tests.test_browser import ARTEFACTS, CHROMIUM, CHROMIUM_ARGS, _require_browser

    sync_playwright = _require_browser()
    html_path = graded_class["tmp"] / "report-browser.html"
    assert main(["report", str(graded_class["out"]), "--html", str(html_path)]) == 0
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 1000})
            problems: list[str] = []
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on("dialog", lambda d: (problems.append(f"a script ran: {d.type} {d.message}"), d.dismiss()))
            page.goto(html_path.as_uri())
            page.wait_for_load_state("load")
            try:
                for section in ("tests", "points", "speed", "flagged", "totals"):
                    assert page.locator(f"section#{section}").is_visible(), section
                    assert page.locator(f"section#{section} h2").inner_text().strip()
                images = page.evaluate("() => Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth, "
                                       "i.getAttribute('src').slice(0, 22)])")
                assert len(images) == 3, images  # pass rates, points, speed (one assignment)
                assert all(complete and width > 0 and src == "data:image/png;base64," for _, complete, width, src in images), \
                    images
                # the hostile id and message are shown as text, and nothing of them ran or became an element
                assert page.title() == "Grading report"
                assert page.evaluate("() => document.querySelectorAll('script, #injected, img[src=\"x\"]').length") == 0
                tests = page.locator("section#tests").inner_text()
                assert HOSTILE_ID in tests and HOSTILE_TEXT in tests  # why its tests failed, as text
                flagged = page.locator("section#flagged").inner_text()
                assert "fay_torch_result" in flagged and "computed with PyTorch" in flagged
                assert HOSTILE_ID in page.locator("section#totals").inner_text()
                speed = page.locator("section#speed").inner_text()
                assert "test_add_bandwidth" in speed and "GB/s" in speed and "interpreter" in speed
            finally:
                page.screenshot(path=str(ARTEFACTS / "grading-report.png"), full_page=True)
            assert not problems, problems
        finally:
            browser.close()


# ---------------------------------------------------------------------------------------------------
# Fast: verdict lines, records the grader made on the H200, what was not graded
# ---------------------------------------------------------------------------------------------------

def test_verdicts_are_read_as_the_grader_writes_them():
    passed = parse_verdict(bandwidth_verdict(3712.4, 0.75, 4267.0, "add on 2^26 float32 elements"))
    assert passed == {"what": "add on 2^26 float32 elements", "unit": "GB/s", "achieved": 3712.0, "target": 3200.0,
                      "ceiling": 4267.0, "fraction": 0.75, "passed": True}
    with pytest.raises(CheckFailed) as below:
        bandwidth_verdict(1316.2, 0.6, 4267.0, "rmsnorm on a 4096x4096 float16 input")
    failed = parse_verdict(f"CheckFailed: {below.value}")
    assert failed["achieved"] == 1316 and failed["target"] == 2560 and failed["passed"] is False
    # the matmul chapter's verdict (utils/matmul.py): TFLOP/s against torch timed in the same rounds
    tf = parse_verdict("matmul_relu at 4096x4096x4096: 512.3 TFLOP/s = 81% of torch relu(a @ b) (632.5 TFLOP/s); "
                       "target 70%: passed")
    assert tf["unit"] == "TFLOP/s" and tf["achieved"] == 512.3 and tf["target"] == pytest.approx(442.75)
    assert tf["baseline"] == "torch relu(a @ b)" and tf["passed"]
    assert parse_verdict("NOT GRADED: the bandwidth of add can only be measured on a CUDA GPU") is None


def test_a_speed_no_kernel_reaches_earns_nothing_and_is_flagged():
    """A timed loop at more than 1.5x the copy bandwidth did not do its work (outputs made before the timing):
    no points, and the report puts the submission under review with the verdict as evidence."""
    assert bandwidth_verdict(1.07 * 4267.0, 0.75, 4267.0, "add").endswith(": passed")  # the best reference's margin
    with pytest.raises(CheckFailed, match="faster than this GPU can move those bytes") as fast:
        bandwidth_verdict(9000.0, 0.75, 4267.0, "add on 2^26 float32 elements")
    with pytest.raises(CheckFailed, match="faster than this GPU can move those bytes"):
        same_size_copy_verdict(7000.0, 3900.0, 0.9, "rmsnorm on a 4096x4096 float16 input", ceiling=4267.0)
    # a same-size copy that ran slow in its round (measured on the H200 while another submission's work ran:
    # tests/gpu/records/gpu_class_throughput_course_relaunch_unfrozen.json) leaves an honest kernel plausible against the GPU's copy
    assert same_size_copy_verdict(3597.0, 1828.0, 0.9, "rmsnorm", ceiling=4285.0).endswith(": passed")
    message = f"CheckFailed: {fast.value}"
    assert parse_verdict(message)["passed"] is False
    graded = GradedSubmission("zed", A, [GradeRecord("zed", A, "test_add_bandwidth", 0, 2, "failed", message)])
    (flag,) = flags([graded])
    assert flag.kinds == ["implausible speed"] and "9,000 GB/s" in flag.evidence[0]
    relaunched = GradeRecord("zed", A, "test_add_ragged", 0, 2, "failed", "CheckFailed: add(float32[1], float32[1]) "
                             "returned a result that its Triton launches do not compute: ...")
    assert flags([GradedSubmission("zed", A, [relaunched])])[0].kinds == ["work not done by the kernel"]


def test_report_from_h200_records(tmp_path):
    """Records from tests/gpu/records/ (graded by the judge on the H200): speed below target from the messages,
    and the cheats flagged with the grader's evidence."""
    recorded = json.loads((ROOT / "tests" / "gpu" / "records" / "gpu_trusted_grading_04_06_08.json").read_text())
    out = tmp_path / "graded"
    out.mkdir()
    write_json([GradeRecord(**r) for r in recorded["records"]], out / "grades.json")
    subs = load_class([out])
    hugo = next(s for s in subs if s.student == "hugo_weight_second_kernel" and s.assignment == "06_rmsnorm")
    (perf,) = hugo.performance
    assert perf["achieved"] == 1316 and perf["target"] == 2560 and not perf["passed"]
    found = {(f.student, f.assignment): f for f in flags(subs)}
    gail = found[("gail_weight_in_torch", "06_rmsnorm")]
    assert "work not done by the kernel" in gail.kinds and any("aten.mul" in e for e in gail.evidence)
    assert ("ada_correct_01", "06_rmsnorm") not in found  # an honest submission is not flagged
    page = render(subs, [out])
    assert "1,316 GB/s" in page and "06_rmsnorm" in page and "gail_weight_in_torch" in page


def test_points_not_graded_are_stated():
    records = [GradeRecord("ann", A, "test_add_ragged", 2, 2, "passed", ""),
               GradeRecord("ann", A, "test_add_bandwidth", 0, 2, "not_graded",
                           "NOT GRADED: the bandwidth of add can only be measured on a CUDA GPU, and this run used "
                           "Triton's interpreter on the CPU.")]
    sub = GradedSubmission("ann", A, records, performance=[{"grade_id": "test_add_bandwidth", "state": "not_graded"}])
    page = render([sub], [Path("graded")])
    assert "Not graded on this machine" in page and "Not graded here" in page
    assert "not graded here" in page  # the bandwidth test's pass rate is not a 0%
    assert not flags([sub])


def test_no_script_can_come_from_a_record():
    evil = "</pre><script>alert(1)</script>"
    sub = GradedSubmission(evil, A, [GradeRecord(evil, A, "test_add_ragged", 0, 2, "error", evil)], notes=[evil])
    page = render([sub], [Path(evil)])
    assert "<script>" not in page and "&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_performance_of_never_stops_grading():
    """It runs as each record is saved: a notebook it cannot read gives [], never an exception."""
    assert performance_of(None) == [] and performance_of(b"{not json") == []
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("bandwidth_points(add, ...)")])
    nb.cells[0].metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": "test_add_bandwidth",
                                        "points": 2}
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text=bandwidth_verdict(
        3712.4, 0.75, 4267.0, "add on 2^26 float32 elements") + "\n")]
    nb.metadata["course_grader"] = {"timing": ["junk", {"what": "add on 2^26 float32 elements", "calls": 256,
                                                         "reported_ms": 25.6}]}
    (entry,) = performance_of(nbformat.writes(nb).encode())
    assert entry["achieved"] == 3712 and entry["best_ms_per_call"] == 0.1 and len(entry["rounds"]) == 1
