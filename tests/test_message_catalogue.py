"""The helpers speak the notebook's language: the Chinese catalogue is complete and current, a self-check's report,
its hints, an input error and a speed check's line come out in Chinese under ``set_language("zh_CN")`` with the
same figures as in English, and in English, byte for byte, again after ``set_language("en")``; so do the checks that
chapters 01, 02 and 08 write in the notebook itself (their judge and self-check cells). The last tests keep it so:
every message a student-facing module or one of those cells raises goes through ``_()``, and every ``Hint`` written
with a literal message, in ``utils/`` or in a solution notebook, and every ``_("...")`` and ``N_("...")`` of a
solution notebook's code cells is extracted into the catalogue."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import nbformat
import pytest
import torch
import triton
import triton.language as tl

import triton_course  # noqa: F401  -- turns the interpreter on before the kernels below are defined
from grader.message_catalogues import _python_of, catalogue_problems, extract, hint_messages, notebook_messages
from grader.notebook_code import exec_cell
from tests.conftest import ROOT, chapter_tests, judge_defs, solution_cell
from triton_course.checks import CheckFailed, check
from triton_course.i18n import current_language, set_language, translations
from triton_course.inputs import BadInputError, expect

CJK = re.compile(r"[\u4e00-\u9fff]")
#: Numbers as the reports write them: counts, sizes, tolerances (1e-06), values.
NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?")
#: Indices as the reports write them: [500], [0, 3] (not the shapes of a call's inputs, float32[1000]).
INDEX = re.compile(r"(?<![\w\]])\[\d+(?:, \d+)*\]")


@pytest.fixture
def language():
    """Set the helpers' language with ``language(code)``; back to the default (English) afterwards, whatever
    happened."""
    try:
        yield set_language
    finally:
        set_language(None)


def test_the_chinese_catalogue_is_complete_current_and_compiled():
    """Every message of utils/ and every literal Hint message of the notebooks is translated, none is fuzzy, each
    translation keeps its {placeholders}, none is left over, and the .mo is the compiled .po."""
    problems = [p for p in catalogue_problems() if p.startswith("utils/locale")]
    assert not problems, "\n".join(problems)


# --- a real self-check, in both languages --------------------------------------------------------------------

@triton.jit
def _first_half_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """x + y, but only for the first half of the elements: the rest of the output is never written."""
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = idx < n // 2
    tl.store(out_ptr + idx, tl.load(x_ptr + idx, mask=ok) + tl.load(y_ptr + idx, mask=ok), mask=ok)


def add_half(x, y):
    out = torch.empty_like(x)
    _first_half_kernel[(triton.cdiv(x.numel(), 128),)](x, y, out, x.numel(), BLOCK=128)
    return out


def _add_reference(x, y):
    return x + y


def _report(fn=add_half, n=1000, hints=()) -> str:
    args = (torch.arange(n, dtype=torch.float32), torch.ones(n, dtype=torch.float32))
    with pytest.raises(CheckFailed) as info:
        check(fn, args, _add_reference, atol=1e-6, rtol=1e-5, hints=hints, require_kernel=False)
    return str(info.value)


ENGLISH = ("add_half(float32[1000], float32[1000]):\n"
           "500 of 1000 output elements are wrong (tolerance |got - expected| <= 1e-06 + 1e-05*|expected|).\n"
           "500 elements were never written (they still hold the poison value): [500]..[999]")


def test_a_self_check_failure_is_reported_in_chinese_with_the_same_figures_and_in_english_again(language):
    english = _report()
    assert english == ENGLISH
    language("zh_CN")
    assert current_language() == "zh_CN"
    chinese = _report()
    assert CJK.search(chinese), chinese
    assert "never written" not in chinese and "output elements are wrong" not in chinese, chinese
    assert Counter(NUMBER.findall(chinese)) == Counter(NUMBER.findall(english)), (chinese, english)
    assert INDEX.findall(chinese) == INDEX.findall(english) == ["[500]", "[999]"], chinese
    assert chinese.startswith("add_half(float32[1000], float32[1000])"), chinese
    language("en")
    assert _report() == ENGLISH


def test_the_table_of_wrong_values_keeps_its_columns_in_chinese(language):
    """Chinese headers take two columns a character: the headers still end where their numbers end."""
    from triton_course.columns import width

    english = _report(_launch_plus_one)
    language("zh_CN")
    chinese = _report(_launch_plus_one)

    for text in (english, chinese):
        lines = text.splitlines()
        header = next(i for i, line in enumerate(lines) if line.startswith("  ") and "[" not in line)
        first_row = lines[header + 1]
        assert width(lines[header]) == width(first_row), (lines[header], first_row)
    assert "期望值" in chinese and "实际值" in chinese, chinese


@triton.jit
def _plus_one_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = idx < n
    tl.store(out_ptr + idx, tl.load(x_ptr + idx, mask=ok) + tl.load(y_ptr + idx, mask=ok) + 1, mask=ok)


def _launch_plus_one(x, y):
    out = torch.empty_like(x)
    _plus_one_kernel[(triton.cdiv(x.numel(), 128),)](x, y, out, x.numel(), BLOCK=128)
    return out


def test_a_notebook_hint_written_as_a_literal_comes_out_translated_when_its_symptom_shows(language):
    """Chapter 03's hints, as its judge_defs cell defines them (literal English messages, no marking): the hint for
    programs that stop short of the end fires on a kernel that writes the first half, in Chinese; the others stay
    silent in both languages."""
    hints = judge_defs("03_vector_add")["hints"]
    stops_short = next(h for h in hints if "stop short of the end" in h.message)
    others = [h for h in hints if h is not stops_short]
    assert ("solutions/03_vector_add/03_vector_add.ipynb", stops_short.message) in hint_messages()
    chinese_hint = translations("zh_CN").gettext(stops_short.message)
    assert chinese_hint != stops_short.message and CJK.search(chinese_hint)

    english = _report(n=3000, hints=hints)
    assert english.endswith("\nHint: " + stops_short.message), english
    language("zh_CN")
    chinese = _report(n=3000, hints=hints)
    assert chinese.endswith("\n提示：" + chinese_hint), chinese
    assert stops_short.message not in chinese
    for other in others:
        assert translations("zh_CN").gettext(other.message) not in chinese and other.message not in english


# --- the checks a chapter writes in its notebook, in both languages ---------------------------------------------

#: Chapters that check their first answers with code of the notebook itself (judge and self-check cells), not only
#: with the helpers' checks.
NOTEBOOK_CHECKS = ("01_gpu_model", "02_benchmarking", "08_fusion")


def _notebook_check(chapter: str, judge: str, self_check: str, **answers) -> tuple[str, dict]:
    """Run the chapter's judge cell, then its self-check cell with ``answers`` (the student's functions, some
    wrong), as the notebook does; return the CheckFailed's message and the namespace."""
    ns = {"torch": torch, "device": triton_course.current()}
    exec_cell(solution_cell(chapter, judge), f"<{chapter} {judge}>", ns)
    ns.update(answers)
    with pytest.raises(CheckFailed) as info:
        exec_cell(solution_cell(chapter, self_check), f"<{chapter} {self_check}>", ns)
    return str(info.value), ns


