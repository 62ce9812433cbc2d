"""The helpers speak the notebook's language: the Chinese catalogue is complete and current, a self-check's report,
its hints, an input error and a speed check's line come out in Chinese under ``set_language("zh_CN")`` with the
same figures as in English, and in English, byte for byte, again after ``set_language("en")``. The last tests keep
it so: every message a student-facing module raises goes through ``_()``, and every ``Hint`` written with a literal
message, in ``utils/`` or in a solution notebook, is extracted into the catalogue."""

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
from grader.message_catalogues import catalogue_problems, extract, hint_messages
from tests.conftest import ROOT, judge_defs
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


def test_the_catalogue_holds_the_hints_of_the_helpers_and_of_every_notebook_that_defines_some():
    catalogue = extract()
    found = hint_messages()
    where = {loc.split("/")[1] for loc, _ in found if loc.startswith("solutions/")}
    assert {"03_vector_add", "06_rmsnorm"} <= where, where
    assert any(loc == "utils/softmax.py" for loc, _ in found)
    for location, message in found:
        entry = catalogue.get(message)
        assert entry is not None and (location, 0) in entry.locations, (location, message)