def _same_figures_in_chinese(english: str, chinese: str, english_words: tuple[str, ...]) -> None:
    assert CJK.search(chinese), chinese
    for words in english_words:
        assert words not in chinese, (words, chinese)
    assert Counter(NUMBER.findall(chinese)) == Counter(NUMBER.findall(english)), (chinese, english)


def test_chapter_01s_check_values_reports_in_chinese_with_the_same_figures(language, capsys):
    """Chapter 01's check_values (its judge_defs cell) with a wrong occupancy: the value, why, and the hint that
    names the mistake; a missing ValueError; and the self-check's "ok" lines, in both languages."""
    mistaken = chapter_tests("01_gpu_model")._mistaken_occupancy

    def wrong(**answers):
        return _notebook_check("01_gpu_model", "judge_defs", "self_check_occupancy", **answers)[0]

    english = wrong(occupancy=mistaken(whole_file=True))
    assert english == (
        "occupancy(64, 48) returned 0.65625, expected 0.625.\n"
        "Why: 1,536 registers per warp: 10 warps per quarter, 40 in all, 20 blocks of 2 warps.\n"
        "Hint: each of the 4 schedulers has its own quarter of the register file (16,384 registers), and a warp's "
        "registers come from one quarter: divide the file by 4 before dividing by a warp's registers.")
    unchecked = wrong(occupancy=mistaken())          # the right rules, without the given lines that refuse
    assert unchecked == (
        "occupancy(0, 32) raised ZeroDivisionError instead of raising ValueError.\nWhy: keep the given first lines "
        "(threads 1..1024, registers 0..255, shared memory >= 0) and lim = sm_limits(gpu), which refuses an unknown "
        "GPU.")
    language("zh_CN")
    chinese = wrong(occupancy=mistaken(whole_file=True))
    _same_figures_in_chinese(english, chinese, ("returned", "expected", "Why:", "Hint:", "registers per warp",
                                                "schedulers"))
    assert chinese.startswith("occupancy(64, 48) ") and "\n原因：" in chinese and "\n提示：" in chinese, chinese
    chinese_unchecked = wrong(occupancy=mistaken())
    _same_figures_in_chinese(unchecked, chinese_unchecked, ("instead of", "Why:", "keep the given"))
    assert "ZeroDivisionError" in chinese_unchecked and "ValueError" in chinese_unchecked, chinese_unchecked

    def waves(num_blocks, num_sms, blocks_per_sm=1):
        if min(num_blocks, num_sms, blocks_per_sm) < 1:
            raise ValueError("need >= 1")
        return -(-num_blocks // (num_sms * blocks_per_sm))

    def last_wave_utilization(num_blocks, num_sms, blocks_per_sm=1):
        slots = num_sms * blocks_per_sm
        return (num_blocks - (waves(num_blocks, num_sms, blocks_per_sm) - 1) * slots) / slots

    ns = judge_defs("01_gpu_model") | {"waves": waves, "last_wave_utilization": last_wave_utilization}
    capsys.readouterr()
    exec_cell(solution_cell("01_gpu_model", "self_check_waves"), "<01 self_check_waves>", ns)
    lines = capsys.readouterr().out.splitlines()
    assert all(line.startswith("ok  ") for line in lines) and CJK.search(lines[-1]), lines
    language("en")
    assert wrong(occupancy=mistaken(whole_file=True)) == english and wrong(occupancy=mistaken()) == unchecked


def test_chapter_02s_benchmark_checks_report_in_chinese_with_the_same_figures(language):
    """Chapter 02's self-check (check_benchmark, and check_ms of its judge_defs cell) with a benchmark that times
    the warm-up calls as its trials: the count it got, the count expected and the hint, in both languages."""
    def one_loop(fn, warmup=1, trials=3, return_mode="median"):   # the warm-up calls are the timed calls
        for _call in range(max(warmup, trials)):
            fn()
        return 1.0

    def wrong():
        message, ns = _notebook_check("02_benchmarking", "judge_defs", "self_check_benchmark", benchmark=one_loop)
        with pytest.raises(CheckFailed) as slow:
            ns["check_ms"](250.0, 19.9, 21.0, "benchmark(fn, warmup=3, trials=2)",
                           [(250.0, ns["HINT_WARMUP"]), (40.0, ns["HINT_TOTAL"])], 20.0)
        return message, str(slow.value)

    english = wrong()
    assert english == ("benchmark(fn, warmup=1, trials=3) called fn 3 times; expected 4.\n"
                       "Hint: warm-up calls and timed calls are separate loops.",
                       "benchmark(fn, warmup=3, trials=2) returned 250 ms; expected 19.9 to 21 ms.\n"
                       "Hint: time only the calls after the warm-up loop.")
    language("zh_CN")
    chinese = wrong()
    for en, zh in zip(english, chinese):
        _same_figures_in_chinese(en, zh, ("called fn", "returned", "expected", "Hint:", "warm-up"))
        assert zh.startswith("benchmark(fn, warmup=") and "\n提示：" in zh, zh
    language("en")
    assert wrong() == english


def test_chapter_08s_same_reports_in_chinese_with_the_same_figures(language):
    """Chapter 08's same() (its judge_traffic cell) under the traffic self-check: a wrong byte count with its
    hint, and a count that is not a Python int, in both languages."""
    def wrong():
        return tuple(_notebook_check("08_fusion", "judge_traffic", "self_check_traffic", softmax_bytes=answer)[0]
                     for answer in (lambda M, N, e, fused: 4 * M * N * e, lambda M, N, e, fused: 2.0 * M * N * e))

    english = wrong()
    assert english == ("softmax_bytes(4, 8, 4, fused=True) = 512, expected 256.\n"
                       "Hint: a fused softmax reads x once and writes out once.",
                       "softmax_bytes(4, 8, 4, fused=True) returned float 256.0; return a plain Python int")
    language("zh_CN")
    chinese = wrong()
    for en, zh in zip(english, chinese):
        _same_figures_in_chinese(en, zh, ("expected", "Hint:", "returned", "reads x once", "plain Python int"))
        assert zh.startswith("softmax_bytes(4, 8, 4, fused=True) "), zh
    assert "\n提示：" in chinese[0] and "float 256.0" in chinese[1], chinese
    language("en")
    assert wrong() == english


@pytest.mark.parametrize("chapter", NOTEBOOK_CHECKS)
def test_every_message_a_chapters_own_check_raises_goes_through_the_catalogue(chapter):
    """The judge and self-check cells of a chapter that checks with code of its own raise no English written in
    place (the same guard as for the helpers' modules)."""
    import nbformat

    from grader.course import solution_notebook

    found = []
    for cell in nbformat.read(solution_notebook(chapter), as_version=4).cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if cell.cell_type == "code" and ("judge" in cell.metadata.get("tags", []) or grade_id.startswith("self_check")):
            found += untranslated_raises(_python_of(cell.source), grade_id)
    assert not found, "raise these through _(): " + repr(found)


# --- other messages a student reads ----------------------------------------------------------------------------

def test_an_input_error_is_in_chinese_and_names_the_same_dtypes(language):
    bad = torch.zeros(3, dtype=torch.int32)
    with pytest.raises(BadInputError) as english:
        expect("x", bad)
    assert str(english.value) == "x has dtype int32; supported: float32, float16"
    language("zh_CN")
    with pytest.raises(BadInputError) as chinese:
        expect("x", bad)
    text = str(chinese.value)
    assert CJK.search(text) and "supported" not in text, text
    assert text.startswith("x ") and "int32" in text and "float32, float16" in text, text
    with pytest.raises(BadInputError) as strides:
        expect("x", torch.zeros(4, 6).t(), contiguous_last_dim=True)
    assert CJK.search(str(strides.value)) and "(1, 6)" in str(strides.value) and ".contiguous()" in str(strides.value)


def test_a_not_graded_line_keeps_its_english_marker_first_in_chinese(language, capsys):
    """The grader finds a check that was not graded by the words NOT GRADED at the start of its output: they stay
    first, untranslated, whatever the language of the rest."""
    from triton_course.grading import NOT_GRADED, at_gpu_sizes

    language("zh_CN")
    assert at_gpu_sizes(lambda: None, points=2, what="add") == 0.0
    out = capsys.readouterr().out
    assert out.startswith(NOT_GRADED) and CJK.search(out) and " 2 " in out, out


def test_a_speed_verdict_is_in_chinese_with_the_same_figures(language):
    from triton_course.grading import bandwidth_verdict

    english = bandwidth_verdict(900.0, 0.8, 1000.0, "add")
    language("zh_CN")
    chinese = bandwidth_verdict(900.0, 0.8, 1000.0, "add")
    assert CJK.search(chinese) and "passed" not in chinese, chinese
    assert Counter(NUMBER.findall(chinese)) == Counter(NUMBER.findall(english)), (chinese, english)
    with pytest.raises(CheckFailed) as slow:
        bandwidth_verdict(500.0, 0.8, 1000.0, "add")
    assert CJK.search(str(slow.value)) and "500 GB/s" in str(slow.value)


# --- what keeps it so ---------------------------------------------------------------------------------------------

#: Modules whose raised messages a student never reads, and why.
NOT_STUDENT_FACING = {
    "exchange.py": "the protocol between the grader's judge and the student's sandbox",
    "harness.py": "the student's end of that protocol (its errors are the judge's to report)",
    "timing_harness.py": "the student's end of a timed loop (the judge reports its errors)",
    "relaunch.py": "re-runs recorded launches for the judge; its refusals are the judge's evidence",
    "fixtures.py": "objects a hidden test hands over, rebuilt from the judge's description",
    "i18n.py": "chooses the language: a wrong language code is reported before any language is chosen",
    "bootstrap.py": "writes the setup cell (its words are translated into the cell when it is generated)",
    "links.py": "course configuration for the release tools",
}
#: (module, function, exception) allowed to raise an English message, and why.
ALLOWED_ENGLISH = {
    ("checks.py", "_per_output", "ValueError"): "a chapter's own call of check() gives the wrong number of "
                                                "tolerances: an error of the course, read by its authors",
    ("checks.py", "check", "ValueError"): "a chapter's own call of check() names more or fewer outputs than its "
                                          "reference returns: an error of the course, read by its authors",
}
GUARDED = {"CheckFailed", "ValueError", "TypeError", "NoGPUError", "BadInputError"}


def _has_words(node: ast.AST) -> bool:
    """Whether ``node`` is English written in place: a string literal or f-string with a word in it, or one
    concatenated or ``.format``-ed (``_("...")`` is not: its English is looked up in the catalogue)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return bool(re.search(r"[A-Za-z]{2}", node.value))
    if isinstance(node, ast.JoinedStr):
        return any(_has_words(v) for v in node.values if isinstance(v, ast.Constant))
    if isinstance(node, ast.BinOp):
        return _has_words(node.left) or _has_words(node.right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return _has_words(node.func.value)
    return False


def untranslated_raises(source: str, module: str) -> list[tuple[str, str, str, int]]:
    """(module, function, exception, line) of every ``raise`` of a :data:`GUARDED` exception whose message is
    English written in place."""
    tree = ast.parse(source)
    owner: dict[int, str] = {}
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                owner[id(node)] = fn.name      # the innermost function wins: ast.walk reaches it later
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            func = node.exc.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            message = node.exc.args[0] if node.exc.args else None
            if name in GUARDED and message is not None and _has_words(message):
                found.append((module, owner.get(id(node), "<module>"), name, node.lineno))
    return sorted(found, key=lambda f: f[3])


def test_the_guard_finds_an_english_message_and_passes_a_translated_one():
    source = '''
def f(x):
    if x:
        raise CheckFailed(f"{x} is wrong")
    raise ValueError("bad " + str(x))
def g(x):
    raise CheckFailed(_("{x} is wrong").format(x=x))
def h(x):
    raise NoGPUError("needs a GPU: {x}".format(x=x))
def k(exc, label):
    raise CheckFailed(explain_exception(exc, label)) from None
'''
    assert untranslated_raises(source, "m.py") == [("m.py", "f", "CheckFailed", 4), ("m.py", "f", "ValueError", 5),
                                                   ("m.py", "h", "NoGPUError", 9)]


def test_every_message_a_student_facing_module_raises_goes_through_the_catalogue():
    found = []
    for path in sorted((ROOT / "utils").glob("*.py")):
        if path.name not in NOT_STUDENT_FACING:
            found += untranslated_raises(path.read_text(encoding="utf-8"), path.name)
    unexplained = [f for f in found if f[:3] not in ALLOWED_ENGLISH]
    assert not unexplained, "raise these through _() (or explain in ALLOWED_ENGLISH why not): " + repr(unexplained)
    stale = set(ALLOWED_ENGLISH) - {f[:3] for f in found}
    assert not stale, f"no longer raised in English, remove from ALLOWED_ENGLISH: {stale}"


def test_literal_hint_messages_are_extracted_from_helpers_and_notebooks(tmp_path):
    """A Hint's message (second argument or message=) is extracted when it is a string literal, implicit
    concatenation included, from a module and from a solution notebook's code cells, past IPython magics; a cell
    that does not parse and a message built at run time are skipped."""
    helpers, solutions = tmp_path / "utils", tmp_path / "solutions"
    helpers.mkdir()
    (helpers / "mod.py").write_text('HINTS = [Hint(lambda c, a: True, "in a module: "\n                "two parts")]\n')
    chapter = solutions / "99_demo"
    chapter.mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell('%matplotlib inline\n!echo hi\nh = Hint(f, message="after magics")'),
                nbformat.v4.new_code_cell('x = f"{y}"\nh = Hint(f, f"built {x}")\nh2 = Hint(f, NAME)'),
                nbformat.v4.new_code_cell('def broken(:\n    Hint(f, "in a cell that does not parse")'),
                nbformat.v4.new_markdown_cell('Hint(f, "in markdown")')]
    nbformat.write(nb, chapter / "99_demo.ipynb")
    nbformat.write(nb, chapter / "not_the_chapter.ipynb")
    assert hint_messages(helpers, solutions) == [("utils/mod.py", "in a module: two parts"),
                                                  ("solutions/99_demo/99_demo.ipynb", "after magics")]


def test_marked_messages_are_extracted_from_the_solution_notebooks(tmp_path):
    """The literal argument of _("...") and N_("...") (implicit concatenation included) in a solution notebook's
    code cells, past IPython magics, located at the notebook; not _(a name), an f-string, a cell that does not
    parse, markdown, or another notebook of the chapter's folder."""
    solutions = tmp_path / "solutions"
    chapter = solutions / "99_demo"
    chapter.mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell('%time x = 1\nHINT = N_("a hint, "\n         "in two parts")'),
                nbformat.v4.new_code_cell('raise CheckFailed(_("{call} failed").format(call=c) + _(why) + _(f"{x}"))'),
                nbformat.v4.new_code_cell('def broken(:\n    _("in a cell that does not parse")'),
                nbformat.v4.new_markdown_cell('_("in markdown")')]
    nbformat.write(nb, chapter / "99_demo.ipynb")
    nbformat.write(nb, chapter / "not_the_chapter.ipynb")
    where = "solutions/99_demo/99_demo.ipynb"
    assert notebook_messages(solutions) == [(where, "a hint, in two parts"), (where, "{call} failed")]
    catalogue = extract(tmp_path / "utils", solutions)
    assert [(m.id, m.locations) for m in catalogue if m.id] == [("a hint, in two parts", [(where, 0)]),
                                                                ("{call} failed", [(where, 0)])]


def test_the_catalogue_holds_the_messages_the_notebooks_mark():
    catalogue = extract()
    found = notebook_messages()
    assert set(NOTEBOOK_CHECKS) <= {location.split("/")[1] for location, _message in found}
    for location, message in found:
        entry = catalogue.get(message)
        assert entry is not None and (location, 0) in entry.locations, (location, message)


def test_the_catalogue_holds_the_hints_of_the_helpers_and_of_every_notebook_that_defines_some():
    catalogue = extract()
    found = hint_messages()
    where = {loc.split("/")[1] for loc, _ in found if loc.startswith("solutions/")}
    assert {"03_vector_add", "06_rmsnorm"} <= where, where
    assert any(loc == "utils/softmax.py" for loc, _ in found)
    for location, message in found:
        entry = catalogue.get(message)
        assert entry is not None and (location, 0) in entry.locations, (location, message)
